"""The operator's kit in ops/: every metric the Grafana dashboard and the
Prometheus alert rules query is one a live crawl's ``/metrics`` exports (a
real crawl with dead letters, scraped over HTTP), and the rules pass
``promtool check rules`` where promtool is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from typing import Any

import pytest
import yaml

from tests.servers import ROOT, free_port, scrapy_env, wait_until
from tests.test_metrics import LABELS, QUIET, demo, samples, scrape, stop

DASHBOARD = ROOT / "ops" / "grafana-dashboard.json"
RULES = ROOT / "ops" / "prometheus-rules.yml"

#: PromQL's own words, and the label names the queries use
PROMQL = {"sum", "max", "min", "avg", "count", "rate", "irate", "increase", "changes", "histogram_quantile",
          "clamp_min", "time", "by", "without", "and", "or", "unless", "on", "ignoring", "label_values",
          "spider", "shard", "reason", "instance", "job", "le"}
#: series Prometheus makes itself for every target (not in any /metrics)
SYNTHETIC = {"up"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana variable query)
    reads: its identifiers less PromQL's words, label names, quoted label
    values and Grafana's ``$variables``."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\$\{?\w+\}?", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    names = set(re.findall(r"(?<![\w.])[a-zA-Z_:][\w:]*", expr)) - PROMQL
    return names


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = []

    def panels(items: list[dict[str, Any]]) -> None:
        for panel in items:
            queries.extend(t["expr"] for t in panel.get("targets", []))
            panels(panel.get("panels", []))

    panels(board["panels"])
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def rule_queries() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_query_parser_sees_every_metric() -> None:
    assert metric_names('sum by (le, spider) (rate(crawler_fetch_duration_seconds_bucket{spider=~"$spider"}'
                        '[$__rate_interval]))') == {"crawler_fetch_duration_seconds_bucket"}
    assert metric_names("time() - max by (instance) (crawler_start_time_seconds)") == {"crawler_start_time_seconds"}
    assert metric_names('up{job="crawler"} == 0 and on (spider) x_total > 0.5') == {"up", "x_total"}


def test_the_kit_is_well_formed() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"] == "polite-crawler"
    assert len(dashboard_queries()) > 20
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule


def test_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rule_queries())} rules found" in check.stdout


def test_every_metric_queried_is_exported_by_a_live_crawl(redis_url: str, make_web) -> None:
    # 404s: dead letters, labelled by reason; slow enough to be scraped while it runs
    web = make_web(domains=2, pages=80, faults={"404": 0.3}, **QUIET)
    port = free_port()
    started = time.time()
    proc = subprocess.Popen(demo(port, [web.url(0), web.url(1)], "-s", "CRAWLER_DOMAIN_DELAY=0.2"), cwd=ROOT,
                            env=scrapy_env(redis_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def ready() -> dict[str, float]:
            values = samples(scrape(port))
            dead = values.get(f'crawler_dead_letters_total{{reason="http_404",shard="0",spider="demo"}}', 0)
            fetched = values.get(f"crawler_fetch_duration_seconds_count{LABELS}", 0)
            assert proc.poll() is None, "the crawl ended before it was scraped"
            return values if dead >= 1 and fetched >= 3 and f"crawler_frontier_queued{LABELS}" in values else {}

        values = wait_until(ready, 60, "a scrape with dead letters, fetches and the frontier's gauges")
    finally:
        err = stop(proc)
    assert "Traceback" not in err, err[-3000:]
    exported = {name.split("{")[0] for name in values}
    queried = {name for expr in dashboard_queries() + rule_queries() for name in metric_names(expr)}
    assert queried - SYNTHETIC <= exported, sorted(queried - SYNTHETIC - exported)
    # every crawler_* family is on the dashboard
    assert {n for n in exported if n.startswith("crawler_") and not n.endswith("_created")} - {
        "crawler_fetch_duration_seconds_count", "crawler_fetch_duration_seconds_sum"} <= queried
    # Prometheus's naming advice: a start timestamp, not a time-since; dead letters by reason
    assert started <= values[f"crawler_start_time_seconds{LABELS}"] <= time.time()
    assert "crawler_uptime_seconds" not in exported
    assert f"crawler_dead_letters_total{LABELS}" not in values
    assert values[f"crawler_dead_letters_unrecorded_total{LABELS}"] == 0


def test_metric_names_in_the_docs() -> None:
    section = (ROOT / "docs" / "operations.md").read_text().split("\n## Prometheus\n", 1)[1].split("\n## ", 1)[0]
    assert "crawler_start_time_seconds" in section and "crawler_uptime_seconds" not in section
    assert "ops/grafana-dashboard.json" in section and "ops/prometheus-rules.yml" in section

