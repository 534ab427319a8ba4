"""The history write of one visit (crawler/worker/visit.py; design/recrawl.md
C.1, C.3, C.5, E): pure, so these tests build the request's meta as the
recrawl middleware and the WARC writer leave it and read the write back
(its record unpacked)."""

from __future__ import annotations

import hashlib

import pytest
from scrapy import Request

from crawler.identity import Fingerprinter
from crawler.meta import NOT_MODIFIED as NOT_MODIFIED_KEY
from crawler.meta import RECRAWL, RECRAWL_SEEN, RECRAWL_STATE
from crawler.recrawl.estimate import RATE_BINS
from crawler.recrawl.record import History, Refers, key_of, pack, unpack
from crawler.worker.visit import GONE, UNTRACKED, USER, Rules, final_end, history_write, judge
from crawler.store.ledger import DEAD, DISALLOWED, NOT_MODIFIED, REDIRECTED, SKIPPED, STORED
from crawler.store.records import CHANGED, CREATE, DELETE, FIRST, NOT_MODIFIED_304, UNCHANGED, UPDATE

HOUR, DAY = 3600, 86400
FIXED = Rules("fixed", interval=DAY, low=HOUR, high=30 * DAY)
ADAPTIVE = Rules("adaptive", interval=DAY, low=HOUR, high=30 * DAY)
URL = "http://www.a.test/page"
ENTRY = b"U0 " + URL.encode()
DIGEST = Fingerprinter().fingerprint(Request(URL))
K = key_of(DIGEST)
NOW = 1_800_000_000


def chg(text: str) -> bytes:
    return hashlib.sha1(text.encode()).digest()[:6]


def seen(status: int = 200, body: str = "v1", etag: bytes = b"", lm: int = 0, date: int = 0, sent: str = "",
         length: int = 1000, weak: bool = False, capture: dict | None = None) -> dict:
    out = {"status": status, "etag": etag, "weak": weak, "lm": lm, "date": date, "length": length,
           "chg": None if status == 304 else chg(body), "sent": sent}
    if capture is not None:
        out["capture"] = capture
    return out


def record(**fields: object) -> History:
    base = {"entry": ENTRY, "last": NOW - DAY, "iv": DAY, "length": 1000, "chg": chg("v1"), "n": 3}
    base.update(fields)
    return History(**base)  # type: ignore[arg-type]


def revisit(history: History, answer: dict | None, end: str = STORED, rules: Rules = FIXED, now: int = NOW,
            mu: float | None = None, **meta: object):
    state = {"k": K, "record": pack(history), "trust": 0, "mu": mu}
    m = {RECRAWL_STATE: state, **meta}
    if answer is not None:
        m[RECRAWL_SEEN] = answer
    return history_write(m, b"V" + K.encode() + b":0::" + pack(history), "a.test", b"", end, rules,
                         "www.a.test", now)


def first(answer: dict | None, end: str = STORED, rules: Rules = FIXED, entry: bytes = ENTRY, **meta: object):
    m = dict(meta)
    if answer is not None:
        m[RECRAWL_SEEN] = answer
    return history_write(m, entry, "a.test", DIGEST, end, rules, "www.a.test", NOW)


# --- create, update, delete by end ------------------------------------------------


@pytest.mark.parametrize("end", [STORED, NOT_MODIFIED])
def test_a_first_visit_that_stored_its_page_creates_its_history(end: str) -> None:
    capture = {"profile": "response", "wd": b"\x01" * 6, "rdate": 1_700_000_000_000_000, "rid": b"\x02" * 16}
    write = first(seen(etag=b'"x1"', lm=NOW - 50, capture=capture), end)
    assert write is not None and write.mode == CREATE and write.outcome == FIRST
    assert write.k == K == key_of(Fingerprinter().fingerprint(Request(URL)))  # the offer path's digest
    assert write.domain == "a.test" and write.host == "www.a.test" and write.rbin_old == -1
    kept = unpack(write.record)
    assert kept.entry == ENTRY and kept.etag == b'"x1"' and kept.lm == NOW - 50 and kept.chg == chg("v1")
    assert kept.refers == Refers(b"\x01" * 6, 1_700_000_000_000_000, b"\x02" * 16)
    assert kept.iv == write.iv and abs(write.iv - DAY) <= 0.05 * DAY


@pytest.mark.parametrize("end", [DEAD, REDIRECTED, DISALLOWED, SKIPPED, "l", "u"])
def test_a_first_visit_that_stored_nothing_writes_nothing(end: str) -> None:
    assert first(seen(), end) is None


