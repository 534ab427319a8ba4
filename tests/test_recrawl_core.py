"""The pure core of recrawling (design/recrawl.md C.1, C.5): the packed
history record, the change-rate estimate, the domain optimum (checked
against bench/_recrawl_model.py, the model the design's figures come from)
and the interval rule."""

from __future__ import annotations

import itertools
import math
import random
import struct
from dataclasses import replace

import pytest

from bench import _recrawl_model as model
from crawler.recrawl import estimate, record
from crawler.recrawl.record import History, Refers

REFERS = Refers(wd=bytes(range(6)), rdate=1_765_000_000_123_456, rid=bytes(range(16, 32)))
ENTRIES = (b"U3 https://example.test/a?b=c", b"R\x83\xa3url\xb5https://example.test/")
ETAGS = (b"", b'"abc"', b"W/" + b"x" * 253)


def _history(**fields: object) -> History:
    base = dict(entry=ENTRIES[0], last=1_765_000_000, iv=86_400, lm=1_700_000_000, length=172_000,
                chg=b"\x01\x02\x03\x04\x05\x06", n=12, changes=5, tu=600_000,
                bins=(1, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15))
    return History(**{**base, **fields})  # type: ignore[arg-type]


# --- the record -------------------------------------------------------------

def test_every_flag_combination_round_trips_at_its_size() -> None:
    seen = 0
    for refers, weak, pinned, hinted, verify, gone, etag, entry in itertools.product(
            (None, REFERS), (False, True), (False, True), (False, True), (False, True), range(4), ETAGS, ENTRIES):
        h = _history(refers=refers, weak=weak, pinned=pinned, hinted=hinted, verify=verify, gone=gone,
                     etag=etag, entry=entry)
        packed = record.pack(h)
        assert len(packed) == (69 if refers else 39) + 1 + len(etag) + len(entry)
        flags = ((refers is not None) * 0x01 | weak * 0x02 | pinned * 0x04 | hinted * 0x08 | verify * 0x10
                 | gone << 5)
        assert packed[0] == flags
        assert record.unpack(packed) == h
        seen += 1
    assert seen == 2 * 2**4 * 4 * len(ETAGS) * len(ENTRIES)


def test_the_layout_is_c1s_to_the_byte() -> None:
    """What Lua's ``struct`` will read: big-endian fields in C.1's order,
    bin 0 in the first byte's high half."""
    h = _history(refers=REFERS, etag=b'"e"', weak=True, gone=2)
    expected = (bytes([0x01 | 0x02 | 2 << 5]) + struct.pack(">IIII", 1_765_000_000, 86_400, 1_700_000_000, 172_000)
                + b"\x01\x02\x03\x04\x05\x06" + struct.pack(">HHI", 12, 5, 600_000)
                + bytes([0x10, 0x30, 0, 0, 0, 0, 0, 0x0F])
                + bytes(range(6)) + struct.pack(">Q", 1_765_000_000_123_456) + bytes(range(16, 32))
                + b'\x03"e"' + ENTRIES[0])
    assert record.pack(h) == expected
    assert record.FIXED_SIZE == 39 and record.FIXED_SIZE + record.WARC_SIZE == 69


def test_an_etag_over_255_bytes_is_not_kept() -> None:
    assert record.kept_etag(b"x" * 255) == b"x" * 255
    assert record.kept_etag(b"x" * 256) == b""
    with pytest.raises(ValueError, match="at most 255"):
        _history(etag=b"x" * 256)


