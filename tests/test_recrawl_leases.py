"""Recrawl on the worker's side (crawler/worker/_leases.py, _history.py,
config.py): a lease ended not modified waits for storage like a stored one
and is acknowledged as ``n``; the acknowledgement carries the URL's history
write; a retry carries none; the settings are checked across; and the
domains' μ is read from, solved for and written to a real Redis."""

from __future__ import annotations

import logging
import math

import pytest
import redis
from scrapy import Request
from scrapy.settings import Settings

from crawler.clock import ManualClock
from crawler.identity import Fingerprinter, url_fingerprint
from crawler.meta import RECRAWL_SEEN, RECRAWL_STATE
from crawler.recrawl.estimate import RATE_BINS, domain_mu
from crawler.recrawl.record import History, key_of, pack, unpack
from crawler.worker.visit import Rules
from crawler.settings_registry import SettingsError
from crawler.store import NOT_MODIFIED, STORED, Leased
from crawler.store.records import CREATE, NOT_MODIFIED_304, UPDATE, Recrawl, wire_writes
from crawler.worker._history import SOLVE_EVERY, HistoryBook, rdom_key
from crawler.worker._leases import Ack, Leases
from crawler.worker.config import FrontierSettings
from tests.servers import crawler_for
from tests.test_clock import Storage

DAY = 86400
RULES = Rules("fixed", interval=DAY, low=3600, high=30 * DAY)
URL = "http://www.a.test/page"
K = key_of(url_fingerprint(URL))  # the URL's history key


class Sent(list):
    """Where the leases' acknowledgements go (their ``AckSink``): kept here."""

    def ack(self, ack: Ack) -> None:
        self.append(ack)

    def retry(self, seconds: float, again: Leased, ack: Ack) -> None:
        self.append(ack)


def seen(body: str = "v1", status: int = 200, **more: object) -> dict:
    import hashlib

    return {"status": status, "etag": b"", "weak": False, "lm": 0, "date": 0, "length": 10,
            "chg": None if status == 304 else hashlib.sha1(body.encode()).digest()[:6], "sent": "", **more}


def leases_on(redis_url: str, clock: ManualClock, rules: Rules = RULES, budget: float | None = None):
    crawler = crawler_for(redis_url)
    sent = Sent()
    leases = Leases(clock, "finish", crawler.stats, sent, 0.01)
    book = HistoryBook(rules, Fingerprinter(), crawler.stats, clock, lambda domain: budget)
    leases.history = book
    storage = Storage()
    leases.storage = storage
    return leases, sent, storage, book, crawler.stats


def lent(leases: Leases, lease_id: str, request: Request, entry: bytes | None = None):
    lease = leases.new(Leased(lease_id, "a.test", 0, entry if entry is not None else b"U0 " + request.url.encode()))
    leases.lend(lease, request)
    return lease


def test_a_not_modified_end_waits_for_storage_and_is_acknowledged_as_not_modified(
        redis_url: str, clock: ManualClock) -> None:
    leases, sent, storage, _, stats = leases_on(redis_url, clock)
    old = History(entry=b"U0 " + URL.encode(), last=int(clock.time()) - DAY, iv=DAY, length=4321)
    request = Request(URL, meta={RECRAWL_STATE: {"k": K, "record": pack(old), "trust": 0, "mu": None},
                                 RECRAWL_SEEN: seen(status=304)})
    lease = lent(leases, "1", request, b"V" + K.encode() + b":0::" + pack(old))
    lease.ack(NOT_MODIFIED)
    assert not sent and leases.awaiting_storage() == [lease]  # held: the revisit record is not written yet
    clock.advance(0.01)
    assert not sent
    storage.kept.add(URL)
    clock.advance(0.01)  # the next look at storage
    (ack,) = sent
    assert ack.end == NOT_MODIFIED and ack.wire(clock.monotonic()).endswith(":n")
    assert ack.write is not None and ack.write.mode == UPDATE and ack.write.k == K
    assert ack.write.outcome == NOT_MODIFIED_304 and ack.write.saved == 4321
    assert stats.get_value("crawler/frontier/ended/not_modified") == 1
    assert stats.get_value("crawler/recrawl/writes/update") == 1