def test_a_first_visit_is_not_tracked_when_off_refused_gone_or_too_large() -> None:
    assert judge({RECRAWL_SEEN: seen()}, ENTRY, "a.test", DIGEST, STORED, Rules(), "www.a.test", NOW).write is None
    refused = judge({RECRAWL: False, RECRAWL_SEEN: seen()}, ENTRY, "a.test", DIGEST, STORED, FIXED, "h", NOW)
    assert refused.write is None and refused.why == USER
    gone = judge({RECRAWL_SEEN: seen(404)}, ENTRY, "a.test", DIGEST, STORED, FIXED, "h", NOW)
    assert gone.write is None and gone.why == GONE
    large = b"U0 http://www.a.test/" + b"x" * 2048
    judged = judge({RECRAWL_SEEN: seen()}, large, "a.test", DIGEST, STORED, FIXED, "h", NOW)
    assert judged.write is None and judged.why == UNTRACKED  # the caller counts it
    fits = large[:2048]
    assert first(seen(), entry=fits) is not None


def test_a_redirect_target_carrying_its_sources_state_is_its_own_first_visit() -> None:
    source = record(entry=b"U0 http://www.a.test/old")
    state = {"k": key_of(Fingerprinter().fingerprint(Request("http://www.a.test/old"))), "record": pack(source),
             "trust": 0, "mu": None}
    meta = {RECRAWL_STATE: state, RECRAWL_SEEN: seen()}
    write = history_write(meta, ENTRY, "a.test", DIGEST, STORED, FIXED, "www.a.test", NOW)
    assert write is not None and write.mode == CREATE and write.k == K and unpack(write.record).entry == ENTRY
    own = history_write({**meta, RECRAWL_STATE: {**state, "k": K}}, ENTRY, "a.test", DIGEST, STORED, FIXED,
                        "www.a.test", NOW)
    assert own is not None and own.mode == UPDATE


@pytest.mark.parametrize("end", [REDIRECTED, DISALLOWED])
def test_a_revisit_redirected_or_disallowed_deletes_the_history(end: str) -> None:
    write = revisit(record(), None, end)
    assert write is not None and write.mode == DELETE and write.k == K and write.record == b""
    assert write.rbin_new == -1


def test_a_revisit_meta_false_deletes_the_history() -> None:
    write = revisit(record(), seen(), STORED, **{RECRAWL: False})
    assert write is not None and write.mode == DELETE


@pytest.mark.parametrize("end", [DEAD, SKIPPED, "l", "u"])
def test_a_failed_revisit_leaves_the_history_alone(end: str) -> None:
    assert revisit(record(), seen(), end) is None


@pytest.mark.parametrize("status", [404, 410])
def test_gone_twice_in_a_row_deletes(status: int) -> None:
    once = revisit(record(), seen(status), STORED)
    assert once is not None and once.mode == UPDATE
    after = unpack(once.record)
    assert after.gone == 1 and after.chg == chg("v1") and after.n == 3  # kept as it was
    twice = revisit(after, seen(status), STORED)
    assert twice is not None and twice.mode == DELETE
    back = revisit(after, seen(200), STORED)  # an answer in between resets the count
    assert back is not None and back.mode == UPDATE and unpack(back.record).gone == 0


def test_a_changed_page_updates_everything_and_counts_a_change() -> None:
    old = record(etag=b'"a"', lm=NOW - 2 * DAY)
    capture = {"profile": "response", "wd": b"\x03" * 6, "rdate": 5, "rid": b"\x04" * 16}
    write = revisit(old, seen(body="v2", etag=b'"b"', lm=NOW - 100, length=2000, capture=capture))
    assert write is not None and write.mode == UPDATE and write.outcome == CHANGED and write.lie == ""
    new = unpack(write.record)
    assert new.etag == b'"b"' and new.lm == NOW - 100 and new.length == 2000 and new.chg == chg("v2")
    assert new.n == 4 and new.changes == 1 and sum(new.bins) == 1 and new.bins[5] == 1  # a day: bin round(log2 24)
    assert new.refers == Refers(b"\x03" * 6, 5, b"\x04" * 16) and new.entry == ENTRY and write.saved == 0


def test_an_unchanged_200_counts_its_interval_unchanged() -> None:
    write = revisit(record(tu=10), seen(body="v1"), now=NOW + 600)
    assert write is not None and write.outcome == UNCHANGED
    new = unpack(write.record)
    assert new.tu == 10 + DAY + 600 and new.changes == 0  # from the record's last to now
    never_stamped = revisit(record(last=0, tu=0), seen(body="v1"))
    assert never_stamped is not None and unpack(never_stamped.record).tu == DAY  # the record's interval


