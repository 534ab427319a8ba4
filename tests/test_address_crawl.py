"""Per-address politeness as the site sees it: real ``scrapy crawl billion``
processes against a test web whose domains live on several loopback
addresses (``WebConfig.addresses``, mapped by ``CRAWLER_HOST_MAP``), audited
from the test web's log with zero tolerance, per address and per domain: no
request to an address sooner than ``CRAWLER_IP_DELAY`` after the end of the
previous answer there, never two in flight at one address, and each
domain's own delay kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from devkit.testweb.control import LogEntry, consecutive, max_in_flight
from tests.servers import ROOT, run_scrapy, scrapy_env

WEB = dict(links=8, size_fixed=4000, private_share=0, crawl_delay_share=0, dup_share=0, cross_share=0.2,
           latency_ms=40, latency_sigma=0.3)


def crawl(web, redis_url: str, tmp_path: Path, *settings: str, processes: int = 1, shards: int = 1,
          hosts: dict | None = None, extra_seeds: tuple[str, ...] = ()) -> list[dict]:
    """``processes`` billion crawls of the test web at once (``shards`` of
    them), on ``hosts`` (default: the web's host map); each one's stats, its
    stderr under ``_stderr``. Each must end cleanly: a crawl that lost work
    exits non-zero."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join([*(web.url(d) for d in range(web.config.domains)), *extra_seeds]))
    base = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}",
            "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CRAWLER_WARC_DIR=",
            "-s", f"CRAWLER_HOST_MAP={json.dumps(web.host_map() if hosts is None else hosts)}",
            *(a for s in settings for a in ("-s", s))]
    env = scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org")
    cmds = []
    for i in range(processes):
        cmd = list(base)
        if shards > 1:
            cmd += ["-a", f"shard={i % shards}", "-a", f"shards={shards}"]
        cmd += ["-s", f"CRAWLER_STATS_FILE={tmp_path / f'stats{i}.json'}"]
        cmds.append(cmd)
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for cmd in cmds]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    for p, err in zip(procs, errors):
        assert p.returncode == 0, err[-3000:]
    return [{**json.loads((tmp_path / f"stats{i}.json").read_text()), "_stderr": err} for i, err in enumerate(errors)]


def under(log: list[LogEntry], by: str, seconds: float) -> tuple[int, list[tuple]]:
    """Intervals from the end of an answer to the next arrival, per ``by``; those under ``seconds``."""
    pairs = consecutive(log, by=by)  # type: ignore[arg-type]
    bad = [(round(b.ms - a.done), a.target, b.target, a.address) for a, b in pairs if b.ms - a.done < seconds * 1000]
    return len(pairs), bad


@pytest.mark.parametrize(("processes", "shards"), [(2, 1), (2, 2)], ids=["2proc-1frontier", "2shards-1redis"])
def test_no_address_and_no_domain_closer_than_its_delay(redis_url: str, make_web, tmp_path: Path,
                                                         processes: int, shards: int) -> None:
    # 18 domains on 4 addresses, one of them a small shared host (10 domains)
    web = make_web(**WEB, domains=18, pages=6, address_counts=[10, 4, 3, 1])
    crawl(web, redis_url, tmp_path, "CRAWLER_DOMAIN_DELAY=1.5", "CRAWLER_IP_DELAY=0.3", "CLOSESPIDER_TIMEOUT=14",
          processes=processes, shards=shards)
    log = [e for e in web.log() if e.status]
    assert {e.address for e in log} <= set(web.addresses)  # every request went to its domain's address
    assert all(e.address == web.address_of(e.host) for e in log)
    seen, bad = under(log, "address", 0.3)
    assert seen >= 40, seen
    assert bad == [], f"{len(bad)} of {seen} intervals at an address under 0.3 s: {bad[:5]}"
    seen, bad = under(log, "domain", 1.5)
    assert seen >= 10 and bad == [], bad[:5]
    assert max(max_in_flight(log).values()) == 1
    # the shared host's 10 domains went one at a time, not 10 at once: its answers
    # came at most one per (0.3 s + an answer) however many of its domains were due
    busiest = web.addresses[0]
    assert sum(e.address == busiest for e in log) >= 15


