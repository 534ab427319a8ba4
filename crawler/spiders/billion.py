"""``billion``: the crawl of the open web, one shard per node.

    scrapy crawl billion -a shard=3 -a shards=12 -a seeds=top-1m.csv

HTML only, ``<a href>`` links only, robots.txt obeyed, 70 s between two
requests to one domain, bodies cut at 250 KB. A domain belongs to shard
``hash(registered domain) mod shards``; a spider seeds and fetches only its
own shard's domains and forwards links to the others to their inboxes.
Seeds: a file (Tranco ``rank,domain``, Majestic CSV, bare domains or URLs,
one a line) or ``redis:<key>`` (a Redis list or set of such lines).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import scrapy
from scrapy.http import Response, TextResponse
from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings
from scrapy.spidermiddlewares.depth import DepthMiddleware
from scrapy.spidermiddlewares.referer import RefererMiddleware
from scrapy.spidermiddlewares.urllength import UrlLengthMiddleware
from twisted.python.failure import Failure

from crawler.clock import clock_of
from crawler.fallback import cannot_connect, fallback_request
from crawler.links import LinkExtractor
from crawler.meta import FALLBACK, RECRAWL_SEEN
from crawler.middlewares.recrawl import text_key
from crawler.middlewares.robots import shared_robots
from crawler.middlewares.useragent import robots_agent
from crawler.robots import header_nofollow
from crawler.identity import domain_of
from crawler.worker import session_of
from crawler.seeds import Seed, SeedError, iter_seeds, redis_seed_lines
from crawler.settings_registry import setting
from crawler.sharding import shard_of

try:
    from scrapy.spidermiddlewares.metacopy import MetaCopyDetectionMiddleware
except ImportError:  # Scrapy < 2.19
    MetaCopyDetectionMiddleware = None

logger = logging.getLogger(__name__)

#: Scrapy's spider middlewares that only act on the requests a callback
#: yields: billion yields one item a page (its links go to the frontier as
#: URLs), so each would be one more step of every page's output for nothing
_REQUESTS_ONLY = tuple(m for m in (RefererMiddleware, UrlLengthMiddleware, DepthMiddleware,
                                   MetaCopyDetectionMiddleware) if m is not None)

_ROBOTS_CHECK_BUDGET = 0.02  # seconds of robots.txt checks per page; the rest are checked when fetched
_MAX_REPORTED = 20
#: seed lines read, parsed and handed to Scrapy's engine between two turns of
#: the event loop. The engine takes each start request whole (its fingerprint,
#: the scheduler's offer, now and then a batch to Redis, some 80-100 us) and,
#: while the downloader is at its cap, asks for the next at once: 2,000 seeds
#: held the loop 150-340 ms before any page was fetched (docs/benchmarks.md)
SEEDS_PER_TURN = 100
_UNKNOWN = object()


def _origin(url: str) -> str:
    """``scheme://host[:port]/`` of ``url``: the prefix its host's links share."""
    end = url.find("/", url.find("//") + 2)
    return url + "/" if end < 0 else url[:end + 1]


def check_arguments(shard: Any = "0", shards: Any = "1", seeds: Any = "", **_: Any) -> tuple[int, int]:
    """Validate the spider arguments; ``ValueError`` with a message for the user."""
    try:
        shard_n, shards_n = int(str(shard)), int(str(shards))
    except ValueError:
        raise ValueError(f"billion: shard and shards must be integers, got shard={shard!r} shards={shards!r}") from None
    if shards_n < 1:
        raise ValueError(f"billion: shards must be >= 1, got {shards_n}")
    if not 0 <= shard_n < shards_n:
        raise ValueError(f"billion: shard must satisfy 0 <= shard < shards ({shards_n}), got {shard_n}")
    if seeds and not str(seeds).startswith("redis:") and not Path(str(seeds)).is_file():
        raise ValueError(f"billion: seeds file {seeds!r} does not exist")
    return shard_n, shards_n


#: a shared pace that keeps up to 2,000 domains on one CDN edge each at its
#: own 70 s: 70.5 s / 2,000 = 35 ms between starts, 32 in flight
#: (docs/politeness.md, the model); a project's own settings win
SHARED_PACE = {"CRAWLER_IP_SHARED_DELAY": 0.035, "CRAWLER_IP_SHARED_CONCURRENCY": 32}