def test_a_first_visit_acknowledgement_carries_its_create(redis_url: str, clock: ManualClock) -> None:
    leases, sent, storage, _, stats = leases_on(redis_url, clock)
    storage.kept.add(URL)
    request = Request(URL, meta={RECRAWL_SEEN: seen()})
    lent(leases, "2", request).ack(STORED)
    (ack,) = sent
    assert ack.end == STORED and ack.write is not None and ack.write.mode == CREATE
    assert ack.write.k == key_of(Fingerprinter().fingerprint(Request(URL)))  # as the offer path digests it
    assert ack.write.k == key_of(url_fingerprint(URL))  # ... a request, or a plain URL (Offers.urls)
    assert unpack(ack.write.record).entry == b"U0 " + URL.encode()
    assert wire_writes(sent)[:4] == ["1", CREATE, "a.test", ack.write.k]  # what the scripts are sent
    assert ack.wire(0.0) == ack._replace(write=None).wire(0.0)  # the ack's own form is unchanged
    assert stats.get_value("crawler/recrawl/writes/create") == 1


def test_an_identical_payload_revisit_ends_not_modified(redis_url: str, clock: ManualClock) -> None:
    leases, sent, storage, _, stats = leases_on(redis_url, clock)
    old = History(entry=b"U0 " + URL.encode(), last=int(clock.time()) - DAY, iv=DAY, length=99)
    request = Request(URL, meta={RECRAWL_STATE: {"k": K, "record": pack(old), "trust": 0, "mu": None},
                                 RECRAWL_SEEN: seen()})
    lent(leases, "3", request, b"V" + K.encode() + b":0::" + pack(old)).ack(STORED)
    assert not sent
    # the WARC writer found the payload identical to the last stored one, then holds the page
    request.meta[RECRAWL_SEEN]["capture"] = {"profile": "identical-payload-digest", "wd": b"\x00" * 6,
                                            "rdate": 1, "rid": b"\x00" * 16}
    storage.kept.add(URL)
    leases.end_stored()
    (ack,) = sent
    assert ack.end == NOT_MODIFIED and ack.write is not None and ack.write.saved == 99
    assert stats.get_value("crawler/frontier/ended/not_modified") == 1
    assert stats.get_value("crawler/frontier/ended/stored") is None


def test_a_retry_carries_no_write_and_a_large_request_is_untracked(redis_url: str, clock: ManualClock) -> None:
    leases, sent, storage, _, stats = leases_on(redis_url, clock)
    request = Request(URL, meta={RECRAWL_SEEN: seen()})
    lent(leases, "4", request).delay(5.0)
    assert len(sent) == 1 and sent[0].end == "" and sent[0].write is None
    big = Request(URL + "?q=" + "x" * 3000, meta={RECRAWL_SEEN: seen()})
    storage.kept.add(big.url)
    lent(leases, "5", big).ack(STORED)
    assert sent[-1].end == STORED and sent[-1].write is None
    assert stats.get_value("crawler/recrawl/untracked") == 1


