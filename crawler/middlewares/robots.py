"""robots.txt, fetched once per host per expiry and shared through Redis.

Replaces Scrapy's RobotsTxtMiddleware (on with ``ROBOTSTXT_OBEY``). The
first process that needs a host's robots.txt takes a short fetch lock in
Redis, downloads it and stores it under ``<base>:robots:<scheme>://<host>``
with a Redis expiry (``CRAWLER_ROBOTS_TTL``, 24 h); every other request of
any process waits for that one fetch and reads it from Redis. RFC 9309:
2xx is parsed (with protego; bodies past 500 KiB are cut), 4xx means allow
all, 5xx or an unreachable server means disallow all for
``CRAWLER_ROBOTS_ERROR_TTL`` and retry then; redirects are followed up to 5
hops. Rules are matched for ``ROBOTSTXT_USER_AGENT``, else the product token
of the User-Agent. A Crawl-delay, capped at ``CRAWLER_ROBOTS_MAX_DELAY``,
becomes the domain's minimum delay in the frontier. Disallowed requests are
dropped and counted (``crawler/robots/disallowed``), not dead-lettered.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import redis
from protego import Protego
from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http.request import NO_CALLBACK

from crawler.meta import DELAY, LEASE, ROBOTS
from crawler.middlewares.sizecap import ROBOTS_MAX_BYTES
from crawler.middlewares.useragent import product_token, user_agent
from crawler.scheduler.access import frontier_scheduler, uses_frontier
from crawler.scheduler.domains import domain_of
from crawler.scheduler.outage import REDIS_ERRORS
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

_FETCH_LOCK_MS = 60_000
_VERDICTS = 4096  # URLs remembered per host
_REDIS_WAIT = 5.0
_WAIT_STEP = 0.1


class Rules:
    """What a robots.txt says, for one user agent."""

    def __init__(self, record: dict[str, Any], agent: str) -> None:
        self.mode = record["mode"]  # "parse", "allow" or "disallow"
        self.parser = Protego.parse(record.get("body", "")) if self.mode == "parse" else None
        self.agent = agent
        # a site's pages link the same URLs over and over (menus, footers)
        self.verdicts: dict[str, bool] = {}

    def allowed(self, url: str) -> bool:
        if self.parser is None:
            return self.mode == "allow"
        verdict = self.verdicts.get(url)
        if verdict is None:
            verdict = bool(self.parser.can_fetch(url, self.agent))
            if len(self.verdicts) >= _VERDICTS:
                self.verdicts.clear()
            self.verdicts[url] = verdict
        return verdict

    def crawl_delay(self) -> float | None:
        if self.parser is None:
            return None
        delay = self.parser.crawl_delay(self.agent)
        return float(delay) if delay is not None else None


class SharedRobotsMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not settings.getbool("ROBOTSTXT_OBEY") or not uses_frontier(crawler):
            raise NotConfigured
        self.crawler = crawler
        self.stats = crawler.stats
        self.ttl = setting(settings, "CRAWLER_ROBOTS_TTL")
        self.error_ttl = setting(settings, "CRAWLER_ROBOTS_ERROR_TTL")
        self.max_delay = setting(settings, "CRAWLER_ROBOTS_MAX_DELAY")
        self.agent = settings.get("ROBOTSTXT_USER_AGENT") or product_token(user_agent(settings))
        self.local: dict[str, tuple[Rules, float]] = {}  # origin -> (rules, monotonic expiry)
        self.fetching: dict[str, asyncio.Future[Rules]] = {}
        self.fetched: dict[str, tuple[float, float]] = {}  # origin -> robots.txt fetch began, ended

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedRobotsMiddleware:
        return cls(crawler)

    async def process_request(self, request: Request) -> Request | None:
        if request.meta.get("dont_obey_robotstxt") or request.meta.get(ROBOTS):
            return
        parts = urlsplit(request.url)
        if parts.scheme not in ("http", "https"):
            return
        origin = f"{parts.scheme}://{parts.netloc}"
        asked = time.monotonic()
        try:
            rules = await self.rules(origin)
        except REDIS_ERRORS:
            # Redis away: ask again later; the scheduler keeps the request
            # until Redis can store it in the delayed set
            self.stats.inc_value("crawler/robots/redis_unavailable")
            again = request.replace(dont_filter=True)
            again.meta[DELAY] = _REDIS_WAIT
            return again
        if not rules.allowed(request.url):
            self.stats.inc_value("crawler/robots/disallowed")
            raise IgnoreRequest("Forbidden by robots.txt")
        fetched = self.fetched.get(origin)
        if fetched is not None and fetched[1] >= asked:
            # robots.txt was this domain's request: the page waits its turn
            del self.fetched[origin]
            scheduler = frontier_scheduler(self.crawler)
            if scheduler is not None and LEASE in request.meta:
                scheduler.note_fetch(request, *fetched)
                again = request.replace(dont_filter=True)
                again.meta[DELAY] = 0
                self.stats.inc_value("crawler/robots/handed_back")
                return again
        return None

    def known_disallowed(self, url: str) -> bool:
        """True if the host's rules are known here and refuse ``url``: a link
        that need not be queued (it would spend a politeness slot for nothing)."""
        end = url.find("/", url.find("//") + 2)
        cached = self.local.get(url if end == -1 else url[:end])
        return cached is not None and not cached[0].allowed(url)

    async def rules(self, origin: str) -> Rules:
        cached = self.local.get(origin)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        pending = self.fetching.get(origin)
        if pending is not None:  # another request of this process is on it
            return await asyncio.shield(pending)
        future: asyncio.Future[Rules] = asyncio.get_running_loop().create_future()
        self.fetching[origin] = future
        try:
            try:
                rules = await self._load(origin)
            except redis.exceptions.OutOfMemoryError:
                # Redis is full: fetch for this process alone rather than stop
                self.stats.inc_value("crawler/robots/unshared")
                rules = self._remember(origin, *await self._fetch(origin))
            future.set_result(rules)
            return rules
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            del self.fetching[origin]
            if not future.done():
                future.cancel()
            elif future.exception() is not None:
                future.exception()  # retrieved: no "never retrieved" warning

    async def _load(self, origin: str) -> Rules:
        scheduler = frontier_scheduler(self.crawler)
        assert scheduler is not None and scheduler.frontier is not None
        store = scheduler.frontier.robots
        deadline = time.monotonic() + _FETCH_LOCK_MS / 1000
        while True:
            record, ttl_ms = store.get(origin)
            if record is not None:
                self.stats.inc_value("crawler/robots/shared_hits")
                return self._remember(origin, record, max(ttl_ms, 1000) / 1000)
            token = uuid.uuid4().hex
            if store.claim(origin, token, _FETCH_LOCK_MS):
                break
            if time.monotonic() > deadline:
                break  # the fetcher died: fetch it ourselves
            await asyncio.sleep(_WAIT_STEP)
        try:
            record, ttl = await self._fetch(origin)
            store.put(origin, record, ttl)
            rules = self._remember(origin, record, ttl)
            try:
                self._apply_crawl_delay(origin, rules, scheduler)
            except redis.RedisError:
                logger.warning("Crawl-delay of %s not stored: Redis unavailable", origin)
            return rules
        finally:
            store.done(origin, token)

    async def _fetch(self, origin: str) -> tuple[dict[str, Any], float]:
        request = Request(
            f"{origin}/robots.txt",
            priority=1000,
            callback=NO_CALLBACK,
            meta={"dont_obey_robotstxt": True, ROBOTS: True, "redirect_ttl": 5,
                  "dont_retry": True, "handle_httpstatus_all": True},
        )
        self.stats.inc_value("crawler/robots/fetched")
        began = time.monotonic()
        try:
            response: Response = await self.crawler.engine.download_async(request)  # type: ignore[union-attr]
        except Exception as exc:  # unreachable: disallow for a while
            logger.info("robots.txt of %s unreachable (%s): disallowing it for %ss", origin, exc, self.error_ttl)
            self.stats.inc_value("crawler/robots/unreachable")
            return {"mode": "disallow", "status": None}, self.error_ttl
        finally:
            self.fetched[origin] = (began, time.monotonic())
        status = response.status
        self.stats.inc_value(f"crawler/robots/status/{status}")
        if 200 <= status < 300:
            body = response.body[:ROBOTS_MAX_BYTES].decode("utf-8", errors="replace")
            return {"mode": "parse", "status": status, "body": body}, self.ttl
        if 400 <= status < 500:
            return {"mode": "allow", "status": status}, self.ttl
        logger.info("robots.txt of %s answered %d: disallowing it for %ss", origin, status, self.error_ttl)
        return {"mode": "disallow", "status": status}, self.error_ttl

    def _remember(self, origin: str, record: dict[str, Any], ttl: float) -> Rules:
        rules = Rules(record, self.agent)
        self.local[origin] = (rules, time.monotonic() + min(ttl, 300.0))
        return rules

    def _apply_crawl_delay(self, origin: str, rules: Rules, scheduler: Any) -> None:
        delay = rules.crawl_delay()
        if delay is None:
            return
        capped = min(delay, self.max_delay)
        domain = domain_of(origin + "/")
        scheduler.frontier.set_robots_delay(domain, capped)
        # the request that asked for robots.txt is about to go: the next one waits
        scheduler.frontier.push_domain(domain, capped)
        self.stats.inc_value("crawler/robots/crawl_delays")
        logger.info("robots.txt of %s asks a Crawl-delay of %gs (applied: %gs)", origin, delay, capped)


def shared_robots(crawler: Crawler) -> SharedRobotsMiddleware | None:
    """The crawl's robots.txt middleware, for link filters
    (:meth:`SharedRobotsMiddleware.known_disallowed`); None when it is off."""
    downloader = getattr(crawler.engine, "downloader", None)
    for middleware in getattr(getattr(downloader, "middleware", None), "middlewares", ()):
        if isinstance(middleware, SharedRobotsMiddleware):
            return middleware
    return None
