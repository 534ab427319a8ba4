"""What the scheduler has to tell Redis, batched: offers (Scrapy requests and
plain URLs made into frontier items), requests to delay, acknowledgements of
leases, and links of other shards' domains on their way to those shards'
inboxes.

A shard owns the domains :func:`crawler.sharding.shard_of` gives it. Links
to another shard's domains are buffered here per shard and pushed to that
frontier's ``inbox`` list (on its own Redis when ``CRAWLER_SHARD_REDIS_URLS``
names one), where ``drain_inbox.lua`` (:meth:`Frontier.drain_inbox`) moves
them into the queues with the same dedup as ``enqueue.lua``. A record is
``"<a>\\n<b>\\n<domain>\\n<priority>\\n<entry>"``: ``a``, ``b`` are the
dedup arguments of the *receiving* frontier's layout, read from its meta.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import redis
from scrapy.settings import BaseSettings, Settings

from crawler.clock import SYSTEM, Clock
from crawler.connection import get_redis
from crawler.identity import domain_of, url_fingerprint
from crawler.meta import DELAY, LEASE
from crawler.sharding import shard_of
from crawler.store import LOST, REDIRECTED, AddResult, Dedup, Frontier, Item, Keys, codec, stored_dedup
from crawler.worker._stats import inc

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

    from crawler.identity import Canonicalizer
    from crawler.worker._leases import Ack, Leases
    from crawler.worker.config import FrontierSettings


class Outbox:
    def __init__(self, settings: BaseSettings, server: redis.Redis, config: FrontierSettings, spider: str,
                 stats: StatsCollector | None, clock: Clock = SYSTEM) -> None:
        self.settings = settings
        self.clock = clock
        self.server = server
        self.config = config
        self.spider = spider
        self.stats = stats
        self.records: dict[int, list[bytes]] = {}  # other shard -> records not stored yet
        self.links: dict[int, tuple[Frontier, Dedup]] = {}

    def __len__(self) -> int:
        return sum(map(len, self.records.values()))

    def add(self, shard: int, item: Item) -> None:
        a, b = self._link(shard)[1].args(item.digest)
        record = b"%d\n%d\n%s\n%d\n%s" % (a, b, item.domain.encode(), item.priority, item.entry)
        self.records.setdefault(shard, []).append(record)

    def flush(self) -> None:
        """Push every shard's records to its inbox; a failed call loses nothing."""
        for shard in list(self.records):
            records = self.records[shard]
            self._link(shard)[0].receive(records)
            del self.records[shard]  # only once stored
            inc(self.stats, "crawler/forward/sent", len(records))

    def _link(self, shard: int) -> tuple[Frontier, Dedup]:
        """Another shard's frontier and its dedup layout."""
        link = self.links.get(shard)
        if link is None:
            url = self.config.shard_urls.get(shard)
            client = self.server
            if url and url != self.settings.get("REDIS_URL"):
                settings = Settings(self.settings.copy_to_dict())
                settings.set("REDIS_URL", url, priority="cmdline")
                client = get_redis(settings)
            keys = Keys(self.config.prefix, self.spider, shard)
            # when that frontier exists, its layout wins
            link = self.links[shard] = (Frontier(client, keys, clock=self.clock),
                                        stored_dedup(client, keys, self.config.dedup))
        return link


class Inbox:
    """This shard's inbox, drained into its queues at most once a second
    unless a drain came back full."""

    def __init__(self, frontier: Frontier, batch: int, stats: StatsCollector | None,
                 clock: Clock = SYSTEM) -> None:
        self.frontier = frontier
        self.clock = clock
        self.batch = batch
        self.stats = stats
        self.next_drain = 0.0

    def drain(self) -> AddResult | None:
        """Move what waits into the queues; None when not due or nothing
        moved. An ``OutOfMemoryError`` passes through; the next drain then
        waits a second, like one that found the inbox empty."""
        now = self.clock.monotonic()
        if now < self.next_drain:
            return None
        self.next_drain = now + 1.0  # forwarded links wait in the inbox meanwhile
        moved, result = self.frontier.drain_inbox(self.batch)
        if moved >= self.batch:
            self.next_drain = now
        if not moved:
            return None
        inc(self.stats, "crawler/forward/received", moved)
        return result


logger = logging.getLogger(__name__)

_OOM_LOG_EVERY = 60.0  # seconds


