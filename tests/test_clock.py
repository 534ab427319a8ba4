"""The clock tests control (``crawler/clock.py``), and the scheduler's parts
that measure time, run on it against a real Redis: dequeue pacing
(``Intake``), politeness marks (``Lease``), the acknowledgement and flush
intervals (``WriteBuffer``, the scheduler's tick), the reconnect backoff
(``RedisGuard``) and the epoch check (``LossWatch``). Nothing sleeps: each
test moves the clock and looks."""

from __future__ import annotations

import logging
from hashlib import sha256

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy import Request
from scrapy.settings import Settings

from crawler.clock import SYSTEM, ManualClock, check_path, from_path, use_clock
from crawler.scheduler import FrontierScheduler
from crawler.worker.config import FrontierSettings
from crawler.worker._intake import MAX_POLL_WAIT, Intake
from crawler.store import STORED, VANISHED, FrontierLost, Leased
from crawler.worker._leases import Ack, Leases
from crawler.worker._outage import CHECK_EVERY, LossWatch, RedisGuard
from crawler.store.keys import Keys, _with_clock
from crawler.worker._shards import Outbox
from crawler.worker._writes import WriteBuffer
from crawler.store import Frontier, Item, Politeness
from crawler.settings_registry import SettingsError, setting
from tests.servers import crawler_for, free_port, open_on


def item(url: str, domain: str = "a.test") -> Item:
    return Item(sha256(url.encode()).digest(), domain, 0, url.encode())


def make(client: redis.Redis, clock: ManualClock, **kwargs) -> Frontier:
    frontier = Frontier(client, Keys("crawler", "t", 0), clock=clock, **kwargs)
    frontier.open()
    return frontier


# --- the clock ------------------------------------------------------------


def test_a_manual_clock_moves_only_when_advanced(redis_client: redis.Redis) -> None:
    clock = ManualClock(redis_client, start=100.0, key="t:clock")
    assert clock.monotonic() == 100.0 and clock.server_time() == (100, 0) and clock.ms() == 100_000
    assert redis_client.get("t:clock") == b"100000"  # what the scripts read
    fired: list[tuple[str, float]] = []
    clock.timers.callLater(0.5, lambda: fired.append(("later", clock.monotonic())))
    clock.timers.callLater(0.25, lambda: fired.append(("sooner", clock.monotonic())))
    clock.advance(0.249)
    assert fired == []
    clock.advance(0.251)  # both due: run in order, at the clock's time
    assert fired == [("sooner", 100.5), ("later", 100.5)]
    assert clock.server_time() == (100, 500_000) and redis_client.get("t:clock") == b"100500"
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-0.001)
    with pytest.raises(ValueError, match="key"):
        ManualClock(redis_client, key="it's")


def test_the_scripts_read_the_manual_clock_and_fail_without_its_key(redis_client: redis.Redis,
                                                                    clock: ManualClock) -> None:
    f = make(redis_client, clock)
    assert f.take(0).now_ms == clock.ms() == 1_000_000_000
    assert f.robots.get("http://a.test")[2] == 1_000_000.0  # robots.txt's clock is the frontier's
    clock.advance(2.5)
    assert f.take(0).now_ms == 1_000_002_500
    redis_client.delete(clock.script_key)  # never a silent fall back to the server's clock
    with pytest.raises(redis.ResponseError, match=r"_lib\.lua:\d+: manual clock key crawler:clock is not set"):
        f.take(0)


def test_the_system_clock_is_the_servers(redis_client: redis.Redis) -> None:
    def ms(pair: tuple[int, int]) -> int:
        return int(pair[0]) * 1000 + int(pair[1]) // 1000

    before = ms(redis_client.time())
    taken = Frontier(redis_client, Keys("crawler", "s", 0)).take(0).now_ms
    system = SYSTEM.server_ms(redis_client)
    assert before <= taken <= system <= ms(redis_client.time())
    assert SYSTEM.script_key is None and from_path(None) is SYSTEM


