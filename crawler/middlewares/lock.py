"""A distributed lock per domain, for domains that allow no concurrency.

Domains matching ``CRAWLER_LOCK_DOMAINS`` (shell patterns of registered
domains or hosts), or listed in the Redis set ``<base>:lockdomains`` (editable
while the crawl runs), are fetched by one request at a time across every
process: ``SET <base>:lock:<domain> <token> NX PX <ttl>``, released only by
its owner (``lua/unlock.lua``). A request whose domain is locked goes back to
the frontier's delayed set for a jittered ``CRAWLER_LOCK_WAIT``; nothing
sleeps. The ttl (``CRAWLER_LOCK_TTL``, default ``DOWNLOAD_TIMEOUT`` + 30 s)
must cover the worst-case download. Locks that expire unreleased are
counted as stale locks (``crawler/lock/stale``).
"""

from __future__ import annotations

import random
import uuid
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured

from crawler.clock import clock_of
from crawler.meta import DELAY, LOCK, ROBOTS
from crawler.worker import uses_frontier
from crawler.identity import domain_of, host_of
from crawler.connection import REDIS_ERRORS
from crawler.worker import session_of
from crawler.settings_registry import lock_ttl, setting

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

_REFRESH = 5.0  # seconds between reads of the live lock-domain set


class DomainLockMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "CRAWLER_LOCK_ENABLED") or not uses_frontier(crawler):
            raise NotConfigured
        self.crawler = crawler
        self.clock = clock_of(crawler)  # paces the reads of the live lock-domain set
        self.stats = crawler.stats
        self.ttl_ms = int(lock_ttl(settings) * 1000)
        self.wait = setting(settings, "CRAWLER_LOCK_WAIT")
        self.patterns = [p.lower() for p in setting(settings, "CRAWLER_LOCK_DOMAINS")]
        self.live: set[str] = set()
        self.live_read: float | None = None  # the clock's monotonic() at the last read; None: never read
        self.random = random.Random()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DomainLockMiddleware:
        return cls(crawler)

    def needs_lock(self, host: str, domain: str) -> bool:
        session = session_of(self.crawler)
        if session is None:
            return False
        now = self.clock.monotonic()
        if self.live_read is None or now - self.live_read > _REFRESH:
            self.live = session.locks.live_domains()
            self.live_read = now
        if domain in self.live or host in self.live:
            return True
        return any(fnmatchcase(domain, p) or fnmatchcase(host, p) for p in self.patterns)

    def process_request(self, request: Request) -> Request | None:
        if request.meta.get(ROBOTS):
            return None
        host = host_of(request.url).lower()
        domain = domain_of(request.url)
        try:
            if not self.needs_lock(host, domain):
                return None
            session = session_of(self.crawler)
            assert session is not None
            token = uuid.uuid4().hex
            taken, stale = session.locks.acquire(domain, token, self.ttl_ms)
        except REDIS_ERRORS:
            taken, stale = False, 0  # Redis away: wait as if the domain were locked
        if stale:
            self.stats.inc_value("crawler/lock/stale", stale)
        if taken:
            request.meta[LOCK] = (domain, token)
            self.stats.inc_value("crawler/lock/acquired")
            return None
        self.stats.inc_value("crawler/lock/busy")
        wait = self.wait * self.random.uniform(0.5, 1.5)
        again = request.replace(dont_filter=True)
        again.meta[DELAY] = wait
        return again

    def release(self, request: Request) -> None:
        held = request.meta.pop(LOCK, None)
        session = session_of(self.crawler)
        if held is None or session is None:
            return
        try:
            released = session.locks.release(*held)
        except REDIS_ERRORS:
            released = False  # the lock expires on its own
        if not released:
            self.stats.inc_value("crawler/lock/lost")

    def process_response(self, request: Request, response: Response) -> Response:
        self.release(request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self.release(request)
