"""Living through a Redis outage without losing what the worker holds, or spinning.

:class:`RedisGuard` runs the scheduler's Redis calls: when one fails with a
connection error, the outage is logged once, the calls stop, and the next
attempt comes after a backoff (0.5 s doubling up to 5 s) that wakes the
engine; the first call that succeeds logs the way back. While Redis is
away the crawl is paused, not closed (``down`` keeps it open), and what
was buffered stays buffered. The middlewares that talk to Redis catch
``REDIS_ERRORS`` too. Whether Redis came back with the frontier it had is
not known here: a call that finds it gone or older raises
:class:`~crawler.scheduler.epoch.FrontierLost`, handed to ``on_lost``
(``epoch.py``); once the crawl stops for that, :meth:`RedisGuard.halt`
ends every call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from crawler.connection import _reason, mask_url
from crawler.scheduler.epoch import FrontierLost

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, OSError)
_MAX_BACKOFF = 5.0  # seconds between reconnect attempts during an outage


class RedisGuard:
    def __init__(self, url: str, stats: StatsCollector | None, wake_in: Callable[[float], None]) -> None:
        self.url = url
        self.stats = stats
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
        return self.down_since is None or time.monotonic() >= self.retry_at

    def halt(self) -> None:
        """No more calls: the frontier is lost and the crawl is stopping."""
        self.halted = True

    def failed(self, exc: Exception) -> None:
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
            self.attempts = 0
            logger.error("Redis at %s is unreachable (%s): crawl paused, what this worker holds "
                         "is kept for when it is back; reconnecting with backoff",
                         mask_url(self.url), _reason(exc))
            self._inc("crawler/redis/outages")
        self.attempts += 1
        self._inc("crawler/redis/reconnect_attempts")
        self.retry_at = now + min(_MAX_BACKOFF, 0.25 * 2 ** min(self.attempts, 8))
        self.wake_in(self.retry_at - now)

    def back(self) -> None:
        if self.down_since is not None:
            logger.warning("Redis at %s is back after %.1fs: crawl resumed",
                           mask_url(self.url), time.monotonic() - self.down_since)
            self.down_since = None

    def _inc(self, key: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(key)
