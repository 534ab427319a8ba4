"""The Prometheus endpoint (crawler/extensions/metrics.py), with real Redis,
real HTTP and real crawl processes: the exposition parses (prometheus-client's
parsers; ``promtool check metrics`` too when it is installed), the frontier's
gauges come from one process per frontier, the fetch histogram is the time
to the last byte, and a port clash is one line."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable

import redis
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from crawler.extensions.metrics import FrontierExporter
from tests.servers import ROOT, free_port, scrapy_env, wait_until

QUIET = dict(links=6, size_fixed=3000, private_share=0, cross_share=0.3, dup_share=0.2, crawl_delay_share=0)
LABELS = '{shard="0",spider="demo"}'


def scrape(port: int, *, openmetrics: bool = False) -> str:
    """The body of ``/metrics``, or "" while nothing answers there."""
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.read().decode()
    except OSError:
        return ""


def samples(body: str) -> dict[str, float]:
    """``name{labels}`` -> value, through prometheus-client's parser (which
    raises on a malformed exposition)."""
    out = {}
    for family in parse_text(body):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def demo(port: int, starts: Iterable[str], *settings: str) -> list[str]:
    return [sys.executable, "-m", "scrapy", "crawl", "demo", "-a", f"start_urls={','.join(starts)}",
            "-s", "CRAWLER_METRICS_ENABLED=True", "-s", f"CRAWLER_METRICS_PORT={port}", *settings]


def stop(proc: subprocess.Popen[str]) -> str:
    """End a crawl as Ctrl-C does (a graceful close), its stderr."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1]


