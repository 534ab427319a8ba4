"""The frontier scheduler in real `scrapy crawl` processes, audited from the
test web's request log and from Redis."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter, defaultdict

import redis

from devkit.testweb.control import LogEntry, TestWebProcess
from tests.servers import ROOT, run_scrapy, scrapy_env, wait_until

SMALL = dict(links=5, size_fixed=3000, private_share=0, cross_share=0.3, dup_share=0.2, crawl_delay_share=0)


def crawl_cmd(web: TestWebProcess, *settings: str, spider: str = "demo") -> list[str]:
    starts = ",".join(web.url(d) for d in range(web.config.domains))
    args = [sys.executable, "-m", "scrapy", "crawl", spider]
    if spider == "demo":
        args += ["-a", f"start_urls={starts}"]
    for s in ("CRAWLER_PROGRESS_INTERVAL=0", "SPIDER_MODULES=crawler.spiders,tests.spiders", *settings):
        args += ["-s", s]
    return args


def start(cmd: list[str], redis_url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, cwd=ROOT, env=scrapy_env(redis_url), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def page_fetches(log: list[LogEntry]) -> Counter[tuple[str, str]]:
    return Counter((e.domain, e.path) for e in log if e.path != "/robots.txt")


def all_pages(web: TestWebProcess) -> set[tuple[str, str]]:
    return {(d, f"/p/{k}.html") for d in web.domains for k in range(1, web.config.pages)}


def test_two_processes_fetch_every_page_once_and_keep_the_delay(redis_url: str, make_web) -> None:
    web = make_web(domains=4, pages=12, **SMALL)
    cmd = crawl_cmd(web, "CRAWLER_DOMAIN_DELAY=0.25")
    procs = [start(cmd, redis_url) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    log = web.log()
    fetches = page_fetches(log)
    assert all_pages(web) <= set(fetches)
    assert max(fetches.values()) == 1, [k for k, v in fetches.items() if v > 1]
    by_domain: dict[str, list[float]] = defaultdict(list)
    for e in log:  # robots.txt included: it is a request to the site too
        by_domain[e.domain].append(e.ms)
    gaps = [b - a for times in by_domain.values() for a, b in zip(sorted(times), sorted(times)[1:])]
    assert min(gaps) >= 250, sorted(gaps)[:5]  # as the site sees it, no tolerance
    both_worked = [json.loads(line.split("crawler/frontier/enqueued': ", 1)[1].split(",", 1)[0])
                   for _, err in outputs for line in [err] if "crawler/frontier/enqueued" in err]
    assert len(both_worked) == 2


def test_a_killed_worker_loses_nothing(redis_url: str, make_web) -> None:
    # slow pages keep requests in flight, so the victim dies holding leases
    web = make_web(domains=3, pages=30, faults={"slow": 0.25}, slow_ms=1500, **SMALL)
    cmd = crawl_cmd(web, "CRAWLER_DOMAIN_DELAY=0.05", "CRAWLER_LEASE_SECONDS=4", "DOWNLOAD_TIMEOUT=3")
    client = redis.Redis.from_url(redis_url)
    victim = start(cmd, redis_url)
    # alone, so the leases in Redis are the victim's
    wait_until(lambda: len(page_fetches(web.log())) >= 10 and client.zcard("crawler:{demo:0}:leases") >= 2,
               30, "10 pages fetched and 2 leases held")
    victim.send_signal(signal.SIGKILL)
    survivor = start(cmd, redis_url)
    victim.wait()
    out, err = survivor.communicate(timeout=120)
    assert survivor.returncode == 0, err[-3000:]
    fetches = page_fetches(web.log())
    assert all_pages(web) <= set(fetches)  # nothing lost
    expired = int(client.hget("crawler:{demo:0}:stats", "leases_expired") or 0)
    assert expired >= 1  # the survivor took over the victim's leases
    twice = sum(v - 1 for v in fetches.values())
    assert twice <= expired  # fetched twice: only what the victim had leased
    assert client.zcard("crawler:{demo:0}:leases") == 0
    print(f"victim's expired leases: {expired}, pages fetched twice: {twice}")


def test_restart_resumes_where_it_stopped(redis_url: str, make_web) -> None:
    web = make_web(domains=3, pages=20, **SMALL)
    first = run_scrapy(crawl_cmd(web, "CLOSESPIDER_PAGECOUNT=15")[3:], scrapy_env(redis_url))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "closespider_pagecount" in first.stderr
    fetched_first = page_fetches(web.log())
    assert fetched_first and not all_pages(web) <= set(fetched_first)
    second = run_scrapy(crawl_cmd(web)[3:], scrapy_env(redis_url))
    assert second.returncode == 0, second.stderr[-3000:]
    (resumed,) = [line for line in second.stderr.splitlines() if "Resuming crawl" in line]
    assert f"on Redis at {redis_url}" in resumed and " s ago" in resumed, resumed  # which Redis, how old
    assert "SCHEDULER_FLUSH_ON_START=True" in resumed, resumed  # and how to start afresh
    (opened,) = [line for line in first.stderr.splitlines() if "Frontier crawler:{" in line]
    assert "opened on Redis at" in opened and "(empty)" in opened, opened
    fetches = page_fetches(web.log())
    assert all_pages(web) <= set(fetches)
    refetched = sum(v - 1 for v in fetches.values())
    assert refetched <= 16  # only what the first run had in flight when it stopped


def test_errors_and_refusals_are_acknowledged(redis_url: str, make_web) -> None:
    web = make_web(domains=2, pages=30, links=6, size_fixed=3000, private_share=0.2, crawl_delay_share=0,
                   faults={"404": 0.2, "drop": 0.1, "500": 0.1})
    result = run_scrapy(crawl_cmd(web, "CRAWLER_MAX_ATTEMPTS=2", "CRAWLER_BACKOFF_BASE=0.05",
                                  "CRAWLER_BACKOFF_JITTER=0.05", "CRAWLER_LEASE_SECONDS=120")[3:],
                        scrapy_env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    client = redis.Redis.from_url(redis_url)
    stats = {k.decode(): int(v) for k, v in client.hgetall("crawler:{demo:0}:stats").items()}
    assert client.zcard("crawler:{demo:0}:leases") == 0
    assert "leases_expired" not in stats  # nothing waited for a lease to expire
    assert stats["acked"] == stats["dequeued"]
    assert "crawler/robots/disallowed" in result.stderr and "404" in result.stderr


def test_scrapy_redis_spider_reads_start_urls_and_persist_off_clears(redis_url: str, make_web) -> None:
    web = make_web(domains=2, pages=10, **SMALL)
    client = redis.Redis.from_url(redis_url)
    client.rpush("redisstart:start_urls", *[web.url(d) for d in range(2)])
    client.set("unrelated:key", "mine")
    result = run_scrapy(crawl_cmd(web, "SCHEDULER_PERSIST=False", "MAX_IDLE_TIME_BEFORE_CLOSE=1", spider="redisstart")[3:],
                        scrapy_env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    assert all_pages(web) <= set(page_fetches(web.log()))
    assert client.keys("crawler:*") == []  # not persisted
    assert client.get("unrelated:key") == b"mine"


def test_bulk_urls_become_requests_only_when_dequeued(redis_url: str, make_web) -> None:
    web = make_web(domains=2, pages=15, **SMALL)
    client = redis.Redis.from_url(redis_url)
    client.rpush("bulk:start_urls", *[web.url(d) for d in range(2)])
    result = run_scrapy(crawl_cmd(web, "FEEDS={\"items.jsonl\": {\"format\": \"jsonlines\", \"overwrite\": true}}", "MAX_IDLE_TIME_BEFORE_CLOSE=1",
                                  spider="bulk")[3:], scrapy_env(redis_url))
    try:
        assert result.returncode == 0, result.stderr[-3000:]
        fetches = page_fetches(web.log())
        assert all_pages(web) <= set(fetches) and max(fetches.values()) == 1
        items = [json.loads(line) for line in (ROOT / "items.jsonl").read_text().splitlines()]
        assert max(i["depth"] for i in items) >= 2  # depth travels with plain URLs
        # only the two start requests, each handed back once after its robots.txt
        assert "scheduler/enqueued/redis': 4," in result.stderr
        assert "crawler/robots/handed_back': 2," in result.stderr
        letters = [json.loads(raw) for raw in client.lrange("crawler:{bulk:0}:dlq", 0, -1)]
        assert sorted(x["url"].split("/", 3)[2].split(":")[0] for x in letters) == ["d0.test", "d1.test"]
        assert {x["reason"] for x in letters} == {"spider_says_so"}  # a spider's own dead letters
        shown = run_scrapy(["frontier", "bulk", "--json"], scrapy_env(redis_url))
        assert json.loads(shown.stdout)[0]["ledger"]["dead"] == 2, shown.stdout  # and its pages end there
    finally:
        (ROOT / "items.jsonl").unlink(missing_ok=True)


def test_bad_frontier_setting_is_one_error_line(redis_url: str) -> None:
    result = run_scrapy(["crawl", "demo", "-a", "start_urls=http://d0.test/", "-s", "CRAWLER_DEDUP=fuzzy"],
                        scrapy_env(redis_url))
    assert result.returncode == 2
    assert result.stderr.strip() == "crawler: error: CRAWLER_DEDUP must be one of exact, bloom, got 'fuzzy'"
    result = run_scrapy(["crawl", "demo", "-a", "start_urls=http://d0.test/", "-s", "CRAWLER_DOMAIN_DELAY=soon"],
                        scrapy_env(redis_url))
    assert result.stderr.strip() == "crawler: error: CRAWLER_DOMAIN_DELAY must be a finite number >= 0, got 'soon'"


def test_flush_on_start_forgets_the_previous_crawl(redis_url: str, make_web) -> None:
    web = make_web(domains=1, pages=5, **SMALL)
    for _ in range(2):
        result = run_scrapy(crawl_cmd(web, "SCHEDULER_FLUSH_ON_START=True")[3:], scrapy_env(redis_url))
        assert result.returncode == 0, result.stderr[-3000:]
    fetches = page_fetches(web.log())
    assert set(fetches.values()) == {2}  # every page again: nothing was remembered


def test_idle_before_close_waits_for_work_from_other_workers(redis_url: str, make_web) -> None:
    from hashlib import sha256

    from crawler.store import codec
    from crawler.store import Frontier, Item
    from crawler.store import Keys

    web = make_web(domains=1, pages=3, links=1, size_fixed=2000, cross_share=0, dup_share=0, crawl_delay_share=0,
                   private_share=0)
    proc = start(crawl_cmd(web, "SCHEDULER_IDLE_BEFORE_CLOSE=6"), redis_url)
    client = redis.Redis.from_url(redis_url)
    wait_until(lambda: len(page_fetches(web.log())) >= 3, 30, "3 pages fetched")
    # the frontier drained (read without LLEN, which the worker's idle check sends) ...
    wait_until(lambda: client.hget("crawler:{demo:0}:stats", "queued") == b"0"
               and not client.zcard("crawler:{demo:0}:leases") and not client.zcard("crawler:{demo:0}:delayed"),
               30, "the frontier drained")
    checks = client.info("commandstats").get("cmdstat_llen", {}).get("calls", 0)
    # ... and the worker has looked twice since, finding it empty: without the setting it would close
    wait_until(lambda: client.info("commandstats").get("cmdstat_llen", {}).get("calls", 0) >= checks + 2,
               30, "two idle checks of the worker")
    assert proc.poll() is None  # idle, but open
    late = web.url(0, "/moved/2.html")
    other = Frontier(redis.Redis.from_url(redis_url), Keys("crawler", "demo", 0))
    other.add([Item(sha256(late.encode()).digest(), "d0.test", 0, codec.encode_url(late))])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert ("d0.test", "/moved/2.html") in page_fetches(web.log())


def test_sigterm_then_resume_fetches_nothing_twice(redis_url: str, make_web) -> None:
    # pages that yield no request, and acknowledgements held back (a long
    # CRAWLER_ACK_INTERVAL): only the stop itself can send the last ones. The
    # lease expires before the second run, so a lost acknowledgement is a page fetched again
    web = make_web(domains=3, pages=30, latency_ms=40, **SMALL)
    client = redis.Redis.from_url(redis_url)
    client.rpush("quiet:start_urls", *[web.url(d, f"/p/{k}.html") for d in range(3) for k in range(1, 30)])
    cmd = crawl_cmd(web, "CRAWLER_DOMAIN_DELAY=0", "CRAWLER_LEASE_SECONDS=4", "DOWNLOAD_TIMEOUT=3",
                    "SCHEDULER_PERSIST=True", "CRAWLER_ACK_INTERVAL=30", "CONCURRENT_REQUESTS=4",
                    "MAX_IDLE_TIME_BEFORE_CLOSE=1", spider="quiet")
    first = start(cmd, redis_url)
    wait_until(lambda: sum(page_fetches(web.log()).values()) >= 30, 60, "30 pages fetched")
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err[-3000:]
    stopped_at = sum(page_fetches(web.log()).values())
    # every lease the first run left expires now (its deadline moved into the past), as it
    # would CRAWLER_LEASE_SECONDS later: the second run's first dequeue hands it out again
    leases = "crawler:{quiet:0}:leases"
    if left := client.zrange(leases, 0, -1):
        client.zadd(leases, dict.fromkeys(left, 0), xx=True)
    second = start(cmd, redis_url)
    _, err2 = second.communicate(timeout=120)
    assert second.returncode == 0, err2[-3000:]
    fetches = page_fetches(web.log())
    assert all_pages(web) <= set(fetches)
    assert 30 <= stopped_at < len(fetches)  # the stop came mid-crawl
    assert max(fetches.values()) == 1, [k for k, v in fetches.items() if v > 1]
