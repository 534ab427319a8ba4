"""Links between shards: a shard owns the domains
:func:`crawler.sharding.shard_of` gives it. Links to another shard's domains
are buffered in the :class:`Outbox` per shard and pushed to that frontier's
``inbox`` list (on its own Redis when ``CRAWLER_SHARD_REDIS_URLS`` names
one); this shard's :class:`Inbox` is drained into its queues by
``drain_inbox.lua`` (:meth:`Frontier.drain_inbox`) with the same dedup as
``enqueue.lua``. A record is ``"<a>\\n<b>\\n<domain>\\n<priority>\\n<entry>"``:
``a``, ``b`` are the dedup arguments of the *receiving* frontier's layout,
read from its meta.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis
from scrapy.settings import BaseSettings, Settings

from crawler.clock import SYSTEM, Clock
from crawler.connection import get_redis
from crawler.store import AddResult, Dedup, Frontier, Item, Keys, stored_dedup
from crawler.worker._stats import inc

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.worker.config import FrontierSettings


class Outbox:
    """Links of other shards' domains, per shard, on their way to those shards' inboxes."""

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

    def frontier(self, shard: int) -> Frontier:
        """Another shard's frontier (opened on its Redis)."""
        return self._link(shard)[0]

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
