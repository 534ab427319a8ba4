"""What the operator sees of recrawling (design/recrawl.md C.7, E): the view
``Frontier.recrawl_status()`` / ``recrawl_urls()``, ``scrapy frontier``'s
recrawl block and ``--recrawl <domain>``, and the Prometheus gauges, all on a
frontier seeded directly in a real Redis with the layout of E (records made
by ``crawler.recrawl.record.pack``), so that every number printed is one the
test put there."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from typing import Any

import redis
from prometheus_client import generate_latest

from crawler import serializers
from crawler.clock import ManualClock
from crawler.commands.frontier import span
from crawler.extensions.metrics import FrontierExporter, HostSweep, MetricsExtension, exporter_key
from crawler.recrawl.record import History, Refers, pack
from crawler.store import Frontier, Keys
from tests.servers import ROOT, crawler_for, scrapy_env
from tests.test_metrics import samples

KEYS = Keys("crawler", "demo", 0)
B = KEYS.base
HOUR, DAY = 3_600_000, 86_400_000
#: regular visits every 16 h (rate bin 4's centre): n visits, X changes; Cho's corrected estimate applies
I_S = 3600 * 16

STATS = {
    "enqueued": 50, "revisits": 30, "queued": 7, "end_stored": 55, "end_not_modified": 10, "end_dead": 5,
    "end_skipped": 3, "rv_tracked": 5, "rv_created": 6, "rv_deleted": 1, "rv_refetched": 2, "rv_untracked": 4,
    "rv_early": 0, "rv_expired": 2, "rv_visits": 24, "rv_changed": 6, "rv_unchanged": 8, "rv_not_modified": 10,
    "rv_bytes_saved": 3 * 2**20, "rv_lies_etag": 1, "rv_lies_ignored": 1,
}


def record(url: str, *, n: int = 10, changes: int = 3, last: int = 1_000_000, r_entry: bool = False,
           **more: Any) -> bytes:
    entry = (b"R" + serializers.dumps({"url": url, "callback": "parse", "method": "GET"}) if r_entry
             else b"U1 " + url.encode())
    bins = [0] * 16
    bins[4] = changes  # every change seen after an interval of I_S
    return pack(History(entry=entry, last=last, iv=I_S, n=n, changes=changes, tu=(n - changes) * I_S,
                        bins=tuple(bins), **more))


def seed(client: redis.Redis, now: int, *, mode: str | None = "adaptive") -> None:
    """A shard whose recrawling is in a known state at server time ``now`` (ms)."""
    client.hset(f"{B}:meta", mapping={"dedup": "exact", **({"recrawl": mode} if mode else {})})
    client.hset(f"{B}:stats", mapping=STATS)
    client.hset(f"{B}:hist:a.test", mapping={
        "11": record("http://a.test/", refers=Refers(bytes(6), 1, bytes(16))),
        "12": record("http://a.test/news", n=4, changes=0, pinned=True),
        "13": record("http://a.test/form", r_entry=True),
    })
    client.zadd(f"{B}:due:a.test", {"11": now - 90_000, "12": now + 600_000, "13": now + 2 * DAY})
    client.hset(f"{B}:hist:b.test", mapping={"21": record("http://b.test/"), "22": b"\x80 torn"})
    client.zadd(f"{B}:due:b.test", {"21": now + 1_800_000, "22": now + 2 * HOUR})
    # four domains: one overdue by 90 s, one due in 30 min, one in 2 h, one in 3 days
    client.zadd(f"{B}:rdue", {"a.test": now - 90_000, "b.test": now + 1_800_000, "c.test": now + 2 * HOUR,
                              "d.test": now + 3 * DAY})
    client.hset(f"{B}:rhost:www.a.test", mapping={"etag": now + 10 * DAY, "lies_etag": 1})
    client.hset(f"{B}:rhost:b.test", mapping={"all": now + 5 * DAY, "ignored": 3})
    client.hset(f"{B}:rhost:c.test", mapping={"etag": now - 1, "lies_etag": 1})  # served its distrust
    client.hset(f"{B}:rhost:d.test", mapping={"lies_lm_now": 1})  # evidence, not yet distrusted
    # another spider's lying host is not this frontier's
    client.hset("crawler:{other:0}:rhost:x.test", mapping={"etag": now + DAY, "lies_etag": 1})


def test_recrawl_status_numbers(redis_client: redis.Redis, clock: ManualClock) -> None:
    now = clock.ms()
    seed(redis_client, now)
    frontier = Frontier(redis_client, KEYS, clock=clock)
    rc = frontier.recrawl_status()
    assert rc["mode"] == "adaptive" and rc["tracked"] == 5 and rc["seen"] == 50
    assert (rc["domains_tracked"], rc["domains_overdue"], rc["due_within_hour"], rc["due_within_day"]) == (4, 1, 1, 2)
    assert rc["lag_seconds"] == 90.0
    assert (rc["visits"], rc["changed"], rc["unchanged"], rc["not_modified"]) == (24, 6, 8, 10)
    assert rc["not_modified_share"] == round(10 / 24, 4)
    assert rc["bytes_saved"] == 3 * 2**20 and rc["untracked"] == 4 and rc["early"] == 0 and rc["expired"] == 2
    assert rc["revisits"] == 30 and rc["lies"] == {"etag": 1, "ignored": 1}
    assert rc["hosts_lying"] == 2 and rc["hosts_scanned_all"]
    # most evidence first, with why
    assert [h["host"] for h in rc["lying"]] == ["b.test", "www.a.test"]
    assert rc["lying"][0]["distrusted"] == {"all": 5 * 86400} and rc["lying"][0]["evidence"] == {"ignored": 3}
    assert rc["lying"][1]["distrusted"] == {"etag": 10 * 86400}
    assert frontier.recrawl_status(top=1)["lying"] == rc["lying"][:1]
    # the lag follows the clock; a day on, three domains are overdue and none is within the hour
    clock.advance(86400)
    later = frontier.recrawl_status()
    assert later["lag_seconds"] == 86490.0 and later["domains_overdue"] == 3 and later["due_within_hour"] == 0
    assert later["hosts_lying"] == 2  # the distrusts run for 5 and 10 days


def test_nothing_overdue_means_no_lag(redis_client: redis.Redis, clock: ManualClock) -> None:
    now = clock.ms()
    redis_client.hset(f"{B}:meta", "recrawl", "fixed")
    redis_client.zadd(f"{B}:rdue", {"a.test": now + 1000})
    rc = Frontier(redis_client, KEYS, clock=clock).recrawl_status()
    assert rc["lag_seconds"] == 0.0 and rc["domains_overdue"] == 0 and rc["due_within_hour"] == 1
    assert rc["not_modified_share"] == 0.0 and rc["hosts_lying"] == 0


def fill(client: redis.Redis, n: int) -> None:
    """``n`` keys that are not the frontier's, for its SCANs to wade through."""
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.set(f"filler:{i}", 1)
    pipe.execute()