class Recent:
    """Fingerprints of links this process has had marked seen in the frontier
    (``CRAWLER_DEDUP_LOCAL``): a link found again (a site's menu, on every
    page) is not offered to Redis a second time. Two generations of ``size``
    each: when the newer fills, the older is dropped. Only what the enqueue
    script said it marked seen is remembered, so a link capped, over its
    domain's budget or excluded is offered again, as without this; a frontier
    lost and made anew (``CRAWLER_ON_FRONTIER_LOSS=continue``) clears it.

    The generations are dicts of digests to None, not sets: a set is always
    tracked by the garbage collector, and a full collection visited each of
    its up to 200,000 digests (about a third of a soak worker's collection),
    while a dict of bytes to None is not tracked at all."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.new: dict[bytes, None] = {}
        self.old: dict[bytes, None] = {}

    def __contains__(self, digest: bytes) -> bool:
        return digest in self.new or digest in self.old

    def clear(self) -> None:
        self.new.clear()
        self.old.clear()

    def mark(self, items: list[Item], unseen: tuple[int, ...]) -> None:
        skip = set(unseen)
        for place, item in enumerate(items, 1):
            if not item.dont_filter and place not in skip:
                self.new[item.digest] = None
        if len(self.new) >= self.size:
            self.old, self.new = self.new, {}


class WriteBuffer:
    def __init__(self, frontier: Frontier, outbox: Outbox, stats: StatsCollector | None, batch: int,
                 ack_interval: float, send_acks: Callable[[], None], clock: Clock = SYSTEM,
                 recent: Recent | None = None) -> None:
        self.frontier = frontier
        self.recent = recent
        self.clock = clock
        self.outbox = outbox
        self.stats = stats
        self.batch = batch
        self.ack_interval = ack_interval
        self.send_acks_soon = send_acks  # called ack_interval after an acknowledgement is buffered
        self._ack_call: Any = None
        self.items: list[Item] = []
        self.delays: list[tuple[float, Item, Ack | None]] = []
        self.acks: list[str | Ack] = []
        self._oom_dropped = 0
        self._oom_logged = -1e9

    def __bool__(self) -> bool:
        return bool(self.items or self.delays or self.outbox or self.acks)

    @property
    def requests_wait(self) -> bool:
        """Requests wait (not just acknowledgements)."""
        return bool(self.items or self.delays or self.outbox)

    @property
    def full(self) -> bool:
        return len(self.items) + len(self.outbox) >= self.batch

    def add(self, item: Item) -> None:
        self.items.append(item)

    def delay(self, seconds: float, item: Item, ack: Ack | None) -> None:
        self.delays.append((seconds, item, ack))

    def ack(self, ack: str | Ack) -> None:
        """Buffer an acknowledgement: a parked domain waits for it, so it
        leaves within ``CRAWLER_ACK_INTERVAL``."""
        self.acks.append(ack)
        self.soon()

    def soon(self) -> None:
        if self._ack_call is None or not self._ack_call.active():
            self._ack_call = self.clock.timers.callLater(self.ack_interval, self.send_acks_soon)

    def cancel(self) -> None:
        if self._ack_call is not None and self._ack_call.active():
            self._ack_call.cancel()

    def flush(self) -> AddResult | None:
        """Store what waits: one round trip (two when requests wait for the
        delayed set). Returns the enqueue's result, None if nothing was enqueued."""
        if self.outbox:
            self.outbox.flush()  # before the acks below: a page is done once its links are stored
        if self.delays:
            delays = self.delays
            leases = [ack for _, _, ack in delays if ack is not None]
            try:
                self.frontier.delay(  # each retry names its lease: void if that expired meanwhile
                    [(seconds, i.domain, i.priority, i.entry, None if ack is None else ack.lease)
                     for seconds, i, ack in delays],
                    acks=leases)
            except redis.exceptions.OutOfMemoryError:
                self.out_of_memory(len(delays))
                self.acks.extend(leases)
            self.delays = []
        if not self.items:
            return None  # acknowledgements alone go with the next dequeue
        try:
            result = self.frontier.add(self.items, self.acks)
        except redis.exceptions.OutOfMemoryError:
            self.out_of_memory(len(self.items))
            self.items = []
            return None
        if self.recent is not None:
            self.recent.mark(self.items, result.unseen)
        self.items, self.acks = [], []
        self.count(result)
        inc(self.stats, "crawler/frontier/acked", result.acked)
        return result

    def send_acks(self) -> None:
        """The acknowledgements in a round trip of their own; kept when it fails."""
        acks, self.acks = self.acks, []
        try:
            self.frontier.take(0, acks)
        except BaseException:
            self.acks = acks + self.acks
            raise
        inc(self.stats, "crawler/frontier/acked", len(acks))

    def count(self, result: AddResult) -> None:
        inc(self.stats, "crawler/frontier/enqueued", result.added)
        inc(self.stats, "crawler/frontier/duplicates", result.duplicates)
        inc(self.stats, "crawler/frontier/capped", result.capped)
        inc(self.stats, "crawler/frontier/over_budget", result.over_budget)
        inc(self.stats, "crawler/frontier/excluded", result.excluded)

    def out_of_memory(self, dropped: int) -> None:
        self._oom_dropped += dropped
        inc(self.stats, "crawler/frontier/oom_dropped", dropped)
        now = self.clock.monotonic()
        if now - self._oom_logged > _OOM_LOG_EVERY:
            self._oom_logged = now
            logger.error("Redis is out of memory (maxmemory reached): new URLs are not stored "
                         "(%d dropped so far); crawling what is queued goes on", self._oom_dropped)
        try:
            self.frontier.count_dropped(dropped)
        except redis.RedisError as exc:  # the count only: the drop itself is counted and logged above
            logger.warning("Frontier counter oom_dropped not updated (%d requests dropped not counted "
                           "in scrapy frontier): %s", dropped, exc)