@pytest.mark.parametrize(("fields", "message"), [
    ({"iv": -1}, r"History.iv must be an integer in 0..4294967295: -1"),
    ({"n": 70_000}, r"History.n must be an integer in 0..65535"),
    ({"gone": 4}, r"History.gone must be an integer in 0..3"),
    ({"chg": b"12345"}, r"History.chg must be 6 bytes"),
    ({"bins": (16,) + (0,) * 15}, r"History.bins must be 16 counts of 0-15"),
    ({"entry": b""}, r"entry must start with U or R"),
    ({"refers": "x"}, r"History.refers must be a Refers"),
])
def test_a_record_that_cannot_be_packed_is_refused_when_made(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _history(**fields)
    with pytest.raises(ValueError, match="Refers.rid must be 16 bytes"):
        Refers(wd=bytes(6), rdate=0, rid=bytes(15))


CORRUPT = {
    "empty": (b"", "too short: 0 bytes"),
    "fixed part only": (bytes(39), "too short: 39 bytes"),
    "unknown flag": (b"\x80" + bytes(38) + b"\x00U0 x", "unknown flags 0x80"),
    "WARC part cut": (b"\x01" + bytes(38) + bytes(20), "too short for its WARC part"),
    "ETag cut": (bytes(39) + b"\x09W/", "cut inside its ETag: 9 bytes announced, 2 left"),
    "no entry": (bytes(39) + b"\x00", "entry must start with U or R"),
    "entry of another kind": (bytes(39) + b"\x00V1:xyz", "entry must start with U or R"),
    "a str": ("U0 http://x/", "bytes, not str"),
}


@pytest.mark.parametrize("name", CORRUPT)
def test_a_corrupt_record_is_refused_in_one_line(name: str) -> None:
    data, message = CORRUPT[name]
    with pytest.raises(ValueError, match=message) as caught:
        record.unpack(data)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_random_bytes_unpack_or_raise_value_error_only() -> None:
    """Hostile values in ``hist:<d>`` cost a one-line error, never a crash:
    random records, and valid ones with a byte changed or cut."""
    rng = random.Random(49)
    valid = record.pack(_history(refers=REFERS, etag=b'"abc"'))
    samples = [rng.randbytes(rng.randrange(0, 120)) for _ in range(2000)]
    samples += [valid[:i] for i in range(len(valid))]
    for _ in range(2000):
        i = rng.randrange(len(valid))
        samples.append(valid[:i] + bytes([rng.randrange(256)]) + valid[i + 1:])
    refused = 0
    for data in samples:
        try:
            h = record.unpack(data)
        except ValueError as exc:
            assert "\n" not in str(exc)
            refused += 1
        else:
            assert record.pack(h) == data  # what unpacks is exactly what it packs to
    assert 0 < refused < len(samples)


def test_key_of_is_the_first_52_bits_in_decimal() -> None:
    digest = bytes.fromhex("fedcba9876543210" * 4)
    assert record.key_of(digest) == str(0xFEDCBA9876543)
    assert record.key_of(b"\xff" * 32) == str(2**52 - 1) and len(str(2**52 - 1)) == 16
    assert float(int(record.key_of(b"\xff" * 7))) == 2**52 - 1  # exact in Lua's doubles
    with pytest.raises(ValueError, match="no 52 bits"):
        record.key_of(b"\x01" * 6)


def test_intervals_fall_in_log2_hour_bins() -> None:
    hour = 3600
    cases = {0: 0, -5: 0, math.nan: 0, hour: 0, 1.4 * hour: 0, 1.5 * hour: 1, 2 * hour: 1, 3 * hour: 2,
             24 * hour: 5, 30 * 24 * hour: 9, 2**15 * hour: 15, 10**9: 15}
    assert {t: record.bin_of(t) for t in cases} == cases
    assert record.bin_centre(5) == 32 * hour


def test_observe_counts_and_halves_when_a_bin_fills() -> None:
    h = History(entry=ENTRIES[0])
    h = record.observe(h, 7200, changed=False)
    h = record.observe(h, 7200, changed=True)
    assert (h.n, h.changes, h.tu, h.bins[1]) == (2, 1, 7200, 1)
    for _ in range(13):
        h = record.observe(h, 7000, changed=True)
    assert (h.n, h.changes, h.bins[1]) == (15, 14, 14)
    h = record.observe(h, 86_400 * 3, changed=True)  # bin 6
    h = record.observe(h, 7200, changed=True)  # bin 1 reaches 15: everything halves
    assert (h.n, h.changes, h.tu, h.bins[1], h.bins[6]) == (8, 8, 3600, 7, 0)
    assert record.unpack(record.pack(h)) == h


def test_observe_never_overflows_the_fields() -> None:
    h = History(entry=ENTRIES[0])
    for _ in range(70_000):
        h = record.observe(h, 2**31, changed=False)
    record.pack(h)  # n stays within u16 and tu within u32
    assert h.n < 2**16 and h.tu < 2**32


# --- the estimate -------------------------------------------------------------

@pytest.mark.parametrize("b", [0, 3, 5, 9, 15])
def test_regular_visits_give_chos_corrected_estimate(b: int) -> None:
    interval = record.bin_centre(b)
    for n in (1, 2, 10, 40, 300):
        for changes in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            cho = -math.log((n - changes + 0.5) / (n + 0.5)) / interval
            if changes <= 15 and (n - changes) * interval < 2**32:  # what a record can hold
                h = History(entry=ENTRIES[0], iv=interval, n=n, changes=changes, tu=(n - changes) * interval,
                            bins=tuple(changes if i == b else 0 for i in range(16)))
                assert estimate.rate_of(h) == pytest.approx(cho, rel=1e-9, abs=0)
            assert estimate.rate([(interval, changes)], (n - changes) * interval, interval) == \
                pytest.approx(cho, rel=1e-9, abs=0)


def _poisson_visits(rate: float, visits: int, rng: random.Random) -> list[tuple[float, bool]]:
    """Visits at irregular intervals (a quarter to four times the mean time
    between changes, log-uniform), each ending changed as a Poisson process
    of ``rate`` would (at least one change within it)."""
    out = []
    for _ in range(visits):
        t = 2 ** rng.uniform(-2, 2) / rate
        out.append((t, rng.random() < -math.expm1(-rate * t)))
    return out


@pytest.mark.parametrize("rate", [1 / 3600, 1 / 86_400, 1 / (40 * 86_400)])
def test_the_irregular_estimate_converges_on_poisson_changes(rate: float) -> None:
    """With exact intervals, 8000 visits: within 3 % of the true rate (the
    sampling error is about 1.3 %; the seed is fixed)."""
    visits = _poisson_visits(rate, 8000, random.Random(49))
    changed: dict[float, int] = {}
    for t, hit in visits:
        if hit:
            changed[t] = changed.get(t, 0) + 1
    unchanged = sum(t for t, hit in visits if not hit)
    assert estimate.rate(changed.items(), unchanged, visits[-1][0]) == pytest.approx(rate, rel=0.03)


def test_the_estimate_from_the_record_tracks_the_true_rate() -> None:
    """Through the record (intervals binned at ±41 %, counts halved at 15):
    over 300 pages of rates from one a day to one in 10 days, 60 visits
    each, the median and the mean of r̂/r lie within 10 % of 1."""
    rng = random.Random(49)
    ratios = []
    for _ in range(300):
        rate = 10 ** rng.uniform(-6, -5) * 1.157  # 1/day .. 1/(10 days)
        h = History(entry=ENTRIES[0])
        for t, hit in _poisson_visits(rate, 60, rng):
            h = replace(record.observe(h, round(t), hit), iv=round(t))
        ratios.append(estimate.rate_of(h) / rate)
    ratios.sort()
    assert ratios[150] == pytest.approx(1, abs=0.10)
    assert sum(ratios) / len(ratios) == pytest.approx(1, abs=0.10)


def test_no_change_seen_is_rate_zero_and_no_unchanged_time_infinity() -> None:
    assert estimate.rate_of(History(entry=ENTRIES[0], iv=3600, n=5, tu=5 * 3600)) == 0.0
    assert estimate.rate([(3600, 2)], 0, 0) == math.inf


def test_g_inverse_inverts_g_across_its_range() -> None:
    for exponent in range(-60, 15):
        x = 2 ** (exponent / 4)
        assert estimate.g_inverse(estimate.g(x)) == pytest.approx(x, rel=1e-6)
        assert estimate.g_inverse(estimate.g(x)) == pytest.approx(model.g_inverse(estimate.g(x)), rel=1e-6)
    assert estimate.g_inverse(0) == 0 and estimate.g_inverse(1) == math.inf


def test_freshness_and_its_target() -> None:
    assert estimate.freshness(1, 0) == 1 and estimate.freshness(0, 5) == 1
    assert estimate.freshness(2, 3) == pytest.approx((1 - math.exp(-6)) / 6, rel=1e-12)
    interval = estimate.target_interval(1 / 86_400, 0.9)
    assert interval / 86_400 == pytest.approx(0.2146, abs=1e-4)  # r I = 0.21 (C.5)
    assert estimate.freshness(1 / 86_400, interval) == pytest.approx(0.9, rel=1e-9)
    with pytest.raises(ValueError, match="between 0 and 1"):
        estimate.target_interval(1, 1.0)


# --- the domain optimum -----------------------------------------------------

def _model_rates() -> list[float]:
    """bench/_recrawl_model.py's domain: 1000 pages, 0.01-10 changes a day."""
    rng = random.Random(49)
    return [10 ** rng.uniform(-2, 1) for _ in range(1000)]


def _mean_freshness(rates: list[float], intervals: list[float]) -> float:
    return sum(map(estimate.freshness, rates, intervals)) / len(rates)


#: C.5's table: visits per page a day -> the optimum's expected freshness
MODEL_TABLE = {0.10: 0.465, 0.25: 0.581, 0.50: 0.671, 1.00: 0.763, 2.00: 0.853}


@pytest.mark.parametrize("per_page", MODEL_TABLE)
def test_the_optimum_matches_the_model(per_page: float) -> None:
    rates = _model_rates()
    budget = per_page * len(rates)
    mu = estimate.solve_mu(rates, [1] * len(rates), budget)
    intervals = [estimate.optimal_interval(r, mu) for r in rates]
    assert sum(1 / i for i in intervals) == pytest.approx(budget, rel=1e-6)
    mine = _mean_freshness(rates, intervals)
    assert mine == pytest.approx(model.mean_freshness(rates, model.optimum(rates, budget)), abs=0.001)
    assert mine == pytest.approx(MODEL_TABLE[per_page], abs=0.001)


def test_the_clamped_optimum_matches_the_model() -> None:
    rates, low, high = _model_rates(), 1 / 24, 30.0
    mu = estimate.solve_mu(rates, [1] * len(rates), 500, low, high)
    intervals = [estimate.optimal_interval(r, mu, low, high) for r in rates]
    assert all(low <= i <= high for i in intervals)
    expected = model.mean_freshness(rates, model.optimum(rates, 500, low=low, high=high))
    assert _mean_freshness(rates, intervals) == pytest.approx(expected, abs=0.001)
    assert expected == pytest.approx(0.671, abs=0.001)


@pytest.mark.parametrize("per_page", MODEL_TABLE)
def test_the_24_bin_mu_is_within_1_percent_of_the_exact_optimum(per_page: float) -> None:
    """A domain keeps only counts of its pages in 24 rate bins (``rdom``):
    the μ solved on them, applied to each page's own rate, gives within 1 %
    of the exact optimum's freshness and spends within 3 % of the budget
    (intervals within [1 h, 30 d], in days)."""
    rates, low, high = _model_rates(), 1 / 24, 30.0
    budget = per_page * len(rates)
    exact_mu = estimate.solve_mu(rates, [1] * len(rates), budget, low, high)
    exact = _mean_freshness(rates, [estimate.optimal_interval(r, exact_mu, low, high) for r in rates])
    counts = [0] * estimate.RATE_BINS
    for r in rates:
        counts[estimate.rate_bin(r, low, high)] += 1
    intervals = [estimate.optimal_interval(r, estimate.domain_mu(counts, budget, low, high), low, high)
                 for r in rates]
    assert _mean_freshness(rates, intervals) == pytest.approx(exact, rel=0.01)
    assert sum(1 / i for i in intervals) == pytest.approx(budget, rel=0.03)


def test_rate_bins_cover_slow_pages_to_one_per_min() -> None:
    low, high = 3600, 30 * 86_400
    assert estimate.rate_bin(0, low, high) == 0
    assert estimate.rate_bin(1 / (estimate.SLOW * high) * 1.01, low, high) == 0
    assert estimate.rate_bin(1 / low * 0.99, low, high) == estimate.RATE_BINS - 1
    assert estimate.rate_bin(100 / low, low, high) == estimate.RATE_BINS - 1
    for i in range(estimate.RATE_BINS):
        assert estimate.rate_bin(estimate.rate_bin_centre(i, low, high), low, high) == i


def test_a_page_changing_faster_than_the_budget_allows_waits_longer() -> None:
    """The optimum's defining property: past a point, a faster page is not
    worth the visits (it would be stale again at once); it gets a longer
    interval than a moderate one, MAX when μ r >= 1."""
    low, high = 3600, 30 * 86_400
    rates = [1 / 86_400] * 50 + [1 / 600] * 10  # daily changes, and pages changing every 10 min
    mu = estimate.solve_mu(rates, [1] * len(rates), 50 / 86_400, low, high)  # one visit per page a day
    moderate, fast = (estimate.optimal_interval(r, mu, low, high) for r in (1 / 86_400, 1 / 600))
    assert fast > moderate
    assert fast == high and mu / 600 >= 1
    assert low < moderate < high


def test_no_page_with_a_rate_means_every_page_at_max() -> None:
    assert estimate.solve_mu([0.0, 0.0], [3, 4], 10, 1, 100) == math.inf
    assert estimate.optimal_interval(0.0, 1.0, 1, 100) == 100
    assert estimate.optimal_interval(0.5, math.inf, 1, 100) == 100


# --- the interval rule --------------------------------------------------------

def test_the_step_guard_halves_and_doubles_at_most() -> None:
    assert estimate.next_interval(86_400, 10.0, 3600, 10**7) == 43_200
    assert estimate.next_interval(86_400, 1e9, 3600, 10**7) == 172_800
    assert estimate.next_interval(86_400, 100_000.4, 3600, 10**7) == 100_000
    assert estimate.next_interval(0, 1e9, 3600, 10**7) == 10**7  # no previous interval: no guard
    assert estimate.next_interval(86_400, math.nan, 3600, 10**7) == 86_400
    with pytest.raises(ValueError, match="0 < MIN <= MAX"):
        estimate.next_interval(1, 1, 10, 5)


def test_min_and_max_are_never_crossed() -> None:
    """20,000 random cases (fixed seed): whatever the record holds (a zero,
    a huge or a stale interval, a rate of 0 or infinity, NaN) and whatever μ,
    the interval is within [MIN, MAX], and within the step guard when
    [MIN, MAX] allows it."""
    rng = random.Random(49)
    specials = [0.0, math.inf, math.nan, -1.0, 1e-300, 1e300]
    for _ in range(20_000):
        low = rng.choice([1, 60, 3600, 86_400, rng.randrange(1, 10**6)])
        high = rng.choice([low, low + 1, 30 * 86_400, rng.randrange(low, 10**8)])
        previous = rng.choice([0, 1, low, high, 2**32 - 1, rng.randrange(0, 2**32)])
        proposed = rng.choice(specials + [10 ** rng.uniform(-3, 10)])
        got = estimate.next_interval(previous, proposed, low, high)
        assert isinstance(got, int) and low <= got <= high
        if previous > 0 and low <= math.ceil(previous / 2) and 2 * previous <= high:
            assert math.ceil(previous / 2) <= got <= 2 * previous
        rate = rng.choice(specials[:2] + [10 ** rng.uniform(-9, 0)])
        mu = rng.choice([0.0, math.inf, 10 ** rng.uniform(-3, 9)])
        assert low <= estimate.optimal_interval(rate, mu, low, high) <= high
        h = History(entry=ENTRIES[0], iv=previous, tu=rng.randrange(0, 2**32), pinned=rng.random() < 0.1,
                    bins=tuple(rng.randrange(0, 15) for _ in range(16)))
        for m in (mu, None):
            assert low <= estimate.adaptive_interval(h, low, high, m) <= high


def test_adaptive_interval_follows_the_rule() -> None:
    low, high = 3600, 30 * 86_400
    quiet = History(entry=ENTRIES[0], iv=86_400, n=120, tu=120 * 86_400)  # never seen changing in 120 days
    assert estimate.adaptive_interval(quiet, low, high, mu=1e5) == 2 * 86_400  # toward MAX, ×2 a visit
    pinned = replace(quiet, pinned=True, iv=7 * 3600)
    assert estimate.adaptive_interval(pinned, low, high, mu=1000.0) == 7 * 3600
    busy = History(entry=ENTRIES[0], iv=86_400, n=10, changes=10, bins=(0,) * 5 + (10,) + (0,) * 10)
    assert estimate.adaptive_interval(busy, low, high, mu=None) == 43_200  # toward MIN, ÷2 a visit


def test_the_bins_follow_the_crawls_min() -> None:
    """At a MIN of 30 s (a crawl whose intervals are seconds), intervals
    counted and read at that base give Cho's estimate; at the default 1 h
    base every one would fall in bin 0 and read as an hour."""
    h = History(entry=b"U0 http://a.test/", iv=30)
    n, changed = 20, 8
    for i in range(n):
        h = record.observe(h, 30, i % 5 < 2, base=30)
    assert (h.n, h.changes) == (n, changed)
    cho = -math.log((n - changed + 0.5) / (n + 0.5)) / 30
    assert estimate.rate_of(h, pseudo=30, base=30) == pytest.approx(cho, rel=1e-9)
    assert estimate.rate_of(h, pseudo=30) < cho / 10  # read at the wrong base


# --- the posterior: what a few visits say -------------------------------------------------------


def test_a_page_not_yet_seen_changing_is_not_sent_to_max() -> None:
    """Two unchanged visits a minute apart do not prove a page never
    changes: the maximum-likelihood rate is 0, whose optimum is MAX (the
    step guard alone held it to ×2 a visit); the posterior still weighs the
    rates a minute cannot rule out, and its interval stays short."""
    low, high, mu = 6, 7200, 3.0
    h = History(entry=ENTRIES[0], iv=60, n=2, tu=120)
    assert estimate.rate_of(h, base=low) == 0
    assert estimate.optimal_interval(estimate.rate_of(h, base=low), mu, low, high) == high
    got = estimate.adaptive_interval(h, low, high, mu)
    assert low <= got < 2 * 60
    longer = replace(h, n=40, tu=40 * 60, iv=got)  # forty quiet minutes say more
    assert estimate.adaptive_interval(longer, low, high, mu) > got


def test_a_certain_rate_gets_the_optimum() -> None:
    """All the weight on one rate: the expected interval is the optimum's,
    the expected target's is the target's."""
    low, high = 6.0, 7200.0
    for r in (1e-4, 1e-3, 1e-2, 0.05):
        for mu in (1.0, 10.0, 100.0):
            assert estimate.expected_interval([1.0], [r], mu, low, high) == pytest.approx(
                estimate.optimal_interval(r, mu, low, high), rel=1e-6)
        assert estimate.expected_target_interval([1.0], [r], 0.9, low, high) == pytest.approx(
            estimate.target_interval(r, 0.9, low, high), rel=1e-6)
    assert estimate.expected_interval([0.5, 0.5], [1e-3, 1e-2], math.inf, low, high) == high
    with pytest.raises(ValueError, match="between 0 and 1"):
        estimate.expected_target_interval([1.0], [1e-3], 1.0, low, high)


def test_the_expected_interval_rises_with_mu() -> None:
    """μ is the price of a visit: the dearer, the longer every interval
    (never outside [low, high]); and a wider posterior over the same mean
    is never visited more often than the rate it averages."""
    rng = random.Random(49)
    low, high = 6.0, 7200.0
    rates = [estimate.rate_bin_centre(i, low, high) for i in range(estimate.RATE_BINS)]
    for _ in range(200):
        weights = [rng.random() ** 4 for _ in rates]
        total = sum(weights)
        weights = [w / total for w in weights]
        previous = 0.0
        for mu in (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0):
            got = estimate.expected_interval(weights, rates, mu, low, high)
            assert low <= got <= high and got >= previous * (1 - 1e-9)
            previous = got
        mean = sum(w * r for w, r in zip(weights, rates))
        assert estimate.expected_interval(weights, rates, 10.0, low, high) >= (
            estimate.optimal_interval(mean, 10.0, low, high) * (1 - 1e-6))


def test_the_posterior_narrows_around_the_estimate() -> None:
    """Many regular visits: the posterior's median bin is the maximum-
    likelihood rate's (within a bin), and the page's interval the optimum's
    for that rate within a quarter."""
    low, high, mu = 60, 30 * 86_400, 3000.0
    h = History(entry=ENTRIES[0], iv=3600)
    for i in range(200):
        h = record.observe(h, 3600, i % 5 < 2, base=low)  # 2 changes in 5 hourly visits, halved as bins fill
    mle = estimate.rate_of(h, base=low)
    assert abs(estimate.rate_bin_of(h, low, high) - estimate.rate_bin(mle, low, high)) <= 1
    weights = estimate.posterior(h, low, high)
    assert sum(weights) == pytest.approx(1.0) and max(weights) > 0.3
    rates = [estimate.rate_bin_centre(i, low, high) for i in range(estimate.RATE_BINS)]
    assert estimate.expected_interval(weights, rates, mu, low, high) == pytest.approx(
        estimate.optimal_interval(mle, mu, low, high), rel=0.25)


def test_the_rate_bin_of_a_record_is_its_posteriors_median() -> None:
    low, high = 6, 7200
    fresh = History(entry=ENTRIES[0], iv=60)
    assert estimate.rate_bin_of(fresh, low, high) == (estimate.RATE_BINS - 1) // 2  # the prior's median
    busy = fresh
    for _ in range(10):
        busy = record.observe(busy, low, True, base=low)  # changed at every visit, MIN apart
    assert estimate.rate_bin_of(busy, low, high) >= estimate.RATE_BINS - 3
    still = replace(fresh, n=100, tu=100 * high)  # unchanged for a hundred MAX
    assert estimate.rate_bin_of(still, low, high) == 0