def test_the_host_scan_is_bounded(redis_client: redis.Redis, clock: ManualClock) -> None:
    now = clock.ms()
    seed(redis_client, now)
    fill(redis_client, 5000)
    frontier = Frontier(redis_client, KEYS, clock=clock)
    cut = frontier.recrawl_status(scan_calls=1)
    assert not cut["hosts_scanned_all"] and cut["hosts_lying"] <= 2
    whole = frontier.recrawl_status(scan_calls=10_000)
    assert whole["hosts_scanned_all"] and whole["hosts_lying"] == 2


def test_recrawl_urls_lists_a_domains_history(redis_client: redis.Redis, clock: ManualClock) -> None:
    now = clock.ms()
    seed(redis_client, now)
    frontier = Frontier(redis_client, KEYS, clock=clock)
    listing = frontier.recrawl_urls("a.test")
    assert listing["tracked"] == 3 and listing["listed"] == 3
    urls = listing["urls"]
    # the most overdue first; the URL from a U entry and from an R entry's msgpack
    assert [u["url"] for u in urls] == ["http://a.test/", "http://a.test/news", "http://a.test/form"]
    assert [u["due_in"] for u in urls] == [-90.0, 600.0, 2 * 86400.0]
    first = urls[0]
    assert (first["last"], first["interval"], first["visits"], first["changes"]) == (1_000_000, I_S, 10, 3)
    # regular visits: the estimate is Cho's bias-corrected -log((n - X + 0.5)/(n + 0.5))/I, a day
    assert math.isclose(first["rate"], -math.log(7.5 / 10.5) / I_S * 86400, rel_tol=1e-3)
    assert first["flags"] == ["warc"] and urls[1]["flags"] == ["pinned"] and urls[1]["rate"] == 0.0
    assert len(frontier.recrawl_urls("a.test", limit=1)["urls"]) == 1
    # a record that does not unpack is listed, not a crash
    torn = {u["k"]: u for u in frontier.recrawl_urls("b.test")["urls"]}
    assert torn["22"]["url"] is None and "too short" in torn["22"]["error"]
    assert torn["21"]["url"] == "http://b.test/"
    assert frontier.recrawl_urls("nosuch.test") == {"domain": "nosuch.test", "tracked": 0, "listed": 0,
                                                     "now": now // 1000, "urls": []}


def frontier_cmd(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy", "frontier", "demo", *args], cwd=ROOT,
                          env=scrapy_env(redis_url), capture_output=True, text=True, timeout=60)


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_scrapy_frontier_prints_the_recrawl_block(redis_url: str, redis_client: redis.Redis) -> None:
    seed(redis_client, server_ms(redis_client))
    result = frontier_cmd(redis_url, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    r = json.loads(result.stdout)[0]
    assert r["recrawl"]["tracked"] == 5 and r["recrawl"]["domains_overdue"] == 1
    assert r["recrawl"]["hosts_lying"] == 2 and r["revisits"] == 30
    # the ledger counts revisits as admissions and 304s as not_modified, and adds up
    assert r["ledger"]["admitted"] == 80 and r["ledger"]["not_modified"] == 10 and r["ledger"]["adds_up"]
    shown = frontier_cmd(redis_url).stdout
    assert "80 admitted (50 new + 30 revisits) = 55 stored, 10 not_modified, 5 dead, 3 skipped" in shown
    assert "(adds up)" in shown
    assert "recrawl       adaptive: tracked 5 of 50 seen in 4 domains; 1 domains overdue (lag 9" in shown
    assert "1 due within 1 h, 2 within 1 d" in shown
    assert ("24 visits written: 6 changed, 8 unchanged, 10 not modified (304: 41.7% of 24 answered); "
            "3.0 MiB of bodies saved; 2 revisit leases expired") in shown
    assert "4 untracked at a cap; 0 early skips" in shown
    assert "lying hosts   2 (lies: 1 etag, 1 ignored)" in shown
    assert "lying host    b.test: no validators for 5.0d; evidence: 3 conditionals ignored" in shown
    assert "lying host    www.a.test: no If-None-Match for 10.0d; evidence: 1 frozen ETag" in shown
    assert "x.test" not in shown


def test_scrapy_frontier_recrawl_domain(redis_url: str, redis_client: redis.Redis) -> None:
    seed(redis_client, server_ms(redis_client))
    shown = frontier_cmd(redis_url, "--recrawl", "A.test")
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = shown.stdout.splitlines()
    assert lines[0] == "a.test (shard 0): 3 tracked URLs, 3 listed"
    assert lines[2].endswith("http://a.test/ [warc]") and "10/3" in lines[2] and lines[2].split()[0].startswith("-1")
    assert "http://a.test/news [pinned]" in lines[3] and "4/0" in lines[3]
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1_000_000)) in lines[2]
    limited = json.loads(frontier_cmd(redis_url, "--recrawl", "a.test", "--limit", "2", "--json",
                                      "--shard", "0").stdout)
    assert limited["tracked"] == 3 and limited["listed"] == 2 and limited["shard"] == 0
    bad = frontier_cmd(redis_url, "--recrawl", "a.test", "--limit", "-1")
    assert bad.returncode != 0 and "--limit must be >= 0" in bad.stderr and "Traceback" not in bad.stderr