logger = logging.getLogger(__name__)


class Offers:
    def __init__(self, spider: Spider, shard: int, shards: int, forward: bool, writes: WriteBuffer,
                 leases: Leases, fingerprinter: RequestFingerprinterProtocol, stats: StatsCollector | None,
                 *, canonicalize: Canonicalizer, dedup_start_requests: bool) -> None:
        self.spider = spider
        self.shard = shard
        self.shards = shards
        self.forward = forward
        self.writes = writes
        self.leases = leases
        self.fingerprinter = fingerprinter
        self.stats = stats
        self.canonicalize = canonicalize
        self.dedup_start_requests = dedup_start_requests

    def request(self, request: Request) -> bool:
        """Buffer ``request`` (see ``FrontierScheduler.enqueue_request``); a
        lease it carries (a retry or redirect of a leased request) ends here."""
        lease = self.leases.get(request.meta.pop(LEASE, None))
        try:
            entry = codec.encode(request, self.spider)
        except (TypeError, ValueError) as exc:
            logger.error("Cannot store %s in the frontier, dropped: %s", request, exc)
            inc(self.stats, "crawler/frontier/unserializable")
            if lease is not None:
                lease.ack(LOST)
            return False
        delay = request.meta.pop(DELAY, None)
        inc(self.stats, "scheduler/enqueued/redis")
        if delay is not None and lease is not None:
            # a copy that waits (a retry, a hand-back) is the same request moving on
            lease.delay(float(delay), entry, domain=domain_of(request.url), priority=request.priority)
            inc(self.stats, "crawler/frontier/delayed")
            return True
        digest = self.fingerprinter.fingerprint(request)
        dont_filter = request.dont_filter and not (
            # Scrapy's start requests skip the dupefilter; in a frontier shared
            # by many workers (and across restarts) that means one fetch each
            self.dedup_start_requests and request.meta.get("is_start_request")
        )
        item = Item(digest, domain_of(request.url), request.priority, entry, dont_filter)
        if delay is not None:
            # the wait happens on the Redis server's clock, not in a worker
            self.writes.delay(float(delay), item, None)
            inc(self.stats, "crawler/frontier/delayed")
        else:
            self.writes.add(item)
            if lease is not None:
                lease.ack(REDIRECTED)  # one that does not wait is a redirect: its URL ended there
        return True

    def urls(self, urls: Iterable[str], depth: int, priority: int, canonical: bool) -> int:
        """Buffer plain URLs (see ``FrontierScheduler.add_urls``); how many were
        offered, those already seen in the frontier (:class:`Recent`) included."""
        offered = known = 0
        recent = self.writes.recent
        for url in urls:
            if not canonical:
                try:
                    url = self.canonicalize(url)
                except ValueError:
                    inc(self.stats, "crawler/frontier/invalid_urls")
                    continue
            digest = url_fingerprint(url)
            if recent is not None and digest in recent:
                known += 1
                continue
            domain = domain_of(url)
            item = Item(digest, domain, priority, codec.encode_url(url, depth))
            target = shard_of(domain, self.shards) if self.shards > 1 else self.shard
            if target == self.shard:
                self.writes.add(item)
            elif self.forward:
                self.writes.outbox.add(target, item)
            else:
                inc(self.stats, "crawler/forward/dropped")
                continue
            offered += 1
        if known:
            inc(self.stats, "crawler/frontier/duplicates_local", known)
        return offered + known

    def unknown(self, urls: list[str]) -> list[str]:
        """``urls`` (canonical) less those :class:`Recent` knows, counted as
        offered duplicates: a caller can skip its own checks of those."""
        recent = self.writes.recent
        if recent is None or not urls:
            return urls
        fresh = [url for url in urls if url_fingerprint(url) not in recent]
        if len(fresh) < len(urls):
            inc(self.stats, "crawler/frontier/duplicates_local", len(urls) - len(fresh))
        return fresh
