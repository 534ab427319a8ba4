"""What the middlewares report outside a request's own flow: push-backs of a
domain (429/503, robots.txt) and dead letters. A Redis failure here is noted
by the outage guard and never raised into the middleware."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis

from crawler.meta import ATTEMPTS
from crawler.scheduler._stats import inc
from crawler.scheduler.deadletters import DeadLetter, DeadLetters
from crawler.scheduler.domains import domain_of
from crawler.scheduler.ledger import Ledger, describe
from crawler.scheduler.outage import REDIS_ERRORS

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.statscollectors import StatsCollector

    from crawler.scheduler.frontier import Frontier
    from crawler.scheduler.outage import RedisGuard

logger = logging.getLogger(__name__)


class Reports:
    def __init__(self, frontier: Frontier, dead_letters: DeadLetters, guard: RedisGuard,
                 stats: StatsCollector | None, spider: str) -> None:
        self.frontier = frontier
        self.dead_letters = dead_letters
        self.guard = guard
        self.stats = stats
        self.spider = spider

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
        """Log the frontier's ledger (``ledger.py``): every URL it admitted,
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
        """Record a request given up on in the dead-letter queue."""
        url = request if isinstance(request, str) else request.url
        attempts = 1 if isinstance(request, str) else int(request.meta.get(ATTEMPTS, 1))
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
