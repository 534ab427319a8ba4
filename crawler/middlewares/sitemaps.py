"""Sitemaps in a crawl: named by robots.txt, fetched through the frontier,
read in bounded steps, their URLs queued like links.

    CRAWLER_SITEMAPS = True    # the addon places SitemapMiddleware; on in billion

Flow (docs/sitemaps.md has the rules and the reasons):

1. The shared robots.txt middleware sends ``robots_txt_read`` once per
   robots.txt it fetches; each ``Sitemap:`` line of it (anywhere in the
   file, absolute http(s) URLs; ``/sitemap.xml`` with
   ``CRAWLER_SITEMAP_GUESS`` when there is none) becomes a plain Scrapy
   request marked ``meta[SITEMAP]`` and goes to the engine, hence the
   frontier. The frontier's dedup (Redis, by canonical URL) makes it one
   fetch per crawl across workers and resumed crawls; a refetched
   robots.txt offers duplicates; a retry is the same request moving on.
   With several shards only the shard owning the robots.txt's domain
   offers its sitemaps.
2. The request is fetched as any page: the domain's turn, the robots.txt
   of the sitemap's own host, backoff, dead letters, the WARC. It is exempt
   from ``CRAWLER_HTML_ONLY`` (``ANY_TYPE``) and from the page cap: its own
   cap, ``CRAWLER_SITEMAP_MAX_BYTES``, bounds the download.
3. Its final response gets :meth:`SitemapMiddleware.read` as callback (set
   here, once no retry or redirect can copy it into the frontier), which
   feeds the body to :class:`~crawler.sitemaps.SitemapParser` one bounded
   step at a time, giving the event loop back between steps.
4. Each URL listed is kept if its registered domain is the one of the
   robots.txt that started the chain (``site``), else counted ``offsite``.
   Pages go to the frontier at depth 0 (plain URLs, or requests carrying
   ``LASTMOD``/``CHANGEFREQ``/``PRIORITY`` when given); children of a
   sitemap index are fetched as in 2, one level deeper, unless past
   ``CRAWLER_SITEMAP_DEPTH`` (``too_deep``) or already above them (``loops``).

The bytes held by the sitemaps in flight together (downloading: their cap;
downloaded: their body, until read) stay within ``CRAWLER_SITEMAP_MEMORY``:
a sitemap request that would go past it waits in the frontier
(``crawler/sitemaps/postponed``) and is tried again; one is always let
through when none is held.

With ``CRAWLER_RECRAWL`` on, a sitemap is a tracked URL like any page, on
its own pinned interval (``CRAWLER_RECRAWL_SITEMAP_INTERVAL``): its revisit
goes with validators; a 304 is not read again (``not_modified``); a changed
one is read again, its URLs mostly duplicates, and each ``<lastmod>`` of a
URL the frontier tracks is a hint that brings its visit sooner once the
host has earned the trust (``crawler/worker/_offers.py``,
``lua/recrawl_hint.lua``).

Stats ``crawler/sitemaps/*``, also counted in the frontier for ``scrapy
frontier`` (``sitemaps_*``). Counts that Redis could not take (an outage)
are kept here and sent with the next ones (``crawler/sitemaps/redis_unavailable``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import redis
from scrapy import Request, signals
from scrapy.exceptions import NotConfigured

from crawler._breaker import RedisNotAnswering
from crawler.clock import clock_of
from crawler.connection import REDIS_ERRORS
from crawler.meta import ANY_TYPE, CHANGEFREQ, DELAY, LASTMOD, MAX_PAGE_BYTES, NOT_MODIFIED, PRIORITY, RECRAWL, SITEMAP
from crawler.middlewares.recrawl import not_modified
from crawler.middlewares.robots import robots_txt_read, shared_robots
from crawler.identity import canonicalize, domain_of
from crawler.worker import uses_frontier
from crawler.worker import session_of
from crawler.settings_registry import setting
from crawler.sharding import shard_of
from crawler.sitemaps import WORK_BYTES, Entry, SitemapParser, clean_url


if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: ``Sitemap: <url>`` anywhere in robots.txt (RFC 9309 2.2.4: outside groups),
#: the field name in any case, the value up to whitespace or a comment
_SITEMAP_LINE = re.compile(rb"^[ \t]*sitemap[ \t]*:[ \t]*([^\s#]+)", re.IGNORECASE | re.MULTILINE)
_ENTRIES_PER_TURN = 256  # URLs handled between two turns of the event loop
_MEMORY_WAIT = 2.0  # seconds a sitemap past CRAWLER_SITEMAP_MEMORY waits in the frontier
_READ_TIME = 120.0  # seconds, beyond DOWNLOAD_TIMEOUT, a sitemap may take to reach its read and end it
#: how the download of a sitemap ends when it stopped at its cap: ``truncated``
#: from the size-cap middleware, ``download_stopped`` from the handler alone
_CUT_FLAGS = ("truncated", "download_stopped")
STATS = ("discovered", "guessed", "fetched", "urls", "kept", "offsite", "truncated", "too_deep", "invalid",
         "loops", "disallowed", "failed")


def robots_sitemaps(body: str, max_url_length: int = 2000) -> list[str]:
    """The sitemap URLs a robots.txt names, in order, without repeats."""
    found: dict[str, None] = {}
    for match in _SITEMAP_LINE.finditer(body.encode("utf-8", "replace")):
        url = clean_url(match.group(1).decode("utf-8", "replace"), max_url_length)
        if url is not None:
            found[url] = None
    return list(found)


class SitemapMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "CRAWLER_SITEMAPS") or not uses_frontier(crawler):
            raise NotConfigured
        if not settings.getbool("ROBOTSTXT_OBEY"):
            logger.warning("CRAWLER_SITEMAPS is on but ROBOTSTXT_OBEY is off: sitemaps are found "
                           "in the robots.txt the crawl reads, so none will be")
            raise NotConfigured
        self.crawler = crawler
        self.stats = crawler.stats
        self.guess = setting(settings, "CRAWLER_SITEMAP_GUESS")
        self.depth = setting(settings, "CRAWLER_SITEMAP_DEPTH")
        self.max_urls = setting(settings, "CRAWLER_SITEMAP_MAX_URLS")
        self.max_bytes = setting(settings, "CRAWLER_SITEMAP_MAX_BYTES")
        self.priority = setting(settings, "CRAWLER_SITEMAP_PRIORITY")
        self.max_url_length = setting(settings, "CRAWLER_MAX_URL_LENGTH")
        self.memory = setting(settings, "CRAWLER_SITEMAP_MEMORY")
        # recrawl on: a sitemap is revisited on its own pinned interval (meta[RECRAWL] seconds)
        self.revisit = (setting(settings, "CRAWLER_RECRAWL_SITEMAP_INTERVAL")
                        if setting(settings, "CRAWLER_RECRAWL") != "off" else None)
        self.robots: Any = None  # the robots.txt middleware, for rules already known here
        self.clock = clock_of(crawler)
        # (bytes, since) per sitemap in flight, by its request, then its response. One that
        # leaves by another way (a retry, a redirect, a hand-back, a spider middleware's
        # error) holds nothing once gone (weak keys), or, kept alive by a cycle the collector
        # has not reached (or frozen), once it is older than any download and read can be
        self.held: WeakKeyDictionary[Any, tuple[int, float]] = WeakKeyDictionary()
        self.held_for = settings.getfloat("DOWNLOAD_TIMEOUT", 180) + _READ_TIME
        self.unsent: Counter[str] = Counter()  # shared counts Redis did not take yet
        self.redis_away = False  # the last try to send them met an outage (logged once)
        crawler.signals.connect(self.robots_txt_read, signal=robots_txt_read)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SitemapMiddleware:
        return cls(crawler)

    # --- discovery -------------------------------------------------------

    def robots_txt_read(self, origin: str, body: str) -> None:
        spider = self.crawler.spider
        shards = int(getattr(spider, "shards", 1))
        if shards > 1 and shard_of(domain_of(origin + "/"), shards) != int(getattr(spider, "shard", 0)):
            return  # the shard owning the domain offers its sitemaps
        urls = robots_sitemaps(body, self.max_url_length)
        self._inc("discovered", len(urls))
        if not urls and self.guess:
            urls = [origin + "/sitemap.xml"]
            self._inc("guessed")
        site = domain_of(origin + "/")
        for url in urls:
            self._fetch(url, site, 1, [])

    def _fetch(self, url: str, site: str, level: int, up: list[str]) -> None:
        """Queue sitemap ``url`` through the engine: the frontier dedups it."""
        meta: dict[str, Any] = {
            SITEMAP: {"site": site, "level": level, "up": up},
            ANY_TYPE: True,  # not a page: never stopped by CRAWLER_HTML_ONLY
            MAX_PAGE_BYTES: self.max_bytes,  # its own cap instead of the page cap
            "download_maxsize": 0,  # read to that cap whatever the length says
            "allow_offsite": True,  # a robots.txt may name a sitemap on another host
            "depth": 0,
        }
        if self.revisit is not None:
            meta[RECRAWL] = self.revisit
        request = Request(url, priority=self.priority, meta=meta)
        self.crawler.engine.crawl(request)  # type: ignore[union-attr]

    # --- the memory bound ---------------------------------------------------

    def held_bytes(self) -> int:
        """Bytes the sitemaps in flight hold: the cap of each being downloaded,
        the body of each downloaded and not read yet."""
        oldest = self.clock.monotonic() - self.held_for
        stale = [key for key, (_, since) in self.held.items() if since < oldest]
        for key in stale:
            self.held.pop(key, None)
        return sum(size for size, _ in self.held.values())

    def process_request(self, request: Request) -> Request | None:
        """A sitemap goes on if its cap fits in ``CRAWLER_SITEMAP_MEMORY``
        beside those in flight (or none is held); else it waits in the frontier."""
        if SITEMAP not in request.meta:
            return None
        held = self.held_bytes()
        if held and held + self.max_bytes > self.memory:
            self.stats.inc_value("crawler/sitemaps/postponed")
            again = request.replace(dont_filter=True)
            again.meta[DELAY] = _MEMORY_WAIT
            return again
        self.held[request] = (self.max_bytes, self.clock.monotonic())
        self.stats.max_value("crawler/sitemaps/memory_max", held + self.max_bytes)
        return None

    def process_exception(self, request: Request, exception: BaseException) -> None:
        self.held.pop(request, None)

    # --- the response ------------------------------------------------------

    def process_response(self, request: Request, response: Response) -> Response:
        # called once the retry and redirect middlewares let the response
        # through: the callback, which cannot travel through Redis, is set on
        # a request that will not go back to the frontier
        if SITEMAP in request.meta:
            if response.status == 304 and (response.request or request).meta.get(NOT_MODIFIED):
                # a revisit the server says is unchanged (crawler/middlewares/recrawl.py): nothing
                # new to read, and no callback of the spider's, whatever its handle_httpstatus_list
                for sent in (request, response.request):
                    if sent is not None:
                        sent.callback = not_modified
                self.held.pop(request, None)
                self.stats.inc_value("crawler/sitemaps/not_modified")
                return response
            request.callback = self.read
            if response.request is not None and response.request is not request:
                response.request.callback = self.read
            held = self.held.pop(request, None)
            if held is not None and 200 <= response.status < 300:  # now its body, held until read
                self.held[response] = (len(response.body), held[1])
        return response

    async def read(self, response: Response) -> list[Any]:
        """Parse the sitemap in ``response`` in bounded steps, queuing what it lists."""
        try:
            if not 200 <= response.status < 300:
                self._inc("failed")
                return []
            self._inc("fetched")
            parser = SitemapParser(max_urls=self.max_urls, max_bytes=self.max_bytes,
                                   max_compressed_bytes=self.max_bytes, max_url_length=self.max_url_length)
            counts = dict.fromkeys(STATS, 0)
            await self._parse(response, parser, counts)
            self._tally(response, parser, counts)
            return []
        finally:
            self.held.pop(response, None)

    async def _parse(self, response: Response, parser: SitemapParser, counts: dict[str, int]) -> None:
        """Feed the body to ``parser`` a step at a time, each batch of entries judged and queued."""
        meta = response.meta[SITEMAP]
        # the indexes above it, and it under each URL it was asked as (redirects)
        up = [*meta.get("up", ()), *{_canonical(u): None for u in (*response.meta.get("redirect_urls", ()),
                                                                     response.url)}]
        body = memoryview(response.body)
        pos = 0
        while not parser.done:
            if parser.pending:
                entries = parser.feed()
            elif pos < len(body):
                entries = parser.feed(body[pos:pos + WORK_BYTES])
                pos += WORK_BYTES
            else:
                entries = parser.close()
            for start in range(0, len(entries), _ENTRIES_PER_TURN):
                self._listed(entries[start:start + _ENTRIES_PER_TURN], meta, up, counts)
                await asyncio.sleep(0)
            if not entries:
                await asyncio.sleep(0)

    def _tally(self, response: Response, parser: SitemapParser, counts: dict[str, int]) -> None:
        """How the sitemap ended (truncated, invalid), counted with what it listed."""
        counts["urls"] = parser.urls
        # the download stopped at CRAWLER_SITEMAP_MAX_BYTES, with or without the size-cap middleware
        cut = any(flag in response.flags for flag in _CUT_FLAGS)
        if parser.truncated or cut:
            counts["truncated"] = 1
        if cut and parser.error in ("malformed", "gzip-truncated"):
            pass  # it ends where it was cut, not where the file ends: truncated, not invalid
        elif parser.error is not None or parser.kind == "unknown":
            counts["invalid"] = 1
            self.stats.inc_value(f"crawler/sitemaps/invalid/{parser.error or 'not_a_sitemap'}")
        self.stats.inc_value("crawler/sitemaps/dropped_urls", parser.dropped_urls)
        self.stats.inc_value("crawler/sitemaps/invalid_urls", parser.invalid_urls)
        self._count(counts)
        logger.debug("Sitemap %s (%s, level %d): %d URLs, %d kept, %d offsite, %d too deep%s%s", response.url,
                     parser.kind, response.meta[SITEMAP]["level"], parser.urls, counts["kept"], counts["offsite"],
                     counts["too_deep"], f", cut: {parser.dropped_urls} URLs dropped" if counts["truncated"] else "",
                     f", {parser.error}: {parser.error_detail}" if parser.error else "")

    def _listed(self, entries: list[Entry], meta: dict[str, Any], up: list[str], counts: dict[str, int]) -> None:
        site, level = meta["site"], meta["level"]
        if self.robots is None:
            self.robots = shared_robots(self.crawler) or False
        plain: list[str] = []
        for entry in entries:
            if domain_of(entry.url) != site:
                counts["offsite"] += 1
                continue
            if entry.kind == "sitemap":
                if level >= self.depth:
                    counts["too_deep"] += 1
                elif _canonical(entry.url) in up:
                    counts["loops"] += 1
                else:
                    counts["kept"] += 1
                    self._fetch(entry.url, site, level + 1, up)
                continue
            if self.robots and self.robots.known_disallowed(entry.url):
                counts["disallowed"] += 1  # its robots.txt is known here: no turn spent on it
                continue
            counts["kept"] += 1
            if entry.lastmod is None and entry.changefreq is None and entry.priority is None:
                plain.append(entry.url)
                continue
            page_meta: dict[str, Any] = {"depth": 0}
            if entry.lastmod is not None:
                page_meta[LASTMOD] = entry.lastmod
            if entry.changefreq is not None:
                page_meta[CHANGEFREQ] = entry.changefreq
            if entry.priority is not None:
                page_meta[PRIORITY] = entry.priority
            self.crawler.engine.crawl(Request(entry.url, priority=self.priority, meta=page_meta))  # type: ignore[union-attr]
        if plain:
            session = session_of(self.crawler)
            if session is not None:
                session.offer(plain, depth=0, priority=self.priority)

    # --- counting ----------------------------------------------------------

    def _inc(self, name: str, n: int = 1) -> None:
        if n:
            self._count({name: n})

    def _count(self, counts: dict[str, int]) -> None:
        """In the stats, and in the frontier's shared counters (``scrapy frontier``)."""
        counts = {name: n for name, n in counts.items() if n}
        for name, n in counts.items():
            self.stats.inc_value(f"crawler/sitemaps/{name}", n)
            self.unsent[name] += n
        self._send()

    def _send(self) -> None:
        """The counts not in the frontier yet, sent. Redis away: they are kept
        for the next try (the outage is the worker's to pause the crawl for,
        said here once and counted), but for one that timed out once sent, which
        Redis may have counted; another Redis error drops them, said at ERROR
        and counted as the session counts its own (``crawler/redis/errors``)."""
        session = session_of(self.crawler)
        if session is None or session.store is None or not self.unsent or session.redis_down:
            return
        try:
            while self.unsent:
                name, n = next(iter(self.unsent.items()))
                session.store.count(f"sitemaps_{name}", n)
                del self.unsent[name]
        except REDIS_ERRORS as exc:
            if isinstance(exc, redis.TimeoutError) and not isinstance(exc, RedisNotAnswering):
                # sent, unanswered: the server may count it when it answers again, so it is
                # not sent twice (a silent server refuses the calls after this one unsent)
                del self.unsent[name]
            self.stats.inc_value("crawler/sitemaps/redis_unavailable")
            if not self.redis_away:
                logger.warning("Sitemap counters not stored in the frontier, Redis unreachable (%s): "
                               "kept here for the next try", exc)
            self.redis_away = True
            return
        except redis.RedisError as exc:
            logger.error("Redis error storing the sitemap counters of the frontier (%s: %s): "
                         "%s not counted in scrapy frontier", type(exc).__name__, exc, dict(self.unsent))
            self.stats.inc_value("crawler/redis/errors")
            self.unsent.clear()
            return
        if self.redis_away:
            self.redis_away = False
            logger.info("Sitemap counters stored in the frontier again")

    def spider_closed(self) -> None:
        # nothing is sent now: the session has closed (and may have cleared the frontier)
        if self.unsent:
            logger.warning("Sitemap counters never stored in the frontier (Redis unreachable since): %s; "
                           "the crawl's stats have them", dict(self.unsent))


def _canonical(url: str) -> str:
    try:
        return canonicalize(url)
    except ValueError:
        return url
