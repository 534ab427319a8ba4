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

import redis
from scrapy import signals

from crawler._compat import downloader_load, engine_busy, missing, wake_engine
from crawler.clock import SYSTEM, Clock, clock_of, use_clock
from crawler.connection import get_redis, mask_url
from crawler.settings_registry import setting
from crawler.store import LOST, Keys, codec
from crawler.worker import WorkerSession
from crawler.worker.config import FrontierSettings, on_loss_policy, warn_ignored

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: requests handed to Scrapy's engine in one turn of the event loop: the
#: engine starts each one (downloader middlewares, the handler) before it
#: lets the loop run, and a turn of hundreds held it for over 100 ms
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
        if engine is None or getattr(engine, "_slot", None) is None:
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


class FrontierScheduler:
    runs_worker_session = True  # crawler.worker.uses_frontier

    def __init__(self, crawler: Crawler, server: redis.Redis, config: FrontierSettings,
                 clock: Clock = SYSTEM) -> None:
        self.crawler = crawler
        self.clock = use_clock(crawler, clock)  # the crawl's one clock (crawler/clock.py)
        self.spider: Spider | None = None
        self._turn = 0  # requests handed out in this turn of the event loop
        settings = crawler.settings
        self.session = WorkerSession(
            server, config, ScrapyEngine(crawler), crawler.stats, settings, crawler.request_fingerprinter, clock,
            on_loss=on_loss_policy(settings), dlq_max=setting(settings, "CRAWLER_DLQ_MAX"),
            dedup_start_requests=setting(settings, "CRAWLER_DEDUP_START_REQUESTS"))
        crawler.signals.connect(self._began, signal=signals.headers_received)
        crawler.signals.connect(self._ended, signal=signals.response_downloaded)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        # a SettingsError or RedisUnavailable fails the crawl; the command layer says it in one line
        config = FrontierSettings.from_settings(crawler.settings)
        clock = clock_of(crawler)  # CRAWLER_CLOCK: for tests and simulations
        server = get_redis(crawler.settings)
        warn_ignored(crawler.settings)
        return cls(crawler, server, config, clock)

    def open(self, spider: Spider) -> None:
        """Open (or resume) the frontier of ``spider`` and its shard."""
        self.spider = spider
        session = self.session
        session.open(spider, int(getattr(spider, "shard", session.config.shard)), int(getattr(spider, "shards", 1)))
        self.crawler.frontier = session  # type: ignore[attr-defined]  # what components ask (crawler/worker/)
        assert session.frontier is not None
        self._say_opened(session.frontier.keys)

    def _say_opened(self, keys: Keys) -> None:
        """One line: which Redis, which frontier, what it holds, and whether
        the crawl resumes it (then how old it is, and how to start afresh)."""
        where = mask_url(self.crawler.settings.get("REDIS_URL") or "")
        queued = len(self)
        if not queued:
            logger.info("Frontier %s opened on Redis at %s (empty)", keys.base, where)
            return
        age = ""
        frontier = self.session.frontier
        if frontier is not None and frontier.epoch.created_ms:
            age = f", made {_age((self.clock.server_ms(frontier.client) - frontier.epoch.created_ms) / 1000)} ago"
        logger.info("Resuming crawl of frontier %s on Redis at %s (%d requests queued%s); to start afresh "
                    "instead: -s SCHEDULER_FLUSH_ON_START=True", keys.base, where, queued, age)

    def close(self, reason: str) -> None:
        """Store what is buffered, acknowledge finished pages and hand
        unfinished leases back (``WorkerSession.close``)."""
        self.session.close()

    def enqueue_request(self, request: Request) -> bool:
        """Buffer ``request`` for the frontier; True unless it cannot be stored.

        Dedup happens when the buffer is stored, so a duplicate is accepted
        here and counted then (``crawler/frontier/duplicates``). A retry or
        redirect of a leased request ends that lease once stored; a request
        with ``meta["crawler_delay"]`` waits in the delayed set.
        """
        return self.session.offer_request(request)

    def next_request(self) -> Request | None:
        """The next leased request (``WorkerSession.take``), or None while
        nothing is due or this turn of the loop had ``TURN_MAX``."""
        if self._turn >= TURN_MAX:
            return None  # the rest in the next turn: the loop runs what else is ready first
        lease = self.session.take()
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
            lease.began()

    def _ended(self, response: Response, request: Request, **_: Any) -> None:
        lease = self.session.lease_of(request)
        if lease is not None:
            # the crawler hung up on it (the page cap, a stopped download): the site sees the end later
            lease.ended(request.meta.get("download_latency"), cut="download_stopped" in response.flags)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