def test_a_304_is_outcome_n_saves_the_length_and_keeps_the_record() -> None:
    old = record(etag=b'"a"', lm=NOW - DAY, length=4321)
    refers = Refers(b"\x05" * 6, 9, b"\x06" * 16)
    old = History(**{**old.__dict__, "refers": refers})
    capture = {"profile": "server-not-modified", "wd": b"\x00" * 6, "rdate": 1, "rid": b"\x07" * 16}
    write = revisit(old, seen(304, length=0, sent="em", capture=capture), NOT_MODIFIED)
    assert write is not None and write.outcome == NOT_MODIFIED_304 and write.saved == 4321
    new = unpack(write.record)
    assert (new.etag, new.lm, new.length, new.chg, new.refers) == (b'"a"', NOW - DAY, 4321, chg("v1"), refers)
    assert new.changes == 0 and new.n == 4
    renewed = revisit(old, seen(304, etag=b'"a2"', lm=NOW - 10, length=0), NOT_MODIFIED)
    assert renewed is not None
    assert (unpack(renewed.record).etag, unpack(renewed.record).lm) == (b'"a2"', NOW - 10)  # sent: taken
    marked = revisit(old, {**seen(200), "chg": None}, STORED, **{NOT_MODIFIED_KEY: True})
    assert marked is not None and marked.outcome == NOT_MODIFIED_304


def test_an_identical_payload_capture_saves_the_length_and_ends_not_modified() -> None:
    capture = {"profile": "identical-payload-digest", "wd": b"\x01" * 6, "rdate": 1, "rid": b"\x02" * 16}
    old = record(length=777)
    meta = {RECRAWL_STATE: {"k": K, "record": pack(old), "trust": 0, "mu": None},
            RECRAWL_SEEN: seen(body="v1", length=777, capture=capture)}
    assert final_end(meta, STORED) == NOT_MODIFIED
    assert final_end({RECRAWL_SEEN: meta[RECRAWL_SEEN]}, STORED) == STORED  # a first visit is no revisit
    assert final_end({**meta, RECRAWL_SEEN: seen()}, STORED) == STORED
    write = revisit(old, meta[RECRAWL_SEEN], NOT_MODIFIED)
    assert write is not None and write.saved == 777 and write.outcome == UNCHANGED


# --- intervals ------------------------------------------------------------------


def test_fixed_intervals_stay_within_min_max_and_five_percent() -> None:
    ivs = set()
    for i in range(400):
        url = f"http://www.a.test/{i}"
        write = history_write({RECRAWL_SEEN: seen()}, b"U0 " + url.encode(), "a.test",
                              Fingerprinter().fingerprint(Request(url)), STORED, FIXED, "www.a.test", NOW)
        assert write is not None and 0.95 * DAY <= write.iv <= 1.05 * DAY
        ivs.add(write.iv)
    assert len(ivs) > 100  # spread, not one value
    again = revisit(record(), seen())
    assert again is not None and again.iv == first(seen()).iv  # the same URL, the same jitter
    tight = Rules("fixed", interval=DAY, low=DAY, high=DAY)
    assert first(seen(), rules=tight).iv == DAY  # the clamps win over the jitter


def test_a_pinned_interval_is_clamped_and_kept() -> None:
    write = first(seen(), **{RECRAWL: 7200})
    assert write is not None and unpack(write.record).pinned and abs(write.iv - 7200) <= 360
    assert first(seen(), **{RECRAWL: 60}).iv == HOUR  # never under MIN
    old = unpack(write.record)
    for rules in (FIXED, ADAPTIVE):
        for body in ("v1", "v2", "v3"):  # changes or not, the pinned interval stays
            again = revisit(old, seen(body=body), rules=rules)
            assert again is not None and again.iv == old.iv and unpack(again.record).pinned
    assert first(seen(), **{RECRAWL: True}).iv == first(seen()).iv  # True: the spider's setting


def test_adaptive_a_page_changing_every_visit_shortens_never_below_min() -> None:
    history, now, ivs = record(iv=DAY, last=NOW), NOW, []
    for i in range(30):
        now += history.iv
        write = revisit(history, seen(body=f"v{i + 2}"), rules=ADAPTIVE, now=now)
        assert write is not None and write.outcome == CHANGED
        assert write.iv >= HOUR and write.iv >= history.iv // 2  # at most halved a visit
        history = History(**{**unpack(write.record).__dict__, "last": now})
        ivs.append(write.iv)
    assert ivs[-1] < DAY and ivs == sorted(ivs, reverse=True) and min(ivs) == HOUR