def test_only_the_clock_line_of_the_library_changes() -> None:
    lib = "a\nlocal CLOCK_KEY = nil\nb\n"
    assert _with_clock(lib, None) is lib
    assert _with_clock(lib, "x:clock") == "a\nlocal CLOCK_KEY = 'x:clock'\nb\n"
    with pytest.raises(ValueError):
        _with_clock(lib, "x'clock")
    with pytest.raises(RuntimeError, match="no line"):
        _with_clock("a\nb\n", "x:clock")


def test_crawler_clock_setting_names_the_schedulers_clock(redis_url: str) -> None:
    assert setting(Settings({"CRAWLER_CLOCK": "crawler.clock:ManualClock"}), "CRAWLER_CLOCK")
    with pytest.raises(SettingsError, match="CRAWLER_CLOCK must be an import path"):
        setting(Settings({"CRAWLER_CLOCK": "crawler.clock:Nothing"}), "CRAWLER_CLOCK")
    with pytest.raises(ValueError, match="must name"):
        check_path("crawler.clock.re")
    scheduler = FrontierScheduler.from_crawler(crawler_for(redis_url, CRAWLER_CLOCK="crawler.clock:ManualClock"))
    assert isinstance(scheduler.clock, ManualClock)  # a callable: called once
    scheduler.open(scheduler.crawler.spider)  # the lease table is made with the session's write buffer
    try:
        assert scheduler.session._guard.clock is scheduler.clock and scheduler.session._leases.clock is scheduler.clock
    finally:
        scheduler.close("finished")
    assert FrontierScheduler.from_crawler(crawler_for(redis_url)).clock is SYSTEM


# --- dequeue pacing (Intake) -------------------------------------------------


def intake(client: redis.Redis, clock: ManualClock, prefetch: int = 2, poll: float = 0.125,
           **frontier: object) -> tuple[Intake, list[float]]:
    wakes: list[float] = []
    return Intake(make(client, clock, **frontier), prefetch, poll, wakes.append, None, clock), wakes


def test_a_full_batch_polls_again_at_once(redis_client: redis.Redis, clock: ManualClock) -> None:
    taker, wakes = intake(redis_client, clock)
    taker.store.add([item(f"u{i}", f"d{i}.test") for i in range(3)])
    taker.dequeue([])
    assert len(taker) == 2 and taker.due() and wakes == []


def test_a_partial_batch_polls_after_the_poll_interval(redis_client: redis.Redis, clock: ManualClock) -> None:
    taker, wakes = intake(redis_client, clock)
    taker.store.add([item("u0")])
    taker.dequeue([])
    assert len(taker) == 1
    assert not taker.due() and wakes == [0.125]  # the engine is woken then
    clock.advance(0.124)
    assert not taker.due()
    clock.advance(0.001)
    assert taker.due()


def test_nothing_due_polls_when_the_next_domain_is_due(redis_client: redis.Redis, clock: ManualClock) -> None:
    taker, wakes = intake(redis_client, clock, politeness=Politeness(delay=0.5))
    taker.store.add([item("u0"), item("u1")])
    taker.dequeue([])
    (leased,) = taker.buffer
    clock.advance(0.125)
    taker.dequeue([leased.lease])  # done now: a.test is due in 501 ms, nothing else is queued
    assert len(taker) == 1 and wakes[-1] == 0.501
    clock.advance(0.5)
    assert not taker.due()
    clock.advance(0.001)
    assert taker.due()
    taker.store.push_domain("a.test", 30)  # far off: polled again after at most MAX_POLL_WAIT
    taker.dequeue([])
    assert wakes[-1] == MAX_POLL_WAIT


def test_an_empty_frontier_backs_off_until_something_is_added(redis_client: redis.Redis,
                                                               clock: ManualClock) -> None:
    taker, wakes = intake(redis_client, clock, poll=0.03125)
    for _ in range(7):
        taker.dequeue([])
        clock.advance(wakes[-1])
    assert wakes == [0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0]  # doubling, up to 1 s
    taker.dequeue([])
    assert not taker.due()
    taker.added()  # stored here: polled again one poll interval after the last poll
    assert wakes[-1] == 0.03125 and taker.empty_polls == 0
    clock.advance(0.03125)
    assert taker.due()


