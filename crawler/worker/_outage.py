"""Redis going away (an outage: calls fail, the worker holds what it has and
retries) or losing the frontier (the data is gone: said once, and the crawl
stops).

How a loss is seen (the epoch record every dequeue checks) is told in
``crawler/store/epoch.py``. When no dequeue happened for
:data:`CHECK_EVERY` seconds (an idle worker), the scheduler's tick looks.

:class:`Epoch` is the worker's memory of it (kept by the
:class:`~crawler.store.frontier.Frontier`); :class:`LossWatch` is what
the scheduler does on a loss: one ERROR line with what is known lost, the
stat ``crawler/exit/error``, and, as ``CRAWLER_ON_FRONTIER_LOSS`` says,
``stop`` (nothing more is written to the frontier; the crawl closes with
finish reason ``frontier_lost``) or ``continue`` (a new epoch; the crawl goes
on with what is written from now on). A Redis Cluster's failover to a
replica is not a loss: the scripts fence the frontier (every domain waits one
full delay) and :meth:`LossWatch.failover_seen` says so once per fence,
forgets what this worker knew seen and hands back what it leased before.

:class:`RedisGuard` runs the scheduler's Redis calls: when one fails with a
connection error, the outage is logged once, the calls stop, and the next
attempt comes after a backoff (0.5 s doubling up to 5 s; up to 1 s on a
Redis Cluster, whose outage is mostly a failover of a few seconds) that wakes the
engine; the first call that succeeds logs the way back. While Redis is
away the crawl is paused, not closed (``down`` keeps it open), and what
was buffered stays buffered. The middlewares that talk to Redis catch
``REDIS_ERRORS`` too. Whether Redis came back with the frontier it had is
not known here: a call that finds it gone or older raises
:class:`~crawler.store.epoch.FrontierLost`, handed to ``on_lost``
(above); once the crawl stops for that, :meth:`RedisGuard.halt`
ends every call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from crawler.clock import SYSTEM, Clock
from crawler.connection import REDIS_ERRORS, _reason, mask_url
from crawler.store import REWOUND, Frontier, FrontierLost

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector


logger = logging.getLogger(__name__)

CHECK_EVERY = 3.0  # seconds: an idle worker looks at the epoch at least this often
SEQ_MARGIN = 1_000_000  # lease ids of a new epoch start this far above the lost one's
FINISH_REASON = "frontier_lost"


class LossWatch:
    """The scheduler's side: when to look, and what to do on a loss."""

    def __init__(self, stats: StatsCollector | None, frontier: Frontier, policy: str, leases_held: Callable[[], int],
                 forget_seen: Callable[[], None], stop: Callable[[], None]) -> None:
        self.stats = stats
        self.frontier = frontier
        self.policy = policy
        self.leases_held = leases_held  # how many leases this worker holds, lent or not
        self.forget_seen = forget_seen  # what this worker knew seen, the new epoch has not seen
        self.stop = stop  # write nothing more, drop what was leased, close the crawl
        self.stopped = False  # stop: nothing more is written to the frontier
        self._renewing = False  # continue: the loss is told, the new epoch not yet made
        self.fences_told = 0  # failover fences of the frontier told (Epoch.fences)

    def check(self) -> None:
        """Look at the epoch if no dequeue did for :data:`CHECK_EVERY` seconds."""
        if self.stopped:
            return
        if self.frontier.clock.monotonic() - self.frontier.epoch.looked_at >= CHECK_EVERY:
            self.frontier.check_epoch()

    def failover_seen(self, hand_back: Callable[[], int]) -> None:
        """After a look at the frontier: if it was fenced after a failover
        since the last look (a replica took over its master, maybe without the
        master's last writes), say so once, count it, forget the links this
        worker knew seen (they may be among the writes lost) and
        ``hand_back()`` the requests leased before the fence and not started
        (a lost lease started now could come under the delay of the same
        request leased again on the new master)."""
        epoch = self.frontier.epoch
        if epoch.fences == self.fences_told:
            return
        self.fences_told = epoch.fences
        self.forget_seen()
        handed = hand_back()
        if self.stats is not None:
            self.stats.inc_value("crawler/frontier/failover_fences")
        logger.warning("Frontier %s failed over (a Redis Cluster replica took over its master): every domain "
                       "of it waits one full delay from the fence before its next request; the master's last "
                       "writes may be lost, so a request leased or answered just before may be fetched again "
                       "(%d leased here and not started were handed back)", self.frontier.keys.base, handed)

    def lost(self, exc: FrontierLost, *, closing: bool = False) -> None:
        """Say what is lost (once), then stop the crawl or go on in a new epoch.
        A Redis error while making the new epoch passes up (the outage guard
        retries; the next look finds the loss again and tries again, silently).
        ``closing``: found while the crawl closes; nothing more is done."""
        if self.stopped:
            return
        if not self._renewing:
            self._tell(exc, closing)
        if closing:
            self.stopped = True
            return
        if self.policy == "stop":
            self.stopped = True
            self.stop()
            return
        self._renewing = True
        self.forget_seen()
        self.frontier.renew(exc.known_id, exc.seen_seq + SEQ_MARGIN)
        self._renewing = False
        logger.warning("Frontier %s: going on in epoch %s (CRAWLER_ON_FRONTIER_LOSS=continue)",
                       self.frontier.keys.base, self.frontier.epoch.id)

    def _tell(self, exc: FrontierLost, closing: bool) -> None:
        held = self.leases_held()
        base = self.frontier.keys.base
        if exc.kind == REWOUND:
            lost = (f"up to {exc.seen_seq - exc.found_seq} leases and delays made since the snapshot, "
                    f"the acknowledgements and links stored since (pages done since may be fetched again)")
            summary = (f"frontier {base} lost (rewound): lease counter {exc.found_seq}, "
                       f"{exc.seen_seq} seen before")
        else:
            lost = (f"{exc.queued} queued requests (at the last look, {exc.looked_ago:.1f} s before), "
                    "the delayed requests, every worker's leases and the dedup state (pages fetched "
                    "before may be fetched again)")
            summary = (f"frontier {base} lost ({exc.kind}): {exc.queued} queued requests, "
                       f"{held} leases of this worker and the dedup state")
        if closing:
            then = "Found while closing: nothing more is written to it"
        elif self.policy == "stop":
            then = "Stopping the crawl (CRAWLER_ON_FRONTIER_LOSS=stop); nothing more is written to the frontier"
        else:
            then = "Going on in a new epoch with what is stored from now on (CRAWLER_ON_FRONTIER_LOSS=continue)"
        logger.error("Frontier %s lost: %s. Lost: %s; this worker held %d leases (their acknowledgements "
                     "are void). %s", base, exc.what(), lost, held, then)
        stats = self.stats
        if stats is not None:
            stats.inc_value("crawler/frontier/lost")
            if exc.kind != REWOUND:
                stats.set_value("crawler/frontier/lost_queued", exc.queued)
            stats.set_value("crawler/exit/error", summary)