def test_adaptive_an_unchanged_page_lengthens_at_most_twice_never_above_max() -> None:
    history, now, ivs = record(iv=HOUR * 2, last=NOW), NOW, []
    for _ in range(20):
        now += history.iv
        write = revisit(history, seen(body="v1"), rules=ADAPTIVE, now=now)
        assert write is not None and write.outcome == UNCHANGED
        assert history.iv < write.iv <= 2 * history.iv or write.iv == 30 * DAY
        history = History(**{**unpack(write.record).__dict__, "last": now})
        ivs.append(write.iv)
    assert ivs[-1] == 30 * DAY and max(ivs) == 30 * DAY


def test_adaptive_follows_the_domains_mu() -> None:
    # a page seen changing about once a day: a tight budget (large μ) visits
    # it less often than a loose one (small μ)
    bins = tuple(8 if b == 5 else 0 for b in range(16))
    old = record(iv=DAY, last=NOW - DAY, bins=bins, changes=8, n=16, tu=8 * DAY)
    tight = revisit(old, seen(body="v9"), rules=ADAPTIVE, mu=1e6)
    loose = revisit(old, seen(body="v9"), rules=ADAPTIVE, mu=1.0)
    assert tight is not None and loose is not None and tight.iv > loose.iv


def test_rate_bins_move_with_the_estimate() -> None:
    write = first(seen())
    assert write is not None and write.rbin_new == (RATE_BINS - 1) // 2  # no visit yet: the prior's median
    bins = tuple(10 if b == 2 else 0 for b in range(16))
    old = record(iv=4 * HOUR, bins=bins, changes=10, n=12, tu=8 * HOUR)
    again = revisit(old, seen(body="v2"), rules=ADAPTIVE)
    assert again is not None and again.rbin_old > 0 and again.rbin_new >= again.rbin_old - 1
    gone = revisit(old, None, REDIRECTED)
    assert gone is not None and gone.rbin_old == again.rbin_old


# --- lies -------------------------------------------------------------------------


def test_a_frozen_etag_is_a_lie() -> None:
    old = record(etag=b'"same"')
    write = revisit(old, seen(body="v2", etag=b'"same"', sent=""))
    assert write is not None and write.lie == "etag" and write.outcome == CHANGED
    weak = revisit(record(etag=b'"same"', weak=True), seen(body="v2", etag=b'"same"', weak=True))
    assert weak is not None and weak.lie == ""  # a weak ETag promises no bytes


def test_a_frozen_last_modified_is_a_lie() -> None:
    old = record(lm=NOW - DAY)
    for lm in (NOW - DAY, NOW - 2 * DAY):
        write = revisit(old, seen(body="v2", lm=lm))
        assert write is not None and write.lie == "lm"


def test_last_modified_always_now_is_evidence() -> None:
    old = record(lm=NOW - DAY)
    write = revisit(old, seen(body="v1", lm=NOW - 2, date=NOW))
    assert write is not None and write.lie == "lm_now"
    later = revisit(old, seen(body="v1", lm=NOW - 60, date=NOW))
    assert later is not None and later.lie == ""


def test_validators_ignored_is_evidence() -> None:
    old = record(etag=b'"e"', lm=NOW - DAY)
    for sent in ("e", "m", "em"):
        write = revisit(old, seen(body="v1", etag=b'"e"', lm=NOW - DAY, sent=sent))
        assert write is not None and write.lie == "ignored", sent
    unsent = revisit(old, seen(body="v1", etag=b'"e"', lm=NOW - DAY, sent=""))
    assert unsent is not None and unsent.lie == ""  # a verification: nothing was asked


def test_an_honest_change_is_never_a_lie() -> None:
    old = record(etag=b'"e1"', lm=NOW - DAY)
    for sent in ("", "e", "m", "em"):
        write = revisit(old, seen(body="v2", etag=b'"e2"', lm=NOW - 3600, date=NOW, sent=sent))
        assert write is not None and write.lie == "" and write.outcome == CHANGED
    no_validators = revisit(record(), seen(body="v2"))
    assert no_validators is not None and no_validators.lie == ""
    not_modified = revisit(old, seen(304, etag=b'"e1"', lm=NOW - DAY, sent="em"), NOT_MODIFIED)
    assert not_modified is not None and not_modified.lie == ""