def test_idle_close_waits_idle_before_close_seconds(redis_client: redis.Redis, clock: ManualClock) -> None:
    taker, _ = intake(redis_client, clock)
    assert taker.frontier_busy(2.0)  # empty from now on
    clock.advance(1.75)
    assert taker.frontier_busy(2.0)
    taker.store.add([item("late")])  # another worker adds work: busy again
    clock.advance(0.25)
    assert taker.frontier_busy(2.0)
    taker.store.add([], acks=[x.lease for x in taker.store.take(5).items])
    assert taker.frontier_busy(2.0)  # Redis is asked at most every 0.25 s: the last answer
    clock.advance(0.25)
    assert taker.frontier_busy(2.0)  # idle from now
    clock.advance(1.75)
    assert taker.frontier_busy(2.0)
    clock.advance(0.25)
    assert not taker.frontier_busy(2.0)


def test_a_domain_due_sooner_than_the_poll_interval_is_polled_for_then(redis_client: redis.Redis,
                                                                      clock: ManualClock) -> None:
    # #34 item 8: the poll interval paces calls that find something; a call
    # that found nothing due comes back when the next domain is, however soon
    taker, wakes = intake(redis_client, clock, poll=0.125, politeness=Politeness(delay=0.05))
    taker.store.add([item("u0"), item("u1")])
    taker.dequeue([])
    (leased,) = taker.buffer
    taker.buffer.clear()
    clock.advance(0.25)
    taker.dequeue([leased.lease])  # done now: a.test is due in 51 ms
    assert len(taker) == 0 and wakes[-1] == 0.051  # not 0.125 later: 74 ms of slack
    clock.advance(0.05)
    assert not taker.due()
    clock.advance(0.001)
    assert taker.due()
    taker.dequeue([])
    assert [x.entry for x in taker.buffer] == [b"u1"]


def test_a_delayed_request_is_polled_for_when_it_is_due(redis_client: redis.Redis, clock: ManualClock) -> None:
    # a retry waiting in the delayed set is due at a known time: no backoff
    # (0.125, 0.16, 0.32 s: taken 105 ms late), a poll then
    taker, wakes = intake(redis_client, clock, poll=0.125)
    taker.store.delay([(0.3, "a.test", 0, b"retry")])
    taker.dequeue([])
    assert len(taker) == 0 and wakes[-1] == 0.3
    clock.advance(0.3)
    assert taker.due()
    taker.dequeue([])
    assert [x.entry for x in taker.buffer] == [b"retry"]
    taker.store.delay([(30, "a.test", 0, b"later")])
    taker.dequeue([])
    assert wakes[-1] == MAX_POLL_WAIT  # far off: polled again after at most MAX_POLL_WAIT


def test_an_idle_answer_is_never_kept(redis_client: redis.Redis, clock: ManualClock) -> None:
    # #36 item 6: the engine closes the crawl on an idle answer; one kept for
    # 0.25 s hid what this worker stored meanwhile (its write buffer empty again)
    taker, _ = intake(redis_client, clock)
    assert not taker.frontier_busy(0)
    taker.store.add([item("u0")])
    assert taker.frontier_busy(0)  # no clock move: asked again



def test_pending_requests_right_after_this_worker_stored_them(redis_url: str, clock: ManualClock) -> None:
    # #36 item 6: has_pending_requests said False for up to 0.25 s after an
    # empty look, while what this worker had just stored waited in Redis
    scheduler = open_on(redis_url, clock)
    try:
        assert not scheduler.has_pending_requests()  # nothing anywhere: idle
        scheduler.session.offer(["http://a.test/1"], canonical=True)
        assert scheduler.has_pending_requests()  # buffered here
        scheduler.session.flush()  # stored: the buffer is empty, Redis holds it
        assert not scheduler.session._writes and not scheduler.session._intake.buffer
        assert scheduler.has_pending_requests()
        request = scheduler.next_request()
        assert request is not None
        scheduler.enqueue_request(request.replace(meta={**request.meta, "crawler_delay": 5}))  # a retry
        scheduler.session.flush()  # in the delayed set, its lease acknowledged with it
        assert scheduler.session.store is not None and scheduler.session.store.pending() == 1
        assert scheduler.has_pending_requests()
    finally:
        scheduler.close("finished")


