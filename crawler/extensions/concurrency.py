"""Requests in flight that follow the due domains: nobody has to compute
``CONCURRENT_REQUESTS``.

Every ``CRAWLER_CONCURRENCY_INTERVAL`` seconds (1; 0 turns this off) the
downloader's cap (``downloader.total_concurrency``: what Scrapy's
``CONCURRENT_REQUESTS`` sets when the crawl starts, read by its engine
before each request it starts) is set to the smallest of:

- **demand**: the requests in flight, plus the leased requests waiting in this
  worker, plus the domains due before the next adjustment (one request each:
  a domain with a delay is parked while its request is out), plus
  ``CRAWLER_CONCURRENCY_MIN`` of headroom. Many due domains raise it, few
  lower it; it is never below ``CRAWLER_CONCURRENCY_MIN``.
- **memory budget**: ``CRAWLER_MEMORY_BUDGET`` bytes of bodies in flight,
  each request counted at its most, ``CRAWLER_MAX_PAGE_BYTES`` (a robots.txt
  fetched for a request rides along with it); without a page cap (0, the
  addon's default outside ``billion``) no request has a most, and this
  bound is off. The process's memory per
  request in flight, measured: docs/billion.md, "Concurrency that follows the due domains".
- **event loop and CPU**: when the loop was late by more than
  ``CRAWLER_CONCURRENCY_MAX_LAG_MS`` (the loop-lag probe's worst, ``looplag.py``,
  or this timer's own lateness) at two adjustments in a row while the loop's
  thread used at least ``CRAWLER_CONCURRENCY_LAG_CPU`` of a core (the lag is
  the crawl's own work: one stall, or a CPU other processes hold, is no
  reason to fetch less), the cap falls to three quarters of what is in
  flight; when the process used more than ``CRAWLER_CONCURRENCY_MAX_CPU`` (off by default) of
  the CPUs it may run on, it is held at what is in flight; otherwise it
  grows back by half an adjustment until the other bounds decide again.
- ``CONCURRENT_REQUESTS`` when it is above 0, Scrapy's default of 16
  included (Scrapy's meaning: a cap; ``0``, Scrapy's "no limit", is what
  leaves the cap to the bounds above: ``billion`` sets it), and
  ``CRAWLER_CONCURRENCY_MAX``. As in Scrapy, the cap holds the requests the
  engine starts: a robots.txt or sitemap fetched for one of them goes to the
  downloader beside it (Scrapy's ``engine.download``), so what is in flight
  may exceed the cap by those.

Stats: ``crawler/concurrency/cap`` and ``in_flight`` (at the last
adjustment), ``cap_max``, ``in_flight_max``, ``due`` (domains due at the last
adjustment), ``limit`` (what set the cap: ``due``, ``budget``, ``lag``,
``cpu`` or ``user``), ``backoffs``, ``adjustments``. Each adjustment is
logged at DEBUG.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy import signals
from scrapy.exceptions import NotConfigured

from crawler._compat import downloader_load, set_downloader_cap, wake_engine
from crawler.clock import clock_of
from crawler.extensions.looplag import LoopLagProbe
from crawler.worker import session_of
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

BACKOFF = 0.75  # the cap after a lag over the bound, as a share of what is in flight
REGROWTH = 1.5  # the lag bound's growth an adjustment while the loop keeps time


class Inputs(NamedTuple):
    """What one adjustment reads."""

    in_flight: int  # requests in the downloader (Scrapy's downloader.active)
    waiting: int  # leased requests buffered in this worker, not yet started
    due: int  # domains due before the next adjustment
    lag_ms: float  # worst loop lateness since the last adjustment
    loop_cpu: float  # cores the loop's thread used since the last adjustment
    cpu: float  # share of the CPUs the process may use, since the last adjustment


class Policy:
    """The cap from :class:`Inputs`; no I/O (the extension reads the inputs)."""

    def __init__(self, floor: int, budget_cap: int, max_lag_ms: float, lag_cpu: float, max_cpu: float,
                 user_cap: int | None) -> None:
        self.floor = floor
        self.budget_cap = budget_cap  # 0: no memory bound
        self.max_lag_ms = max_lag_ms
        self.lag_cpu = lag_cpu
        self.max_cpu = max_cpu
        self.user_cap = user_cap
        self.lag_cap: float | None = None  # None: the loop keeps time, no bound from it
        self.late = False  # the loop was late (and busy) at the last cap()
        self.backed_off = False  # the last cap() backed off

    def cap(self, i: Inputs) -> tuple[int, str]:
        """The cap and what set it (``due``, ``budget``, ``lag``, ``cpu``, ``user``)."""
        bounds: list[tuple[float, str]] = [(i.in_flight + i.waiting + i.due + self.floor, "due")]
        if self.budget_cap:
            bounds.append((self.budget_cap, "budget"))
        late = bool(self.max_lag_ms) and i.lag_ms > self.max_lag_ms and i.loop_cpu >= self.lag_cpu
        self.backed_off = late and self.late
        self.late = late
        # never below the floor: it grows back by multiplying
        if self.backed_off:
            self.lag_cap = max(self.floor, min(self.lag_cap or i.in_flight, i.in_flight) * BACKOFF)
            bounds.append((self.lag_cap, "lag"))
        elif self.max_cpu and i.cpu > self.max_cpu:
            self.lag_cap = max(self.floor, min(self.lag_cap or i.in_flight, i.in_flight))
            bounds.append((self.lag_cap, "cpu"))
        elif self.lag_cap is not None:
            self.lag_cap *= REGROWTH
            if self.lag_cap >= min(b for b, _ in bounds):
                self.lag_cap = None  # the other bounds decide again
            else:
                bounds.append((self.lag_cap, "lag"))
        if self.user_cap:
            bounds.append((self.user_cap, "user"))
        value, limit = min(bounds, key=lambda b: b[0])
        if value < self.floor:
            value = min(self.floor, self.user_cap or self.floor)
        return max(1, int(value)), limit


def user_cap(crawler: Crawler) -> int | None:
    """``CRAWLER_CONCURRENCY_MAX``, and ``CONCURRENT_REQUESTS`` when it is
    above 0 (Scrapy's default, 16, included: Scrapy's meaning is kept, and
    only ``0``, Scrapy's "no limit", leaves the cap to the due domains and
    the budget); None: no cap."""
    settings = crawler.settings
    cap = setting(settings, "CRAWLER_CONCURRENCY_MAX") or None
    fixed = settings.getint("CONCURRENT_REQUESTS")
    if fixed > 0:
        cap = min(cap or fixed, fixed)
    return cap


class ConcurrencyController:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.interval = setting(settings, "CRAWLER_CONCURRENCY_INTERVAL")
        if self.interval <= 0:
            raise NotConfigured
        budget = setting(settings, "CRAWLER_MEMORY_BUDGET")
        page = setting(settings, "CRAWLER_MAX_PAGE_BYTES")  # 0: no page cap, so no bound per request either
        self.policy = Policy(setting(settings, "CRAWLER_CONCURRENCY_MIN"),
                             max(1, budget // page) if budget and page else 0,
                             setting(settings, "CRAWLER_CONCURRENCY_MAX_LAG_MS"),
                             setting(settings, "CRAWLER_CONCURRENCY_LAG_CPU"),
                             setting(settings, "CRAWLER_CONCURRENCY_MAX_CPU"), user_cap(crawler))
        self.crawler = crawler
        # the interval and its lateness on the crawl's clock (crawler/clock.py), and its timer; the
        # CPU clocks stay real: CPU time is the process's own work, not time passing
        self.clock = clock_of(crawler)
        self.stats = crawler.stats
        self.probe: LoopLagProbe | None = None
        self.call: Any = None
        self.expected = 0.0  # when the next adjustment is due (monotonic)
        self.cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.clocks = self._read_clocks()
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ConcurrencyController:
        return cls(crawler)

    def spider_opened(self) -> None:
        extensions = getattr(getattr(self.crawler, "extensions", None), "middlewares", ())
        self.probe = next((e for e in extensions if isinstance(e, LoopLagProbe)), None)
        self.clocks = self._read_clocks()
        self.adjust()

    def spider_closed(self) -> None:
        if self.call is not None and self.call.active():
            self.call.cancel()
        self.call = None
        get = self.stats.get_value
        logger.info("Concurrency: at most %d requests in flight, cap at most %d (%s last)",
                    get("crawler/concurrency/in_flight_max", 0), get("crawler/concurrency/cap_max", 0),
                    get("crawler/concurrency/limit", "-"))

    def _read_clocks(self) -> tuple[float, float, float]:
        """The crawl's clock, and the CPU time of the loop's thread and of the process."""
        return self.clock.monotonic(), time.thread_time(), time.process_time()

    def _schedule(self) -> None:
        self.expected = self.clock.monotonic() + self.interval
        self.call = self.clock.timers.callLater(self.interval, self.adjust)

    def adjust(self) -> None:
        """Read the inputs, set the downloader's cap, schedule the next adjustment."""
        try:
            engine = self.crawler.engine
            load = downloader_load(engine)
            if load is not None:
                inputs = self.inputs(load[0])
                cap, limit = self.policy.cap(inputs)
                raised = cap > load[1] > 0
                set_downloader_cap(engine, cap)
                if raised:  # the engine starts what the new cap allows now, not at its next turn
                    wake_engine(engine)
                self._record(inputs, cap, limit)
        finally:
            self._schedule()

    def inputs(self, in_flight: int) -> Inputs:
        now, thread_now, process_now = self._read_clocks()
        then, thread_then, process_then = self.clocks
        self.clocks = (now, thread_now, process_now)
        wall = max(now - then, 1e-6)
        service = session_of(self.crawler)
        due = waiting = 0
        if service is not None:
            due, waiting = service.due_domains(self.interval), service.leased_waiting()
        # this timer's own lateness too: a stall just before it is seen with the CPU it took
        lag = max(self.probe.worst_since() if self.probe is not None else 0.0,
                  (now - self.expected) * 1000 if self.expected else 0.0)
        return Inputs(in_flight, waiting, due, lag, (thread_now - thread_then) / wall,
                      (process_now - process_then) / wall / self.cpus)

    def _record(self, i: Inputs, cap: int, limit: str) -> None:
        stats = self.stats
        stats.set_value("crawler/concurrency/cap", cap)
        stats.set_value("crawler/concurrency/in_flight", i.in_flight)
        stats.set_value("crawler/concurrency/due", i.due)
        stats.set_value("crawler/concurrency/limit", limit)
        stats.inc_value("crawler/concurrency/adjustments")
        if self.policy.backed_off:
            stats.inc_value("crawler/concurrency/backoffs")
        stats.max_value("crawler/concurrency/cap_max", cap)
        stats.max_value("crawler/concurrency/in_flight_max", i.in_flight)
        logger.debug("Concurrency cap %d (%s): %d in flight, %d waiting, %d due, lag %.0f ms, loop CPU %.0f%%, "
                     "CPU %.0f%%", cap, limit, i.in_flight, i.waiting, i.due, i.lag_ms, i.loop_cpu * 100, i.cpu * 100)
