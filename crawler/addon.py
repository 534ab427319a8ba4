"""The addon: the Redis frontier and the middlewares for any Scrapy project.

    ADDONS = {"crawler.addon.Addon": 100}

Everything is set with the ``addon`` priority, and components are only added
where the project has not placed them itself, so what a project sets (a
setting, a component's order, ``None`` to disable one) still wins.

What it changes, said in one INFO line at start (``Addon: changes ...``):
the scheduler (the Redis frontier), dedup (in Redis, SHA-256 of canonical
URLs), its downloader and spider middlewares and extensions (each extension
off until its setting asks for it; ``RecrawlMiddleware`` at 585 only when
``CRAWLER_RECRAWL`` is not ``off``), and four swaps each one setting away:
the download handler (``CRAWLER_HANDLER``), the stats class
(``CRAWLER_LEAN_STATS``), the log formatter (``CRAWLER_LEAN_LOG``) and the
garbage collector's tuning (``CRAWLER_GC_TUNING``). What a project fetches
keeps Scrapy's rules: no HTML-only filter, no page cap, no refusal of
private addresses unless the project sets them (``billion`` does).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.downloadermiddlewares.useragent import UserAgentMiddleware
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.python import global_object_name

from crawler.connection import configured_url, mask_url, scrapy_redis_parts
from crawler.extensions.concurrency import ConcurrencyController
from crawler.extensions.gcpauses import GcPauses
from crawler.extensions.looplag import LoopLagProbe
from crawler.extensions.metrics import MetricsExtension
from crawler.extensions.progress import Progress
from crawler.extensions.statsfile import StatsFile
from crawler.extensions.warc import WarcExtension
from crawler.fetch import DownloadHandler
from crawler.lean import LogFormatter, MemoryStats
from crawler.middlewares.backoff import BackoffMiddleware
from crawler.middlewares.deadletter import (
    DeadLetterMiddleware, DeadLetterRedirectMiddleware, DeadLetterSpiderMiddleware,
)
from crawler.middlewares.lock import DomainLockMiddleware
from crawler.middlewares.recrawl import RecrawlMiddleware
from crawler.middlewares.robots import SharedRobotsMiddleware
from crawler.middlewares.sizecap import SizeCapMiddleware
from crawler.middlewares.useragent import ContactUserAgentMiddleware
from crawler.middlewares.acks import FrontierAckDownloaderMiddleware, FrontierAckSpiderMiddleware
from crawler.worker.config import adopt_scrapy_delays
from crawler.identity import Fingerprinter
from crawler.scheduler.scheduler import FrontierScheduler
from crawler.settings_registry import setting, validate
from crawler.middlewares.sitemaps import SitemapMiddleware

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: scrapy-redis's components that the frontier replaces, by setting
SCRAPY_REDIS = {
    "SCHEDULER": ("scrapy_redis.scheduler.Scheduler", FrontierScheduler),
    "DUPEFILTER_CLASS": ("scrapy_redis.dupefilter.RFPDupeFilter", BaseDupeFilter),
}

DOWNLOADER_MIDDLEWARES = {
    FrontierAckDownloaderMiddleware: 1,
    DeadLetterMiddleware: 50,
    # sees a response after backoff and redirects let it through (CRAWLER_SITEMAPS)
    SitemapMiddleware: 75,
    SharedRobotsMiddleware: 100,
    ContactUserAgentMiddleware: 500,
    BackoffMiddleware: 550,
    SizeCapMiddleware: 580,
    DomainLockMiddleware: 950,
}
#: placed only when CRAWLER_RECRAWL is not off (with off nothing of recrawling loads)
RECRAWL_MIDDLEWARES = {RecrawlMiddleware: 585}
REPLACED = (RobotsTxtMiddleware, UserAgentMiddleware, RetryMiddleware)
SPIDER_MIDDLEWARES = {
    FrontierAckSpiderMiddleware: 10,
    DeadLetterSpiderMiddleware: 20,
}
# GcPauses before StatsFile: its stats are set when the spider closes, before they are written
EXTENSIONS = {GcPauses: 490, Progress: 500, StatsFile: 510, WarcExtension: 520, MetricsExtension: 530,
              LoopLagProbe: 540, ConcurrencyController: 550}


class Addon:
    def __init__(self, crawler: Crawler | None = None) -> None:
        #: the spider class, known before the spider is built: a RedisSpider is a scrapy-redis part
        self.spidercls = getattr(crawler, "spidercls", None)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Addon:
        return cls(crawler)

    def settle_redis(self, settings: BaseSettings) -> None:
        """One Redis for everything, written into ``REDIS_URL``, which
        scrapy-redis's spiders and pipeline read as the frontier does: the
        one the settings or the environment name, else in a project with
        scrapy-redis parts the one scrapy-redis would use
        (``localhost:6379``), else the embedded Redis (started when first
        used). Settled before the spider is built (a ``RedisSpider``
        connects in its ``from_crawler``) and before scrapy-redis's lines
        are replaced (they are among the parts)."""
        if settings.get("REDIS_URL"):
            return
        url = configured_url(settings, self.spidercls)  # RedisUnavailable: the command layer says it in one line
        if not url:
            from crawler.embedded import EmbeddedRedis

            url = EmbeddedRedis.from_settings(settings).url  # started when first needed
        settings.set("REDIS_URL", url, "addon")

    def say_redis(self, settings: BaseSettings) -> None:
        """Say it when the addon chose scrapy-redis's default (logging is set
        up only once the crawler is made, after the choice)."""
        if settings.getpriority("REDIS_URL") != SETTINGS_PRIORITIES["addon"]:
            return
        params = settings.getdict("REDIS_PARAMS")
        named = (os.environ.get("REDIS_URL") or settings.get("REDIS_HOST") or settings.get("REDIS_PORT")
                 or params.get("host") or params.get("port"))
        url = str(settings.get("REDIS_URL"))
        if not named and not url.startswith("unix://"):
            why = ", ".join(scrapy_redis_parts(settings, self.spidercls)) or "CRAWLER_EMBEDDED_REDIS is false"
            logger.info("Addon: Redis %s, the one scrapy-redis uses (%s; CRAWLER_EMBEDDED_REDIS=True "
                        "for the embedded one)", mask_url(url), why)

    @classmethod
    def update_pre_crawler_settings(cls, settings: BaseSettings) -> None:
        """The Redis settled before any spider is built: Scrapy builds the
        spider before it runs ``update_settings``, and a ``RedisSpider``
        connects in its ``from_crawler`` (the spider's class is not known
        yet: the project's spider modules say whether it has scrapy-redis
        parts)."""
        cls().settle_redis(settings)

    def update_settings(self, settings: BaseSettings) -> None:
        self.settle_redis(settings)  # when the addon came in after the crawler process was made
        self.say_redis(settings)
        for line in adopt_scrapy_delays(settings, self.spidercls):
            logger.info("Addon: %s", line)
        for name, (theirs, ours) in SCRAPY_REDIS.items():
            # a project moving from scrapy-redis keeps its lines: they are taken over
            if _name(settings.get(name)) == theirs:
                settings.set(name, ours, settings.getpriority(name))
                logger.info("Addon: %s = %s replaced by %s (the Redis frontier)", name, theirs, _name(ours))
        settings.set("SCHEDULER", FrontierScheduler, "addon")
        settings.set("REQUEST_FINGERPRINTER_CLASS", Fingerprinter, "addon")
        settings.set("DUPEFILTER_CLASS", BaseDupeFilter, "addon")  # dedup happens in Redis
        if setting(settings, "CRAWLER_LEAN_STATS"):
            settings.set("STATS_CLASS", MemoryStats, "addon")
        if setting(settings, "CRAWLER_LEAN_LOG"):
            settings.set("LOG_FORMATTER", LogFormatter, "addon")
        for cls in REPLACED:
            settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", cls, None)
        if RedirectMiddleware not in _classes(settings.getdict("DOWNLOADER_MIDDLEWARES")):
            # its give-ups become dead letters; a project that placed or disabled it keeps its choice
            settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", RedirectMiddleware, None)
            settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES",
                                                           DeadLetterRedirectMiddleware, 600)
        for cls, order in DOWNLOADER_MIDDLEWARES.items():
            settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", cls, order)
        if setting(settings, "CRAWLER_RECRAWL") != "off":
            for cls, order in RECRAWL_MIDDLEWARES.items():
                settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", cls, order)
        for cls, order in SPIDER_MIDDLEWARES.items():
            settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", cls, order)
        for cls, order in EXTENSIONS.items():  # each is off until its setting asks for it
            settings.setdefault_in_component_priority_dict("EXTENSIONS", cls, order)
        handlers = settings.getdict("DOWNLOAD_HANDLERS")
        ours = {"http": DownloadHandler, "https": DownloadHandler}
        if setting(settings, "CRAWLER_HANDLER") and not set(ours) & set(handlers):
            settings.set("DOWNLOAD_HANDLERS", {**handlers, **ours}, "addon")
        if settings.get("USER_AGENT", "").startswith("Scrapy/"):
            settings.set("USER_AGENT", f"{settings['BOT_NAME']} (+{{contact}})", "addon")
        validate(settings)  # before any component is built: a SettingsError, one line from the commands
        logger.info("Addon: changes %s", "; ".join(changes(settings)))


def changes(settings: BaseSettings) -> list[str]:
    """What the addon changed in these settings, as the start of the log
    says it: each part, and the setting that turns an optional one off."""
    said = [f"SCHEDULER = {_name(settings.get('SCHEDULER'))} (the Redis frontier)",
            f"DUPEFILTER_CLASS = {_name(settings.get('DUPEFILTER_CLASS'))} (dedup in Redis)",
            f"REQUEST_FINGERPRINTER_CLASS = {_name(settings.get('REQUEST_FINGERPRINTER_CLASS'))}"]
    for name, table in (("DOWNLOADER_MIDDLEWARES", DOWNLOADER_MIDDLEWARES), ("SPIDER_MIDDLEWARES", SPIDER_MIDDLEWARES),
                        ("EXTENSIONS", EXTENSIONS)):
        placed = _classes({k: v for k, v in settings.getdict(name).items() if v is not None})
        added = [cls.__name__ for cls in table if cls in placed]
        if name == "DOWNLOADER_MIDDLEWARES":
            added += [cls.__name__ for cls in (DeadLetterRedirectMiddleware, *RECRAWL_MIDDLEWARES) if cls in placed]
        said.append(f"{name} + {', '.join(added)}")
    replaced = [cls.__name__ for cls in REPLACED if settings.getdict("DOWNLOADER_MIDDLEWARES").get(cls, 0) is None]
    if replaced:
        said.append(f"Scrapy's {', '.join(replaced)} off (the addon's take their place)")
    swaps = (("DOWNLOAD_HANDLERS", "crawler.fetch.DownloadHandler for http and https", "CRAWLER_HANDLER",
              _name(settings.getdict("DOWNLOAD_HANDLERS").get("https")) == _name(DownloadHandler)),
             ("STATS_CLASS", _name(MemoryStats), "CRAWLER_LEAN_STATS",
              _name(settings.get("STATS_CLASS")) == _name(MemoryStats)),
             ("LOG_FORMATTER", _name(LogFormatter), "CRAWLER_LEAN_LOG",
              _name(settings.get("LOG_FORMATTER")) == _name(LogFormatter)),
             ("garbage collector", "tuned", "CRAWLER_GC_TUNING", setting(settings, "CRAWLER_GC_TUNING")))
    for name, value, switch, on in swaps:
        if on:
            said.append(f"{name} = {value} ({switch}=False: as without the addon)")
    return said


def _classes(components: dict) -> set[object]:
    from scrapy.utils.misc import load_object

    return {load_object(c) if isinstance(c, str) else c for c in components}


def _name(value: object) -> str:
    return global_object_name(value) if isinstance(value, type) else str(value or "")