class Storage:
    """A page store whose writer the test plays: a page is kept once named."""

    def __init__(self) -> None:
        self.kept: set[str] = set()

    def stored(self, request: Request) -> bool:
        return request.url in self.kept

    def flush(self) -> None:
        pass


def test_a_page_stored_late_is_acknowledged_within_the_ack_interval(redis_url: str, redis_client: redis.Redis,
                                                                   clock: ManualClock) -> None:
    # #34 item 8: a page's lease is held until storage (the WARC writer's
    # thread) holds the page; it was looked at again only at the next ack or
    # the 0.5 s tick, and sent with whatever dequeue came next: its parked
    # domain waited 0.1-0.6 s past its turn
    scheduler = open_on(redis_url, clock, CRAWLER_DOMAIN_DELAY=0.05)
    try:
        storage = Storage()
        scheduler.session.keep_pages_with(storage)
        scheduler.session.offer(["http://a.test/1", "http://a.test/2"], canonical=True)
        scheduler.session.flush()
        request = scheduler.next_request()
        assert request is not None and scheduler.next_request() is None  # a.test is parked
        scheduler.session.lease_of(request).ack(STORED)
        assert scheduler.session._leases.awaiting_storage()  # on its way to storage
        clock.advance(0.01)
        storage.kept.add(request.url)  # the writer holds it now
        clock.advance(0.01)  # the next look at storage, one ack interval (0.02) after the ack
        assert not scheduler.session._leases.awaiting_storage() and scheduler.session._writes.acks
        clock.advance(0.02)  # the acknowledgement leaves one ack interval later, with a dequeue
        leases = scheduler.session.store.keys.leases if scheduler.session.store is not None else ""
        assert not scheduler.session._leases.awaiting_storage() and redis_client.zcard(leases) == 0
        clock.advance(0.05)  # the delay after the ack's mark: polled for then
        assert scheduler.next_request() is not None
    finally:
        scheduler.close("finished")


# --- politeness marks (Lease) ---------------------------------------------


class Sent(list):
    """Where the leases' acknowledgements go (their ``AckSink``): kept here."""

    def ack(self, ack: Ack) -> None:
        self.append(ack)

    def retry(self, seconds: float, again: Leased, ack: Ack) -> None:
        self.append(ack)


@pytest.mark.parametrize(("delay_from", "age"), [("finish", 500), ("start", 750)])
def test_marks_are_read_on_the_clock(redis_url: str, clock: ManualClock, delay_from: str, age: int) -> None:
    sent = Sent()
    leases = Leases(clock, delay_from, crawler_for(redis_url).stats, sent, 0.01)
    request = Request("http://a.test/", meta={"download_latency": 0.125})
    lease = leases.new(Leased("7", "a.test", 0, b""))
    leases.lend(lease, request)
    lease.response_began()
    clock.advance(0.25)
    lease.response_ended(request.meta["download_latency"])
    clock.advance(0.5)
    lease.ack(STORED)
    (ack,) = sent
    assert ack.duration == 0.375  # the latency, then the body
    assert ack.wire(clock.monotonic()) == f"7:{age}:375:s"
    clock.advance(0.5)  # never sent: it ends now, its age 0 when sent now
    assert leases.new(Leased("8", "a.test", 0, b"")).acknowledgement().wire(clock.monotonic()) == "8:0"


def test_a_cut_answer_is_marked_a_round_trip_later(redis_url: str, clock: ManualClock) -> None:
    """An answer the crawler hung up on (its page cap) ends at the site when
    the site sees the hang-up: its mark is the time to the headers later."""
    sent = Sent()
    leases = Leases(clock, "finish", crawler_for(redis_url).stats, sent, 0.01)
    lease = leases.new(Leased("9", "a.test", 0, b""))
    leases.lend(lease, Request("http://a.test/"))
    lease.response_began()
    lease.response_ended(0.2, cut=True)
    lease.ack(STORED)
    (ack,) = sent
    assert ack.wire(clock.monotonic()) == "9:-200:200:s"  # the domain's turn counts from 200 ms from now
    clock.advance(0.5)
    assert ack.wire(clock.monotonic()) == "9:300:200:s"


