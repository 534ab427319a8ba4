"""Write the final stats as JSON to ``CRAWLER_STATS_FILE`` when a crawl ends."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class StatsFile:
    def __init__(self, crawler: Crawler) -> None:
        path = setting(crawler.settings, "CRAWLER_STATS_FILE")
        if not path:
            raise NotConfigured
        self.path = Path(path)
        self.crawler = crawler
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StatsFile:
        return cls(crawler)

    def spider_closed(self, reason: str) -> None:
        assert self.crawler.stats is not None
        stats: dict[str, Any] = dict(self.crawler.stats.get_stats())
        stats["finish_reason"] = reason
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(stats, default=_plain, indent=1, sort_keys=True))


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
