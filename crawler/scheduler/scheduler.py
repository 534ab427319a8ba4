"""The frontier scheduler: scrapy-redis's scheduler on the Redis frontier.

    SCHEDULER = "crawler.scheduler.FrontierScheduler"
    REQUEST_FINGERPRINTER_CLASS = "crawler.scheduler.fingerprint.Fingerprinter"

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
``CRAWLER_PREFETCH`` requests per round trip.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import redis
from scrapy.utils.python import global_object_name
from scrapy_redis.scheduler import Scheduler as RedisScheduler
from twisted.internet import task

from crawler.connection import RedisUnavailable, _reason, get_redis
from crawler.deadletters import DeadLetter, DeadLetters
from crawler.meta import ATTEMPTS, DELAY
from crawler.scheduler import codec
from crawler.scheduler.canonical import Canonicalizer
from crawler.scheduler.config import FrontierSettings, SettingsError, exit_with
from crawler.scheduler.domains import domain_of
from crawler.scheduler.fingerprint import url_fingerprint
from crawler.scheduler.frontier import AddResult, Frontier, Item, Leased
from crawler.scheduler.keys import Keys
from crawler.scheduler.forwarding import Outbox
from crawler.scheduler.marks import Ack, Marks
from crawler.scheduler.outage import REDIS_ERRORS, RedisGuard
from crawler.sharding import shard_of

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_MAX_POLL_WAIT = 1.0  # seconds between dequeue attempts while nothing is due


class FrontierScheduler(RedisScheduler):
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.config = FrontierSettings.from_settings(crawler.settings)
        super().__init__(
            server=get_redis(crawler.settings),
            persist=self.config.persist,
            flush_on_start=self.config.flush_on_start,
            idle_before_close=int(self.config.idle_before_close),
        )
        self.idle_before_close = self.config.idle_before_close
        _warn_ignored(crawler.settings)
        self.dedup_start_requests = crawler.settings.getbool("CRAWLER_DEDUP_START_REQUESTS", True)
        self.stats = crawler.stats
        self.canonicalize = Canonicalizer(self.config.tracking)
        self.frontier: Frontier | None = None
        self.spider: Spider | None = None
        self.buffer: deque[Leased] = deque()
        self.pending: list[Item] = []
        self.pending_acks: list[str | Ack] = []
        self.pending_delays: list[tuple[float, Item, Ack | None]] = []
        self.marks = Marks(crawler, self.config.delay_from)
        self._ack_call: Any = None
        self.shards = 1
        self.outbox: Outbox | None = None  # links of other shards' domains (opened with the frontier)
        self._next_drain = 0.0
        self.inflight: dict[str, Request] = {}  # lease -> the request it covers
        self._next_poll = 0.0
        self._last_take = 0.0
        self._take_call = uuid.uuid4().hex
        self._took_call = ""
        self._empty_polls = 0
        self._pending_checked = -1.0
        self._pending_cached = True
        self._idle_since: float | None = None
        self._flusher: task.LoopingCall | None = None
        self._wakeup: Any = None
        self.guard = RedisGuard(crawler.settings.get("REDIS_URL") or "", self.stats, self._wake_engine_in)
        self._oom_dropped = 0
        self._oom_logged = -1e9

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        from crawler.settings_check import check_settings  # it imports this module's users

        try:
            check_settings(crawler.settings)
            return cls(crawler)
        except (SettingsError, RedisUnavailable) as exc:  # one line, also in projects using the addon
            exit_with(exc)

    # --- lifecycle -------------------------------------------------------

    def open(self, spider: Spider) -> None:
        self.spider = spider
        shard = int(getattr(spider, "shard", self.config.shard))
        keys = Keys(self.config.prefix, spider.name, shard)
        self.shards = int(getattr(spider, "shards", 1))
        self.outbox = Outbox(self.crawler.settings, self.server, self.config, spider.name, self.stats)
        self.frontier = Frontier(
            self.server, keys,
            dedup=self.config.dedup,
            politeness=self.config.politeness,
            overrides=self.config.overrides,
            domain_cap=self.config.domain_cap,
            domain_budget=self.config.domain_budget,
            lease_seconds=self.config.lease_seconds,
        )
        if self.flush_on_start:
            self.frontier.clear()
        self.frontier.open()
        self.dead_letters = DeadLetters(
            self.server, keys, self.crawler.settings.getint("CRAWLER_DLQ_MAX", 100_000)
        )
        queued = len(self)
        if queued:
            logger.info("Resuming crawl of frontier %s (%d requests queued)", keys.base, queued)
        else:
            logger.info("Frontier %s opened", keys.base)
        self._flusher = task.LoopingCall(self._tick)
        self._flusher.start(self.config.flush_interval, now=False)

    def close(self, reason: str) -> None:
        if self._flusher is not None and self._flusher.running:
            self._flusher.stop()
        if self._wakeup is not None and self._wakeup.active():
            self._wakeup.cancel()
        if self._ack_call is not None and self._ack_call.active():
            self._ack_call.cancel()
        assert self.frontier is not None
        unfinished = [leased.lease for leased in self.buffer] + list(self.inflight)
        self.marks.forget(unfinished)
        try:
            self.flush_pending()
            if self.pending_acks:  # finished pages: acknowledged before the process goes
                self._send_acks_alone()
            given_back = self.frontier.release(unfinished)
        except REDIS_ERRORS as exc:
            # unacknowledged pages come back when their leases expire, and
            # their links with them: nothing is lost, some pages are refetched
            logger.warning("Redis unreachable at close (%s): %d leased requests will come back "
                           "when their leases expire", _reason(exc), len(unfinished))
            return
        if given_back:
            logger.info("Handed %d unfinished requests back to the frontier", given_back)
        self.buffer.clear()
        self.inflight.clear()
        if not self.persist:
            self.flush()

    def flush(self) -> None:
        """Delete the whole frontier (scrapy-redis's ``flush``)."""
        if self.frontier is not None:
            self.frontier.clear()

    # --- enqueue ---------------------------------------------------------

    def enqueue_request(self, request: Request) -> bool:
        assert self.spider is not None
        lease = request.meta.pop(codec.LEASE, None)
        if lease is not None:
            self.inflight.pop(lease, None)  # a retry or redirect of a leased request
        try:
            entry = codec.encode(request, self.spider)
        except (TypeError, ValueError) as exc:
            logger.error("Cannot store %s in the frontier, dropped: %s", request, exc)
            self._inc("crawler/frontier/unserializable")
            if lease is not None:
                self._acked(self.marks.ack(lease))
            return False
        digest = self.crawler.request_fingerprinter.fingerprint(request)
        dont_filter = request.dont_filter and not (
            # Scrapy's start requests skip the dupefilter; in a frontier shared
            # by many workers (and across restarts) that means one fetch each
            self.dedup_start_requests and request.meta.get("is_start_request")
        )
        item = Item(digest, domain_of(request.url), request.priority, entry, dont_filter)
        delay = request.meta.pop(DELAY, None)
        ack = self.marks.ack(lease) if lease is not None else None
        if delay is not None:
            # a retry or a request that must wait: into the delayed set, where
            # the wait happens on the Redis server's clock, not in a worker
            self.pending_delays.append((float(delay), item, ack))
            self._inc("crawler/frontier/delayed")
            if ack is not None:
                self._ack_soon()
        else:
            self.pending.append(item)
            if ack is not None:
                self._acked(ack)
        self._inc("scheduler/enqueued/redis")
        if len(self.pending) >= self.config.batch:
            self.guard.call(self.flush_pending)
        return True

    def add_urls(self, urls: Iterable[str], *, depth: int = 0, priority: int = 0,
                 canonical: bool = False) -> int:
        """Offer plain URLs in bulk: no ``Request`` objects until dequeued.

        URLs are canonicalised here (unless ``canonical`` says they are);
        invalid ones are skipped and counted. With several shards (the
        spider's ``shards``), URLs of another shard's domains are forwarded to
        that shard's inbox. Returns how many were offered (dedup happens in
        Redis).
        """
        offered = 0
        assert self.frontier is not None
        own = self.frontier.keys.shard
        for url in urls:
            if not canonical:
                try:
                    url = self.canonicalize(url)
                except ValueError:
                    self._inc("crawler/frontier/invalid_urls")
                    continue
            domain = domain_of(url)
            item = Item(url_fingerprint(url), domain, priority, codec.encode_url(url, depth))
            target = shard_of(domain, self.shards) if self.shards > 1 else own
            if target == own:
                self.pending.append(item)
            elif self.config.forward:
                self.outbox.add(target, item)
            else:
                self._inc("crawler/forward/dropped")
                continue
            offered += 1
        if len(self.pending) + len(self.outbox) >= self.config.batch:
            self.guard.call(self.flush_pending)
        return offered

    def _drain_inbox(self) -> None:
        now = time.monotonic()
        if now < self._next_drain:
            return
        assert self.frontier is not None
        try:
            moved, result = self.frontier.drain_inbox(self.config.batch)
        except redis.exceptions.OutOfMemoryError:
            self._next_drain = now + 1.0  # forwarded links wait in the inbox
            self._out_of_memory(0)
            return
        self._next_drain = now if moved >= self.config.batch else now + 1.0
        if moved:
            self._inc("crawler/forward/received", moved)
            self._count(result)

    def push_domain(self, url: str, seconds: float) -> None:
        """No request to the domain of ``url`` before ``seconds`` from now."""
        assert self.frontier is not None
        try:
            self.frontier.push_domain(domain_of(url), seconds)
        except redis.RedisError as exc:
            if isinstance(exc, REDIS_ERRORS):
                self.guard.failed(exc)
            return
        self._inc("crawler/frontier/domain_pushbacks")

    def dead_letter(self, request: Request | str, reason: str, *, status: int | None = None,
                    exception: BaseException | str | None = None) -> None:
        """Record a request given up on in the dead-letter queue."""
        assert self.spider is not None and self.frontier is not None
        url = request if isinstance(request, str) else request.url
        attempts = 1 if isinstance(request, str) else int(request.meta.get(ATTEMPTS, 1))
        if isinstance(exception, BaseException):
            exception = type(exception).__name__
        letter = DeadLetter(url, reason, status, exception, attempts,
                            spider=self.spider.name, shard=self.frontier.keys.shard)
        try:
            self.dead_letters.add([letter])
        except redis.RedisError as exc:
            if isinstance(exc, REDIS_ERRORS):
                self.guard.failed(exc)
            logger.warning("Dead letter not recorded, Redis unreachable: %s", letter.to_json())
            self._inc("crawler/dlq/unrecorded")
            return
        self._inc(f"crawler/dlq/{reason}")

    def ack(self, request: Request) -> None:
        """The request is done; its lease is released, and its domain's
        next turn set, within ``CRAWLER_ACK_INTERVAL``."""
        lease = request.meta.pop(codec.LEASE, None)
        if lease is not None and self.inflight.pop(lease, None) is not None:
            self._acked(self.marks.ack(lease))

    def note_fetch(self, request: Request, began: float, ended: float) -> None:
        """A fetch made for ``request`` outside the downloader (its robots.txt)
        is the domain's last request: the next waits for the delay after it."""
        lease = request.meta.get(codec.LEASE)
        if lease is not None:
            # its start is known only as an upper bound: when its answer ended
            self.marks.note(lease, ended, ended, ended - began)

    def _acked(self, ack: Ack) -> None:
        self.pending_acks.append(ack)
        self._ack_soon()

    def _ack_soon(self) -> None:
        """A parked domain waits for this acknowledgement: send it soon."""
        if self._ack_call is None or not self._ack_call.active():
            from twisted.internet import reactor

            self._ack_call = reactor.callLater(self.config.ack_interval, self._send_acks)  # type: ignore[attr-defined]

    def _send_acks(self) -> None:
        if not (self.pending_acks or self.pending_delays) or self.frontier is None:
            return
        if self.pending_delays:
            self.guard.call(self.flush_pending)
        if not self.pending_acks:
            return
        if not self.buffer:
            self._next_poll = 0.0
            self.guard.call(self._take)  # the acknowledgements ride with a dequeue
            if self.buffer:
                self._wake_engine_in(0.0)
            return
        self.guard.call(self._send_acks_alone)

    def _send_acks_alone(self) -> None:
        """Pending acknowledgements in a round trip of their own; kept when it fails."""
        assert self.frontier is not None
        acks, self.pending_acks = self.pending_acks, []
        try:
            self.frontier.take(0, acks)
        except BaseException:
            self.pending_acks = acks + self.pending_acks
            raise
        self._inc("crawler/frontier/acked", len(acks))

    def _tick(self) -> None:
        self._sweep_finished()
        self.guard.call(self.flush_pending)

    def _sweep_finished(self) -> None:
        """Acknowledge leased requests the engine is done with.

        The middlewares acknowledge what they see; a request can also end
        where none of them looks (an ``IgnoreRequest`` raised in some
        ``process_response``, a filter). A leased request that is neither
        downloading nor being scraped is finished.
        """
        engine = self.crawler.engine
        slot = getattr(engine, "_slot", None)
        scraper_slot = getattr(getattr(engine, "scraper", None), "slot", None)
        if not self.inflight or slot is None or scraper_slot is None:
            return
        busy = {id(r) for r in getattr(slot, "inprogress", ())}
        busy.update(id(r) for r in getattr(scraper_slot, "active", ()))
        busy.update(id(entry[1]) for entry in getattr(scraper_slot, "queue", ()))
        done = [lease for lease, request in self.inflight.items() if id(request) not in busy]
        for lease in done:
            del self.inflight[lease]
            self.pending_acks.append(self.marks.ack(lease))
        if done:
            self._inc("crawler/frontier/acked_by_sweep", len(done))

    def flush_pending(self) -> None:
        """Store buffered requests and acknowledgements: one round trip
        (two when requests wait for the delayed set).

        Each buffer is cleared only once Redis has stored it: when a call
        fails, everything is still here for the next attempt. When Redis is
        out of memory, new requests are dropped (counted) and the
        acknowledgements go with the next dequeue, which Redis still runs.
        """
        assert self.frontier is not None
        if self.outbox:
            self.outbox.flush()  # before the acks below: a page is done once its links are stored
        if self.pending_delays:
            delays = self.pending_delays
            leases = [ack for _, _, ack in delays if ack is not None]
            try:
                self.frontier.delay(
                    [(seconds, i.domain, i.priority, i.entry) for seconds, i, _ in delays], acks=leases)
            except redis.exceptions.OutOfMemoryError:
                self._out_of_memory(len(delays))
                self.pending_acks.extend(leases)
            self.pending_delays = []
        if not self.pending:
            return  # acknowledgements alone go with the next dequeue
        items, acks = self.pending, self.pending_acks
        try:
            result = self.frontier.add(items, acks)
        except redis.exceptions.OutOfMemoryError:
            self._out_of_memory(len(items))
            self.pending = []
            return
        self.pending, self.pending_acks = [], []
        self._count(result)
        self._inc("crawler/frontier/acked", result.acked)
        if result.added:
            self._empty_polls = 0
            self._next_poll = min(self._next_poll, self._last_take + self.config.poll_interval)
            if not self.buffer:
                self._wake_engine_in(max(0.0, self._next_poll - time.monotonic()))

    def _count(self, result: AddResult) -> None:
        self._inc("crawler/frontier/enqueued", result.added)
        self._inc("crawler/frontier/duplicates", result.duplicates)
        self._inc("crawler/frontier/capped", result.capped)
        self._inc("crawler/frontier/over_budget", result.over_budget)
        self._inc("crawler/frontier/excluded", result.excluded)

    # --- dequeue ---------------------------------------------------------

    def next_request(self) -> Request | None:
        if not self.buffer:
            self._refill()
        if not self.buffer:
            return None
        assert self.spider is not None
        leased = self.buffer.popleft()
        try:
            request = codec.decode(leased.entry, self.spider)
        except Exception as exc:  # a corrupt entry must not stop the crawl
            logger.error("Dropped an undecodable frontier entry %r: %s", leased.entry[:80], exc)
            self._inc("crawler/frontier/undecodable")
            self.pending_acks.append(leased.lease)
            return None
        request.meta[codec.LEASE] = leased.lease
        self.inflight[leased.lease] = request
        self._inc("scheduler/dequeued/redis")
        return request

    def _refill(self) -> None:
        now = time.monotonic()
        if now < self._next_poll:
            self._wake_engine_in(self._next_poll - now)
            return
        self.guard.call(self._take)

    def _take(self) -> None:
        now = time.monotonic()
        assert self.frontier is not None
        if self.pending or self.pending_delays or self.outbox:
            self.flush_pending()
        self._drain_inbox()
        acks = self.pending_acks
        result = self.frontier.take(self.config.prefetch, acks, self._take_call, self._took_call)
        # the next call's name: a retry of this one reuses it; its reply is here
        self._took_call, self._take_call = self._take_call, uuid.uuid4().hex
        self._last_take = now
        self.pending_acks = []
        self._inc("crawler/frontier/acked", len(acks))
        self._inc("crawler/frontier/polls")
        self.buffer.extend(result.items)
        if len(result.items) >= self.config.prefetch:
            self._empty_polls = 0
            self._next_poll = 0.0  # more may be due right now
            return
        if result.items:
            # everything due was taken: the next poll, no sooner than
            # CRAWLER_POLL_INTERVAL, gathers what becomes due meanwhile
            self._empty_polls = 0
            self._next_poll = now + self.config.poll_interval
            return
        if result.next_due_ms is not None:
            # a queued domain is waiting for its turn: come back exactly then
            wait = max(0.0, (result.next_due_ms - result.now_ms) / 1000)
        else:
            # nothing queued here; other workers may add some: back off
            self._empty_polls += 1
            wait = 0.02 * 2 ** min(self._empty_polls, 10)
        wait = min(max(wait, self.config.poll_interval), _MAX_POLL_WAIT)
        self._next_poll = now + wait
        self._wake_engine_in(wait)

    def _wake_engine_in(self, seconds: float) -> None:
        from twisted.internet import reactor

        if self._wakeup is not None and self._wakeup.active():
            if abs(self._wakeup.getTime() - reactor.seconds() - seconds) < 0.005:  # type: ignore[attr-defined]
                return
            self._wakeup.cancel()
        self._wakeup = reactor.callLater(seconds + 0.001, self._wake_engine)  # type: ignore[attr-defined]

    def _wake_engine(self) -> None:
        slot = getattr(self.crawler.engine, "_slot", None)
        if slot is not None:
            slot.nextcall.schedule()

    # --- a full Redis ------------------------------------------------------

    def _out_of_memory(self, dropped: int) -> None:
        self._oom_dropped += dropped
        self._inc("crawler/frontier/oom_dropped", dropped)
        now = time.monotonic()
        if now - self._oom_logged > 60:
            self._oom_logged = now
            logger.error("Redis is out of memory (maxmemory reached): new URLs are not stored "
                         "(%d dropped so far); crawling what is queued goes on", self._oom_dropped)
        if self.frontier is not None:
            try:
                self.server.hincrby(self.frontier.keys.stats, "oom_dropped", dropped)
            except redis.RedisError:
                pass

    # --- state -----------------------------------------------------------

    def has_pending_requests(self) -> bool:
        if self.buffer or self.pending or self.pending_delays or self.outbox or self.pending_acks:
            return True
        if self.guard.down:
            return True  # Redis away: never an idle close because of that
        now = time.monotonic()
        if now - self._pending_checked < 0.25:
            return self._pending_cached
        assert self.frontier is not None
        self._pending_checked = now
        try:
            pending = self.frontier.pending()
        except REDIS_ERRORS as exc:
            self.guard.failed(exc)
            return True
        self.guard.back()
        if pending > 0:
            self._idle_since = None
            self._pending_cached = True
        else:
            if self._idle_since is None:
                self._idle_since = now
            self._pending_cached = now - self._idle_since < self.idle_before_close
        return self._pending_cached

    def __len__(self) -> int:
        if self.frontier is None or self.guard.down:
            return len(self.buffer)
        try:
            queued = self.server.hget(self.frontier.keys.stats, "queued")
        except REDIS_ERRORS:
            return len(self.buffer)
        return int(queued or 0) + len(self.buffer)

    def _inc(self, key: str, count: int = 1) -> None:
        if count and self.stats is not None:
            self.stats.inc_value(key, count)


#: settings of scrapy-redis and Scrapy that this scheduler does not read
_IGNORED = {
    "SCHEDULER_QUEUE_CLASS": "the frontier keeps one queue per domain in Redis (CRAWLER_DOMAIN_* settings)",
    "SCHEDULER_QUEUE_KEY": "the frontier's keys are <CRAWLER_KEY_PREFIX>:{<spider>:<shard>}:...",
    "SCHEDULER_SERIALIZER": "requests travel as msgpack (crawler.serializers)",
    "SCHEDULER_DUPEFILTER_KEY": "dedup happens in the frontier (CRAWLER_DEDUP)",
}


def _warn_ignored(settings: Any) -> None:
    for name, instead in _IGNORED.items():
        if settings.get(name) is not None:
            logger.warning("%s is ignored: %s", name, instead)
    dupefilter = settings.get("DUPEFILTER_CLASS")
    name = dupefilter if isinstance(dupefilter, str) else global_object_name(dupefilter)
    if name not in ("scrapy.dupefilters.BaseDupeFilter", "scrapy.dupefilters.RFPDupeFilter"):
        logger.warning("DUPEFILTER_CLASS %s is not used: the frontier dedups in Redis by the SHA-256 "
                       "of canonical URLs (CRAWLER_DEDUP)", name)
