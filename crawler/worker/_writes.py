"""The write buffer: what the session has to tell Redis, batched: offers
(frontier items), requests to delay, the outbox of other shards' links
(``_shards.py``), and acknowledgements of leases (``_leases.py`` gives them
here: the buffer is the leases' :class:`~crawler.worker._leases.AckSink`).

When acknowledgements leave, in one place (:meth:`WriteBuffer.acks_leaving`),
by one rule: **a page's links are stored before its acknowledgement,
always.** Every request buffered before an acknowledgement (links for this
shard, other shards' links, delayed retries) is stored first, in one
:meth:`~WriteBuffer.flush` whose enqueue carries the acknowledgements
buffered so far; only what is then left leaves, with a dequeue or in a
round trip of its own. A worker killed at any moment has therefore either
stored a page's links or not acknowledged the page (its lease expires and
the page is fetched again). An acknowledgement leaves within
``CRAWLER_ACK_INTERVAL`` of being buffered (a parked domain waits for it):
the buffer calls ``acks_due`` then, and the session picks the round trip.

With recrawl on, a sitemap's ``<lastmod>`` of a URL (``meta[LASTMOD]``) is
a hint (``Frontier.hint``), sent after the flush's enqueue; and a URL's
history write rides on its acknowledgement
(``Ack.write``, ``_leases.py``): buffered, kept on a failed round trip and
sent with it, so the write and the ack leave in the same script call (the
frontier sends ``wire_writes(acks)`` right after the acks), never apart.

Redis out of memory (maxmemory with noeviction) refuses the enqueue and
delay scripts: new URLs are dropped and counted (``oom_dropped``); a retry
of a leased request is not dropped: its lease is not acknowledged, so its
URL stays leased and comes back to its queue when the lease expires, or is
handed back when the worker closes (``oom_retries_kept``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import redis

from crawler.clock import SYSTEM, Clock
from crawler.store import AddResult, Frontier, Hint, Item, Promotion
from crawler.worker._recent import Recent
from crawler.worker._shards import Outbox
from crawler.worker._stats import inc

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.store import Leased
    from crawler.worker._inlinks import InlinkSketch
    from crawler.worker._leases import Ack

__all__ = ["WriteBuffer"]

logger = logging.getLogger(__name__)

_OOM_LOG_EVERY = 60.0  # seconds


class WriteBuffer:
    def __init__(self, store: Frontier, outbox: Outbox, stats: StatsCollector | None, batch: int,
                 ack_interval: float, acks_due: Callable[[], None], clock: Clock = SYSTEM,
                 recent: Recent | None = None) -> None:
        self.store = store
        self.recent = recent
        self.clock = clock
        self.outbox = outbox
        self.stats = stats
        self.batch = batch
        self.ack_interval = ack_interval
        self.acks_due = acks_due  # called ack_interval after an acknowledgement is buffered
        self.on_stored: Callable[[], None] | None = None  # a flush stored requests (new or delayed)
        self._ack_call: Any = None
        self.items: list[Item] = []
        self.delays: list[tuple[float, Item, Ack | None]] = []
        self.acks: list[str | Ack] = []
        #: sitemap <lastmod> hints for tracked URLs (recrawl on): sent after the items, advice only
        self.hints: list[Hint] = []
        #: rank order: (target domain, linking domain) pairs, by the target's shard (``Offers.links_from``)
        self.links: dict[int, list[tuple[str, str]]] = {}
        #: the in-link order: requests many links lead to, promoted with the next items (``_inlinks.py``)
        self.promotions: list[Promotion] = []
        self.inlinks: InlinkSketch | None = None
        #: leases whose retry Redis refused for want of memory: not acknowledged, handed back at close
        self.kept: list[str] = []
        self._oom_dropped = 0
        self._oom_logged = -1e9

    def __bool__(self) -> bool:
        return bool(self.items or self.delays or self.outbox or self.acks or self.hints or self.promotions)

    @property
    def requests_wait(self) -> bool:
        """Requests wait (not just acknowledgements)."""
        return bool(self.items or self.delays or self.outbox or self.promotions)

    @property
    def full(self) -> bool:
        return len(self.items) + len(self.outbox) + len(self.hints) >= self.batch

    def add(self, item: Item) -> None:
        self.items.append(item)

    def link(self, shard: int, target: str, source: str) -> None:
        self.links.setdefault(shard, []).append((target, source))

    def hint(self, hint: Hint) -> None:
        """A sitemap's ``<lastmod>`` for a URL that may be tracked (``Frontier.hint``)."""
        self.hints.append(hint)

    def delay(self, seconds: float, item: Item) -> None:
        """A request never leased, to wait ``seconds`` in the frontier."""
        self.delays.append((seconds, item, None))

    # --- AckSink (what Leases gives) -------------------------------------

    def ack(self, ack: Ack) -> None:
        """Buffer an acknowledgement; it leaves within ``CRAWLER_ACK_INTERVAL``."""
        self.acks.append(ack)
        self._due_soon()

    def retry(self, seconds: float, again: Leased, ack: Ack) -> None:
        """Buffer a leased request moving on (a retry), acknowledged with it
        when it is parked; it leaves within ``CRAWLER_ACK_INTERVAL``."""
        self.delays.append((seconds, Item(b"", again.domain, again.priority, again.entry), ack))
        self._due_soon()

    def _due_soon(self) -> None:
        if self._ack_call is None or not self._ack_call.active():
            self._ack_call = self.clock.timers.callLater(self.ack_interval, self.acks_due)

    def cancel(self) -> None:
        if self._ack_call is not None and self._ack_call.active():
            self._ack_call.cancel()

    # --- to Redis --------------------------------------------------------

    @contextmanager
    def acks_leaving(self) -> Iterator[list[str | Ack]]:
        """The one way acknowledgements leave the buffer: what waits is
        stored first (its enqueue carries the acknowledgements buffered so
        far); those left are yielded for the caller's round trip, and kept
        for the next one if it fails."""
        if self.requests_wait:
            self.flush()
        acks, self.acks = self.acks, []
        try:
            yield acks
        except BaseException:
            self.acks = acks + self.acks
            raise

    def flush(self) -> AddResult | None:
        """Store what waits: other shards' links, then delayed requests (each
        with its lease's acknowledgement), then this shard's with every
        acknowledgement buffered: one round trip each. Returns the enqueue's
        result, None if nothing was enqueued."""
        if self.outbox:
            self.outbox.flush()
        delayed = bool(self.delays)
        if self.delays:
            self._store_delays()
        result = self._store_items() if self.items or self.promotions else None
        if self.hints:
            self._store_hints()
        if self.links:
            self._store_links()
        if self.on_stored is not None and (delayed or (result is not None and result.added)):
            self.on_stored()
        return result

    def _store_delays(self) -> None:
        delays = self.delays
        acks = [ack for _, _, ack in delays if ack is not None]
        try:
            self.store.delay(  # each retry names its lease: void if that expired meanwhile
                [(seconds, i.domain, i.priority, i.entry, None if ack is None else ack.lease)
                 for seconds, i, ack in delays],
                acks=acks)
        except redis.exceptions.OutOfMemoryError:
            # a retry is not dropped: its lease stays, unacknowledged (see the module's docstring)
            self.kept += [ack.lease for ack in acks]
            inc(self.stats, "crawler/frontier/oom_retries_kept", len(acks))
            self.out_of_memory(len(delays) - len(acks))
        self.delays = []

    def _store_items(self) -> AddResult | None:
        promotions = self.promotions
        shard = self.store.keys.shard
        links = self.links.get(shard, [])  # this shard's links between domains ride along
        try:
            result = self.store.add(self.items, self.acks, promotions, links)
        except redis.exceptions.OutOfMemoryError:
            self.out_of_memory(len(self.items))
            self.items, self.promotions = [], []  # promotions are advice: dropped with the rest
            if links:
                self._links_done(shard, lost=True)
            return None
        if links:
            self._links_done(shard, lost=False)
        if self.recent is not None:
            self.recent.mark(self.items, result.unseen, result.positions)
        self.items, self.acks, self.promotions = [], [], []
        if self.inlinks is not None:
            for p, (outcome, given) in zip(promotions, result.promoted):
                self.inlinks.given(p.domain, p.priority, given)
                inc(self.stats, f"crawler/frontier/inlinks/{outcome}")
        self.count(result)
        inc(self.stats, "crawler/frontier/acked", result.acked)
        return result

    def _store_links(self) -> None:
        """The links between domains not sent with the enqueue, into each
        target's shard (its own or another's: ``Frontier.add_links``);
        advice for the order, not URLs: a
        Redis out of memory drops them (counted), another error keeps them."""
        for shard in list(self.links):
            frontier = self.store if shard == self.store.keys.shard else self.outbox.frontier(shard)
            try:
                frontier.add_links(self.links[shard])
            except redis.exceptions.OutOfMemoryError:
                self._links_done(shard, lost=True)
            else:
                self._links_done(shard, lost=False)

    def _links_done(self, shard: int, lost: bool) -> None:
        """``shard``'s links between domains sent (with the enqueue, or on
        their own), or dropped by a Redis out of memory: counted, forgotten."""
        pairs = self.links.pop(shard)
        inc(self.stats, "crawler/frontier/links_between", len(pairs))
        if lost:
            inc(self.stats, "crawler/frontier/links_lost", len(pairs))

    def _store_hints(self) -> None:
        """The hints, in one round trip; Redis out of memory drops them
        (advice, not URLs: counted ``crawler/recrawl/hints/lost``), another
        error keeps them for the next flush."""
        try:
            result = self.store.hint(self.hints)
        except redis.exceptions.OutOfMemoryError:
            inc(self.stats, "crawler/recrawl/hints/lost", len(self.hints))
            self.hints = []
            return
        self.hints = []
        inc(self.stats, "crawler/recrawl/hints/applied", result.applied)
        inc(self.stats, "crawler/recrawl/hints/ignored", result.ignored)

    def count(self, result: AddResult) -> None:
        inc(self.stats, "crawler/frontier/enqueued", result.added)
        inc(self.stats, "crawler/frontier/duplicates", result.duplicates)
        inc(self.stats, "crawler/frontier/spilled", result.spilled)
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
        if not dropped:
            return
        try:
            self.store.count_dropped(dropped)
        except redis.RedisError as exc:  # the count only: the drop itself is counted and logged above
            logger.warning("Frontier counter oom_dropped not updated (%d requests dropped not counted "
                           "in scrapy frontier): %s", dropped, exc)