def test_an_acks_age_sets_the_domains_next_turn(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, politeness=Politeness(delay=1))
    f.add([item("u0"), item("u1")])
    (leased,) = f.take(5).items
    clock.advance(2)
    done = f.take(5, [Ack(leased.lease, clock.monotonic() - 0.75)])  # ended 750 ms ago
    assert done.next_due_ms - done.now_ms == 251


# --- the write buffer and the scheduler's tick -----------------------------


def test_acknowledgements_leave_within_the_ack_interval(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    sent: list[float] = []
    config = FrontierSettings.from_settings(Settings())
    writes = WriteBuffer(f, Outbox(Settings(), redis_client, config, "t", None, clock), None, 100, 0.5,
                         lambda: sent.append(clock.monotonic()), clock)
    writes.ack("1")
    clock.advance(0.25)
    writes.ack("2")  # one call pending, not two
    clock.advance(0.249)
    assert sent == []
    clock.advance(0.001)
    assert sent == [1_000_000.5]
    writes.ack("3")
    writes.cancel()
    clock.advance(1)
    assert sent == [1_000_000.5]


def test_the_scheduler_stores_buffered_requests_every_flush_interval(redis_url: str, redis_client: redis.Redis,
                                                                     clock: ManualClock) -> None:
    crawler = crawler_for(redis_url, CRAWLER_FLUSH_INTERVAL=0.5, CRAWLER_ACK_INTERVAL=0.25)
    use_clock(crawler, clock)
    scheduler = FrontierScheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    try:
        assert scheduler.enqueue_request(Request("http://a.test/1"))
        clock.advance(0.499)
        assert scheduler.session.store.queued() == 0  # buffered
        clock.advance(0.001)  # the tick
        assert scheduler.session.store.queued() == 1
        request = scheduler.next_request()
        assert request is not None and redis_client.zcard(scheduler.session.store.keys.leases) == 1
        scheduler.session.lease_of(request).ack()
        clock.advance(0.249)
        assert redis_client.zcard(scheduler.session.store.keys.leases) == 1
        clock.advance(0.001)  # the acknowledgement interval: sent with a dequeue
        assert redis_client.zcard(scheduler.session.store.keys.leases) == 0
    finally:
        scheduler.close("finished")


# --- Redis away: the reconnect backoff (RedisGuard) ------------------------


def test_reconnects_back_off_on_the_clock(clock: ManualClock, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    # nothing listens there; one refused connection per call (redis-py's own retries sleep)
    away = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    wakes: list[float] = []
    guard = RedisGuard(f"redis://127.0.0.1:{port}/0", None, wakes.append, clock)
    attempts: list[float] = []

    def ping() -> None:
        attempts.append(clock.monotonic() - 1_000_000)
        away.ping()

    guard.call(ping)
    assert guard.down and wakes == [0.5]
    for wait in (0.5, 1.0, 2.0, 4.0, 5.0):
        clock.advance(wait - 0.001)
        guard.call(ping)  # not due: not tried
        clock.advance(0.001)
        guard.call(ping)
    assert attempts == [0.0, 0.5, 1.5, 3.5, 7.5, 12.5]
    assert wakes == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]  # doubling, up to 5 s; the engine woken each time
    clock.advance(5.0)
    with caplog.at_level(logging.WARNING, logger="crawler.worker._outage"):
        guard.call(lambda: None)
    assert not guard.down and "is back after 17.5s" in caplog.text


# --- the frontier lost: the epoch check every CHECK_EVERY s (LossWatch) -----


def test_an_idle_worker_looks_at_the_epoch_every_check_every(redis_client: redis.Redis, clock: ManualClock,
                                                             redis_url: str) -> None:
    f = make(redis_client, clock)
    watch = LossWatch(crawler_for(redis_url).stats, f, "stop", lambda: 0, lambda: None, lambda: None)
    clock.advance(CHECK_EVERY - 1)
    f.take(0)  # a dequeue looks too
    redis_client.delete(f.keys.key("epoch"))  # the frontier vanishes (a flush, say)
    clock.advance(CHECK_EVERY - 0.001)
    watch.check()  # not looked: nothing known yet
    clock.advance(0.001)
    with pytest.raises(FrontierLost) as lost:
        watch.check()
    assert lost.value.kind == VANISHED and lost.value.looked_ago == CHECK_EVERY