class BillionSpider(scrapy.Spider):
    name = "billion"
    requires_contact = True
    custom_settings = {
        "ROBOTSTXT_OBEY": True,
        "CRAWLER_DOMAIN_DELAY": 70.0,
        # 70 s from the end of the previous answer, as Heritrix and the 2025
        # crawl count it: a slow site is never asked while it is still sending
        "CRAWLER_DELAY_FROM": "finish",
        # billion's rules, not the addon's: HTML only, bodies cut at 250 kB,
        # no private or loopback address (the open web has no business there)
        "CRAWLER_HTML_ONLY": True,
        "CRAWLER_MAX_PAGE_BYTES": 250_000,
        "CRAWLER_BLOCK_PRIVATE": True,
        # polite to the server, not only to the name: one request at a time
        # per IP address, 1 s from the end of one answer to the next
        # (docs/politeness.md); shared hosts carry hundreds of domains
        "CRAWLER_IP_DELAY": 1.0,
        # CDN edges known from the vendors' published ranges (the dated copy
        # shipped, `scrapy cdn-ranges` refreshes it); their pace: SHARED_PACE
        "CRAWLER_IP_SHARED_RANGES": "builtin",
        "CRAWLER_MAX_DEPTH": 16,
        # the pages sites list in the sitemaps their robots.txt names (docs/sitemaps.md)
        "CRAWLER_SITEMAPS": True,
        # a budget by rank: 10,000 URLs for a domain nobody links to, 10,000
        # more for each domain seen linking to it (or by its CRAWLER_RANKS
        # weight), at most a million (docs/frontier.md)
        "CRAWLER_DOMAIN_BUDGET": 10_000,
        "CRAWLER_DOMAIN_BUDGET_MAX": 1_000_000,
        # short of capacity, the domains that matter first: the most domains
        # seen linking to them per request given (docs/frontier.md, docs/crawl-order.md)
        "CRAWLER_DOMAIN_ORDER": "rank",
        # within a domain, the pages links found again lead to first (a
        # sketch per domain in each process; docs/frontier.md, crawl-order.md)
        "CRAWLER_WITHIN_ORDER": "inlinks",
        "CRAWLER_WARC_DIR": "output/warc",
        # one item per page; Scrapy starts CONCURRENT_ITEMS tasks for every
        # response (100 by default): a quarter of the crawl's CPU
        "CONCURRENT_ITEMS": 1,
        # no fixed cap (0, Scrapy's "no limit", over the project's): the cap of
        # requests in flight follows the due domains within CRAWLER_MEMORY_BUDGET
        # (crawler/extensions/concurrency.py); -s CONCURRENT_REQUESTS=N still caps it
        "CONCURRENT_REQUESTS": 0,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        # DNS: Scrapy resolves in the reactor's thread pool, caching answers
        "REACTOR_THREADPOOL_MAXSIZE": 32,
        "DNSCACHE_SIZE": 100_000,
        # <a href> links only: no <meta refresh> (its check decodes every page)
        "METAREFRESH_ENABLED": False,
        # revisits, when CRAWLER_RECRAWL turns them on (off here as everywhere;
        # docs/recrawl.md): weekly to start, never sooner than a day after a
        # visit nor later than 60 days, change judged by the visible text (a
        # nonce in the markup is no change), 20 M tracked URLs a shard (~6 GB)
        "CRAWLER_RECRAWL_INTERVAL": 604_800.0,
        "CRAWLER_RECRAWL_MIN": 86_400.0,
        "CRAWLER_RECRAWL_MAX": 5_184_000.0,
        "CRAWLER_RECRAWL_SIGNATURE": "text",
        "CRAWLER_RECRAWL_MAX_TRACKED": 20_000_000,
    }
    #: parse() sets RECRAWL_SEEN["chg"] from the tree its links came from
    #: (crawler/middlewares/recrawl.py leaves it to the spider)
    recrawl_signature = True

    def __init__(self, shard: str = "0", shards: str = "1", seeds: str = "", *args: Any, **kwargs: Any) -> None:
        kwargs.pop("_job", None)  # Scrapyd's job id: in the log, not needed here
        super().__init__(*args, **kwargs)
        self.shard, self.shards = check_arguments(shard, shards, seeds)
        self.seeds = seeds
        self.robots: Any = _UNKNOWN  # the robots.txt middleware, found on the first page

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        super().update_settings(settings)
        for middleware in _REQUESTS_ONLY:  # a project that lists one keeps it
            settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", middleware, None)
        # at the spider's priority, as custom_settings: the crawler process
        # merges its own settings (the project's, {} here) over lower ones
        priority = max(settings.getpriority("SPIDER_MIDDLEWARES") or 0, SETTINGS_PRIORITIES["spider"])
        settings.set("SPIDER_MIDDLEWARES", settings.getdict("SPIDER_MIDDLEWARES"), priority)
        # the shared front ends' pace, unless the project sets its own (the
        # test web's project does: its one address serves every test domain)
        for name, value in SHARED_PACE.items():
            if settings.getpriority(name) in (None, SETTINGS_PRIORITIES["default"]):
                settings.set(name, value, SETTINGS_PRIORITIES["spider"])
        # a recrawl is continuous: the crawl waits for its next due revisit
        # (up to CRAWLER_RECRAWL_MAX, the longest a tracked page waits) rather
        # than closing once nothing is queued; -s SCHEDULER_IDLE_BEFORE_CLOSE=N
        # still decides
        if (setting(settings, "CRAWLER_RECRAWL") != "off"
                and settings.getpriority("SCHEDULER_IDLE_BEFORE_CLOSE") in (None, SETTINGS_PRIORITIES["default"])):
            settings.set("SCHEDULER_IDLE_BEFORE_CLOSE", setting(settings, "CRAWLER_RECRAWL_MAX"),
                         SETTINGS_PRIORITIES["spider"])

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> BillionSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        settings = crawler.settings
        spider.extract = LinkExtractor(nofollow=not setting(settings, "CRAWLER_FOLLOW_NOFOLLOW"),
                                       max_length=setting(settings, "CRAWLER_MAX_URL_LENGTH"))
        spider.max_depth = setting(settings, "CRAWLER_MAX_DEPTH")
        spider.agent = robots_agent(settings)
        spider.page_robots = settings.getbool("ROBOTSTXT_OBEY") and spider.extract.nofollow
        # the text signature comes with the links, from one tree (design/recrawl.md C.4)
        spider.signed = (setting(settings, "CRAWLER_RECRAWL") != "off"
                         and setting(settings, "CRAWLER_RECRAWL_SIGNATURE") == "text")
        return spider

    # --- seeds -----------------------------------------------------------

    def _seed_lines(self) -> Iterable[str]:
        if not self.seeds:
            return []
        if self.seeds.startswith("redis:"):
            return redis_seed_lines(self.crawler.settings, self.seeds[len("redis:"):])
        return self._file_lines(Path(self.seeds))

    @staticmethod
    def _file_lines(path: Path) -> Iterator[str]:
        """The file's lines as they are read: a list of a million seeds is
        never read whole between two turns of the loop."""
        with path.open(encoding="utf-8", errors="replace", newline=None) as lines:
            yield from lines

    def _owns(self, seed: Seed) -> bool:
        return shard_of(domain_of(seed.url), self.shards) == self.shard

    async def start(self) -> AsyncIterator[scrapy.Request]:
        """The seeds of this shard, read, parsed and yielded ``SEEDS_PER_TURN``
        lines at a time, the event loop let run between two slices."""
        self._load_exclusions()
        stats = self.crawler.stats
        total = own = bad = 0
        for number, parsed in enumerate(iter_seeds(self._seed_lines()), start=1):
            if isinstance(parsed, SeedError):
                bad += 1
                if bad <= _MAX_REPORTED:
                    logger.warning("Bad seed, skipped: %s", parsed)
            else:
                total += 1
                if self._owns(parsed):
                    own += 1
                    yield scrapy.Request(parsed.url, callback=self.parse, errback=self.seed_failed,
                                         meta={FALLBACK: parsed.fallback, "depth": 0})
            if number % SEEDS_PER_TURN == 0:
                await asyncio.sleep(0)  # a turn of the loop: what is ready runs before the next slice
        if bad > _MAX_REPORTED:
            logger.warning("... and %d more bad seed lines", bad - _MAX_REPORTED)
        stats.set_value("crawler/seeds/bad_lines", bad)
        stats.set_value("crawler/seeds/total", total)
        stats.set_value("crawler/seeds/own_shard", own)
        logger.info("Seeds: %d read, %d of shard %d/%d, %d bad lines",
                    total, own, self.shard, self.shards, bad)

    def _load_exclusions(self) -> None:
        path = setting(self.crawler.settings, "CRAWLER_EXCLUDE_FILE")
        session = session_of(self.crawler)
        if not path or session is None:
            return
        domains = [line.split("#", 1)[0].strip() for line in Path(path).read_text().splitlines()]
        added = session.exclude(d for d in domains if d)
        logger.info("Exclusion list %s: %d domains (%d new)", path, sum(1 for d in domains if d), added)

    def seed_failed(self, failure: Failure) -> Iterator[scrapy.Request]:
        """A seed whose server cannot be connected to (retries included) is
        tried once with the other scheme."""
        request = failure.request  # type: ignore[attr-defined]
        fallback = fallback_request(request) if cannot_connect(failure.value) else None
        if fallback is not None:
            self.crawler.stats.inc_value(f"crawler/fallback/{fallback.url.split(':', 1)[0]}")
            logger.info("Seed %s failed (%s): trying %s", request.url, failure.value, fallback.url)
            yield fallback

    # --- pages -----------------------------------------------------------

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        if not isinstance(response, TextResponse):
            return
        stats = self.crawler.stats
        depth = int(response.meta.get("depth", 0))
        # a tracked page's change key, from the tree its links come from (design/recrawl.md C.4)
        seen = response.meta.get(RECRAWL_SEEN) if self.signed else None
        if self.page_robots and header_nofollow(response.headers.getlist(b"X-Robots-Tag"), self.agent):
            links, nofollow = [], True
            if seen is not None and response.status == 200:
                seen["chg"] = text_key(response.body)  # no links to read: the text alone
        else:
            if seen is not None and response.status == 200:
                links, nofollow, signature = self.extract.page(response.body, response.url, self.agent,
                                                               signature=True)
                seen["chg"] = signature.to_bytes(6, "big")
            else:
                links, nofollow = self.extract.page(response.body, response.url, self.agent)
            if self.extract.scanned:  # too deeply nested for a tree: scanned in linear time
                stats.inc_value("crawler/links/scanned_pages")
        if nofollow:
            stats.inc_value("crawler/links/nofollow_pages")
        stats.inc_value("crawler/links/found", len(links))
        if self.robots is _UNKNOWN:
            self.robots = shared_robots(self.crawler)
        offered = known = 0
        session = None
        if not self.max_depth or depth < self.max_depth:
            session = session_of(self.crawler)
            assert session is not None, "the billion spider needs the frontier scheduler"
            # every link counts for the order (a domain's linking domains), known or not
            session.links_from(domain_of(response.url), links)
            # links the frontier has seen were checked when first offered; those
            # to this page's host count for the order within its domain
            fresh = session.unknown(links, depth=depth + 1, origin=_origin(response.url))
            known, links = len(links) - len(fresh), fresh
        if self.robots is not None and links:
            links = self._robots_allowed(links)
        if session is not None:
            offered = known + session.offer(links, depth=depth + 1, canonical=True)
        else:
            stats.inc_value("crawler/links/beyond_max_depth", len(links))
        yield {
            "url": response.url,
            "status": response.status,
            "depth": depth,
            "links": known + len(links),
            "offered": offered,
            "bytes": len(response.body),
            "truncated": "truncated" in response.flags,
            "nofollow": nofollow,
            "shard": self.shard,
        }

    def _robots_allowed(self, links: list[str]) -> list[str]:
        """``links`` less those whose host's known robots.txt refuses them.
        Checks stop after ``_ROBOTS_CHECK_BUDGET`` seconds: the rest are
        queued and checked when fetched, so no page holds the event loop."""
        known_disallowed = self.robots.known_disallowed
        clock = clock_of(self.crawler)  # the budget is spent on the crawl's clock (crawler/clock.py)
        deadline = clock.monotonic() + _ROBOTS_CHECK_BUDGET
        allowed = []
        for i, link in enumerate(links):
            if not known_disallowed(link):
                allowed.append(link)
            if i & 63 == 63 and clock.monotonic() > deadline:
                rest = links[i + 1:]
                self.crawler.stats.inc_value("crawler/links/robots_unchecked", len(rest))
                allowed += rest
                break
        self.crawler.stats.inc_value("crawler/links/robots_disallowed", len(links) - len(allowed))
        return allowed
