"""Dequeue: leased requests waiting for the engine, and when to ask Redis
for more.

One ``dequeue.lua`` call leases up to ``CRAWLER_PREFETCH`` requests of due
domains. The next call comes at once when that call came back full; no
sooner than ``CRAWLER_POLL_INTERVAL`` when it took what was due; exactly
when the next domain (or delayed request) is due when nothing was, however
soon (at most 1 s ahead); and with a doubling backoff (up to 1 s) while
nothing is queued here. Each call has a name: a call
retried after a lost reply gets the first call's leases back instead of
taking more, and the next call drops that kept reply. Every wait is read
on the scheduler's clock (``crawler/clock.py``), which a test moves.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from crawler.clock import SYSTEM, Clock
from crawler.worker._stats import inc

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.store import Frontier, Leased
    from crawler.worker._leases import Ack


logger = logging.getLogger(__name__)

MAX_POLL_WAIT = 1.0  # seconds between dequeue attempts while nothing is due
#: the least wait for a domain due now that the last call could not take
#: (a script call leaves each domain it looked at out of ready or later)
MIN_POLL_WAIT = 0.002


class Intake:
    def __init__(self, store: Frontier, prefetch: int, poll_interval: float,
                 wake_in: Callable[[float], None], stats: StatsCollector | None, clock: Clock = SYSTEM,
                 ask: Callable[[list[tuple[str, str]]], None] | None = None,
                 fill: Callable[[], None] | None = None) -> None:
        self.store = store
        self.ask = ask  # the names a call claimed for this worker to look up (per-address politeness)
        self.fill = fill  # a call made fill jobs of the compact tier: run them soon, not at the next tick
        self.clock = clock
        self.prefetch = prefetch
        self.poll_interval = poll_interval
        self.wake_in = wake_in  # wake the engine this many seconds from now
        self.stats = stats
        self.buffer: deque[Leased] = deque()
        self.next_poll = 0.0
        self.last_take = 0.0
        self.empty_polls = 0
        self.call = uuid.uuid4().hex
        self.took = ""
        self._busy_checked = -1.0
        self._busy = True
        self._idle_since: float | None = None

    def __len__(self) -> int:
        return len(self.buffer)

    def pop(self) -> Leased | None:
        return self.buffer.popleft() if self.buffer else None

    def due(self) -> bool:
        """Whether a dequeue call is due; if not, the engine is woken when it is."""
        wait = self.next_poll - self.clock.monotonic()
        if wait > 0:
            self.wake_in(wait)
            return False
        return True

    def dequeue(self, acks: Sequence[str | Ack], room: int | None = None) -> None:
        """One ``dequeue.lua`` call: lease what is due, acknowledging ``acks`` in the same call; no
        more than ``room`` (the requests the engine may start now), so no
        domain waits leased here while its turn passes."""
        now = self.clock.monotonic()
        want = min(self.prefetch, room) if room else self.prefetch
        result = self.store.take(want, acks, self.call, self.took)
        # the next call's name: a retry of this one reuses it; its reply is here
        self.took, self.call = self.call, uuid.uuid4().hex
        self.last_take = now
        inc(self.stats, "crawler/frontier/acked", len(acks))
        inc(self.stats, "crawler/frontier/polls")
        self.buffer.extend(result.items)
        if result.lookups and self.ask is not None:
            self.ask(result.lookups)
        if result.fills and self.fill is not None:
            self.fill()
        if len(result.items) >= want:
            self.empty_polls = 0
            self.next_poll = 0.0  # more may be due right now
            return
        if result.items:
            # everything due was taken: the next poll, no sooner than the
            # poll interval, gathers what becomes due meanwhile
            self.empty_polls = 0
            self.next_poll = now + self.poll_interval
            return
        if result.next_due_ms is not None:
            # a queued domain (or a delayed request) is waiting for its turn:
            # come back exactly then, sooner than the poll interval if it is
            # sooner (that call takes it: the interval paces calls that find
            # something, not this one)
            self.empty_polls = 0
            wait = max((result.next_due_ms - result.now_ms) / 1000, MIN_POLL_WAIT)
        else:
            # nothing queued here; other workers may add some: back off
            self.empty_polls += 1
            wait = max(0.02 * 2 ** min(self.empty_polls, 10), self.poll_interval)
        wait = min(wait, MAX_POLL_WAIT)
        self.next_poll = now + wait
        self.wake_in(wait)

    def added(self) -> None:
        """New requests were stored: poll again soon, and wake the engine
        then if it has nothing to do."""
        self.empty_polls = 0
        self.next_poll = min(self.next_poll, self.last_take + self.poll_interval)
        if not self.buffer:
            self.wake_in(max(0.0, self.next_poll - self.clock.monotonic()))

    def due_now(self) -> None:
        self.next_poll = 0.0

    def frontier_busy(self, idle_before_close: float) -> bool:
        """Whether the frontier (any worker's share) holds requests (or a
        revisit due within ``idle_before_close`` seconds), or held some less
        than ``idle_before_close`` seconds ago. A busy answer is
        kept for 0.25 s (Redis is asked at most that often while the crawl
        runs); an idle one never is: the engine closes the crawl on it, and
        this worker may have stored requests since (its write buffer empties
        into Redis, where only a new look sees them)."""
        now = self.clock.monotonic()
        if self._busy and now - self._busy_checked < 0.25:
            return True
        self._busy_checked = now
        if self.store.pending(revisits_within=idle_before_close) > 0:
            self._idle_since = None
            self._busy = True
        else:
            if self._idle_since is None:
                self._idle_since = now
            self._busy = now - self._idle_since < idle_before_close
        return self._busy


class EngineWaker:
    """Wakes Scrapy's engine loop when something may be due, instead of it
    polling the scheduler on its own 5 s heartbeat; one wake-up pending."""

    def __init__(self, wake: Callable[[], object], clock: Clock = SYSTEM) -> None:
        self.wake = wake  # wakes the engine now; False when it cannot
        self.clock = clock
        self.call: Any = None
        self._said = False

    def wake_in(self, seconds: float) -> None:
        timers = self.clock.timers
        if self.call is not None and self.call.active():
            if abs(self.call.getTime() - timers.seconds() - seconds) < 0.005:
                return
            self.call.cancel()
        self.call = timers.callLater(seconds + 0.001, self._wake)

    def _wake(self) -> None:
        if self.wake() is False and not self._said:
            self._said = True
            logger.warning("Scrapy's engine state moved (crawler/_compat.py): the engine is not woken "
                           "when a domain is due, it polls every 5 s")

    def cancel(self) -> None:
        if self.call is not None and self.call.active():
            self.call.cancel()
