"""What components (middlewares, extensions, spiders, commands) ask of the
frontier through the worker session, besides leases and offers: the
per-domain locks, the robots.txt records, push-backs and Crawl-delays,
exclusions, shared counters, the ledger and the dead-letter queue. Each
write that must not stop the crawl is made through :meth:`Services._write`:
an outage is the guard's; any other Redis error is logged at ERROR with what
it cost and counted in ``crawler/redis/errors``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import redis

from crawler.connection import REDIS_ERRORS
from crawler.identity import domain_of
from crawler.meta import ATTEMPTS, DEAD, LEASE
from crawler.store import DeadLetter, DeadLetters, DomainLocks, Frontier, Ledger, RobotsStore, describe
from crawler.worker._stats import inc

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.worker._leases import Leases
    from crawler.worker._outage import RedisGuard
    from crawler.worker.config import FrontierSettings

logger = logging.getLogger(__name__)


class Services:
    """The component-facing part of :class:`~crawler.worker.WorkerSession`."""

    store: Frontier | None
    config: FrontierSettings
    stats: StatsCollector | None
    spider_name: str
    _guard: RedisGuard
    _leases: Leases
    _dead_letters: DeadLetters

    @property
    def locks(self) -> DomainLocks:
        """The per-domain locks (``acquire``, ``release``, ``live_domains``)."""
        assert self.store is not None
        return self.store.locks

    @property
    def robots(self) -> RobotsStore:
        """The robots.txt records every process shares."""
        assert self.store is not None
        return self.store.robots

    @property
    def domain_delay(self) -> float:
        """Seconds between two requests to one domain (``CRAWLER_DOMAIN_DELAY``)."""
        return self.config.politeness.delay

    def due_domains(self, within: float = 0.0) -> int:
        """Domains of this frontier with queued requests due within
        ``within`` seconds on the server's clock (parked ones, whose request
        is out, are not in the ready set); 0 while Redis is away."""
        assert self.store is not None
        try:
            return self.store.due_domains(within)
        except REDIS_ERRORS as exc:
            self._guard.failed(exc)
            return 0

    def _write(self, call: Callable[[], object], cost: str) -> bool:
        """``call()``; False if it failed: an outage is the guard's, any
        other Redis error is logged with ``cost`` (what is not done) and counted."""
        try:
            call()
        except REDIS_ERRORS as exc:
            self._guard.failed(exc)
            return False
        except redis.RedisError as exc:
            logger.error("Redis error on frontier %s, %s: %s: %s",
                         self.store.keys.base if self.store is not None else "?", cost,
                         type(exc).__name__, exc)
            inc(self.stats, "crawler/redis/errors")
            return False
        return True

    def set_robots_delay(self, domain: str, seconds: float) -> None:
        """A robots.txt ``Crawl-delay`` for ``domain``."""
        assert self.store is not None
        store = self.store
        self._write(lambda: store.set_robots_delay(domain, seconds),
                    f"Crawl-delay {seconds:g} s of {domain} not stored")

    def exclude(self, domains: Iterable[str]) -> int:
        """Never fetch these domains again (their queued requests are dropped); how many were new."""
        assert self.store is not None
        return self.store.exclude(domains)

    def push_domain(self, url: str, seconds: float) -> None:
        """No request to the domain of ``url`` before ``seconds`` from now."""
        assert self.store is not None
        store, domain = self.store, domain_of(url)
        if self._write(lambda: store.push_domain(domain, seconds),
                       f"push-back of {domain} by {seconds:g} s not applied"):
            inc(self.stats, "crawler/frontier/domain_pushbacks")

    def count(self, name: str) -> None:
        """One more in the frontier's shared counter ``name``: what every
        process did, for ``scrapy frontier`` (lost while Redis is away)."""
        assert self.store is not None
        store = self.store
        self._write(lambda: store.count(name), f"shared counter {name} not counted")

    def ledger(self) -> None:
        """Log the frontier's ledger (``crawler/store/ledger.py``): every URL
        it admitted, by state, and whether they add up; in the stats as
        ``crawler/ledger/*``."""
        assert self.store is not None
        try:
            status = self.store.status()
            ledger = Ledger.from_status(status).as_dict()
        except REDIS_ERRORS as exc:
            logger.warning("Frontier ledger not read, Redis unreachable: %s", exc)
            return
        except redis.RedisError as exc:
            logger.error("Frontier ledger not read (Redis error %s: %s)", type(exc).__name__, exc)
            inc(self.stats, "crawler/redis/errors")
            return
        if self.stats is not None:
            for name, value in ledger.items():
                self.stats.set_value(f"crawler/ledger/{name}", int(value))
        level = logging.INFO if ledger["adds_up"] else logging.ERROR
        logger.log(level, "Frontier ledger: %s", describe(ledger))
        untracked = status["counters"].get("rv_untracked", 0)
        if untracked:  # the recrawl caps' policy: fetched once, counted, and said (docs/recrawl.md)
            logger.warning("Frontier recrawl: %d URLs were fetched without a history (never revisited): "
                           "CRAWLER_RECRAWL_MAX_TRACKED (%d tracked now) or CRAWLER_RECRAWL_DOMAIN_MAX was "
                           "reached; scrapy frontier shows them, 'untracked at a cap'", untracked,
                           status["counters"].get("rv_tracked", 0))
        lost = self.stats.get_value("crawler/frontier/ended/lost", 0) if self.stats is not None else 0
        if lost and self.stats is not None and not self.stats.get_value("crawler/exit/error"):
            self.stats.set_value("crawler/exit/error", f"{lost} requests of this crawl were lost "
                                 "(undecodable or unstorable frontier entries; see the errors above)")

    def dead_letter(self, request: Any, reason: str, *, status: int | None = None,
                    exception: BaseException | str | None = None) -> None:
        """Record a request (or a URL) given up on in the dead-letter queue;
        its lease ends as a dead letter (``Lease.dead``)."""
        assert self.store is not None
        url = request if isinstance(request, str) else request.url
        attempts = 1 if isinstance(request, str) else int(request.meta.get(ATTEMPTS, 1))
        if not isinstance(request, str):
            request.meta[DEAD] = True
            lease = self._leases.get(request.meta.get(LEASE))
            if lease is not None:
                lease.dead(reason)
        if isinstance(exception, BaseException):
            exception = type(exception).__name__
        letter = DeadLetter(url, reason, status, exception, attempts,
                            spider=self.spider_name, shard=self.store.keys.shard)
        if not self._write(lambda: self._dead_letters.add([letter]), f"dead letter not recorded: {letter.to_json()}"):
            if self._guard.down:
                logger.warning("Dead letter not recorded, Redis unreachable: %s", letter.to_json())
            inc(self.stats, "crawler/dlq/unrecorded")
            return
        inc(self.stats, f"crawler/dlq/{reason}")
