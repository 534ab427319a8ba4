"""The frontier scheduler: Scrapy's scheduler contract on a worker session
(``crawler/worker/``), which owns the leases and everything between them
and Redis.

    SCHEDULER = "crawler.scheduler.FrontierScheduler"
    REQUEST_FINGERPRINTER_CLASS = "crawler.scheduler.Fingerprinter"

Order guarantees. Requests are queued per registered domain. Within a domain,
a higher ``priority`` comes first, and requests of one priority come out in
the order they were enqueued (FIFO), except that a request whose lease
expired, or that a closing worker handed back, goes to the front. Across
domains, a domain is served only when it is due on the Redis server's clock
(its token bucket holds a token and its minimum delay has passed); among due
domains, the one due longest comes first. Delayed requests (retries,
backoff) join the back of their queue when their time comes.

Enqueued requests are buffered and reach Redis in batches (dedup, cap and
push in one script call): at ``CRAWLER_ENQUEUE_BATCH`` requests, when a
page's output is exhausted, before each dequeue and every
``CRAWLER_FLUSH_INTERVAL`` seconds. ``enqueue_request`` therefore returns True
for every request it accepts for sending; duplicates are counted when the
batch is stored (``crawler/frontier/duplicates``). Dequeue leases up to
``CRAWLER_PREFETCH`` requests per round trip; the engine gets at most
``TURN_MAX`` of them in one turn of the event loop, and is woken for the
rest once the loop has run what else was ready.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.utils.misc import load_object

from crawler._compat import downloader_load, engine_busy, engine_running, missing, wake_engine
from crawler.clock import use_clock
from crawler.connection import mask_url
from crawler.store import LOST, Keys, codec
from crawler.worker import WorkerSession, publish

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: requests handed to Scrapy's engine in one turn of the event loop: the
#: engine starts each one (downloader middlewares, the handler) before it
#: lets the loop run, so a turn of hundreds stalls the loop (docs/benchmarks.md)
TURN_MAX = 64


class ScrapyEngine:
    """The session's view of Scrapy's engine (``WorkerSession``'s ``Engine``)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._blind = False  # Scrapy's engine state moved: said once

    @property
    def engine(self) -> Any:
        """Scrapy's engine, None before the crawl starts (Scrapy 2.19 raises
        on ``Crawler.engine`` then: a scheduler driven without an engine, as
        ``bench/bench_frontier.py`` drives it, sees None)."""
        try:
            return self.crawler.engine
        except RuntimeError:
            return None

    def busy(self) -> set[int] | None:
        engine = self.engine
        if not engine_running(engine):
            return None  # not started, or closed
        busy = engine_busy(engine)
        if busy is None and not self._blind:
            self._blind = True
            logger.warning("Scrapy's engine state moved (crawler/_compat.py: %s): requests that end "
                           "where no middleware sees them are acknowledged when their leases expire",
                           ", ".join(missing(engine)))
        return busy

    def room(self) -> int | None:
        """The downloader's cap (``CONCURRENT_REQUESTS``, or what
        ``extensions/concurrency.py`` sets) less what is in flight."""
        load = downloader_load(self.engine)
        return None if load is None or not load[1] else max(1, load[1] - load[0])

    def wake(self) -> object:
        return wake_engine(self.engine)

    def close(self, reason: str) -> None:
        from scrapy.utils.defer import deferred_from_coro
        from twisted.internet import reactor

        def close() -> None:
            engine = self.engine
            if engine is not None and engine.spider is not None:
                engine.unpause()
                deferred_from_coro(engine.close_spider_async(reason=reason))

        reactor.callLater(0, close)  # type: ignore[attr-defined]


class FrontierScheduler(BaseScheduler):
    """Scrapy's scheduler contract (``scrapy.core.scheduler.BaseScheduler``)
    on a worker session, which it is given (``from_crawler`` builds it with
    ``session_factory``'s ``from_crawler(crawler, engine)``):

    - ``open(spider)`` opens the session on the spider's frontier and shard
      and publishes it as ``crawler.worker_session``; ``close(reason)``
      stores what is buffered, acknowledges finished pages, hands
      unfinished leases back and withdraws it (None from then on);
    - ``enqueue_request(request)`` buffers the request; True unless it cannot
      be stored (a duplicate is accepted and counted when the batch is stored);
    - ``next_request()`` the next leased request, or None while nothing is
      due (the engine is woken when something may be);
    - ``has_pending_requests()`` False only once the frontier (every
      worker's share) has been empty for ``SCHEDULER_IDLE_BEFORE_CLOSE``,
      never while Redis is away.

    The order guarantees are the module's (per domain, by priority, FIFO
    within one; across domains, by when each is due on the Redis server's clock).
    """

    runs_worker_session = True  # crawler.worker.uses_frontier
    #: what builds the session: an import path to a class (or object) with
    #: ``from_crawler(crawler, engine) -> WorkerSession``
    session_factory = "crawler.worker.WorkerSession"

    def __init__(self, crawler: Crawler, session: WorkerSession) -> None:
        self.crawler = crawler
        self.session = session
        self.clock = use_clock(crawler, session.clock)  # the crawl's one clock (crawler/clock.py)
        self.spider: Spider | None = None
        self._turn = 0  # requests handed out in this turn of the event loop
        crawler.signals.connect(self._began, signal=signals.headers_received)
        crawler.signals.connect(self._ended, signal=signals.response_downloaded)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        # a SettingsError or RedisUnavailable fails the crawl; the command layer says it in one line
        factory = load_object(cls.session_factory)
        return cls(crawler, factory.from_crawler(crawler, ScrapyEngine(crawler)))

    def open(self, spider: Spider) -> None:
        """Open (or resume) the frontier of ``spider`` and its shard."""
        self.spider = spider
        session = self.session
        session.open(spider, int(getattr(spider, "shard", session.config.shard)), int(getattr(spider, "shards", 1)))
        publish(self.crawler, session)  # what components ask (crawler/worker/)
        assert session.store is not None
        self._say_opened(session.store.keys)

    def _say_opened(self, keys: Keys) -> None:
        """One line: which Redis, which frontier, what it holds, and whether
        the crawl resumes it (then how old it is, and how to start afresh)."""
        where = mask_url(self.crawler.settings.get("REDIS_URL") or "")
        queued = len(self)
        if not queued:
            logger.info("Frontier %s opened on Redis at %s (empty)", keys.base, where)
            return
        age = ""
        store = self.session.store
        if store is not None and store.epoch.created_ms:
            age = f", made {_age((self.clock.server_ms(store.client) - store.epoch.created_ms) / 1000)} ago"
        logger.info("Resuming crawl of frontier %s on Redis at %s (%d requests queued%s); to start afresh "
                    "instead: -s SCHEDULER_FLUSH_ON_START=True", keys.base, where, queued, age)

    def close(self, reason: str) -> None:
        """Store what is buffered, acknowledge finished pages and hand
        unfinished leases back (``WorkerSession.close``); from then on
        ``session_of(crawler)`` is None."""
        try:
            self.session.close()
        finally:
            publish(self.crawler, None)

    def enqueue_request(self, request: Request) -> bool:
        """Buffer ``request`` for the frontier; True unless it cannot be stored.

        Dedup happens when the buffer is stored, so a duplicate is accepted
        here and counted then (``crawler/frontier/duplicates``). A retry or
        redirect of a leased request ends that lease once stored; a request
        with ``meta["crawler_delay"]`` waits in the delayed set.
        """
        return self.session.offer_request(request)

    def next_request(self) -> Request | None:
        """The next leased request (``WorkerSession.next_lease``), or None while
        nothing is due or this turn of the loop had ``TURN_MAX``."""
        if self._turn >= TURN_MAX:
            return None  # the rest in the next turn: the loop runs what else is ready first
        lease = self.session.next_lease()
        if lease is None:
            return None
        try:
            request = codec.decode(lease.entry, self.spider)  # type: ignore[arg-type]
        except Exception as exc:  # a corrupt entry must not stop the crawl
            logger.error("Dropped an undecodable frontier entry %r: %s", lease.entry[:80], exc)
            self.crawler.stats.inc_value("crawler/frontier/undecodable")  # type: ignore[union-attr]
            self.session.lend(lease, None)
            lease.ack(LOST)
            return None
        self.session.lend(lease, request)
        self.crawler.stats.inc_value("scheduler/dequeued/redis")  # type: ignore[union-attr]
        self._count_turn()
        return request

    def _count_turn(self) -> None:
        if self._turn == 0:
            try:
                asyncio.get_running_loop().call_soon(self._turn_over)
            except RuntimeError:  # called with no loop running: there are no turns to spread over
                return
        self._turn += 1

    def _turn_over(self) -> None:
        if self._turn >= TURN_MAX:
            self.session.wake_now()
        self._turn = 0

    def has_pending_requests(self) -> bool:
        """``WorkerSession.busy``: never idle while Redis is away."""
        return self.session.busy()

    def __len__(self) -> int:
        return len(self.session)

    def _began(self, request: Request, **_: Any) -> None:
        lease = self.session.lease_of(request)
        if lease is not None:
            lease.response_began()

    def _ended(self, response: Response, request: Request, **_: Any) -> None:
        lease = self.session.lease_of(request)
        if lease is not None:
            # the crawler hung up on it (the page cap, a stopped download): the site sees the end later
            lease.response_ended(request.meta.get("download_latency"), cut="download_stopped" in response.flags)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