def test_a_frontier_made_with_recrawl_off(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.hset(f"{B}:meta", "dedup", "exact")  # made before recrawling: no recrawl field
    redis_client.hset(f"{B}:stats", mapping={"enqueued": 7, "end_stored": 7})
    shown = frontier_cmd(redis_url)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "recrawl       off: tracked 0 of 7 seen; these URLs are not revisited" in shown.stdout
    assert "7 admitted = 7 stored" in shown.stdout  # no revisits: the ledger line as before
    listing = frontier_cmd(redis_url, "--recrawl", "a.test").stdout
    assert "0 tracked URLs" in listing and "keeps no fetch history; its URLs are not revisited" in listing
    report = json.loads(frontier_cmd(redis_url, "--json").stdout)[0]
    assert report["recrawl"]["mode"] == "off" and report["recrawl"]["tracked"] == 0
    assert report["recrawl"]["hosts_lying"] == 0


def test_span() -> None:
    assert [span(s) for s in (42, -90, 600, 5400, 86400 * 2.5)] == ["42s", "-1.5m", "10.0m", "1.5h", "2.5d"]


def test_recrawl_gauges(redis_url: str, redis_client: redis.Redis, clock: ManualClock) -> None:
    now = clock.ms()
    seed(redis_client, now)
    crawler = crawler_for(redis_url, CRAWLER_METRICS_ENABLED=True)
    ext = MetricsExtension(crawler)
    frontier = Frontier(redis_client, KEYS, clock=clock)
    ext.collector.labels = ["demo", "0"]
    ext.collector.frontier = frontier
    ext.collector.exporter = FrontierExporter(redis_client, exporter_key(KEYS))
    assert ext.collector.exporter.hold()
    labels = '{shard="0",spider="demo"}'
    found = samples(generate_latest(ext.registry).decode())
    assert found[f"crawler_frontier_recrawl_tracked{labels}"] == 5
    assert found[f"crawler_frontier_recrawl_domains_overdue{labels}"] == 1
    assert found[f"crawler_frontier_recrawl_lag_seconds{labels}"] == 90.0
    assert found[f"crawler_frontier_recrawl_not_modified_share{labels}"] == round(10 / 24, 4)
    assert found[f"crawler_frontier_recrawl_bytes_saved_total{labels}"] == 3 * 2**20
    assert found[f"crawler_frontier_recrawl_hosts_lying{labels}"] == 2
    assert found[f"crawler_frontier_recrawl_untracked_total{labels}"] == 4
    clock.advance(10)
    assert samples(generate_latest(ext.registry).decode())[f"crawler_frontier_recrawl_lag_seconds{labels}"] == 100.0
    # with recrawl off and nothing tracked, the series are there at 0
    redis_client.flushall()
    clock.advance(0)
    redis_client.hset(f"{B}:meta", "dedup", "exact")
    ext.collector.exporter = FrontierExporter(redis_client, exporter_key(KEYS))  # the flush took the lease
    assert ext.collector.exporter.hold()
    off = samples(generate_latest(ext.registry).decode())
    assert off[f"crawler_frontier_recrawl_tracked{labels}"] == 0
    assert off[f"crawler_frontier_recrawl_hosts_lying{labels}"] == 0


def test_the_recrawl_page_stands_alone() -> None:
    page = (ROOT / "docs" / "recrawl.md").read_text()
    assert "design/" not in page and "../shared" not in page and "/work/" not in page
    for heading in ("## Settings", "## Benchmark", "crawler_not_modified", "handle_httpstatus_list",
                    "crawler_recrawl", "WARC-Refers-To-Target-URI", "hash-max-listpack-value"):
        assert heading in page, heading


def test_the_gauges_sweep_for_lying_hosts_over_scrapes(redis_client: redis.Redis, clock: ManualClock) -> None:
    """On a Redis of many keys the lying hosts are found by a SCAN spread over
    the scrapes; once a sweep has gone round the count is whole, and a host
    whose record is gone drops out at the next round."""
    now = clock.ms()
    seed(redis_client, now)
    fill(redis_client, 30_000)
    frontier = Frontier(redis_client, KEYS, clock=clock)
    sweep = HostSweep(calls=5)  # 5 SCAN calls of COUNT 1000 a step: about 5,000 of the 30,000 keys
    rounds = 0
    while True:
        sweep.step(frontier)
        rounds += 1
        if not sweep.cursor:
            break
        assert len(Frontier.lying(sweep.hosts, now)) <= 2
    assert rounds > 1
    assert [h["host"] for h in Frontier.lying(sweep.hosts, now)] == ["b.test", "www.a.test"]
    redis_client.delete(f"{B}:rhost:b.test")
    sweep.step(frontier)
    while sweep.cursor:
        sweep.step(frontier)
    assert [h["host"] for h in Frontier.lying(sweep.hosts, now)] == ["www.a.test"]
    # the view counts from what a caller swept, without a scan of its own
    assert frontier.recrawl_status(hosts=sweep.hosts)["hosts_lying"] == 1