def test_every_address_of_a_name_and_names_looked_up_once(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(**WEB, domains=4, pages=8, address_counts=[1, 1, 1, 1])
    hosts = web.host_map()
    two = web.domains[0]
    hosts[two] = [web.addresses[0], web.addresses[1]]  # a name with two addresses
    hosts[web.domains[1]] = web.addresses[2]  # the second, its alone (the test web answers any name anywhere)
    [stats] = crawl(web, redis_url, tmp_path, "CRAWLER_DOMAIN_DELAY=0.2", "CRAWLER_IP_DELAY=0.2",
                    "CLOSESPIDER_TIMEOUT=10", hosts=hosts)
    log = [e for e in web.log() if e.status]
    used = {e.address for e in log if e.host.split(":")[0] == two}
    assert used == {web.addresses[0], web.addresses[1]}  # charged to, and connected to, each in turn
    seen, bad = under(log, "address", 0.2)
    assert bad == [], bad[:5]
    # one lookup per name for the crawl (4 names; the www. names and the rest unasked)
    client = redis.Redis.from_url(redis_url)
    ok = sum(int(client.hget(k, "dns_ok") or 0) for k in client.scan_iter("*:stats"))
    assert ok == 4, ok
    assert stats["crawler/dns/ok"] == 4


def test_missing_names_end_as_dns_dead_letters(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(**WEB, domains=2, pages=3, address_counts=[1, 1])
    # the crawl ends cleanly (crawl() asserts it): every URL in a known, counted end
    [stats] = crawl(web, redis_url, tmp_path, "CRAWLER_DOMAIN_DELAY=0.1", "CRAWLER_IP_DELAY=0.1",
                    "CRAWLER_DNS_NX_RETRIES=1", "CLOSESPIDER_TIMEOUT=20",
                    extra_seeds=("https://nowhere.invalid/", "https://nowhere.invalid/a"))
    assert stats["crawler/dns/nx"] == 2  # the first lookup and one retry
    assert stats["crawler/dlq/dns"] == 2  # both URLs, unsent
    assert not any("nowhere.invalid" in e.host for e in web.log())


def test_a_shared_front_end_is_recognised_and_runs_at_its_own_pace(redis_url: str, make_web,
                                                                    tmp_path: Path) -> None:
    web = make_web(**WEB, domains=30, pages=2, address_counts=[30])
    [stats] = crawl(web, redis_url, tmp_path, "CRAWLER_DOMAIN_DELAY=5", "CRAWLER_IP_DELAY=1",
                    "CRAWLER_IP_SHARED_MIN_DOMAINS=20", "CRAWLER_IP_SHARED_DELAY=0.05",
                    "CRAWLER_IP_SHARED_CONCURRENCY=3", "CLOSESPIDER_TIMEOUT=8")
    said = [line for line in stats["_stderr"].splitlines() if "is a shared front end" in line]
    assert len(said) == 1 and web.addresses[0] in said[0] and "21 registered domains" in said[0], said
    log = [e for e in web.log() if e.status]
    # far more than one request a second once it is recognised; never over its cap; each domain's delay kept
    assert len(log) >= 30, len(log)
    assert max(max_in_flight(log).values()) <= 3
    seen, bad = under(log, "domain", 5)
    assert bad == [], bad[:5]


def test_the_operator_sees_the_addresses(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(**WEB, domains=18, pages=3, address_counts=[10, 4, 3, 1])
    crawl(web, redis_url, tmp_path, "CRAWLER_DOMAIN_DELAY=1", "CRAWLER_IP_DELAY=0.2",
          "CRAWLER_IP_SHARED_MIN_DOMAINS=5", "SCHEDULER_PERSIST=True", "CLOSESPIDER_TIMEOUT=6")
    shown = run_scrapy(["frontier", "billion", "--json", "--shard", "0"], scrapy_env(redis_url))
    assert shown.returncode == 0, shown.stderr
    a = json.loads(shown.stdout)["addresses"]
    assert a["addresses_known"] == 4
    assert a["domains_per_address"] == {"1": 1, "2-9": 2, "10-99": 1, "100-999": 0, "1000+": 0}
    top = a["busiest"][0]
    assert (top["address"], top["domains"], top["shared"]) == (web.addresses[0], 10, True)
    assert a["shared"][web.addresses[0]]["reason"] == "domains"
    assert a["lookups"]["ok"] == 18
    text = run_scrapy(["frontier", "billion", "--shard", "0"], scrapy_env(redis_url)).stdout
    assert f"shared        {web.addresses[0]}: a shared front end (6 domains)" in text
    assert "addresses     4 known (every shard of this Redis" in text


def test_a_name_that_moves_is_followed_to_its_new_address(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(**WEB, domains=2, pages=12, address_counts=[1, 1])
    first, second = web.addresses
    moved = {**web.host_map(), web.domains[0]: second}
    common = ("CRAWLER_DOMAIN_DELAY=0.3", "CRAWLER_IP_DELAY=0.1", "CRAWLER_DNS_TTL=1", "SCHEDULER_PERSIST=True")
    # the first crawl stops early, its frontier kept; the name then moves (another answer from "DNS")
    crawl(web, redis_url, tmp_path, *common, "CLOSESPIDER_PAGECOUNT=4")
    before = len(web.log())
    [stats] = crawl(web, redis_url, tmp_path, *common, "CLOSESPIDER_TIMEOUT=8", hosts=moved)
    ours = [e for e in web.log() if e.host.split(":")[0] == web.domains[0] and e.status]
    assert ours and {e.address for e in web.log()[:before] if e in ours} == {first}
    after = [e.address for e in web.log()[before:] if e in ours]
    assert after and set(after) == {second}, after  # charged to, and connected to, the new address only
    client = redis.Redis.from_url(redis_url)
    moves = sum(int(client.hget(k, "ip_moves") or 0) for k in client.scan_iter("*{billion:ip}:stats"))
    assert moves == 1
    assert stats["crawler/dns/ok"] >= 1
