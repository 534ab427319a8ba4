"""A progress line every ``CRAWLER_PROGRESS_INTERVAL`` seconds, and one
when the crawl ends; ``worst_stall`` is the event loop's worst lateness so
far (``crawler/loop/lag_max_ms``, from the loop-lag probe):

    pages=1532 (153.2/s) queued=8120 domains=50 duplicates=4410 errors=12 worst_stall=12ms

While Redis is away the line ends with the outage: ``redis=down(7 attempts)``
(``crawler/redis/reconnect_attempts`` so far). The rate is measured, and the
line scheduled, on the crawl's clock (``crawler/clock.py``). ``domains``
is exact up to 65,536 hosts, then an estimate (about 2% off) that keeps
no names (:class:`DistinctCount`): a crawl of days meets millions.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task

from crawler.clock import clock_of
from crawler.worker import session_of
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.http.request import Request

logger = logging.getLogger(__name__)


_FRONTIER_DUPLICATES = ("crawler/frontier/duplicates", "crawler/frontier/duplicates_local")


def frontier_duplicates(stats: dict[str, int]) -> int:
    """URLs the frontier refused as seen: in Redis, or known in the process."""
    return sum(stats.get(key, 0) for key in _FRONTIER_DUPLICATES)


def duplicates(stats: dict[str, int]) -> int:
    """Requests the dupefilter refused: offered to the scheduler minus enqueued."""
    if any(key in stats for key in _FRONTIER_DUPLICATES):
        return frontier_duplicates(stats)
    if "dupefilter/filtered" in stats:
        return stats["dupefilter/filtered"]
    offered = stats.get("crawler/requests_offered", 0)
    enqueued = stats.get("scheduler/enqueued/redis", stats.get("scheduler/enqueued", 0))
    return max(0, offered - enqueued)


class DistinctCount:
    """How many distinct strings were added: exact up to :attr:`EXACT`, then
    a HyperLogLog estimate (2**12 one-byte registers, about 1.6% off), so
    that the count costs 4 kB however many are added."""

    EXACT = 65_536
    _BITS = 12

    def __init__(self) -> None:
        self.exact: set[str] | None = set()
        self.registers = bytearray(1 << self._BITS)

    def add(self, value: str) -> None:
        if self.exact is None:
            self._register(value)
            return
        self.exact.add(value)
        if len(self.exact) > self.EXACT:
            for known in self.exact:
                self._register(known)
            self.exact = None

    def _register(self, value: str) -> None:
        h = int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "big")
        rest_bits = 64 - self._BITS
        slot, rest = h >> rest_bits, h & ((1 << rest_bits) - 1)
        rank = rest_bits - rest.bit_length() + 1  # the position of the first 1 bit
        if rank > self.registers[slot]:
            self.registers[slot] = rank

    def __len__(self) -> int:
        if self.exact is not None:
            return len(self.exact)
        m = len(self.registers)
        estimate = 0.7213 / (1 + 1.079 / m) * m * m / sum(2.0 ** -r for r in self.registers)
        zeros = self.registers.count(0)
        if estimate <= 2.5 * m and zeros:
            estimate = m * math.log(m / zeros)
        return round(estimate)


class Progress:
    def __init__(self, crawler: Crawler) -> None:
        self.interval = setting(crawler.settings, "CRAWLER_PROGRESS_INTERVAL")
        if self.interval <= 0:
            raise NotConfigured
        self.crawler = crawler
        self.clock = clock_of(crawler)  # the rate is read on it; its timers run the log
        self.domains = DistinctCount()
        self.loop: task.LoopingCall | None = None
        self.last_pages = 0
        self.last_time = 0.0
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.response_received, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Progress:
        return cls(crawler)

    def spider_opened(self) -> None:
        self.last_time = self.clock.monotonic()
        self.loop = task.LoopingCall(self.log)
        self.loop.clock = self.clock.timers
        self.loop.start(self.interval, now=False)

    def spider_closed(self) -> None:
        if self.loop is not None and self.loop.running:
            self.loop.stop()
        self.log()

    def response_received(self, response: Response, request: Request) -> None:
        self.domains.add(request.url.split("/", 3)[2] if "//" in request.url else request.url)

    def queued(self) -> int | None:
        engine = self.crawler.engine
        scheduler = getattr(engine, "scheduler", None) if engine else None
        try:
            return len(scheduler)  # type: ignore[arg-type]
        except Exception:
            return None

    def log(self) -> None:
        stats = self.crawler.stats
        assert stats is not None
        pages = stats.get_value("response_received_count", 0)
        now = self.clock.monotonic()
        rate = (pages - self.last_pages) / max(now - self.last_time, 1e-9)
        self.last_pages, self.last_time = pages, now
        queued = self.queued()
        errors = (
            stats.get_value("log_count/ERROR", 0)
            + stats.get_value("downloader/exception_count", 0)
            - stats.get_value("downloader/exception_type_count/scrapy.exceptions.IgnoreRequest", 0)
        )
        session = session_of(self.crawler)
        down = session is not None and session.redis_down
        logger.info(
            "pages=%d (%.1f/s) queued=%s domains=%d duplicates=%d errors=%d worst_stall=%.0fms in_flight=%s/%s%s",
            pages, rate, "?" if queued is None else queued, len(self.domains),
            duplicates(stats.get_stats()), errors, stats.get_value("crawler/loop/lag_max_ms", 0),
            stats.get_value("crawler/concurrency/in_flight", "-"), stats.get_value("crawler/concurrency/cap", "-"),
            f" redis=down({stats.get_value('crawler/redis/reconnect_attempts', 0)} attempts)" if down else "",
        )
        stats.set_value("crawler/domains_seen", len(self.domains))