def test_an_unreadable_record_ends_the_lease_without_a_write(redis_url: str, clock: ManualClock,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    leases, sent, storage, _, stats = leases_on(redis_url, clock)
    storage.kept.add(URL)
    request = Request(URL, meta={RECRAWL_STATE: {"k": K, "record": b"Xbroken", "trust": 0, "mu": None},
                                 RECRAWL_SEEN: seen()})
    with caplog.at_level(logging.ERROR, logger="crawler.worker._history"):
        lent(leases, "u1", request, b"V1:0::Xbroken").ack(STORED)
    (ack,) = sent
    assert ack.end == STORED and ack.write is None and stats.get_value("crawler/recrawl/unreadable") == 1
    assert any(URL in r.getMessage() for r in caplog.records)


def test_without_the_hook_nothing_is_written(redis_url: str, clock: ManualClock) -> None:
    leases, sent, storage, _, _ = leases_on(redis_url, clock)
    leases.history = None  # recrawl off
    storage.kept.add(URL)
    lent(leases, "6", Request(URL, meta={RECRAWL_SEEN: seen()})).ack(STORED)
    assert sent[0].write is None and sent[0].end == STORED


def test_a_lie_is_counted_and_said_once_per_host(redis_url: str, clock: ManualClock,
                                                caplog: pytest.LogCaptureFixture) -> None:
    leases, sent, storage, _, stats = leases_on(redis_url, clock)
    storage.kept.add(URL)
    old = History(entry=b"U0 " + URL.encode(), last=int(clock.time()) - DAY, iv=DAY, etag=b'"f"',
                  chg=b"\x00" * 6)
    with caplog.at_level(logging.WARNING, logger="crawler.worker._history"):
        for i in range(3):
            request = Request(URL, meta={RECRAWL_STATE: {"k": K, "record": pack(old), "trust": 0, "mu": None},
                                         RECRAWL_SEEN: seen(f"v{i}", etag=b'"f"')})
            lent(leases, f"l{i}", request, b"V" + K.encode() + b":0::" + pack(old)).ack(STORED)
    assert [a.write.lie for a in sent] == ["etag"] * 3
    assert stats.get_value("crawler/recrawl/lies/etag") == 3
    assert len([r for r in caplog.records if "www.a.test" in r.getMessage()]) == 1


# --- μ ------------------------------------------------------------------------------


def test_mu_is_solved_from_the_domains_bins_and_written(redis_url: str, redis_client: redis.Redis,
                                                        clock: ManualClock) -> None:
    rules = Rules("adaptive", interval=DAY, low=3600, high=30 * DAY)
    leases, sent, storage, book, stats = leases_on(redis_url, clock, rules, budget=500.0)
    base = "t:{mu:0}"
    counts = [0] * RATE_BINS
    counts[10], counts[16] = 40, 60
    redis_client.hset(rdom_key(base, "a.test"), mapping={f"lb{i}": c for i, c in enumerate(counts) if c})
    storage.kept.add(URL)
    lent(leases, "m1", Request(URL, meta={RECRAWL_SEEN: seen()})).ack(STORED)
    assert book.due == {"a.test"}  # no μ known yet
    assert book.solve(redis_client, base) == 1 and not book.due
    expected = domain_mu(counts, 500.0 / 86400, 3600, 30 * DAY)
    assert math.isfinite(expected)
    assert float(redis_client.hget(rdom_key(base, "a.test"), "mu")) == pytest.approx(expected, rel=1e-12)
    assert book.mu["a.test"] == pytest.approx(expected) and stats.get_value("crawler/recrawl/mu_solved") == 1
    # known now: the next solve comes after SOLVE_EVERY writes of the domain
    for i in range(SOLVE_EVERY - 1):
        lent(leases, f"m{i + 2}", Request(URL, meta={RECRAWL_SEEN: seen()})).ack(STORED)
    assert not book.due
    lent(leases, "mlast", Request(URL, meta={RECRAWL_SEEN: seen()})).ack(STORED)
    assert book.due == {"a.test"}


def test_mu_is_not_solved_without_a_budget(redis_url: str, clock: ManualClock) -> None:
    rules = Rules("adaptive", interval=DAY, low=3600, high=30 * DAY)
    leases, _, storage, book, _ = leases_on(redis_url, clock, rules, budget=None)
    storage.kept.add(URL)
    lent(leases, "n1", Request(URL, meta={RECRAWL_SEEN: seen()})).ack(STORED)
    assert not book.due


# --- settings -------------------------------------------------------------------------


def read(**values: object) -> FrontierSettings:
    return FrontierSettings.from_settings(Settings(values))


def test_recrawl_settings_are_read() -> None:
    assert read().recrawl == Recrawl()  # off
    config = read(CRAWLER_RECRAWL="adaptive", CRAWLER_RECRAWL_MIN=7200, CRAWLER_RECRAWL_MAX=10 * DAY,
                  CRAWLER_RECRAWL_INTERVAL=DAY, CRAWLER_RECRAWL_ENTRY_MAX=512, CRAWLER_RECRAWL_BUDGET=100)
    assert config.recrawl.mode == "adaptive" and (config.recrawl.min, config.recrawl.max) == (7200, 10 * DAY)
    assert config.recrawl_rules == Rules("adaptive", DAY, 7200, 10 * DAY, 512, 0.9)
    assert config.revisit_budget("a.test") == 100 and config.recrawl.domain_max == 0  # no delay: no cap


def test_recrawl_min_under_the_domain_delay_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        read(CRAWLER_RECRAWL="fixed", CRAWLER_DOMAIN_DELAY=10, CRAWLER_RECRAWL_MIN=5)
    assert str(caught.value) == "CRAWLER_RECRAWL_MIN (5 s) must be at least CRAWLER_DOMAIN_DELAY (10 s)"
    read(CRAWLER_RECRAWL="off", CRAWLER_DOMAIN_DELAY=10, CRAWLER_RECRAWL_MIN=5)  # off: not checked


def test_recrawl_max_under_min_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        read(CRAWLER_RECRAWL="fixed", CRAWLER_RECRAWL_MIN=7200, CRAWLER_RECRAWL_MAX=3600)
    assert str(caught.value) == "CRAWLER_RECRAWL_MAX (3600 s) must be at least CRAWLER_RECRAWL_MIN (7200 s)"
    assert "\n" not in str(caught.value)


def test_an_interval_outside_the_clamps_is_clamped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crawler.worker.config"):
        config = read(CRAWLER_RECRAWL="fixed", CRAWLER_RECRAWL_MIN=7200, CRAWLER_RECRAWL_INTERVAL=60)
    assert config.recrawl.interval == 7200 and config.recrawl_rules.interval == 7200
    assert any("CRAWLER_RECRAWL_INTERVAL (60 s)" in r.getMessage() for r in caplog.records)


def test_the_domain_cap_is_derived_from_the_delay() -> None:
    # billion: share 0.5, delay 70 s, MAX 60 days: 0.5 × 86400 / 70 × 60 = 37028
    config = read(CRAWLER_RECRAWL="fixed", CRAWLER_DOMAIN_DELAY=70, CRAWLER_RECRAWL_MIN=DAY,
                  CRAWLER_RECRAWL_MAX=60 * DAY, CRAWLER_RECRAWL_INTERVAL=7 * DAY)
    assert config.recrawl.domain_max == 37028
    assert config.revisit_budget("a.test") == pytest.approx(0.5 * 86400 / 71)
    assert read(CRAWLER_RECRAWL="fixed", CRAWLER_DOMAIN_DELAY=70, CRAWLER_RECRAWL_MIN=DAY,
                CRAWLER_RECRAWL_DOMAIN_MAX=5).recrawl.domain_max == 5
    overridden = read(CRAWLER_RECRAWL="adaptive", CRAWLER_DOMAIN_OVERRIDES={"b.test": {"delay": 9}})
    assert overridden.revisit_budget("b.test") == pytest.approx(0.5 * 86400 / 10)
    assert overridden.revisit_budget("a.test") is None  # no delay, no CRAWLER_RECRAWL_BUDGET


# --- the session wires it ------------------------------------------------------------


def test_a_crawl_with_recrawl_on_builds_writes_and_solves_mu(redis_url: str, clock: ManualClock) -> None:
    # needs Frontier(recrawl=) (crawler/store/frontier.py, the store's half of the build)
    from tests.servers import open_on

    scheduler = open_on(redis_url, clock, CRAWLER_RECRAWL="adaptive", CRAWLER_RECRAWL_BUDGET=100,
                        CRAWLER_ACK_INTERVAL=10, CRAWLER_FLUSH_INTERVAL=0.5)
    try:
        session = scheduler.session
        session.offer([URL], canonical=True)
        session.flush()
        request = scheduler.next_request()
        assert request is not None
        request.meta[RECRAWL_SEEN] = seen()
        session.lease_of(request).ack(STORED)
        (ack,) = session._writes.acks
        assert ack.write is not None and ack.write.mode == CREATE and ack.write.domain == "a.test"
        assert ack.write.k == key_of(scheduler.crawler.request_fingerprinter.fingerprint(Request(URL)))
        assert session._history is not None and session._history.due == {"a.test"}
        clock.advance(0.5)  # the session's tick solves the domain's μ
        assert not session._history.due
        assert scheduler.crawler.stats.get_value("crawler/recrawl/mu_solved") == 1
    finally:
        scheduler.close("finished")


def test_a_crawl_with_recrawl_off_builds_none(redis_url: str, clock: ManualClock) -> None:
    from tests.servers import open_on

    scheduler = open_on(redis_url, clock, CRAWLER_ACK_INTERVAL=10)
    try:
        session = scheduler.session
        session.offer([URL], canonical=True)
        session.flush()
        request = scheduler.next_request()
        assert request is not None and session._history is None
        session.lease_of(request).ack(STORED)
        (ack,) = session._writes.acks
        assert ack.write is None
    finally:
        scheduler.close("finished")
