"""The worker session: one worker's crawl on the frontier, the owner of its
leases from start to finish. It is what components reach as
``crawler.frontier`` while the frontier scheduler is open (None otherwise)::

    session = session_of(self.crawler)
    lease = session.lease_of(request)             # the request's lease, or None
    lease.ack(STORED)                             # done: released, its domain's next turn set
    lease.dead("my_reason")                       # given up on: it ends as dead
    session.offer(urls, depth=1)                  # links, deduplicated in Redis
    session.push_domain(url, 30)                  # no request to its domain for 30 s
    session.dead_letter(request, "my_reason")     # given up on: scrapy dlq lists it
    session.locks.acquire(domain, token, ttl_ms)  # the per-domain lock
    session.robots                                # the shared robots.txt records

:meth:`WorkerSession.take` leases the next request (a :class:`Lease`);
everything between it and Redis is private here: batching (``_writes.py``),
the dequeue pace (``_intake.py``), the outage guard and the epoch check
(``_outage.py``), and the form acknowledgements take on the way to Lua
(``_leases.py``). Scrapy's engine is reached only through the ``Engine``
given in (the scheduler adapter's).

Redis errors: an outage (``REDIS_ERRORS``) pauses the crawl and is retried;
any other Redis error (a script error, a key of the wrong type) is raised,
or, where a component's write must not stop the crawl, logged at ERROR with
what it cost and counted in ``crawler/redis/errors``: never dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit
from typing import TYPE_CHECKING, Any, Protocol

import redis
from redis.cluster import RedisCluster
from twisted.internet import task

from crawler.clock import SYSTEM, Clock
from crawler.fetch import Addresses
from crawler.connection import REDIS_ERRORS, _reason, mask_url, persistence_warning, wait_at_start
from crawler.identity import Canonicalizer, domain_of
from crawler.meta import ADDRESS, ATTEMPTS, DEAD, LEASE
from crawler.store import (
    DeadLetter,
    DeadLetters,
    DomainLocks,
    Frontier,
    FrontierLost,
    Item,
    Keys,
    Leased,
    Ledger,
    RobotsStore,
    describe,
)
from crawler.worker._intake import EngineWaker, Intake
from crawler.worker._leases import Ack, Lease, Leases, Storage
from crawler.worker._names import Names
from crawler.worker._outage import CLUSTER_MAX_BACKOFF, FINISH_REASON, LossWatch, RedisGuard
from crawler.worker._stats import inc
from crawler.worker._writes import Inbox, Offers, Outbox, Recent, WriteBuffer

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

    from crawler.worker.config import FrontierSettings

logger = logging.getLogger(__name__)

#: least seconds between two looks at pages on their way to storage (with
#: ``CRAWLER_ACK_INTERVAL`` 0, they would be looked at in every turn of the loop)
STORAGE_LOOK = 0.01


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
    """``crawler.frontier``: the session while the frontier scheduler is open, else None."""
    return getattr(crawler, "frontier", None)


def _unlink(request: Any) -> None:
    if request is not None:
        request.meta.pop(LEASE, None)


class _NoStats:
    """Stats for a session run without a collector (the name lookups count into it)."""

    def inc_value(self, *args: Any, **kwargs: Any) -> None: ...

    def set_value(self, *args: Any, **kwargs: Any) -> None: ...


class WorkerSession:
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
        self._leases = Leases(clock, config.delay_from, stats, self._writes_ack, self._redo, _unlink,
                              self._storage_stored)
        self.spider_name = ""
        # built in open(), once the spider (and so the frontier's keys) is known
        self.frontier: Frontier | None = None
        self._writes: WriteBuffer
        self._intake: Intake
        self._inbox: Inbox
        self._offers: Offers
        self._loss: LossWatch
        self._dead_letters: DeadLetters
        self._flusher: task.LoopingCall | None = None
        self._storage_call: Any = None  # the next look at pages on their way to storage
        self._names: Names | None = None  # per-address politeness: the lookups the frontier asks of this worker
        self._lookups: Addresses

    # --- lifecycle -------------------------------------------------------

    def open(self, spider: Any, shard: int, shards: int) -> None:
        """Open (or resume) the frontier of ``spider`` (its ``name``) and ``shard``."""
        config = self.config
        self.spider_name = spider.name
        keys = Keys(config.prefix, spider.name, shard)
        self.frontier = frontier = config.frontier(self.server, keys, self.clock, shards)

        def opening() -> None:
            if config.flush_on_start:
                frontier.clear()
            frontier.open()

        # waited for like the start check: on a Redis Cluster whose master of these keys is
        # dead and its replica not yet elected, the check (a PING to any node) passes, this not
        wait_at_start(opening, self.server, self._guard.url)
        self._loss = LossWatch(self.stats, frontier, self._on_loss, self.held, self._forget_seen, self._stop)
        self._guard.on_lost = lambda exc: self._loss.lost(exc)
        if config.persist and (warning := persistence_warning(self.server, keys.base)):
            logger.warning("Redis at %s %s", mask_url(self._guard.url), warning)
        outbox = Outbox(self._settings, self.server, config, spider.name, self.stats, self.clock)
        recent = Recent(config.dedup_local) if config.dedup_local else None
        self._writes = WriteBuffer(frontier, outbox, self.stats, config.batch, config.ack_interval,
                                   self._send_acks, self.clock, recent)
        if config.addresses.delay > 0:
            self._lookups = Addresses(self._settings, self.stats or _NoStats(), self.clock)
            self._names = Names(frontier, self._lookups.answer, self._answered, self.stats)
        self._intake = Intake(frontier, config.prefetch, config.poll_interval, self._waker.wake_in,
                              self.stats, self.clock, self._names.ask if self._names is not None else None)
        self._inbox = Inbox(frontier, config.batch, self.stats, self.clock)
        self._offers = Offers(spider, shard, shards, config.forward, self._writes, self._leases,
                              self._fingerprinter, self.stats, canonicalize=Canonicalizer(config.tracking),
                              dedup_start_requests=self._dedup_start_requests)
        self._dead_letters = DeadLetters(self.server, keys, self._dlq_max)
        self._flusher = task.LoopingCall(self._tick)
        self._flusher.clock = self.clock.timers
        self._flusher.start(config.flush_interval, now=False)

    def close(self) -> None:
        """Store what is buffered, acknowledge finished pages and hand
        unfinished leases back; delete the frontier unless ``SCHEDULER_PERSIST``."""
        self._waker.cancel()
        if self._names is not None:
            self._names.close()
            self._lookups.close()
        self._writes.cancel()
        if self._storage_call is not None and self._storage_call.active():
            self._storage_call.cancel()
        if self._flusher is not None and self._flusher.running:
            self._flusher.stop()
        if self._guard.halted:  # the frontier was lost (_outage.py): nothing more is written to it
            return
        assert self.frontier is not None
        if self._leases.storage is not None:  # pages on their way to storage: acknowledged once there
            self._leases.storage.flush()
            self._leases.stored()
        unfinished = [leased.lease for leased in self._intake.buffer] + self._leases.unfinished()
        try:
            self._writes.flush()
            if self._writes.acks:  # finished pages: acknowledged before the process goes
                self._writes.send_acks()
            given_back = self.frontier.release(unfinished)
        except FrontierLost as exc:  # lost since the last look: said, and nothing more is written
            self._loss.lost(exc, closing=True)
            return
        except REDIS_ERRORS as exc:
            # unacknowledged pages come back when their leases expire, and
            # their links with them (stored first): they are fetched again
            logger.warning("Redis unreachable at close (%s): %d leased requests will come back "
                           "when their leases expire", _reason(exc), len(unfinished))
            return
        if given_back:
            logger.info("Handed %d unfinished requests back to the frontier", given_back)
        self.ledger()
        self._intake.buffer.clear()
        self._leases.clear()
        if not self.config.persist:
            self.frontier.clear()

    def held(self) -> int:
        """Leases this worker holds: lent to the engine or waiting for it."""
        return len(self._leases) + len(self._intake.buffer)

    def _forget_seen(self) -> None:
        if self._writes.recent is not None:
            self._writes.recent.clear()

    def _stop(self) -> None:
        """The frontier is lost and the crawl stops: nothing more is written to it."""
        self._guard.halt()
        self._intake.buffer.clear()  # leased in the lost epoch: never lent
        self._writes.acks = []
        self._engine.close(FINISH_REASON)

    # --- leases ------------------------------------------------------------

    def take(self) -> Lease | None:
        """The next leased request, or None while nothing is due. Leases come
        in batches of up to ``CRAWLER_PREFETCH``; when a batch is used up, the
        next call is paced (``_intake.py``) and the engine woken when
        something may be due."""
        if not self._intake.buffer and self._intake.due():
            self._guard.call(self._dequeue)
        leased = self._intake.pop()
        return self._leases.new(leased) if leased is not None else None

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

    def _writes_ack(self, ack: Ack) -> None:
        self._writes.ack(ack)

    def _redo(self, seconds: float, again: Leased, ack: Ack) -> None:
        self._writes.delay(seconds, Item(b"", again.domain, again.priority, again.entry), ack)
        self._writes.soon()

    def _storage_stored(self) -> None:
        """Acknowledge the held pages storage holds by now; while some are
        still on their way, look again one ack interval later: a parked domain
        waits for its page's acknowledgement, not for the next ack or tick."""
        self._leases.stored()
        if self._leases.held and not (self._storage_call is not None and self._storage_call.active()):
            self._storage_call = self.clock.timers.callLater(max(self.config.ack_interval, STORAGE_LOOK),
                                                             self._storage_stored)

    def _send_acks(self) -> None:
        if self.frontier is None or not (self._writes.acks or self._writes.delays):
            return
        if self._writes.delays:
            self._guard.call(self.flush)
        if not self._writes.acks:
            return
        if not self._intake.buffer:
            self._intake.due_now()
            self._guard.call(self._dequeue)  # the acknowledgements ride with a dequeue
            if self._intake.buffer:
                self._waker.wake_in(0.0)
            return
        self._guard.call(self._writes.send_acks)

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
        # acknowledgements found here leave within the ack interval, with a
        # dequeue (_send_acks), not whenever the next dequeue comes
        self._leases.stored()
        busy = self._engine.busy() if self._leases else None
        if busy is not None:
            swept = self._leases.sweep(busy)
            inc(self.stats, "crawler/frontier/acked_by_sweep", swept)
        self._guard.call(self.flush)
        self._guard.call(self._look)

    def _look(self) -> None:
        """The idle worker's look at the frontier's epoch (and a failover fence)."""
        self._loss.check()
        self._loss.failover_seen(lambda: self._hand_back(len(self._intake.buffer)))

    def _hand_back(self, n: int) -> int:
        """Give the first ``n`` leased requests waiting for the engine back to the frontier."""
        assert self.frontier is not None
        buffer = self._intake.buffer
        stale = [buffer.popleft().lease for _ in range(min(n, len(buffer)))]
        return self.frontier.release(stale) if stale else 0

    def _dequeue(self) -> None:
        """One dequeue, after storing what waits and draining the inbox; the
        pending acknowledgements ride with it."""
        if self._writes.requests_wait:
            self.flush()
        try:
            drained = self._inbox.drain()
        except redis.exceptions.OutOfMemoryError:
            self._writes.out_of_memory(0)
        else:
            if drained is not None:
                self._writes.count(drained)
        acks = self._writes.acks
        waiting = len(self._intake.buffer)  # leased before this call
        self._intake.take(acks, self._engine.room())
        self._writes.acks = []
        self._loss.failover_seen(lambda: self._hand_back(waiting))

    # --- offers --------------------------------------------------------------

    def offer_request(self, request: Any) -> bool:
        """Buffer ``request``; True unless it cannot be stored (``_writes.py``)."""
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

    def unknown(self, urls: list[str]) -> list[str]:
        """The canonical ``urls`` not known here as seen by the frontier: a
        link found again need not be checked (robots.txt) before it is
        offered. Those left out count in ``crawler/frontier/duplicates_local``."""
        return self._offers.unknown(urls)

    def flush(self) -> None:
        """Store buffered requests and acknowledgements now (``_writes.py``);
        then poll soon if that stored a request (or a delayed one, whose time
        the next poll learns), rather than after a backoff."""
        delayed = bool(self._writes.delays)
        result = self._writes.flush()
        if delayed or (result is not None and result.added):
            self._intake.added()

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
        buffered = len(self._intake.buffer) if self.frontier is not None else 0
        if self.frontier is None or self._guard.down:
            return buffered
        try:
            return self.frontier.queued() + buffered
        except REDIS_ERRORS:
            return buffered

    def wake_now(self) -> None:
        """Wake the engine at once (it asks for the requests that wait)."""
        self._waker.wake_in(0.0)

    def leased_waiting(self) -> int:
        """Requests this worker leased that the engine has not started."""
        return len(self._intake)

    # --- what components ask of the frontier --------------------------------

    @property
    def locks(self) -> DomainLocks:
        """The per-domain locks (``acquire``, ``release``, ``live_domains``)."""
        assert self.frontier is not None
        return self.frontier.locks

    @property
    def robots(self) -> RobotsStore:
        """The robots.txt records every process shares."""
        assert self.frontier is not None
        return self.frontier.robots

    @property
    def domain_delay(self) -> float:
        """Seconds between two requests to one domain (``CRAWLER_DOMAIN_DELAY``)."""
        return self.config.politeness.delay

    def due_domains(self, within: float = 0.0) -> int:
        """Domains of this frontier with queued requests due within
        ``within`` seconds on the server's clock (parked ones, whose request
        is out, are not in the ready set); 0 while Redis is away."""
        assert self.frontier is not None
        try:
            now_ms = self.frontier.clock.server_ms(self.frontier.client)
            return int(self.frontier.client.zcount(self.frontier.keys.ready, "-inf", now_ms + int(within * 1000)))
        except REDIS_ERRORS as exc:
            self._guard.failed(exc)
            return 0

    def _write(self, call: Callable[[], object], cost: str) -> bool:
        """``call()``; False if it failed: an outage is the guard's, any
        other Redis error is logged with ``cost`` (what is not done) and counted."""
        try:
            call()
        except REDIS_ERRORS as exc:
            self._guard.failed(exc)
            return False
        except redis.RedisError as exc:
            logger.error("Redis error on frontier %s, %s: %s: %s",
                         self.frontier.keys.base if self.frontier is not None else "?", cost,
                         type(exc).__name__, exc)
            inc(self.stats, "crawler/redis/errors")
            return False
        return True

    def set_robots_delay(self, domain: str, seconds: float) -> None:
        """A robots.txt ``Crawl-delay`` for ``domain``."""
        assert self.frontier is not None
        frontier = self.frontier
        self._write(lambda: frontier.set_robots_delay(domain, seconds),
                    f"Crawl-delay {seconds:g} s of {domain} not stored")

    def exclude(self, domains: Iterable[str]) -> int:
        """Never fetch these domains again (their queued requests are dropped); how many were new."""
        assert self.frontier is not None
        return self.frontier.exclude(domains)

    def push_domain(self, url: str, seconds: float) -> None:
        """No request to the domain of ``url`` before ``seconds`` from now."""
        assert self.frontier is not None
        frontier, domain = self.frontier, domain_of(url)
        if self._write(lambda: frontier.push_domain(domain, seconds),
                       f"push-back of {domain} by {seconds:g} s not applied"):
            inc(self.stats, "crawler/frontier/domain_pushbacks")

    def count(self, name: str) -> None:
        """One more in the frontier's shared counter ``name``: what every
        process did, for ``scrapy frontier`` (lost while Redis is away)."""
        assert self.frontier is not None
        frontier = self.frontier
        self._write(lambda: frontier.count(name), f"shared counter {name} not counted")

    def ledger(self) -> None:
        """Log the frontier's ledger (``crawler/store/ledger.py``): every URL
        it admitted, by state, and whether they add up; in the stats as
        ``crawler/ledger/*``."""
        assert self.frontier is not None
        try:
            ledger = Ledger.from_status(self.frontier.status()).as_dict()
        except REDIS_ERRORS as exc:
            logger.warning("Frontier ledger not read, Redis unreachable: %s", exc)
            return
        except redis.RedisError as exc:
            logger.error("Frontier ledger not read (Redis error %s: %s)", type(exc).__name__, exc)
            inc(self.stats, "crawler/redis/errors")
            return
        if self.stats is not None:
            for name, value in ledger.items():
                self.stats.set_value(f"crawler/ledger/{name}", int(value))
        level = logging.INFO if ledger["adds_up"] else logging.ERROR
        logger.log(level, "Frontier ledger: %s", describe(ledger))
        lost = self.stats.get_value("crawler/frontier/ended/lost", 0) if self.stats is not None else 0
        if lost and self.stats is not None and not self.stats.get_value("crawler/exit/error"):
            self.stats.set_value("crawler/exit/error", f"{lost} requests of this crawl were lost "
                                 "(undecodable or unstorable frontier entries; see the errors above)")

    def dead_letter(self, request: Any, reason: str, *, status: int | None = None,
                    exception: BaseException | str | None = None) -> None:
        """Record a request (or a URL) given up on in the dead-letter queue;
        its lease ends as a dead letter (``Lease.dead``)."""
        assert self.frontier is not None
        url = request if isinstance(request, str) else request.url
        attempts = 1 if isinstance(request, str) else int(request.meta.get(ATTEMPTS, 1))
        if not isinstance(request, str):
            request.meta[DEAD] = True
            lease = self._leases.get(request.meta.get(LEASE))
            if lease is not None:
                lease.dead(reason)
        if isinstance(exception, BaseException):
            exception = type(exception).__name__
        letter = DeadLetter(url, reason, status, exception, attempts,
                            spider=self.spider_name, shard=self.frontier.keys.shard)
        if not self._write(lambda: self._dead_letters.add([letter]), f"dead letter not recorded: {letter.to_json()}"):
            if self._guard.down:
                logger.warning("Dead letter not recorded, Redis unreachable: %s", letter.to_json())
            inc(self.stats, "crawler/dlq/unrecorded")
            return
        inc(self.stats, f"crawler/dlq/{reason}")
