"""How late the event loop runs its timers: a probe every
``CRAWLER_LOOP_PROBE_INTERVAL`` seconds (0.1; 0 turns it off).

A timer that fires late measures how long the loop was busy with something
else: a page parsed on the reactor thread, a robots.txt matched, a blocking
call. The worst lateness of the crawl is the stat ``crawler/loop/lag_max_ms``
(also a Prometheus gauge, ``crawler_loop_lag_max_seconds``), the latest one
``crawler/loop/lag_ms``; stalls over 100 ms are counted
(``crawler/loop/stalls``) and the worst is logged when the crawl ends.
:meth:`LoopLagProbe.worst_since` gives the worst lateness since the last
call (the concurrency controller backs off on it: ``concurrency.py``);
:meth:`LoopLagProbe.last_minute` the worst of the probes of the last minute
(the Prometheus gauge ``crawler_loop_lag_minute_max_seconds``: a stall after
the warm-up shows there, where the crawl's worst may be its start).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from crawler.clock import SYSTEM, clock_of
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

STALL_MS = 100.0


class LoopLagProbe:
    def __init__(self, crawler: Crawler) -> None:
        self.interval = setting(crawler.settings, "CRAWLER_LOOP_PROBE_INTERVAL")
        if self.interval <= 0:
            raise NotConfigured
        self.clock = clock_of(crawler)  # lateness is read on it; its timers run the probe
        self.stats = crawler.stats
        self.worst = 0.0
        self.recent = 0.0  # worst since the last worst_since()
        self.minute: deque[float] = deque(maxlen=max(1, round(60 / self.interval)))  # the last minute's probes
        self.expected = 0.0
        self.call: Any = None
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LoopLagProbe:
        return cls(crawler)

    def spider_opened(self) -> None:
        self._schedule()

    def _schedule(self) -> None:
        self.expected = self.clock.monotonic() + self.interval
        if self.clock is SYSTEM:
            try:
                # the asyncio loop's own timer, on the system clock's time.monotonic
                # too: through Twisted's callLater, each tick would run the reactor's
                # timer pass, and the engine's scheduling with it
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not the asyncio reactor: the reactor's timers
                pass
            else:
                self.call = loop.call_later(self.interval, self._fire)
                return
        self.call = self.clock.timers.callLater(self.interval, self._fire)

    def _fire(self) -> None:
        lag = max(0.0, (self.clock.monotonic() - self.expected) * 1000)
        self.stats.set_value("crawler/loop/lag_ms", round(lag, 1))
        self.recent = max(self.recent, lag)
        self.minute.append(lag)
        if lag > self.worst:
            self.worst = lag
            self.stats.set_value("crawler/loop/lag_max_ms", round(lag, 1))
        if lag > STALL_MS:
            self.stats.inc_value("crawler/loop/stalls")
            logger.debug("Event loop stalled %.0f ms", lag)
        self._schedule()

    def worst_since(self) -> float:
        """The worst lateness, in ms, since the previous call (0.0 at first)."""
        recent, self.recent = self.recent, 0.0
        return recent

    def last_minute(self) -> float:
        """The worst lateness, in ms, of the probes of the last minute (as many
        probes as a minute holds at the interval: longer when the loop stalls)."""
        return max(self.minute, default=0.0)

    def spider_closed(self) -> None:
        active = getattr(self.call, "active", None)  # a Twisted DelayedCall says; a TimerHandle does not mind
        if self.call is not None and (active is None or active()):
            self.call.cancel()
        self.call = None
        logger.info("Worst event-loop stall: %.1f ms (%d over %d ms)", self.worst,
                    self.stats.get_value("crawler/loop/stalls", 0), STALL_MS)
