"""When a lease's acknowledgement leaves, on a real Redis: a page's links are
stored before (or with) its acknowledgement, always; and an acknowledgement
never leaves a URL leased with no end (the ledger adds up). The session runs
without Scrapy's engine started (``tests.servers.crawler_for``) on a clock
the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from scrapy import Request
from scrapy.core.scheduler import BaseScheduler

from crawler.clock import ManualClock
from crawler.meta import DELAY
from crawler.scheduler import FrontierScheduler
from crawler.store import STORED, Ledger
from tests.servers import RedisServer, open_on

LINKS = [f"http://a.test/child/{i}" for i in range(5)]



def ledger_of(scheduler: FrontierScheduler) -> Ledger:
    store = scheduler.session.store
    assert store is not None
    return Ledger.from_status(store.status())


def test_a_pages_acknowledgement_never_leaves_before_its_links(redis_url: str, redis_client: redis.Redis,
                                                              clock: ManualClock) -> None:
    # the acknowledgement's interval (20 ms) is up long before the batch fills
    # or the flush interval (10 s) comes: the links wait in the write buffer;
    # a second leased request waits for the engine, so no dequeue carries the
    # acknowledgement: it left in a round trip of its own, ahead of the links,
    # and a worker killed then lost the page's subtree for good
    scheduler = open_on(redis_url, clock, CRAWLER_ACK_INTERVAL=0.02, CRAWLER_FLUSH_INTERVAL=10,
                        CRAWLER_ENQUEUE_BATCH=1000)
    try:
        session = scheduler.session
        session.offer(["http://a.test/", "http://b.test/"], canonical=True)
        session.flush()
        parent = scheduler.next_request()
        assert parent is not None and session.leased_waiting() == 1  # b.test's waits for the engine
        lease = session.lease_of(parent)
        assert lease is not None
        session.offer(LINKS, depth=1, canonical=True)  # the page's links, buffered
        lease.ack(STORED)
        clock.advance(0.02)  # the acknowledgement's interval: it leaves now
        store = session.store
        assert store is not None
        acknowledged = redis_client.zscore(store.keys.leases, lease.id) is None
        assert acknowledged  # it did leave within its interval
        # ... and only with (or after) the links: admitted, queued for their domain
        assert ledger_of(scheduler).admitted == 2 + len(LINKS)
        assert store.queued() == len(LINKS)
    finally:
        scheduler.close("finished")


@pytest.fixture
def tiny_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "oom").start()
    yield server
    server.stop()


def test_a_retry_refused_for_want_of_memory_stays_leased_and_comes_back(tiny_redis: RedisServer) -> None:
    # Redis out of memory (maxmemory, noeviction) refuses delay.lua: the retry
    # was not parked, yet its lease was acknowledged with the next dequeue (as
    # a request that moved on): the URL left "leased" for no state at all
    clock = ManualClock()  # no key on Redis: the scripts read Redis' own time, and the test writes nothing
    scheduler = open_on(tiny_redis.url, clock, CRAWLER_ACK_INTERVAL=0.02, CRAWLER_POLL_INTERVAL=0.01,
                        SCHEDULER_PERSIST=True)
    client = tiny_redis.client()
    try:
        session = scheduler.session
        session.offer(["http://a.test/"], canonical=True)
        session.flush()
        request = scheduler.next_request()
        assert request is not None
        lease = session.lease_of(request)
        assert lease is not None
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", 1)  # below what it holds: every flagged script is refused
        retry = request.replace(dont_filter=True)
        retry.meta[DELAY] = 5.0
        assert scheduler.enqueue_request(retry)
        session.flush()  # delay.lua: refused for want of memory
        clock.advance(1)  # acknowledgements' interval, polls: whatever would carry the lease's ack has run
        assert scheduler.next_request() is None
        store = session.store
        assert store is not None
        assert client.zscore(store.keys.leases, lease.id) is not None  # still leased: its URL has a state
        ledger = ledger_of(scheduler)
        assert ledger.balanced and ledger.leased == 1, ledger
        assert scheduler.crawler.stats.get_value("crawler/frontier/oom_retries_kept") == 1
        client.config_set("maxmemory", 0)
    finally:
        scheduler.close("finished")  # the kept lease is handed back, not left to expire
    ledger = Ledger.from_status(store.status())
    assert ledger.balanced and ledger.queued == 1 and ledger.leased == 0, ledger


def test_a_retry_refused_for_want_of_memory_at_close_is_handed_back(tiny_redis: RedisServer) -> None:
    # the retry is still in the write buffer when the crawl closes: close's own
    # flush is refused for want of memory, and the lease it kept then must be
    # among those handed back (the list of them was made before the flush)
    clock = ManualClock()
    scheduler = open_on(tiny_redis.url, clock, CRAWLER_ACK_INTERVAL=10, CRAWLER_FLUSH_INTERVAL=10,
                        SCHEDULER_PERSIST=True)
    client = tiny_redis.client()
    session = scheduler.session
    store = session.store
    assert store is not None
    session.offer(["http://a.test/"], canonical=True)
    session.flush()
    request = scheduler.next_request()
    assert request is not None
    retry = request.replace(dont_filter=True)
    retry.meta[DELAY] = 5.0
    assert scheduler.enqueue_request(retry)  # buffered: nothing sent yet
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    scheduler.close("finished")
    assert scheduler.crawler.stats.get_value("crawler/frontier/oom_retries_kept") == 1
    client.config_set("maxmemory", 0)
    ledger = Ledger.from_status(store.status())
    assert ledger.balanced and ledger.queued == 1 and ledger.leased == 0, ledger


def test_the_published_session_is_cleared_at_close(redis_url: str, clock: ManualClock) -> None:
    from crawler.worker import session_of

    scheduler = open_on(redis_url, clock)
    crawler = scheduler.crawler
    assert isinstance(scheduler, BaseScheduler)
    assert session_of(crawler) is scheduler.session is crawler.worker_session
    assert crawler.frontier is scheduler.session  # the deprecated name, for one release
    scheduler.close("finished")
    assert session_of(crawler) is None and crawler.frontier is None


def test_the_deprecated_names_still_work_and_say_so(redis_url: str, clock: ManualClock) -> None:
    scheduler = open_on(redis_url, clock, CRAWLER_DOMAIN_DELAY=0)
    try:
        session = scheduler.session
        session.offer(["http://a.test/1", "http://a.test/2"], canonical=True)
        session.flush()
        with pytest.warns(DeprecationWarning, match="next_lease"):
            lease = session.take()
        assert lease is not None
        session.lend(lease, Request("http://a.test/1"))
        with pytest.warns(DeprecationWarning, match="response_began"):
            lease.began()
        clock.advance(0.25)
        with pytest.warns(DeprecationWarning, match="response_ended"):
            lease.ended(0.125)
        assert lease.acknowledgement().duration == 0.375  # marked as by the new names
    finally:
        scheduler.close("finished")
