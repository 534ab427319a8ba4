"""The write buffer: what the scheduler has to tell Redis, batched.

Three kinds of writes wait here: requests to enqueue (``enqueue.lua``),
requests to delay (``delay.lua``), and acknowledgements of leases, which
ride with the next enqueue or dequeue call. Links of other shards' domains
wait in the :class:`~crawler.scheduler.forwarding.Outbox` beside them.

Each list is cleared only once Redis has stored it: when a call fails,
everything is still here for the next attempt. When Redis is out of memory,
new requests are dropped (counted) and acknowledgements go with the next
dequeue, which Redis still runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from crawler.scheduler._stats import inc

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.scheduler.forwarding import Outbox
    from crawler.scheduler.frontier import AddResult, Frontier, Item
    from crawler.scheduler.marks import Ack

logger = logging.getLogger(__name__)

_OOM_LOG_EVERY = 60.0  # seconds


class WriteBuffer:
    def __init__(self, frontier: Frontier, outbox: Outbox, stats: StatsCollector | None, batch: int,
                 ack_interval: float, send_acks: Callable[[], None]) -> None:
        self.frontier = frontier
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
            from twisted.internet import reactor

            self._ack_call = reactor.callLater(self.ack_interval, self.send_acks_soon)  # type: ignore[attr-defined]

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
                self.frontier.delay(
                    [(seconds, i.domain, i.priority, i.entry) for seconds, i, _ in delays], acks=leases)
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
        now = time.monotonic()
        if now - self._oom_logged > _OOM_LOG_EVERY:
            self._oom_logged = now
            logger.error("Redis is out of memory (maxmemory reached): new URLs are not stored "
                         "(%d dropped so far); crawling what is queued goes on", self._oom_dropped)
        try:
            self.frontier.count_dropped(dropped)
        except redis.RedisError:
            pass
