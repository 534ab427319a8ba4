"""The garbage collector's pauses, measured, and made shorter.

Python's cyclic collector stops the event loop while it walks every object
it tracks: a full collection in a busy crawl is the longest stall the loop
has (docs/benchmarks.md). With ``CRAWLER_GC_FREEZE`` (on), everything alive
when the spider opens (modules, classes, the crawler's own machinery) is
collected once and then frozen (``gc.freeze``): later collections walk only
what the crawl made. And what survives a full collection is frozen in turn,
as it ends: the state a crawl keeps per host (robots.txt rules, connections,
download slots, some 20 objects a host) is walked by one full collection, not
by every one after it, so a full collection's pause follows what the crawl
made since the last, not how many hosts it has met (docs/benchmarks.md has
the soak's pauses before and after).

The price: a frozen object is freed by reference counting only. One that
later ends in a reference cycle stays. The crawl's own long-lived objects
make none (``bench.memtrace.GcProbe``: no cycle in the soak; closed
connections and stopped pages leave none, tests/test_fetch_handler.py), and
``crawler/gc/collected`` counts the cyclic garbage the collections find
among what is not frozen: a count that grows says a spider makes cycles, and
``CRAWLER_GC_FREEZE = False`` is then the safer setting.

Every collection is timed: ``crawler/gc/collections/<generation>``,
``crawler/gc/pause_ms`` (all of them) and ``crawler/gc/pause_max_ms``, logged
when the crawl ends; ``crawler/gc/frozen`` is how many objects were frozen
(at the end).

``CRAWLER_GC_YOUNG`` (20,000) spaces out the collections of the youngest
generation: at Python's 700 a crawl collected about once every five pages,
each collection promoting what a request in flight holds, so that the oldest
generation filled and was walked whole every few hundred pages. The objects
a page makes go by reference counting (the download handler leaves no cycle
behind), so fewer collections keep no more memory. The interpreter's
thresholds are put back when the spider closes. ``CRAWLER_GC_TUNING = False``
turns both off at once (the pauses are still timed).
"""

from __future__ import annotations

import gc
import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals

from crawler.identity import registered_domain
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class GcPauses:
    def __init__(self, crawler: Crawler) -> None:
        tuned = setting(crawler.settings, "CRAWLER_GC_TUNING")
        self.freeze = tuned and setting(crawler.settings, "CRAWLER_GC_FREEZE")
        self.young = setting(crawler.settings, "CRAWLER_GC_YOUNG") if tuned else 0
        self.thresholds = gc.get_threshold()
        self.stats = crawler.stats
        self.started = 0.0
        self.total = 0.0
        self.worst = 0.0
        self.counts = [0, 0, 0]
        self.collected = 0
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> GcPauses:
        return cls(crawler)

    def spider_opened(self) -> None:
        if self.freeze:
            # what is built once and kept for good, built now to be frozen with
            # the rest: the public-suffix trie (17,000 objects) is built on first use
            registered_domain("www.example.co.uk")
            gc.collect()
            gc.freeze()
        if self.young:
            gc.set_threshold(self.young, *self.thresholds[1:])
        self.stats.set_value("crawler/gc/frozen", gc.get_freeze_count())
        self.stats.set_value("crawler/gc/young", gc.get_threshold()[0])
        gc.callbacks.append(self._timed)

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        # the real clock, not the crawl's (crawler/clock.py): a pause is the
        # interpreter's own work between the collector's start and stop
        # callbacks, which no code can interrupt to move a clock (on a test's
        # clock every pause would read 0), as CPU time is measured on the CPU clocks
        if phase == "start":
            self.started = time.perf_counter()
            return
        pause = time.perf_counter() - self.started
        self.total += pause
        self.counts[info["generation"]] += 1
        self.collected += info["collected"]
        if pause > self.worst:
            self.worst = pause
        if self.freeze and info["generation"] == 2:
            # the collection is over (this is its "stop" callback): what it left
            # alive joins the permanent generation, which no collection walks
            gc.freeze()

    def spider_closed(self) -> None:
        if self._timed in gc.callbacks:
            gc.callbacks.remove(self._timed)
        gc.set_threshold(*self.thresholds)
        for generation, count in enumerate(self.counts):
            self.stats.set_value(f"crawler/gc/collections/{generation}", count)
        self.stats.set_value("crawler/gc/collected", self.collected)
        self.stats.set_value("crawler/gc/frozen", gc.get_freeze_count())
        self.stats.set_value("crawler/gc/pause_ms", round(self.total * 1000, 1))
        self.stats.set_value("crawler/gc/pause_max_ms", round(self.worst * 1000, 1))
        logger.info("Garbage collector: %d collections (%d full), %.0f ms in all, the longest %.1f ms",
                    sum(self.counts), self.counts[2], self.total * 1000, self.worst * 1000)
