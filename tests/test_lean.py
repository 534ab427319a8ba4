"""The addon's stats collector and log formatter: Scrapy's behaviour, less
work per page."""

from __future__ import annotations

import logging
import warnings

import pytest
from scrapy.http import HtmlResponse, Request
from scrapy.logformatter import LogFormatter as ScrapyLogFormatter
from scrapy.settings import Settings
from scrapy.spiders import Spider
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawler.addon import Addon
from crawler.lean import LogFormatter, MemoryStats


def addon_settings(**values: object) -> Settings:
    settings = Settings()
    settings.setdict({"REDIS_URL": "redis://127.0.0.1:1/0", **values}, priority="project")
    Addon().update_settings(settings)
    return settings


def test_addon_wires_both_and_a_project_still_wins() -> None:
    settings = addon_settings()
    assert settings["STATS_CLASS"] is MemoryStats
    assert settings["LOG_FORMATTER"] is LogFormatter
    mine = addon_settings(STATS_CLASS="scrapy.statscollectors.DummyStatsCollector",
                          LOG_FORMATTER="scrapy.logformatter.LogFormatter")
    assert mine["STATS_CLASS"] == "scrapy.statscollectors.DummyStatsCollector"
    assert mine["LOG_FORMATTER"] == "scrapy.logformatter.LogFormatter"


def test_stats_keep_scrapy_s_methods_without_the_wrapper() -> None:
    crawler = get_crawler(Spider, {"STATS_CLASS": MemoryStats})
    stats = crawler.stats
    assert isinstance(stats, MemoryStats) and isinstance(stats, MemoryStatsCollector)
    assert type(stats).__getattribute__ is object.__getattribute__
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old spider argument: accepted, no warning
        stats.inc_value("crawler/x", spider=None)
    stats.inc_value("crawler/x", 2)
    stats.max_value("crawler/m", 5)
    stats.max_value("crawler/m", 3)
    assert stats.get_value("crawler/x") == 3
    assert stats.get_stats() == {"crawler/x": 3, "crawler/m": 5}


@pytest.mark.parametrize(("level", "enabled", "built"), [
    ("DEBUG", True, True), ("debug", True, True), (logging.DEBUG, True, True),
    ("INFO", True, False), (logging.WARNING, True, False), ("DEBUG", False, False),
])
def test_per_page_debug_records_only_when_they_can_show(level: object, enabled: bool, built: bool) -> None:
    crawler = get_crawler(Spider, {"LOG_LEVEL": level, "LOG_ENABLED": enabled})
    formatter = LogFormatter.from_crawler(crawler)
    spider = Spider("s")
    request = Request("https://a.test/")
    response = HtmlResponse("https://a.test/", body=b"<html></html>", request=request)
    for got, scrapy_s in ((formatter.crawled(request, response, spider),
                           ScrapyLogFormatter().crawled(request, response, spider)),
                          (formatter.scraped({"a": 1}, response, spider),
                           ScrapyLogFormatter().scraped({"a": 1}, response, spider))):
        assert got == (scrapy_s if built else None)
    assert formatter.download_error(ValueError("x"), request, spider)["level"] == logging.ERROR  # kept
