"""Scrapy's stats collector and log formatter, without their per-page costs.

The addon sets both (``STATS_CLASS``, ``LOG_FORMATTER``) with its own
priority, so a project's own classes still win. Each removes a cost that
Scrapy pays on every page whatever the crawl (py-spy, bench_openweb.py):

- ``MemoryStats``: Scrapy 2.13+ wraps every attribute read of its stats
  collector in a ``__getattribute__`` that looks for a deprecated
  ``spider`` argument, a dozen times per page (docs/benchmarks.md). The
  methods are Scrapy's own and still take ``spider`` (without the warning).
- ``LogFormatter``: Scrapy builds a ``Crawled (200)`` and a ``Scraped from``
  DEBUG record for every page and lets the log handler drop them when
  ``LOG_LEVEL`` is higher; here they are not built then.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.logformatter import LogFormatter as ScrapyLogFormatter
from scrapy.statscollectors import MemoryStatsCollector

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
    from scrapy.logformatter import LogFormatterResult
    from typing_extensions import Self


class MemoryStats(MemoryStatsCollector):
    __getattribute__ = object.__getattribute__


class LogFormatter(ScrapyLogFormatter):
    def __init__(self, debug: bool = True) -> None:
        self.debug = debug

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        level = settings.get("LOG_LEVEL")
        if isinstance(level, str):
            level = logging.getLevelName(level.upper())  # a number, or a message for an unknown name
        return cls(debug=settings.getbool("LOG_ENABLED") and (not isinstance(level, int) or level <= logging.DEBUG))

    def crawled(self, request: Request, response: Response, spider: Spider) -> LogFormatterResult | None:
        return super().crawled(request, response, spider) if self.debug else None

    def scraped(self, item: Any, response: Response | Any, spider: Spider) -> LogFormatterResult | None:
        return super().scraped(item, response, spider) if self.debug else None
