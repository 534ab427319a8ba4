"""The worker session: one worker's crawl on the frontier, the owner of its
leases from start to finish. It is what components reach as
``crawler.worker_session`` (``session_of(crawler)``) while the frontier
scheduler is open, None before and after; ``crawler.frontier`` is a
deprecated alias of it::

    session = session_of(self.crawler)
    lease = session.lease_of(request)             # the request's lease, or None
    lease.ack(STORED)                             # done: released, its domain's next turn set
    lease.dead("my_reason")                       # given up on: it ends as dead
    session.offer(urls, depth=1)                  # links, deduplicated in Redis
    session.push_domain(url, 30)                  # no request to its domain for 30 s
    session.dead_letter(request, "my_reason")     # given up on: scrapy dlq lists it
    session.locks.acquire(domain, token, ttl_ms)  # the per-domain lock
    session.robots                                # the shared robots.txt records

``session.store`` is the frontier's Redis store (``crawler.store.Frontier``).
:meth:`WorkerSession.next_lease` leases the next request (a :class:`Lease`);
everything between it and Redis is private here: the write buffer and when
acknowledgements leave (``_writes.py``), offers (``_offers.py``), other
shards' links (``_shards.py``), the dequeue pace (``_intake.py``), the outage
guard and the epoch check (``_outage.py``), how leases end (``_leases.py``)
and what components ask besides (``_services.py``), and with recrawl on the
history writes acknowledgements carry and the domains' μ (``_history.py``,
solved in the session's tick). Scrapy's engine is reached only through the
``Engine`` given in (the scheduler adapter's).

Redis errors: an outage (``REDIS_ERRORS``) pauses the crawl and is retried;
any other Redis error (a script error, a key of the wrong type) is raised,
or, where a component's write must not stop the crawl, logged at ERROR with
what it cost and counted in ``crawler/redis/errors``: never dropped.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import redis
from redis.cluster import RedisCluster
from twisted.internet import task

from crawler.clock import SYSTEM, Clock, clock_of
from crawler.connection import REDIS_ERRORS, _reason, get_redis, mask_url, persistence_warning, wait_at_start
from crawler.fetch import Addresses
from crawler.identity import Canonicalizer
from crawler.meta import ADDRESS, LEASE
from crawler.ranks import read_ranks
from crawler.settings_registry import setting
from crawler.store import DeadLetters, Frontier, FrontierLost, Keys
from crawler.worker._history import HistoryBook
from crawler.worker._inlinks import InlinkSketch
from crawler.worker._intake import EngineWaker, Intake
from crawler.worker._leases import Lease, Leases, Storage
from crawler.worker._names import Names
from crawler.worker._offers import Offers
from crawler.worker._outage import CLUSTER_MAX_BACKOFF, FINISH_REASON, LossWatch, RedisGuard
from crawler.worker._recent import Recent
from crawler.worker._services import Services
from crawler.worker._shards import Inbox, Outbox
from crawler.worker._stats import inc
from crawler.worker._writes import WriteBuffer
from crawler.worker.config import FrontierSettings, on_loss_policy, warn_ignored

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

logger = logging.getLogger(__name__)

#: least seconds between two looks at pages on their way to storage (with
#: ``CRAWLER_ACK_INTERVAL`` 0, they would be looked at in every turn of the loop)
STORAGE_LOOK = 0.01
#: the compact tier's jobs a tick does at most: TIER_PASSES round trips of TIER_JOBS
#: (a job packs or unpacks up to 8 blocks: about 0.2 ms of zlib each)
TIER_JOBS = 16
TIER_PASSES = 4
#: the least time between two passes of the compact tier's jobs made at once
#: for a take's fill jobs (_fill_soon): a head of 16 and blocks of 64 then
#: serve one domain at one priority up to ~10 x 16 x 64 requests a second
FILL_SPACING = 0.1
#: rank order: pairs of linking and linked domains a process remembers having sent
LINKS_REMEMBERED = 200_000

#: where the session is published on the crawler, and its deprecated alias (one release)
PUBLISHED, ALIAS = "worker_session", "frontier"


class Engine(Protocol):
    """What the session asks of the engine it feeds (the scheduler adapter's)."""

    def busy(self) -> set[int] | None:
        """ids of the requests being downloaded or scraped; None when unknown."""

    def room(self) -> int | None:
        """Requests the engine may start now; None without a cap."""

    def wake(self) -> object:
        """Ask the engine for requests now; False when it cannot be woken."""

    def close(self, reason: str) -> None:
        """Close the crawl (soon, not within this call)."""


def session_of(crawler: Any) -> WorkerSession | None:
    """``crawler.worker_session``: the session while the frontier scheduler is open, else None."""
    return getattr(crawler, PUBLISHED, None)


def publish(crawler: Any, session: WorkerSession | None) -> None:
    """Make ``session`` what components reach (None: none, once it closed)."""
    setattr(crawler, PUBLISHED, session)
    setattr(crawler, ALIAS, session)


class _NoStats:
    """Stats for a session run without a collector (the name lookups count into it)."""

    def inc_value(self, *args: Any, **kwargs: Any) -> None: ...

    def set_value(self, *args: Any, **kwargs: Any) -> None: ...


class WorkerSession(Services):
    def __init__(self, server: redis.Redis, config: FrontierSettings, engine: Engine,
                 stats: StatsCollector | None, settings: BaseSettings,
                 fingerprinter: RequestFingerprinterProtocol, clock: Clock = SYSTEM, *,
                 on_loss: str = "stop", dlq_max: int = 0, dedup_start_requests: bool = True) -> None:
        self.server = server
        self.config = config
        self.clock = clock  # every part below measures time on it (crawler/clock.py)
        self.stats = stats
        self._settings = settings
        self._engine = engine
        self._fingerprinter = fingerprinter
        self._on_loss = on_loss
        self._dlq_max = dlq_max
        self._dedup_start_requests = dedup_start_requests
        self._waker = EngineWaker(engine.wake, clock)
        self._guard = RedisGuard(settings.get("REDIS_URL") or "", stats, self._waker.wake_in, clock,
                                 CLUSTER_MAX_BACKOFF if isinstance(server, RedisCluster) else None)
        self.spider_name = ""
        # built in open(), once the spider (and so the frontier's keys) is known
        self.store: Frontier | None = None
        self._writes: WriteBuffer
        self._leases: Leases
        self._intake: Intake
        self._inbox: Inbox
        self._offers: Offers
        self._loss: LossWatch
        self._dead_letters: DeadLetters
        self._flusher: task.LoopingCall | None = None
        self._fill_call: Any = None  # a pass of the compact tier's jobs, soon (_fill_soon)
        self._fill_last = -FILL_SPACING  # when the last such pass ran (monotonic s)
        self._names: Names | None = None  # per-address politeness: the lookups the frontier asks of this worker
        self._lookups: Addresses
        self._history: HistoryBook | None = None  # recrawl: the history writes and the domains' μ

    @classmethod
    def from_crawler(cls, crawler: Crawler, engine: Engine) -> WorkerSession:
        """The session of ``crawler``'s settings and clock (``CRAWLER_CLOCK``)
        on its Redis, feeding ``engine``; ``FrontierScheduler.from_crawler``
        calls it. A ``SettingsError`` or ``RedisUnavailable`` fails the crawl."""
        settings = crawler.settings
        config = FrontierSettings.from_settings(settings)
        clock = clock_of(crawler)  # CRAWLER_CLOCK: for tests and simulations
        server = get_redis(settings)
        warn_ignored(settings)
        return cls(server, config, engine, crawler.stats, settings, crawler.request_fingerprinter, clock,
                   on_loss=on_loss_policy(settings), dlq_max=setting(settings, "CRAWLER_DLQ_MAX"),
                   dedup_start_requests=setting(settings, "CRAWLER_DEDUP_START_REQUESTS"))

    # --- lifecycle -------------------------------------------------------

    def open(self, spider: Any, shard: int, shards: int) -> None:
        """Open (or resume) the frontier of ``spider`` (its ``name``) and ``shard``."""
        config = self.config
        self.spider_name = spider.name
        keys = Keys(config.prefix, spider.name, shard)
        self.store = store = config.frontier(self.server, keys, self.clock, shards)

        ranks = None
        if config.ranks and not config.weighs:
            logger.warning("CRAWLER_RANKS is ignored: the due order (CRAWLER_DOMAIN_ORDER = 'due') with a flat "
                           "budget (CRAWLER_DOMAIN_BUDGET_MAX not above CRAWLER_DOMAIN_BUDGET) reads no ranking")
        elif config.ranks:
            ranks = read_ranks(config.ranks, shard, shards)

        def opening() -> None:
            if config.flush_on_start:
                store.clear()
            store.open()
            if ranks is not None:
                logger.info("Ranking %s: %d domains of this shard weighed (CRAWLER_RANKS)", config.ranks,
                            store.load_ranks(ranks))

        # waited for like the start check: on a Redis Cluster whose master of these keys is
        # dead and its replica not yet elected, the check (a PING to any node) passes, this not
        wait_at_start(opening, self.server, self._guard.url)
        self._loss = LossWatch(self.stats, store, self._on_loss, self.leases_held, self._forget_seen, self._stop)
        self._guard.on_lost = lambda exc: self._loss.lost(exc)
        if config.persist and (warning := persistence_warning(self.server, keys.base)):
            logger.warning("Redis at %s %s", mask_url(self._guard.url), warning)
        outbox = Outbox(self._settings, self.server, config, spider.name, self.stats, self.clock)
        recent = Recent(config.dedup_local) if config.dedup_local else None
        self._writes = WriteBuffer(store, outbox, self.stats, config.batch, config.ack_interval,
                                   self._acks_due, self.clock, recent)
        if config.within == "inlinks":  # the links found again are counted in the process (_inlinks.py)
            if recent is None:
                logger.warning("CRAWLER_WITHIN_ORDER = 'inlinks' counts the links found again to requests this "
                               "process remembers queuing: with CRAWLER_DEDUP_LOCAL = 0 it counts none (FIFO)")
            self._writes.inlinks = InlinkSketch()
        self._leases = Leases(self.clock, config.delay_from, self.stats, self._writes,
                              max(config.ack_interval, STORAGE_LOOK))
        if config.recrawl.on:  # each ending lease's acknowledgement carries its history write (_history.py)
            self._history = HistoryBook(config.recrawl_rules, self._fingerprinter, self.stats, self.clock,
                                        config.revisit_budget)
            self._leases.history = self._history
        if config.addresses.delay > 0:
            self._lookups = Addresses(self._settings, self.stats or _NoStats(), self.clock)
            self._names = Names(store, self._lookups.answer, self._answered, self.stats)
        self._intake = Intake(store, config.prefetch, config.poll_interval, self._waker.wake_in,
                              self.stats, self.clock, self._names.ask if self._names is not None else None,
                              self._fill_soon)
        self._writes.on_stored = self._intake.added
        self._inbox = Inbox(store, config.batch, self.stats, self.clock)
        self._offers = Offers(spider, shard, shards, config.forward, self._writes, self._leases,
                              self._fingerprinter, self.stats, canonicalize=Canonicalizer(config.tracking),
                              dedup_start_requests=self._dedup_start_requests, hints=config.recrawl.on,
                              links_between=LINKS_REMEMBERED if config.weighs else 0,
                              inlinks=self._writes.inlinks)
        self._dead_letters = DeadLetters(self.server, keys, self._dlq_max)
        self._flusher = task.LoopingCall(self._tick)
        self._flusher.clock = self.clock.timers
        self._flusher.start(config.flush_interval, now=False)

    def close(self) -> None:
        """Store what is buffered, acknowledge finished pages and hand
        unfinished leases back; delete the frontier unless ``SCHEDULER_PERSIST``."""
        self._stop_timers()
        if self._guard.halted:  # the frontier was lost (_outage.py): nothing more is written to it
            return
        assert self.store is not None
        if self._leases.storage is not None:  # pages on their way to storage: acknowledged once there
            self._leases.storage.flush()
            self._leases.end_stored()
            self._leases.cancel()
        try:
            self._send_acks_alone()  # finished pages: acknowledged before the process goes
            # after it: a retry Redis refused just now for want of memory is kept, and given back too
            unfinished = self._unfinished()
            given_back = self.store.release(unfinished)
        except FrontierLost as exc:  # lost since the last look: said, and nothing more is written
            self._loss.lost(exc, closing=True)
            return
        except REDIS_ERRORS as exc:
            # unacknowledged pages come back when their leases expire, and
            # their links with them (stored first): they are fetched again
            logger.warning("Redis unreachable at close (%s): %d leased requests will come back "
                           "when their leases expire", _reason(exc), len(self._unfinished()))
            return
        finally:
            self._writes.cancel()  # what is left unsent arms no timer on a closed session
        if given_back:
            logger.info("Handed %d unfinished requests back to the frontier", given_back)
        self.ledger()
        self._intake.buffer.clear()
        self._leases.clear()
        self._writes.kept.clear()
        if not self.config.persist:
            self.store.clear()

    def _unfinished(self) -> list[str]:
        """The leases this worker holds and did not end: waiting for the
        engine, lent, or kept after Redis refused their retry."""
        return [leased.lease for leased in self._intake.buffer] + self._leases.unfinished() + self._writes.kept

    def _stop_timers(self) -> None:
        """No more ticks, polls, wake-ups, looks at storage or name lookups."""
        self._waker.cancel()
        self._writes.on_stored = None
        if self._names is not None:
            self._names.close()
            self._lookups.close()
        self._writes.cancel()
        self._leases.cancel()
        if self._fill_call is not None and self._fill_call.active():
            self._fill_call.cancel()
        if self._flusher is not None and self._flusher.running:
            self._flusher.stop()

    def leases_held(self) -> int:
        """How many leases this worker holds: lent to the engine or waiting for it."""
        return len(self._leases) + len(self._intake.buffer)

    def _forget_seen(self) -> None:
        if self._writes.recent is not None:
            self._writes.recent.clear()

    def _stop(self) -> None:
        """The frontier is lost and the crawl stops: nothing more is written to it."""
        self._guard.halt()
        self._intake.buffer.clear()  # leased in the lost epoch: never lent
        self._writes.acks = []
        self._writes.kept = []
        self._engine.close(FINISH_REASON)

    # --- leases ------------------------------------------------------------

    def next_lease(self) -> Lease | None:
        """The next leased request, or None while nothing is due. Leases come
        in batches of up to ``CRAWLER_PREFETCH``; when a batch is used up, the
        next call is paced (``_intake.py``) and the engine woken when
        something may be due."""
        if not self._intake.buffer and self._intake.due():
            self._guard.call(self._dequeue)
        leased = self._intake.pop()
        return self._leases.new(leased) if leased is not None else None

    def take(self) -> Lease | None:
        """Deprecated (gone in the next release): :meth:`next_lease`."""
        warnings.warn("WorkerSession.take() is deprecated, use next_lease()", DeprecationWarning, stacklevel=2)
        return self.next_lease()

    def lend(self, lease: Lease, request: Any) -> None:
        """``lease`` is out as ``request`` (its ``meta`` names the lease)."""
        if request is not None:
            request.meta[LEASE] = lease.id
            if lease.address:
                request.meta[ADDRESS] = {"host": urlsplit(request.url).hostname, "address": lease.address}
        self._leases.lend(lease, request)

    def _answered(self) -> None:
        """Name lookups are in the frontier: the domains that waited on them are due."""
        self._intake.due_now()
        self._waker.wake_in(0.0)

    def lease_of(self, request: Any) -> Lease | None:
        """The open lease ``request`` covers, else None."""
        lease_id = request.meta.get(LEASE)
        lease = self._leases.get(lease_id)
        if lease is None and lease_id is not None:
            del request.meta[LEASE]
        return lease

    def keep_pages_with(self, storage: Storage) -> None:
        """A page's lease is acknowledged once ``storage`` holds the page."""
        self._leases.storage = storage

    # --- acknowledgements leave (the rule: _writes.py) -------------------------

    def _acks_due(self) -> None:
        """The acknowledgement interval is up (``WriteBuffer``): they leave
        now, with a dequeue when the engine waits for requests, else in a
        round trip of their own; either way after what waits is stored."""
        if self.store is None or not (self._writes.acks or self._writes.delays):
            return
        if not self._writes.acks:  # retries alone: stored now, the next poll learns their time
            self._guard.call(self.flush)
            return
        if self._intake.buffer:
            self._guard.call(self._send_acks_alone)
            return
        self._intake.due_now()
        self._guard.call(self._dequeue)
        if self._intake.buffer:
            self._waker.wake_in(0.0)

    def _send_acks_alone(self) -> None:
        """What waits is stored, and the acknowledgements left go in a
        ``dequeue.lua`` call that leases nothing."""
        assert self.store is not None
        with self._writes.acks_leaving() as acks:
            if acks:
                self.store.take(0, acks)
        inc(self.stats, "crawler/frontier/acked", len(acks))

    def _dequeue(self) -> None:
        """One dequeue, after storing what waits and draining the inbox; the
        acknowledgements left ride with it."""
        try:
            drained = self._inbox.drain()
        except redis.exceptions.OutOfMemoryError:
            self._writes.out_of_memory(0)
        else:
            if drained is not None:
                self._writes.count(drained)
        waiting = len(self._intake.buffer)  # leased before this call
        with self._writes.acks_leaving() as acks:
            self._intake.dequeue(acks, self._engine.room())
        self._loss.failover_seen(lambda: self._hand_back(waiting))

    def _tick(self) -> None:
        """The session's timer: a failure is logged and counted, and the
        timer goes on (a stopped timer would leave leases unswept and the
        crawl waiting forever)."""
        try:
            self._tick_once()
        except Exception:
            logger.exception("The frontier's timer failed; it goes on (crawler/frontier/tick_errors)")
            inc(self.stats, "crawler/frontier/tick_errors")

    def _tick_once(self) -> None:
        # acknowledgements found here leave within the ack interval (_acks_due)
        self._leases.end_stored()
        busy = self._engine.busy() if self._leases else None
        if busy is not None:
            swept = self._leases.sweep(busy)
            inc(self.stats, "crawler/frontier/acked_by_sweep", swept)
        self._guard.call(self.flush)
        self._guard.call(self._move_tiers)
        self._guard.call(self._look)
        if self._history is not None and self._history.due:
            self._guard.call(self._solve_mu)

    def _move_tiers(self) -> None:
        """The compact tier's jobs due (``crawler/store/tiers.py``): spills
        packed into blocks, heads run low filled from them; a few passes a
        tick at most, so that a tick stays short."""
        assert self.store is not None
        for _ in range(TIER_PASSES):
            try:
                done = self.store.tiers.run(TIER_JOBS)
            except redis.exceptions.OutOfMemoryError:
                return  # a Redis without script flags: the jobs wait for the memory, nothing moved

            inc(self.stats, "crawler/frontier/tier/packed", done.packed)
            inc(self.stats, "crawler/frontier/tier/unpacked", done.unpacked)
            inc(self.stats, "crawler/frontier/tier/stale", done.stale)
            if done.unreadable:
                inc(self.stats, "crawler/frontier/tier/unreadable", done.unreadable)
                logger.error("%d block(s) of the compact tier could not be read; they stay where they are "
                             "(crawler/frontier/tier/unreadable)", done.unreadable)
            if done.jobs < TIER_JOBS:
                break

    def _fill_soon(self) -> None:
        """A take made fill jobs (a head run low, a block next): the
        compact tier's jobs run on the loop's next turn, not at the next
        tick, so a domain served faster than a head a tick is not left
        waiting (docs/frontier.md); at most one such pass every
        FILL_SPACING, so a crawl whose takes keep making them (many domains
        past their heads) does not pay a pass's round trips a take."""
        if self._fill_call is None or not self._fill_call.active():
            wait = max(0.0, self._fill_last + FILL_SPACING - self.clock.monotonic())
            self._fill_call = self.clock.timers.callLater(wait, self._fill_now)

    def _fill_now(self) -> None:
        self._fill_call = None
        self._fill_last = self.clock.monotonic()
        if self.store is not None and not self._guard.halted:
            self._guard.call(self._move_tiers)

    def _solve_mu(self) -> None:
        """``adaptive``: the μ of the domains due, read, solved and written (``_history.py``)."""
        assert self.store is not None and self._history is not None
        self._history.solve(self.store.client, self.store.keys.base)

    def _look(self) -> None:
        """The idle worker's look at the frontier's epoch (and a failover fence)."""
        self._loss.check()
        self._loss.failover_seen(lambda: self._hand_back(len(self._intake.buffer)))

    def _hand_back(self, n: int) -> int:
        """Give the first ``n`` leased requests waiting for the engine back to the frontier."""
        assert self.store is not None
        buffer = self._intake.buffer
        stale = [buffer.popleft().lease for _ in range(min(n, len(buffer)))]
        return self.store.release(stale) if stale else 0

    # --- offers --------------------------------------------------------------

    def offer_request(self, request: Any) -> bool:
        """Buffer ``request``; True unless it cannot be stored (``_offers.py``)."""
        accepted = self._offers.request(request)
        if self._writes.full:
            self._guard.call(self.flush)
        return accepted

    def offer(self, urls: Iterable[str], *, depth: int = 0, priority: int = 0, canonical: bool = False) -> int:
        """Offer plain URLs in bulk: no ``Request`` objects until dequeued.

        URLs are canonicalised here (unless ``canonical`` says they are);
        invalid ones are skipped and counted. With several shards (the
        spider's ``shards``), URLs of another shard's domains are forwarded to
        that shard's inbox. Returns how many were offered (dedup happens in
        Redis).
        """
        offered = self._offers.urls(urls, depth, priority, canonical)
        if self._writes.full:
            self._guard.call(self.flush)
        return offered

    def links_from(self, source: str, urls: Iterable[str]) -> int:
        """When domains are weighed (``CRAWLER_DOMAIN_ORDER = "rank"``, or a
        budget by rank: ``FrontierSettings.weighs``): a page of registered domain
        ``source`` links to ``urls``, each other domain they name counting it
        among the domains linking to it (docs/frontier.md); stored with the
        next flush. Returns the pairs it adds (0 in the due order)."""
        return self._offers.links_from(source, urls)

    def unknown(self, urls: list[str], depth: int = 0, origin: str = "") -> list[str]:
        """The canonical ``urls`` not known here as seen by the frontier: a
        link found again need not be checked (robots.txt) before it is
        offered. Those left out count in ``crawler/frontier/duplicates_local``;
        in the in-link order (``CRAWLER_WITHIN_ORDER``) each is a link found
        again, counted for its request (offered at ``depth`` if it is
        promoted; only links to the host of ``origin``, ``scheme://host/``,
        when it is given)."""
        return self._offers.unknown(urls, depth, origin)

    def flush(self) -> None:
        """Store buffered requests, and the acknowledgements buffered with
        them, now (``WriteBuffer.flush``); the next poll comes soon if that
        stored a request (or a delayed one, whose time the next poll learns)."""
        self._writes.flush()

    # --- state -----------------------------------------------------------

    @property
    def redis_down(self) -> bool:
        """True while Redis is away (calls paused, retried with backoff)."""
        return self._guard.down

    def busy(self) -> bool:
        """True while anything is buffered here, Redis is away, or the
        frontier (any worker's share) holds requests; False once it has been
        empty for ``SCHEDULER_IDLE_BEFORE_CLOSE`` seconds. A busy answer from
        Redis is reused for up to 0.25 s, an idle one never (``_intake.py``)."""
        if self._intake.buffer or self._writes:
            return True
        if self._guard.down:
            return True  # Redis away: never an idle close because of that
        try:
            busy = self._intake.frontier_busy(self.config.idle_before_close)
        except REDIS_ERRORS as exc:
            self._guard.failed(exc)
            return True
        self._guard.back()
        return busy

    def __len__(self) -> int:
        """Requests queued in the frontier plus those leased and buffered here."""
        buffered = len(self._intake.buffer) if self.store is not None else 0
        if self.store is None or self._guard.down:
            return buffered
        try:
            return self.store.queued() + buffered
        except REDIS_ERRORS:
            return buffered

    def wake_now(self) -> None:
        """Wake the engine at once (it asks for the requests that wait)."""
        self._waker.wake_in(0.0)

    def leased_waiting(self) -> int:
        """Requests this worker leased that the engine has not started."""
        return len(self._intake)
