"""The frontier scheduler: Scrapy's scheduler contract on the Redis frontier.

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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import redis
from scrapy.utils.misc import load_object
from twisted.internet import task

from crawler._compat import downloader_load
from crawler.clock import SYSTEM, Clock, from_path
from crawler.connection import _reason, get_redis, mask_url, persistence_warning
from crawler.scheduler import _codec as codec
from crawler.scheduler._config import FrontierSettings, warn_ignored
from crawler.scheduler._intake import EngineWaker, Intake
from crawler.scheduler._leases import LOST, STORED, Leases, Marks
from crawler.scheduler._outage import (
    REDIS_ERRORS,
    FrontierLost,
    LossWatch,
    RedisGuard,
    on_loss_policy,
)
from crawler.scheduler._redis import Keys
from crawler.scheduler._stats import inc
from crawler.scheduler._stores import DeadLetters
from crawler.scheduler._writes import Inbox, Offers, Outbox, Recent, WriteBuffer
from crawler.scheduler.frontier import Frontier
from crawler.scheduler.identity import Canonicalizer
from crawler.scheduler.service import FrontierService
from crawler.settings_registry import SettingsError, setting

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler


logger = logging.getLogger(__name__)

#: requests handed to Scrapy's engine in one turn of the event loop: the
#: engine starts each one (downloader middlewares, the handler) before it
#: lets the loop run, and a turn of hundreds held it for over 100 ms
TURN_MAX = 64
#: least seconds between two looks at pages on their way to storage (with
#: ``CRAWLER_ACK_INTERVAL`` 0, they would be looked at in every turn of the loop)
STORAGE_LOOK = 0.01


class FrontierScheduler:
    def __init__(self, crawler: Crawler, server: redis.Redis, config: FrontierSettings,
                 clock: Clock = SYSTEM) -> None:
        self.crawler = crawler
        self.server = server
        self.config = config
        self.clock = clock  # every part below measures time on it (crawler/clock.py)
        self.stats = crawler.stats
        self.leases = Leases(Marks(crawler, config.delay_from, clock))
        self.waker = EngineWaker(crawler, clock)
        self.guard = RedisGuard(crawler.settings.get("REDIS_URL") or "", self.stats, self.waker.wake_in, clock)
        self.spider: Spider | None = None
        self._turn = 0  # requests handed out in this turn of the event loop
        # built in open(), once the spider (and so the frontier's keys) is known
        self.frontier: Frontier | None = None
        self.writes: WriteBuffer
        self.intake: Intake
        self.inbox: Inbox
        self.offers: Offers
        self.service: FrontierService
        self._flusher: task.LoopingCall | None = None
        self._storage_call: Any = None  # the next look at pages on their way to storage

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        # a SettingsError or RedisUnavailable fails the crawl; the command layer says it in one line
        config = FrontierSettings.from_settings(crawler.settings)
        try:
            clock = from_path(setting(crawler.settings, "CRAWLER_CLOCK"))  # for tests and simulations
        except ValueError as exc:
            raise SettingsError(f"CRAWLER_CLOCK {exc}") from None
        server = get_redis(crawler.settings)
        warn_ignored(crawler.settings)
        return cls(crawler, server, config, clock)

    # --- lifecycle -------------------------------------------------------

    def open(self, spider: Spider) -> None:
        """Open (or resume) the frontier of ``spider`` and its shard."""
        self.spider = spider
        config = self.config
        keys = Keys(config.prefix, spider.name, int(getattr(spider, "shard", config.shard)))
        self.frontier = config.frontier(self.server, keys, self.clock)
        if config.flush_on_start:
            self.frontier.clear()
        self.frontier.open()
        self.loss = LossWatch(self.crawler, self.frontier, on_loss_policy(self.crawler))
        self.guard.on_lost = lambda exc: self.loss.lost(exc, self)
        if config.persist and (warning := persistence_warning(self.server, keys.base)):
            logger.warning("Redis at %s %s", mask_url(self.guard.url), warning)
        outbox = Outbox(self.crawler.settings, self.server, config, spider.name, self.stats, self.clock)
        recent = Recent(config.dedup_local) if config.dedup_local else None
        self.writes = WriteBuffer(self.frontier, outbox, self.stats, config.batch,
                                  config.ack_interval, self._send_acks, self.clock, recent)
        self.intake = Intake(self.frontier, config.prefetch, config.poll_interval,
                             self.waker.wake_in, self.stats, self.clock)
        self.inbox = Inbox(self.frontier, config.batch, self.stats, self.clock)
        self.offers = Offers(spider, keys.shard, int(getattr(spider, "shards", 1)), config.forward, self.writes,
                             self.leases, self.crawler.request_fingerprinter, self.stats,
                             canonicalize=Canonicalizer(config.tracking),
                             dedup_start_requests=setting(self.crawler.settings, "CRAWLER_DEDUP_START_REQUESTS"))
        dead_letters = DeadLetters(self.server, keys, setting(self.crawler.settings, "CRAWLER_DLQ_MAX"))
        self.service = FrontierService(self, self.frontier, dead_letters, self.guard, self.stats, spider.name)
        self.crawler.frontier = self.service  # type: ignore[attr-defined]  # what components ask (service.py)
        self._say_opened(keys)
        self._flusher = task.LoopingCall(self._tick)
        self._flusher.clock = self.clock.timers
        self._flusher.start(config.flush_interval, now=False)

    def _say_opened(self, keys: Keys) -> None:
        """One line: which Redis, which frontier, what it holds, and whether
        the crawl resumes it (then how old it is, and how to start afresh)."""
        where = mask_url(self.guard.url)
        queued = len(self)
        if not queued:
            logger.info("Frontier %s opened on Redis at %s (empty)", keys.base, where)
            return
        age = ""
        created = self.frontier.epoch.created_ms if self.frontier is not None else 0
        if created:
            age = f", made {_age((self.clock.server_ms(self.server) - created) / 1000)} ago"
        logger.info("Resuming crawl of frontier %s on Redis at %s (%d requests queued%s); to start afresh "
                    "instead: -s SCHEDULER_FLUSH_ON_START=True", keys.base, where, queued, age)

    def close(self, reason: str) -> None:
        """Store what is buffered, acknowledge finished pages and hand
        unfinished leases back; delete the frontier unless ``SCHEDULER_PERSIST``."""
        self.waker.cancel()
        self.writes.cancel()
        if self._storage_call is not None and self._storage_call.active():
            self._storage_call.cancel()
        if self._flusher is not None and self._flusher.running:
            self._flusher.stop()
        if self.guard.halted:  # the frontier was lost (_outage.py): nothing more is written to it
            return
        assert self.frontier is not None
        if self.leases.storage is not None:  # pages on their way to storage: acknowledged once there
            self.leases.storage.flush()
            self.writes.acks.extend(self.leases.stored())
        unfinished = self.leases.unfinished(leased.lease for leased in self.intake.buffer)
        try:
            self.writes.flush()
            if self.writes.acks:  # finished pages: acknowledged before the process goes
                self.writes.send_acks()
            given_back = self.frontier.release(unfinished)
        except FrontierLost as exc:  # lost since the last look: said, and nothing more is written
            self.loss.lost(exc, self, closing=True)
            return
        except REDIS_ERRORS as exc:
            # unacknowledged pages come back when their leases expire, and
            # their links with them (stored first): they are fetched again
            logger.warning("Redis unreachable at close (%s): %d leased requests will come back "
                           "when their leases expire", _reason(exc), len(unfinished))
            return
        if given_back:
            logger.info("Handed %d unfinished requests back to the frontier", given_back)
        self.service.ledger()
        self.intake.buffer.clear()
        self.leases.clear()
        if not self.config.persist:
            self.flush()

    def flush(self) -> None:
        """Delete the whole frontier (scrapy-redis's ``flush``)."""
        if self.frontier is not None:
            self.frontier.clear()

    # --- enqueue ---------------------------------------------------------

    def enqueue_request(self, request: Request) -> bool:
        """Buffer ``request`` for the frontier; True unless it cannot be stored.

        Dedup happens when the buffer is stored, so a duplicate is accepted
        here and counted then (``crawler/frontier/duplicates``). A retry or
        redirect of a leased request acknowledges that lease once stored; a
        request with ``meta["crawler_delay"]`` waits in the delayed set.
        """
        accepted = self.offers.request(request)
        if self.writes.full:
            self.guard.call(self.flush_pending)
        return accepted

    def add_urls(self, urls: Iterable[str], *, depth: int = 0, priority: int = 0,
                 canonical: bool = False) -> int:
        """Offer plain URLs in bulk: no ``Request`` objects until dequeued.

        URLs are canonicalised here (unless ``canonical`` says they are);
        invalid ones are skipped and counted. With several shards (the
        spider's ``shards``), URLs of another shard's domains are forwarded to
        that shard's inbox. Returns how many were offered (dedup happens in
        Redis).
        """
        offered = self.offers.urls(urls, depth, priority, canonical)
        if self.writes.full:
            self.guard.call(self.flush_pending)
        return offered

    def unknown_urls(self, urls: list[str]) -> list[str]:
        """The canonical ``urls`` this process does not know the frontier
        has seen (``CRAWLER_DEDUP_LOCAL``); the others count as duplicates."""
        return self.offers.unknown(urls)

    def flush_pending(self) -> None:
        """Store buffered requests and acknowledgements now (``_writes.py``);
        then poll soon if that stored a request (or a delayed one, whose time
        the next poll learns), rather than after a backoff."""
        delayed = bool(self.writes.delays)
        result = self.writes.flush()
        if delayed or (result is not None and result.added):
            self.intake.added()

    # --- what the middlewares report ---------------------------------------

    def ack(self, request: Request, end: str = STORED) -> None:
        """The request is done, ended as ``end`` (one of ``_leases.ENDS``); its lease
        is released, and its domain's next turn set, within
        ``CRAWLER_ACK_INTERVAL`` (a stored page's once its storage holds it)."""
        ack = self.leases.done(request, end)
        if ack is not None:
            self.writes.ack(ack)
        if self.leases.held:
            self._storage_stored()

    def _storage_stored(self) -> None:
        """Acknowledge the held pages storage holds by now; while some are
        still on their way, look again one ack interval later: a parked domain
        waits for its page's acknowledgement, not for the next ack or tick."""
        for ack in self.leases.stored():
            self.writes.ack(ack)
        if self.leases.held and not (self._storage_call is not None and self._storage_call.active()):
            self._storage_call = self.clock.timers.callLater(max(self.config.ack_interval, STORAGE_LOOK),
                                                             self._storage_stored)

    def note_fetch(self, request: Request, began: float, ended: float) -> None:
        """A fetch made for ``request`` outside the downloader (its robots.txt)
        is the domain's last request: the next waits for the delay after it."""
        self.leases.note_fetch(request, began, ended)

    def _send_acks(self) -> None:
        if self.frontier is None or not (self.writes.acks or self.writes.delays):
            return
        if self.writes.delays:
            self.guard.call(self.flush_pending)
        if not self.writes.acks:
            return
        if not self.intake.buffer:
            self.intake.due_now()
            self.guard.call(self._take)  # the acknowledgements ride with a dequeue
            if self.intake.buffer:
                self.waker.wake_in(0.0)
            return
        self.guard.call(self.writes.send_acks)

    def _tick(self) -> None:
        # acknowledgements found here leave within the ack interval, with a
        # dequeue (_send_acks), not whenever the next dequeue comes
        for ack in self.leases.stored():
            self.writes.ack(ack)
        acks = self.leases.sweep(self.crawler.engine)
        if acks:
            for ack in acks:
                self.writes.ack(ack)
            inc(self.stats, "crawler/frontier/acked_by_sweep", len(acks))
        self.guard.call(self.flush_pending)
        self.guard.call(self.loss.check)

    # --- dequeue ---------------------------------------------------------

    def next_request(self) -> Request | None:
        """The next leased request, or None while nothing is due.

        Leased requests come in batches of up to ``CRAWLER_PREFETCH``; when
        the batch is used up, the next call is paced by ``_intake.py``, and
        the engine is woken when something may be due.
        """
        if self._turn >= TURN_MAX:
            return None  # the rest in the next turn: the loop runs what else is ready first
        if not self.intake.buffer and self.intake.due():
            self.guard.call(self._take)
        leased = self.intake.pop()
        if leased is None:
            return None
        assert self.spider is not None
        try:
            request = codec.decode(leased.entry, self.spider)
        except Exception as exc:  # a corrupt entry must not stop the crawl
            logger.error("Dropped an undecodable frontier entry %r: %s", leased.entry[:80], exc)
            inc(self.stats, "crawler/frontier/undecodable")
            self.writes.ack(self.leases.marks.ack(leased.lease, LOST))
            return None
        self.leases.lend(leased.lease, request)
        inc(self.stats, "scheduler/dequeued/redis")
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
            self.waker.wake_in(0.0)
        self._turn = 0

    def _take(self) -> None:
        """One dequeue, after storing what waits and draining the inbox; the
        pending acknowledgements ride with it."""
        if self.writes.requests_wait:
            self.flush_pending()
        try:
            drained = self.inbox.drain()
        except redis.exceptions.OutOfMemoryError:
            self.writes.out_of_memory(0)
        else:
            if drained is not None:
                self.writes.count(drained)
        acks = self.writes.acks
        self.intake.take(acks, self._room())
        self.writes.acks = []

    def _room(self) -> int | None:
        """Requests the engine may start now: the downloader's cap
        (``CONCURRENT_REQUESTS``, or what ``extensions/concurrency.py`` sets)
        less what is in flight; None without a cap."""
        load = downloader_load(self.crawler.engine)
        if load is None or not load[1]:
            return None
        return max(1, load[1] - load[0])

    # --- state -----------------------------------------------------------

    def has_pending_requests(self) -> bool:
        """True while anything is buffered here, Redis is away, or the
        frontier (any worker's share) holds requests; False once it has been
        empty for ``SCHEDULER_IDLE_BEFORE_CLOSE`` seconds. A busy answer from
        Redis is reused for up to 0.25 s, an idle one never (``_intake.py``)."""
        if self.intake.buffer or self.writes:
            return True
        if self.guard.down:
            return True  # Redis away: never an idle close because of that
        assert self.frontier is not None
        try:
            busy = self.intake.frontier_busy(self.config.idle_before_close)
        except REDIS_ERRORS as exc:
            self.guard.failed(exc)
            return True
        self.guard.back()
        return busy

    def __len__(self) -> int:
        """Requests queued in the frontier plus those leased and buffered here."""
        buffered = len(self.intake.buffer) if self.frontier is not None else 0
        if self.frontier is None or self.guard.down:
            return buffered
        try:
            return self.frontier.queued() + buffered
        except REDIS_ERRORS:
            return buffered


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def uses_frontier(crawler: Crawler) -> bool:
    """Whether the crawl is configured with the frontier scheduler."""
    scheduler = crawler.settings.get("SCHEDULER")
    cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    return isinstance(cls, type) and issubclass(cls, FrontierScheduler)
