"""Prometheus metrics at ``/metrics`` of each crawl process (prometheus-client).

Off by default: ``CRAWLER_METRICS_ENABLED = True``; ``CRAWLER_METRICS_PORT``
(9410; 0 picks a free port, logged) on ``CRAWLER_METRICS_ADDRESS``
(127.0.0.1). Values are read from the crawl's stats and its frontier when
scraped. Labels: spider and shard only; a per-domain label would explode.

What a ``sum()`` over processes means:

- counters and the fetch histogram are this process's own: sums are the
  crawl's totals;
- the frontier's gauges (``crawler_frontier_*``) describe the shared Redis
  frontier, so exactly one process of each frontier exports them: the
  holder of a short lease in Redis (:class:`FrontierExporter`), which a
  thread renews; when the holder stops (or dies, after the lease's
  ``EXPORTER_TTL_MS``) another process with metrics takes over. Every
  process exports ``crawler_frontier_exporter`` (1 in the holder, 0 in the
  others), so sums are right per spider and shard;
- among them, recrawling's (``crawler_frontier_recrawl_*``, CRAWLER_RECRAWL;
  ``Frontier.recrawl_status``): tracked URLs, domains overdue, the revisit
  lag, the 304 share of revisits, lying hosts (:class:`HostSweep`: a SCAN
  spread over the scrapes, ``RECRAWL_SCAN_CALLS`` calls each), and as
  counters the frontier's own ``_bytes_saved_total`` and
  ``_untracked_total``; all 0 with recrawl off;
- ``crawler_fetch_duration_seconds``: from the download handler's start
  (connection, TLS, request) to the last byte of the body, per response; a
  response whose handler sent no ``headers_received`` signal after setting
  ``download_latency`` (the time to the headers) is not observed.

A port already in use (a second process on one machine) is one error line:
that process crawls on without metrics (and never exports the frontier's
gauges); the exit status is not changed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import redis
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from redis.exceptions import RedisClusterException
from scrapy import signals
from scrapy.exceptions import NotConfigured

from crawler.extensions.looplag import LoopLagProbe
from crawler.extensions.progress import frontier_duplicates
from crawler.worker import session_of
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawler.worker import Frontier, Keys

logger = logging.getLogger(__name__)

#: counter name (without _total) -> (help, stats key or a function of the stats)
COUNTERS: dict[str, tuple[str, Any]] = {
    "crawler_pages_fetched": ("Responses received", "response_received_count"),
    "crawler_requests_dequeued": ("Requests taken from the frontier", "scheduler/dequeued/redis"),
    "crawler_urls_enqueued": ("URLs admitted into the frontier", "crawler/frontier/enqueued"),
    "crawler_urls_duplicate": ("URLs refused as already seen (in Redis, or known in the process)",
                               frontier_duplicates),
    "crawler_urls_spilled": ("URLs admitted past their domain's head, into the compact tier (kept, never dropped)",
                             "crawler/frontier/spilled"),
    "crawler_urls_over_budget": ("URLs refused past their domain's budget (CRAWLER_DOMAIN_BUDGET, by rank up to "
                                 "CRAWLER_DOMAIN_BUDGET_MAX): not marked seen, taken if offered after it grew",
                                 "crawler/frontier/over_budget"),
    "crawler_tier_packed": ("Requests packed into compact-tier blocks by this process", "crawler/frontier/tier/packed"),
    "crawler_tier_unpacked": ("Requests unpacked from compact-tier blocks into heads by this process",
                              "crawler/frontier/tier/unpacked"),
    "crawler_links_found": ("Links extracted from pages", "crawler/links/found"),
    "crawler_links_forwarded": ("Links forwarded to other shards", "crawler/forward/sent"),
    "crawler_retries": ("Retries scheduled by the backoff middleware", "crawler/backoff/retries"),
    "crawler_robots_disallowed": ("Requests refused by robots.txt", "crawler/robots/disallowed"),
    "crawler_pages_truncated": ("Bodies cut at the size cap", "crawler/truncated"),
    "crawler_pages_non_html": ("Responses stopped as not HTML", "crawler/skipped/non_html"),
    "crawler_received_bytes": ("Body bytes received", "crawler/bytes_received"),
    "crawler_dead_letters_unrecorded": ("Dead letters lost: Redis was unreachable when they were written",
                                        "crawler/dlq/unrecorded"),
    "crawler_download_errors": ("Download exceptions", "downloader/exception_count"),
    "crawler_loop_stalls": ("Event-loop stalls over 100 ms (the loop-lag probe's timer that late)",
                            "crawler/loop/stalls"),
    "crawler_tls_handshakes": ("TLS handshakes", "crawler/tls/handshakes"),
    "crawler_tls_resumed": ("TLS handshakes that resumed a session (the others: a host met for the first "
                            "time, or its session gone)", "crawler/tls/resumed"),
}

#: the stats of dead letters: this prefix and the reason (``crawler_dead_letters_total{reason=...}``)
DEAD_LETTER_STATS = "crawler/dlq/"

#: the frontier's gauges: status() key -> help
FRONTIER_GAUGES: dict[str, str] = {
    "queued": "Requests queued in the frontier (exported by one process per frontier)",
    "domains_queued": "Domains with queued requests (exported by one process per frontier)",
    "domains_due": "Domains due now (exported by one process per frontier)",
    "leases": "Requests leased by any worker (exported by one process per frontier)",
    "delayed": "Requests waiting in the delayed set (exported by one process per frontier)",
    "compact": "Requests kept compressed in the compact tier (exported by one process per frontier)",
    "spill": "Requests past a head waiting uncompressed to be packed (exported by one process per frontier)",
    "compact_bytes": "Bytes of the compact tier's blocks (exported by one process per frontier)",
}

#: per-address politeness (CRAWLER_IP_DELAY), from ``Frontier.addresses_status``
ADDRESS_GAUGES: dict[str, str] = {
    "addresses_known": "IP addresses the frontier knows (per-address politeness; every shard's on one Redis)",
    "requests_waiting_on_address": "Domains due but waiting for their address's turn",
    "domains_resolving": "Names being looked up for the frontier",
    "shared": "Addresses found to be shared front ends",
}

#: recrawling (CRAWLER_RECRAWL), from ``Frontier.recrawl_status``: name -> (its key there, help); 0 when off
RECRAWL_GAUGES: dict[str, tuple[str, str]] = {
    "crawler_frontier_recrawl_tracked": ("tracked", "URLs with a fetch history, revisited on their schedule"),
    "crawler_frontier_recrawl_domains_overdue": ("domains_overdue", "Domains whose first revisit is due or past due"),
    "crawler_frontier_recrawl_lag_seconds": ("lag_seconds", "How long the most overdue domain's first revisit "
                                             "has been due, seconds (0: none overdue)"),
    "crawler_frontier_recrawl_not_modified_share": ("not_modified_share", "Share of the revisits answered that "
                                                    "were 304 Not Modified"),
    "crawler_frontier_recrawl_hosts_lying": ("hosts_lying", "Hosts with a validator (ETag, Last-Modified) not sent "
                                             "because they were caught lying about it"),
}
#: the frontier's recrawl counters (monotonic in its ``:stats``): name without _total -> (key, help)
RECRAWL_COUNTERS: dict[str, tuple[str, str]] = {
    "crawler_frontier_recrawl_bytes_saved": ("bytes_saved", "Body bytes revisits did not download or store "
                                             "(304s and identical payloads)"),
    "crawler_frontier_recrawl_untracked": ("untracked", "URLs fetched once without a history: a cap "
                                           "(CRAWLER_RECRAWL_MAX_TRACKED, _DOMAIN_MAX) was reached"),
    "crawler_frontier_recrawl_hints_applied": ("hints_applied", "Sitemap <lastmod> hints that brought a tracked "
                                               "URL's visit sooner"),
}
#: SCAN calls (COUNT 1000) one scrape spends at most on the sweep for lying hosts (:class:`HostSweep`)
RECRAWL_SCAN_CALLS = 100

#: fetch duration buckets, seconds: a fast local page to a slow one near DOWNLOAD_TIMEOUT
FETCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0, float("inf"))

#: the exporter lease: its time to live, how often its holder renews it (and
#: the others try to take it), and how long before its end the holder stops
#: trusting it (a renewal that might reach Redis after the end is not sent)
EXPORTER_TTL_MS = 15_000
EXPORTER_RENEW_S = 5.0
EXPORTER_MARGIN_S = 2.0

_REDIS_ERRORS = (redis.RedisError, RedisClusterException, OSError)


def exporter_key(keys: Keys) -> str:
    """The exporter lease of a frontier: in its hash slot, not under its base."""
    return f"{keys.prefix}:metrics:{{{keys.spider}:{keys.shard}}}"


class FrontierExporter:
    """Which one process exports a frontier's gauges: the holder of the
    string ``<prefix>:metrics:{<spider>:<shard>}`` (its token, ``PX`` ttl;
    outside the frontier's keys, so clearing the frontier leaves it alone).

    :meth:`hold` takes the lease (``SET NX PX``) or renews it (``GET`` and
    ``PEXPIRE`` in one ``MULTI``, sent only while the local deadline, taken
    before the previous write was sent and so never later than Redis's
    expiry, is more than ``margin`` away). :attr:`held` is true until that
    local deadline, so a holder cut off from Redis stops exporting before
    another process can take the lease over.
    """

    def __init__(self, client: Any, key: str, *, ttl_ms: int = EXPORTER_TTL_MS,
                 margin: float = EXPORTER_MARGIN_S, token: str | None = None) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = ttl_ms
        self.margin = margin
        self.token = (token or f"{os.getpid()}:{uuid.uuid4().hex}").encode()
        self.until = 0.0  # monotonic deadline of the lease as this process knows it

    @property
    def held(self) -> bool:
        return time.monotonic() < self.until

    def hold(self) -> bool:
        """Take or renew the lease; whether this process holds it now."""
        sent = time.monotonic()
        if sent < self.until - self.margin:
            pipe = self.client.pipeline(transaction=True)
            pipe.get(self.key)
            pipe.pexpire(self.key, self.ttl_ms)
            owner, _ = pipe.execute()
            # not ours (the key was deleted, by a flush say, and another process
            # took it): that PEXPIRE only lengthened the other holder's lease
            self.until = sent + self.ttl_ms / 1000 if owner == self.token else 0.0
        elif self.client.set(self.key, self.token, nx=True, px=self.ttl_ms):
            self.until = sent + self.ttl_ms / 1000
        else:
            self.until = 0.0  # another's, or ours about to lapse: taken again once it has
        return self.held

    def release(self) -> None:
        """Give the lease up at once (only while surely still ours), so another
        process takes over at its next try rather than after the ttl."""
        ours = time.monotonic() < self.until - self.margin
        self.until = 0.0
        if ours:
            self.client.delete(self.key)


class _Election(threading.Thread):
    """Runs :meth:`FrontierExporter.hold` every ``interval`` seconds until stopped."""

    def __init__(self, exporter: FrontierExporter, interval: float) -> None:
        super().__init__(name="metrics-exporter-lease", daemon=True)
        self.exporter = exporter
        self.interval = interval
        self.stopped = threading.Event()
        self.failing = False

    def run(self) -> None:
        while True:
            try:
                held = self.exporter.held
                if self.exporter.hold() != held:
                    logger.debug("Metrics: %s the frontier's gauges",
                                 "no longer exporting" if held else "exporting")
                self.failing = False
            except _REDIS_ERRORS as e:  # Redis away: the lease lapses on its own; the guard says the rest
                if not self.failing:
                    logger.debug("Metrics: cannot renew the exporter lease: %s", e)
                self.failing = True
            if self.stopped.wait(self.interval):
                return

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)
        try:
            self.exporter.release()
        except _REDIS_ERRORS:
            pass


class HostSweep:
    """The hosts' trust records (``:rhost:<h>``) for the lying-hosts gauge,
    swept :data:`RECRAWL_SCAN_CALLS` SCAN calls a scrape, so that a scrape
    of a frontier on a Redis of millions of keys stays short. The gauge
    counts what the last full sweep found, updated by the sweep under way
    (a lower bound until the first sweep has gone round; on a small Redis a
    sweep goes round in one scrape). No sweep while recrawling is off and
    nothing is tracked."""

    def __init__(self, calls: int = RECRAWL_SCAN_CALLS) -> None:
        self.calls = calls
        self.started = False
        self.cursor = 0
        self.sweeping: dict[str, dict[str, Any]] = {}
        self.swept: dict[str, dict[str, Any]] = {}

    @property
    def hosts(self) -> dict[str, dict[str, Any]]:
        return {**self.swept, **self.sweeping}

    def step(self, frontier: Frontier) -> None:
        self.started = True
        self.cursor, found = frontier.scan_hosts(self.cursor, self.calls)
        self.sweeping.update(found)
        if not self.cursor:  # round: what it found is the whole, hosts gone since drop out
            self.swept, self.sweeping = self.sweeping, {}


class _Collector:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.labels = ["", "0"]
        self.exporter: FrontierExporter | None = None
        self.frontier: Frontier | None = None
        self.probe: LoopLagProbe | None = None
        self.hosts = HostSweep()

    def collect(self) -> Iterator[Any]:
        stats = self.crawler.stats.get_stats() if self.crawler.stats else {}
        names = ["spider", "shard"]
        for name, (text, source) in COUNTERS.items():
            value = source(stats) if callable(source) else stats.get(source, 0)
            family = CounterMetricFamily(name, text, labels=names)
            family.add_metric(self.labels, float(value or 0))
            yield family
        # stats crawler/dlq/<reason>, one series per reason seen (unrecorded ones: their own counter)
        dead = CounterMetricFamily("crawler_dead_letters", "Requests sent to the dead-letter queue, by reason",
                                   labels=[*names, "reason"])
        for key, value in sorted(stats.items()):
            if key.startswith(DEAD_LETTER_STATS) and key != "crawler/dlq/unrecorded":
                dead.add_metric([*self.labels, key[len(DEAD_LETTER_STATS):]], float(value or 0))
        yield dead
        # a timestamp, as process_start_time_seconds: `time() - ...` is the uptime
        start = GaugeMetricFamily("crawler_start_time_seconds", "Start time of the crawl since the Unix epoch, "
                                  "in seconds", labels=names)
        started = stats.get("start_time")
        if started is not None:
            start.add_metric(self.labels, started.timestamp())
        yield start
        lag = GaugeMetricFamily("crawler_loop_lag_max_seconds",
                                "Longest the event loop was late running a timer, this crawl", labels=names)
        lag.add_metric(self.labels, float(stats.get("crawler/loop/lag_max_ms", 0)) / 1000)
        yield lag
        if self.probe is not None:
            minute = GaugeMetricFamily("crawler_loop_lag_minute_max_seconds",
                                       "Longest the event loop was late running a timer, over the last minute",
                                       labels=names)
            minute.add_metric(self.labels, self.probe.last_minute() / 1000)
            yield minute
        if self.exporter is None or self.frontier is None:
            return
        held = self.exporter.held
        exporter = GaugeMetricFamily("crawler_frontier_exporter",
                                     "1 in the one process that exports this frontier's gauges, 0 in the others",
                                     labels=names)
        exporter.add_metric(self.labels, 1.0 if held else 0.0)
        yield exporter
        if not held:
            return
        try:
            status = self.frontier.status()
        except _REDIS_ERRORS:  # Redis away: the counters above still answer
            return
        for key, text in FRONTIER_GAUGES.items():
            gauge = GaugeMetricFamily(f"crawler_frontier_{key}", text, labels=names)
            gauge.add_metric(self.labels, float(status[key]))
            yield gauge
        try:
            recrawl = self.frontier.recrawl_status(top=0, hosts=self.hosts.hosts)
            if recrawl.get("tracked") or recrawl.get("domains_tracked") or recrawl.get("mode", "off") != "off":
                first = not self.hosts.started
                self.hosts.step(self.frontier)  # for the next scrape; the first one's own
                if first:
                    recrawl = self.frontier.recrawl_status(top=0, hosts=self.hosts.hosts)
            elif self.hosts.started:
                self.hosts = HostSweep()  # recrawling off and nothing tracked: nothing to sweep
        except _REDIS_ERRORS:
            return
        for name, (key, text) in RECRAWL_GAUGES.items():
            gauge = GaugeMetricFamily(name, f"{text} (exported by one process per frontier)", labels=names)
            gauge.add_metric(self.labels, float(recrawl[key]))
            yield gauge
        for name, (key, text) in RECRAWL_COUNTERS.items():
            counter = CounterMetricFamily(name, f"{text} (exported by one process per frontier)", labels=names)
            counter.add_metric(self.labels, float(recrawl[key]))
            yield counter
        try:
            addresses = self.frontier.addresses_status()
        except _REDIS_ERRORS:
            return
        if addresses is None:
            return
        for key, text in ADDRESS_GAUGES.items():
            value = addresses[key]
            gauge = GaugeMetricFamily(f"crawler_frontier_{key}", text, labels=names)
            gauge.add_metric(self.labels, float(len(value) if isinstance(value, dict) else value))
            yield gauge
        # the 10 busiest only: the label's values stay few
        busiest = GaugeMetricFamily("crawler_frontier_busiest_address_waiting",
                                    "Domains waiting on one of the 10 addresses serving the most domains",
                                    labels=[*names, "address"])
        for b in addresses["busiest"]:
            busiest.add_metric([*self.labels, b["address"]], float(b["waiting"]))
        yield busiest


class MetricsExtension:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "CRAWLER_METRICS_ENABLED"):
            raise NotConfigured
        self.crawler = crawler
        self.port = setting(settings, "CRAWLER_METRICS_PORT")
        self.address = setting(settings, "CRAWLER_METRICS_ADDRESS")
        self.collector = _Collector(crawler)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)  # type: ignore[arg-type]
        # process_* (CPU, memory, open files), python_info and python_gc_*: the
        # default registry's collectors, in this process's own registry
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.fetch_seconds = Histogram(
            "crawler_fetch_duration_seconds",
            "Seconds from the download handler's start (connection, TLS, request) to the last byte, per response",
            ["spider", "shard"], registry=self.registry, buckets=FETCH_BUCKETS)
        self.fetch_child: Any = None
        # request -> monotonic time its download started; a request that fails
        # after its headers (no response) leaves with its last reference
        self.started: weakref.WeakKeyDictionary[Request, float] = weakref.WeakKeyDictionary()
        self.server: Any = None
        self.election: _Election | None = None
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.headers_received, signal=signals.headers_received)
        crawler.signals.connect(self.response_downloaded, signal=signals.response_downloaded)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MetricsExtension:
        return cls(crawler)

    # --- fetch duration ----------------------------------------------------

    def headers_received(self, request: Request, **_: Any) -> None:
        # the handler has just set download_latency: the start is now minus it
        latency = request.meta.get("download_latency")
        if latency is not None:
            self.started[request] = time.monotonic() - latency

    def response_downloaded(self, request: Request, response: Response, **_: Any) -> None:
        start = self.started.pop(request, None)
        if start is not None and self.fetch_child is not None:
            self.fetch_child.observe(time.monotonic() - start)

    # --- lifecycle -----------------------------------------------------------

    def spider_opened(self, spider: Spider) -> None:
        labels = [spider.name, str(getattr(spider, "shard", 0))]
        self.collector.labels = labels
        self.fetch_child = self.fetch_seconds.labels(*labels)
        extensions = self.crawler.extensions.middlewares if self.crawler.extensions else ()
        self.collector.probe = next((e for e in extensions if isinstance(e, LoopLagProbe)), None)
        try:
            self.server, _ = start_http_server(self.port, addr=self.address, registry=self.registry)
        except OSError as e:
            logger.error("Metrics: cannot serve on %s:%d (%s): this crawl goes on without metrics; give each "
                         "process of a machine its own CRAWLER_METRICS_PORT, or 0 for any free port (logged)",
                         self.address, self.port, e.strerror or e)
            return
        port = self.server.server_address[1]
        logger.info("Prometheus metrics on http://%s:%d/metrics", self.address, port)
        service = session_of(self.crawler)
        if service is not None:
            frontier = service.store
            self.collector.frontier = frontier
            self.collector.exporter = FrontierExporter(frontier.client, exporter_key(frontier.keys))
            self.election = _Election(self.collector.exporter, EXPORTER_RENEW_S)
            self.election.start()

    def spider_closed(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.election is not None:
            self.election.stop()
            self.election = None
        self.started.clear()