def test_prometheus_metrics_during_a_crawl(redis_url: str, make_web) -> None:
    # bodies of 20 KB at 50 KB/s: every page takes 0.4 s after its headers
    web = make_web(domains=2, pages=8, **{**QUIET, "size_fixed": 20_000}, bandwidth=50_000)
    port = free_port()
    proc = subprocess.Popen(demo(port, [web.url(0), web.url(1)], "-s", "CRAWLER_DOMAIN_DELAY=0.1"),
                            cwd=ROOT, env=scrapy_env(redis_url), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    def three_fetches() -> tuple[str, str] | None:
        if proc.poll() is not None:
            return "", ""  # ended first: the assertions below say what it saw
        text = scrape(port)
        if samples(text).get(f"crawler_fetch_duration_seconds_count{LABELS}", 0) < 3:
            return None
        return text, scrape(port, openmetrics=True)

    body, openmetrics = wait_until(three_fetches, 60, "three fetches scraped")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert body, "no scrape saw three fetches"
    values = samples(body)
    assert values[f"crawler_pages_fetched_total{LABELS}"] > 0
    # one process on the frontier: it exports the frontier's gauges
    assert values[f"crawler_frontier_exporter{LABELS}"] == 1
    assert f"crawler_frontier_queued{LABELS}" in values
    # the loop-lag probe's worst stall, in seconds: under a second on a page of 30 links
    assert 0 <= values[f"crawler_loop_lag_max_seconds{LABELS}"] < 1
    # the last minute's worst is one of the crawl's lateness values: never above the crawl's worst
    # (which the stats keep to 0.1 ms)
    minute = values[f"crawler_loop_lag_minute_max_seconds{LABELS}"]
    assert 0 <= minute <= values[f"crawler_loop_lag_max_seconds{LABELS}"] + 0.00005
    assert f"crawler_loop_stalls_total{LABELS}" in values
    # the time to the last byte, not to the headers (milliseconds here): pages
    # are observed above 0.25 s (robots.txt, one small write, below it)
    count = values[f"crawler_fetch_duration_seconds_count{LABELS}"]
    fast = values['crawler_fetch_duration_seconds_bucket{le="0.25",shard="0",spider="demo"}']
    assert count - fast >= 1 and fast <= 2
    # prometheus-client's process and platform (and gc) collectors
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "python_gc_objects_collected_total{generation=\"0\"}"):
        assert name in values, name
    assert any(name.startswith("python_info{") for name in values)
    assert all(name.split("{")[0].endswith("_total") for name in values if "_total" in name)
    assert not any("domain=" in name for name in values)  # no per-domain label
    # the OpenMetrics exposition parses with its strict parser too
    assert "crawler_fetch_duration_seconds" in {f.name for f in parse_openmetrics(openmetrics)}
    promtool = shutil.which("promtool")
    if promtool:
        check = subprocess.run([promtool, "check", "metrics"], input=body, check=False, capture_output=True, text=True,
                               timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr


def test_frontier_gauges_come_from_one_process(redis_url: str, make_web) -> None:
    web = make_web(domains=1, pages=300, **QUIET)
    ports = [free_port(), free_port()]
    env = scrapy_env(redis_url)
    # one frontier, two processes; slow enough that both are still crawling when asked
    procs = [subprocess.Popen(demo(port, [web.url(0)], "-s", "CRAWLER_DOMAIN_DELAY=0.3",
                                   "-s", "SCHEDULER_PERSIST=True"),
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for port in ports]
    try:
        def one_exporter() -> tuple[list[dict[str, float]], list[float]] | None:
            bodies = [samples(scrape(port)) for port in ports]
            exporters = [b.get(f"crawler_frontier_exporter{LABELS}", -1) for b in bodies]
            return (bodies, exporters) if -1 not in exporters and sum(exporters) == 1 else None

        bodies, exporters = wait_until(one_exporter, 60, "one process exporting the frontier's gauges")
        assert sorted(exporters) == [0, 1], exporters
        holder = exporters.index(1)
        other = 1 - holder
        # the frontier's gauges in the holder's answer only: a sum() over processes is right
        assert f"crawler_frontier_queued{LABELS}" in bodies[holder]
        assert not any(name.startswith("crawler_frontier_") and name != f"crawler_frontier_exporter{LABELS}"
                       for name in bodies[other])
        assert bodies[other][f"crawler_pages_fetched_total{LABELS}"] >= 0  # its own counters still there
        # the holder stops: it gives the lease up and the other takes the gauges over
        err = stop(procs[holder])
        assert "Traceback" not in err, err[-3000:]
        def taken_over() -> dict[str, float] | None:
            assert procs[other].poll() is None, "the other process ended before taking the gauges over"
            values = samples(scrape(ports[other]))
            return values if values.get(f"crawler_frontier_exporter{LABELS}") == 1 else None

        assert f"crawler_frontier_queued{LABELS}" in wait_until(taken_over, 30, "the other process exporting")
    finally:
        for proc in procs:
            stop(proc)


def test_metrics_port_in_use_is_one_line(redis_url: str, make_web) -> None:
    web = make_web(domains=1, pages=10, **QUIET)
    client = redis.Redis.from_url(redis_url)
    with socket.socket() as taken:  # another worker's metrics, say
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.Popen(demo(port, [web.url(0)], "-s", "CRAWLER_DOMAIN_DELAY=0.1"),
                                cwd=ROOT, env=scrapy_env(redis_url), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        leases: list[bytes] = []

        def ended() -> bool:  # sampled all along: a process without metrics never holds the exporter lease
            leases.extend(client.keys("*:metrics:*"))
            return proc.poll() is not None

        wait_until(ended, 120, "the crawl ending", every=0.05)
        _, err = proc.communicate(timeout=120)
    client.close()
    assert proc.returncode == 0, err[-3000:]
    lines = [line for line in err.splitlines() if "Metrics: cannot serve" in line]
    assert len(lines) == 1, err[-3000:]
    assert f"127.0.0.1:{port}" in lines[0] and "ERROR" in lines[0] and "without metrics" in lines[0]
    assert "Traceback" not in err and "Error caught on signal handler" not in err, err[err.find("Traceback") - 300:][:2500]
    assert re.search(r"'item_scraped_count': [1-9]", err)  # the crawl went on
    assert not leases


def test_exporter_lease(redis_client: redis.Redis) -> None:
    key = "t:metrics:{demo:0}"
    a = FrontierExporter(redis_client, key, ttl_ms=1000, margin=0.2, token="a")
    b = FrontierExporter(redis_client, key, ttl_ms=1000, margin=0.2, token="b")
    assert a.hold() and not b.hold()
    assert a.hold() and a.held and not b.held  # renewed
    assert 0 < redis_client.pttl(key) <= 1000
    a.release()  # handed over at once
    assert not a.held and redis_client.get(key) is None
    assert b.hold() and not a.hold()
    # the holder stops renewing (it died): the lease lapses, in Redis and in its own view
    wait_until(lambda: redis_client.get(key) is None, 5, "the lease's key expiring")
    assert not b.held  # its own view ends before Redis's (the margin)
    assert a.hold() and not b.hold()
    # the lease's key deleted under its holder (a flush) and taken by another:
    # the old holder learns it at its next renewal and leaves the new one's lease alone
    redis_client.delete(key)
    assert b.hold()
    assert not a.hold() and not a.held
    assert redis_client.get(key) == b"b" and b.held
    # a release that may come after the lease lapsed deletes nothing
    b.until = time.monotonic() + 0.1  # within the margin
    b.release()
    assert redis_client.get(key) == b"b"


def test_the_progress_line_counts_domains_exactly_then_in_4_kb() -> None:
    """``domains=`` kept every host name met (a crawl of days meets millions):
    exact up to 65,536, then an estimate within a few percent that holds no name."""
    from crawler.extensions.progress import DistinctCount

    count = DistinctCount()
    for _ in range(2):  # a name met again is not counted again
        for i in range(DistinctCount.EXACT):
            count.add(f"d{i}.test")
        assert len(count) == DistinctCount.EXACT and count.exact is not None
    for i in range(DistinctCount.EXACT, 300_000):
        count.add(f"d{i}.test")
    assert count.exact is None  # the names are gone
    assert abs(len(count) - 300_000) < 300_000 * 0.05, len(count)
    for i in range(0, 300_000, 7):
        count.add(f"d{i}.test")
    assert abs(len(count) - 300_000) < 300_000 * 0.05, len(count)
