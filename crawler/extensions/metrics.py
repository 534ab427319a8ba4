"""Prometheus metrics at ``/metrics`` of each crawl process (prometheus-client).

Off by default: ``CRAWLER_METRICS_ENABLED = True``; ``CRAWLER_METRICS_PORT``
(9410; 0 picks a free port, logged) on ``CRAWLER_METRICS_ADDRESS``
(127.0.0.1). Values are read from the crawl's stats and its frontier when
scraped. Labels: spider and shard only; a per-domain label would explode.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from scrapy import signals
from scrapy.exceptions import NotConfigured

from crawler.scheduler.access import frontier_scheduler
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: counter name (without _total) -> (help, stats key or a function of the stats)
COUNTERS: dict[str, tuple[str, Any]] = {
    "crawler_pages_fetched": ("Responses received", "response_received_count"),
    "crawler_requests_dequeued": ("Requests taken from the frontier", "scheduler/dequeued/redis"),
    "crawler_urls_enqueued": ("URLs admitted into the frontier", "crawler/frontier/enqueued"),
    "crawler_urls_duplicate": ("URLs refused as already seen", "crawler/frontier/duplicates"),
    "crawler_urls_capped": ("URLs dropped at a domain's queue cap", "crawler/frontier/capped"),
    "crawler_links_found": ("Links extracted from pages", "crawler/links/found"),
    "crawler_links_forwarded": ("Links forwarded to other shards", "crawler/forward/sent"),
    "crawler_retries": ("Retries scheduled by the backoff middleware", "crawler/backoff/retries"),
    "crawler_robots_disallowed": ("Requests refused by robots.txt", "crawler/robots/disallowed"),
    "crawler_pages_truncated": ("Bodies cut at the size cap", "crawler/truncated"),
    "crawler_pages_non_html": ("Responses stopped as not HTML", "crawler/skipped/non_html"),
    "crawler_received_bytes": ("Body bytes received", "crawler/bytes_received"),
    "crawler_dead_letters": ("Requests sent to the dead-letter queue",
                             lambda s: sum(v for k, v in s.items() if k.startswith("crawler/dlq/"))),
    "crawler_download_errors": ("Download exceptions", "downloader/exception_count"),
}


class _Collector:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.labels = ["", "0"]

    def collect(self) -> Iterator[Any]:
        stats = self.crawler.stats.get_stats() if self.crawler.stats else {}
        names = ["spider", "shard"]
        for name, (text, source) in COUNTERS.items():
            value = source(stats) if callable(source) else stats.get(source, 0)
            family = CounterMetricFamily(name, text, labels=names)
            family.add_metric(self.labels, float(value or 0))
            yield family
        uptime = GaugeMetricFamily("crawler_uptime_seconds", "Seconds since the crawl started", labels=names)
        start = stats.get("start_time")
        if start is not None:
            from datetime import datetime, timezone

            uptime.add_metric(self.labels, (datetime.now(timezone.utc) - start).total_seconds())
        yield uptime
        lag = GaugeMetricFamily("crawler_loop_lag_max_seconds",
                                "Longest the event loop was late running a timer, this crawl", labels=names)
        lag.add_metric(self.labels, float(stats.get("crawler/loop/lag_max_ms", 0)) / 1000)
        yield lag
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is None or scheduler.frontier is None:
            return
        try:
            status = scheduler.frontier.status()
        except Exception:  # Redis away: the counters above still answer
            return
        for key, text in (("queued", "Requests queued in the frontier"),
                          ("domains_queued", "Domains with queued requests"),
                          ("domains_due", "Domains due now"),
                          ("leases", "Requests leased by any worker"),
                          ("delayed", "Requests waiting in the delayed set")):
            gauge = GaugeMetricFamily(f"crawler_frontier_{key}", text, labels=names)
            gauge.add_metric(self.labels, float(status[key]))
            yield gauge


class MetricsExtension:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "CRAWLER_METRICS_ENABLED"):
            raise NotConfigured
        self.port = setting(settings, "CRAWLER_METRICS_PORT")
        self.address = setting(settings, "CRAWLER_METRICS_ADDRESS")
        self.collector = _Collector(crawler)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)  # type: ignore[arg-type]
        self.server: Any = None
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MetricsExtension:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        self.collector.labels = [spider.name, str(getattr(spider, "shard", 0))]
        self.server, _ = start_http_server(self.port, addr=self.address, registry=self.registry)
        port = self.server.server_address[1]
        logger.info("Prometheus metrics on http://%s:%d/metrics", self.address, port)

    def spider_closed(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None
