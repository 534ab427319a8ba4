"""The frontier service: what middlewares, extensions and spiders may ask of
the crawl's frontier, published on the crawler as ``crawler.frontier`` while
the frontier scheduler is open (None otherwise)::

    frontier = self.crawler.frontier
    frontier.offer(urls, depth=1)                 # links, deduplicated in Redis
    frontier.push_domain(url, 30)                 # no request to its domain for 30 s
    frontier.dead_letter(request, "my_reason")    # given up on: scrapy dlq lists it
    frontier.locks.acquire(domain, token, ttl_ms) # the per-domain lock
    frontier.robots                               # the shared robots.txt records
    frontier.note_fetch(request, began, ended)    # a fetch made outside the downloader,
                                                  # timed on frontier.clock.monotonic()

Writes that fail because Redis is away are noted by the outage guard (the
crawl pauses and reconnects) and never raised into the caller: a push-back
or a counter is lost, a dead letter is logged instead of stored.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis

from crawler.meta import ATTEMPTS, DEAD
from crawler.scheduler._leases import Ledger, describe
from crawler.scheduler._outage import REDIS_ERRORS
from crawler.scheduler._stats import inc
from crawler.scheduler._stores import DeadLetter, DeadLetters
from crawler.scheduler.identity import domain_of

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from crawler.clock import Clock
    from crawler.scheduler._leases import Storage
    from crawler.scheduler._outage import RedisGuard
    from crawler.scheduler._stores import DomainLocks, RobotsStore
    from crawler.scheduler.frontier import Frontier
    from crawler.scheduler.scheduler import FrontierScheduler

logger = logging.getLogger(__name__)


def frontier_service(crawler: Crawler) -> FrontierService | None:
    """``crawler.frontier``: the service while the frontier scheduler is open, else None."""
    return getattr(crawler, "frontier", None)


class FrontierService:
    def __init__(self, scheduler: FrontierScheduler, frontier: Frontier, dead_letters: DeadLetters,
                 guard: RedisGuard, stats: StatsCollector | None, spider: str) -> None:
        self._scheduler = scheduler
        self.frontier = frontier
        self.dead_letters = dead_letters
        self.guard = guard
        self.stats = stats
        self.spider = spider

    # --- what a spider or a component asks ---------------------------------

    def offer(self, urls: Iterable[str], *, depth: int = 0, priority: int = 0, canonical: bool = False) -> int:
        """Offer plain URLs (links) in bulk; how many were offered (dedup,
        caps and exclusions apply in Redis). See ``FrontierScheduler.add_urls``."""
        return self._scheduler.add_urls(urls, depth=depth, priority=priority, canonical=canonical)

    def unknown(self, urls: list[str]) -> list[str]:
        """The canonical ``urls`` not known here as seen by the frontier: a
        link found again need not be checked (robots.txt) before it is
        offered. Those left out count in ``crawler/frontier/duplicates_local``."""
        return self._scheduler.unknown_urls(urls)

    def note_fetch(self, request: Request, began: float, ended: float) -> None:
        """A fetch made for ``request`` outside the downloader (its robots.txt)
        is its domain's last request: the next waits for the delay after it.
        ``began`` and ``ended`` are read on :attr:`clock` (``monotonic()``)."""
        self._scheduler.note_fetch(request, began, ended)

    def ack(self, request: Request, end: str) -> None:
        """``request`` is done, ended as ``end`` (one of ``_leases.ENDS``)."""
        self._scheduler.ack(request, end)

    def keep_pages_with(self, storage: Storage) -> None:
        """A page's lease is acknowledged once ``storage`` holds the page."""
        self._scheduler.leases.storage = storage

    @property
    def clock(self) -> Clock:
        """The clock the scheduler measures time on (``crawler/clock.py``;
        ``CRAWLER_CLOCK``): a component timing what it reports here reads it."""
        return self._scheduler.clock

    @property
    def locks(self) -> DomainLocks:
        """The per-domain locks (``acquire``, ``release``, ``live_domains``)."""
        return self.frontier.locks

    @property
    def robots(self) -> RobotsStore:
        """The robots.txt records every process shares."""
        return self.frontier.robots

    @property
    def domain_delay(self) -> float:
        """Seconds between two requests to one domain (``CRAWLER_DOMAIN_DELAY``)."""
        return self._scheduler.config.politeness.delay

    def due_domains(self, within: float = 0.0) -> int:
        """Domains of this frontier with queued requests due within
        ``within`` seconds on the server's clock (parked ones, whose request
        is out, are not in the ready set); 0 while Redis is away."""
        try:
            now_ms = self.frontier.clock.server_ms(self.frontier.client)
            return int(self.frontier.client.zcount(self.frontier.keys.ready, "-inf", now_ms + int(within * 1000)))
        except REDIS_ERRORS as exc:
            self.guard.failed(exc)
            return 0

    def leased_waiting(self) -> int:
        """Requests this worker leased that the engine has not started."""
        return len(self._scheduler.intake)

    def set_robots_delay(self, domain: str, seconds: float) -> None:
        """A robots.txt ``Crawl-delay`` for ``domain``."""
        try:
            self.frontier.set_robots_delay(domain, seconds)
        except redis.RedisError as exc:
            if isinstance(exc, REDIS_ERRORS):
                self.guard.failed(exc)

    def exclude(self, domains: Iterable[str]) -> int:
        """Never fetch these domains again (their queued requests are dropped); how many were new."""
        return self.frontier.exclude(domains)

    def push_domain(self, url: str, seconds: float) -> None:
        """No request to the domain of ``url`` before ``seconds`` from now."""
        try:
            self.frontier.push_domain(domain_of(url), seconds)
        except redis.RedisError as exc:
            if isinstance(exc, REDIS_ERRORS):
                self.guard.failed(exc)
            return
        inc(self.stats, "crawler/frontier/domain_pushbacks")

    def count(self, name: str) -> None:
        """One more in the frontier's shared counter ``name``: what every
        process did, for ``scrapy frontier`` (lost while Redis is away)."""
        try:
            self.frontier.count(name)
        except redis.RedisError as exc:
            if isinstance(exc, REDIS_ERRORS):
                self.guard.failed(exc)

    def ledger(self) -> None:
        """Log the frontier's ledger (``_leases.py``): every URL it admitted,
        by state, and whether they add up; in the stats as ``crawler/ledger/*``."""
        try:
            ledger = Ledger.from_status(self.frontier.status()).as_dict()
        except redis.RedisError as exc:
            logger.warning("Frontier ledger not read, Redis unreachable: %s", exc)
            return
        if self.stats is not None:
            for name, value in ledger.items():
                self.stats.set_value(f"crawler/ledger/{name}", int(value))
        level = logging.INFO if ledger["adds_up"] else logging.ERROR
        logger.log(level, "Frontier ledger: %s", describe(ledger))
        lost = self.stats.get_value("crawler/frontier/ended/lost", 0) if self.stats is not None else 0
        if lost and self.stats is not None and not self.stats.get_value("crawler/exit/error"):
            self.stats.set_value("crawler/exit/error", f"{lost} requests of this crawl were lost "
                                 "(undecodable or unstorable frontier entries; see the errors above)")

    def dead_letter(self, request: Request | str, reason: str, *, status: int | None = None,
                    exception: BaseException | str | None = None) -> None:
        """Record a request given up on in the dead-letter queue; its lease
        ends as a dead letter (``crawler_dead_lettered`` in its meta)."""
        url = request if isinstance(request, str) else request.url
        attempts = 1 if isinstance(request, str) else int(request.meta.get(ATTEMPTS, 1))
        if not isinstance(request, str):
            request.meta[DEAD] = True
        if isinstance(exception, BaseException):
            exception = type(exception).__name__
        letter = DeadLetter(url, reason, status, exception, attempts,
                            spider=self.spider, shard=self.frontier.keys.shard)
        try:
            self.dead_letters.add([letter])
        except redis.RedisError as exc:
            if isinstance(exc, REDIS_ERRORS):
                self.guard.failed(exc)
            logger.warning("Dead letter not recorded, Redis unreachable: %s", letter.to_json())
            inc(self.stats, "crawler/dlq/unrecorded")
            return
        inc(self.stats, f"crawler/dlq/{reason}")