_MAX_BACKOFF = 5.0  # seconds between reconnect attempts during an outage
#: ... on a Redis Cluster: a failover is over in a few seconds (the node timeout
#: and an election), and each second more is a second the crawl stands still
CLUSTER_MAX_BACKOFF = 1.0


class RedisGuard:
    def __init__(self, url: str, stats: StatsCollector | None, wake_in: Callable[[float], None],
                 clock: Clock = SYSTEM, max_backoff: float | None = None) -> None:
        self.url = url
        self.max_backoff = max_backoff or _MAX_BACKOFF
        self.stats = stats
        self.clock = clock
        self.wake_in = wake_in  # wake the engine this many seconds from now
        self.down_since: float | None = None
        self.attempts = 0
        self.retry_at = 0.0
        self.halted = False
        self.on_lost: Callable[[FrontierLost], None] | None = None

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def call(self, call: Callable[[], None]) -> None:
        """``call()``, unless Redis is away and the next attempt is not due;
        an outage is noted (once) instead of raised."""
        if not self.due():
            return
        try:
            call()
        except REDIS_ERRORS as exc:
            self.failed(exc)
        except FrontierLost as exc:
            self.back()
            if self.on_lost is None:
                raise
            try:
                self.on_lost(exc)
            except REDIS_ERRORS as again:
                self.failed(again)
        else:
            self.back()

    def due(self) -> bool:
        """False while Redis is away and the next attempt is not due yet,
        and for good once halted."""
        if self.halted:
            return False
        return self.down_since is None or self.clock.monotonic() >= self.retry_at

    def halt(self) -> None:
        """No more calls: the frontier is lost and the crawl is stopping."""
        self.halted = True

    def failed(self, exc: Exception) -> None:
        now = self.clock.monotonic()
        if self.down_since is None:
            self.down_since = now
            self.attempts = 0
            logger.error("Redis at %s is unreachable (%s): crawl paused, what this worker holds "
                         "is kept for when it is back; reconnecting with backoff",
                         mask_url(self.url), _reason(exc))
            self._inc("crawler/redis/outages")
        self.attempts += 1
        self._inc("crawler/redis/reconnect_attempts")
        self.retry_at = now + min(self.max_backoff, 0.25 * 2 ** min(self.attempts, 8))
        self.wake_in(self.retry_at - now)

    def back(self) -> None:
        if self.down_since is not None:
            logger.warning("Redis at %s is back after %.1fs: crawl resumed",
                           mask_url(self.url), self.clock.monotonic() - self.down_since)
            self.down_since = None

    def _inc(self, key: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(key)
