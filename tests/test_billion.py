"""The billion spider: arguments, shards, links, scope, exclusions,
cross-shard delivery and WARC storage, against real Redis and the test web."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from warcio.archiveiterator import ArchiveIterator

from crawler.links import LinkExtractor
from crawler.identity import domain_of
from crawler.seeds import parse_seeds
from crawler.sharding import shard_of
from tests.servers import ROOT, RedisServer, run_scrapy, scrapy_env, wait_until

QUIET = dict(links=6, size_fixed=3000, private_share=0, cross_share=0.3, dup_share=0.2, crawl_delay_share=0)


def billion(*args: str, seeds: Path, settings: tuple[str, ...] = ()) -> list[str]:
    cmd = ["crawl", "billion", "-a", f"seeds={seeds}", *args,
           "-s", "CRAWLER_DOMAIN_DELAY=0", "-s", "CRAWLER_PROGRESS_INTERVAL=0"]
    for s in settings:
        cmd += ["-s", s]
    return cmd


def seeds_of(web, tmp_path: Path) -> Path:
    path = tmp_path / "seeds.txt"
    path.write_text("\n".join(web.url(d) for d in range(web.config.domains)) + "\n")
    return path


def env(redis_url: str) -> dict[str, str]:
    return scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org")


@pytest.mark.parametrize(("args", "message"), [
    (["-a", "shard=x"], "billion: shard and shards must be integers, got shard='x' shards='1'"),
    (["-a", "shard=2", "-a", "shards=2"], "billion: shard must satisfy 0 <= shard < shards (2), got 2"),
    (["-a", "shard=-1", "-a", "shards=4"], "billion: shard must satisfy 0 <= shard < shards (4), got -1"),
    (["-a", "shards=0"], "billion: shards must be >= 1, got 0"),
])
def test_argument_errors_are_one_line(redis_url: str, tmp_path: Path, args: list[str], message: str) -> None:
    seeds = tmp_path / "s.txt"
    seeds.write_text("example.com\n")
    result = run_scrapy(billion(*args, seeds=seeds), env(redis_url))
    assert result.returncode == 2  # as a bad setting
    assert result.stderr.strip() == f"crawler: error: {message}"


def test_missing_seeds_file_and_missing_contact(redis_url: str, tmp_path: Path) -> None:
    result = run_scrapy(billion(seeds=tmp_path / "nope.csv"), env(redis_url))
    assert result.stderr.strip() == f"crawler: error: billion: seeds file '{tmp_path / 'nope.csv'}' does not exist"
    seeds = tmp_path / "s.txt"
    seeds.write_text("example.com\n")
    result = run_scrapy(billion(seeds=seeds), scrapy_env(redis_url, CRAWLER_CONTACT=""))
    assert result.returncode == 2 and "set CRAWLER_CONTACT" in result.stderr


def test_shards_are_stable_and_balanced() -> None:
    counts = Counter(shard_of(f"site{i}.example", 12) for i in range(1_000_000))
    assert set(counts) == set(range(12))
    assert max(abs(c / (1_000_000 / 12) - 1) for c in counts.values()) < 0.02
    code = "from crawler.sharding import shard_of; print([shard_of(f'd{i}.com', 7) for i in range(50)])"
    other = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(other.stdout) == [shard_of(f"d{i}.com", 7) for i in range(50)]


def test_link_extraction_rules() -> None:
    html = b"""<html><head><base href="https://other.org/dir/"></head><body>
      <a href="page.html#top">relative, with fragment</a>
      <a href="page.html">the same page</a>
      <a href="#only-fragment">x</a><a href="javascript:void(0)">x</a><a href="mailto:a@b.c">x</a>
      <a href="tel:+1555">x</a><a href="data:text/html,hi">x</a><a href="ftp://files.org/x">x</a>
      <a rel="nofollow sponsored" href="/ad">ad</a>
      <a href="HTTP://WWW.Example.COM:80/a/../b?utm_source=x&z=1&a=2">abs</a>
      <a href=" /spaced ">spaced</a><a>no href</a>
      <a href="/long/%s">long</a>
    </body></html>""".replace(b"%s", b"x" * 2100)
    links = LinkExtractor()(html, "http://site.test/p/1.html")
    assert links == ["https://other.org/dir/page.html", "http://www.example.com/b?a=2&z=1",
                     "https://other.org/spaced"]
    with_nofollow = LinkExtractor(nofollow=False)(html, "http://site.test/p/1.html")
    assert "https://other.org/ad" in with_nofollow
    no_base = LinkExtractor()(b'<a href="x.html">x</a>', "http://site.test/p/1.html")
    assert no_base == ["http://site.test/p/x.html"]


def test_base_anywhere_and_nofollow_per_anchor() -> None:
    html = b"""<a href="a.html">a</a><a REL="NOFOLLOW" href="/hidden">x</a>
      <a rel=nofollow href="shared.html">x</a><a href="shared.html#again">followed here</a>
      <base href="http://other.test/d/"><base href="http://ignored.test/">"""
    assert LinkExtractor()(html, "http://site.test/p/1.html") == [
        "http://other.test/d/a.html", "http://other.test/d/shared.html"]


def test_seed_formats_and_bad_lines() -> None:
    seeds, errors = parse_seeds([
        "1,example.com", "2,Example.ORG.", "bare.net", "https://www.x.io/start?utm_source=a",
        "", "# comment", "3,bad domain", "ftp://files.org/", "4,a,b,c",
    ])
    assert [s.url for s in seeds] == ["https://example.com/", "https://example.org/", "https://bare.net/",
                                      "https://www.x.io/start"]
    assert seeds[0].fallback == "http://example.com/" and seeds[3].fallback == "http://www.x.io/start"
    assert [(e.line, e.reason) for e in errors] == [
        (7, "not a domain name"), (8, "only http(s) URLs can be seeds"),
        (9, "expected 'rank,domain', a domain or a URL")]
    majestic, errors = parse_seeds(["GlobalRank,TldRank,Domain,TLD", "1,1,google.com,com", "2,2,bing.com,com"])
    assert [s.url for s in majestic] == ["https://google.com/", "https://bing.com/"] and not errors


def test_crawl_writes_exact_bodies_to_warc_and_obeys_depth(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=2, pages=30, **{**QUIET, "size_fixed": None, "size_median": 100_000,
                                           "size_mean": 200_000})
    warc_dir, feed = tmp_path / "warc", tmp_path / "items.jsonl"
    result = run_scrapy(billion(seeds=seeds_of(web, tmp_path), settings=(
        f"CRAWLER_WARC_DIR={warc_dir}", "CRAWLER_MAX_DEPTH=3", "CRAWLER_WARC_MAX_BYTES=300000",
        f"FEEDS={json.dumps({str(feed): {'format': 'jsonlines'}})}")), env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    assert max(i["depth"] for i in items) == 3
    assert all(i["offered"] == 0 for i in items if i["depth"] == 3)  # nothing beyond the depth
    files = sorted(warc_dir.glob("billion-000-*.warc.gz"))
    assert len(files) > 1  # rotated by size
    bodies = {}
    for path in files:
        with open(path, "rb") as fh:
            for record in ArchiveIterator(fh):
                if record.rec_type == "response":
                    bodies[record.rec_headers.get_header("WARC-Target-URI")] = (
                        record.content_stream().read(), record.rec_headers.get_header("WARC-Truncated"))
    assert len(bodies) == len(items)
    for url, (body, truncated) in bodies.items():
        host, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
        expected = web.fetch(host.split(":")[0], path)[2]
        assert body == expected[:250_000]
        assert (truncated == "length") == (len(expected) > 250_000)


def test_links_robots_txt_disallows_are_dropped_before_the_frontier(redis_url: str, make_web,
                                                                     tmp_path: Path) -> None:
    web = make_web(domains=2, pages=20, **{**QUIET, "private_share": 0.4, "cross_share": 0})
    stats_file = tmp_path / "stats.json"
    result = run_scrapy(billion(seeds=seeds_of(web, tmp_path), settings=(f"CRAWLER_STATS_FILE={stats_file}",)),
                        env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    stats = json.loads(stats_file.read_text())
    assert stats["crawler/links/robots_disallowed"] > 0  # the robots.txt middleware, found by the spider
    assert not [e for e in web.log() if e.path.startswith("/private/")]
    assert stats.get("crawler/robots/disallowed", 0) == 0  # none reached the downloader


def test_domain_budget_and_exclusions(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=4, pages=40, **QUIET)
    exclude = tmp_path / "exclude.txt"
    exclude.write_text("# site owners who asked us not to crawl\nd3.test\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy", *billion(seeds=seeds_of(web, tmp_path), settings=(
            "CRAWLER_DOMAIN_BUDGET=25", "CRAWLER_DOMAIN_BUDGET_MAX=0", f"CRAWLER_EXCLUDE_FILE={exclude}",
            "CRAWLER_DOMAIN_DELAY=0.05"))],
        cwd=ROOT, env=env(redis_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = redis.Redis.from_url(redis_url)
    wait_until(lambda: sum(e.domain == "d2.test" for e in web.log()) >= 3 or proc.poll() is not None, 30,
               "3 requests to d2.test")
    client.sadd("crawler:{billion:0}:excluded", "d2.test")  # a site owner joins the list, live
    excluded_at = time.time() * 1000
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    pages = Counter(e.domain for e in web.log() if e.path != "/robots.txt")
    assert pages["d3.test"] == 0  # excluded by the file: never fetched
    assert all(pages[d] <= 25 for d in ("d0.test", "d1.test"))  # the budget, flat
    late = [e for e in web.log() if e.domain == "d2.test" and e.ms > excluded_at + 200]
    assert late == []  # queued URLs of an excluded domain are dropped, not fetched
    stats = {k.decode(): int(v) for k, v in client.hgetall("crawler:{billion:0}:stats").items()}
    assert stats["over_budget"] > 0 and stats["excluded"] > 0


def test_a_domains_budget_follows_its_rank(redis_url: str, make_web, tmp_path: Path) -> None:
    """billion's budget by rank: CRAWLER_DOMAIN_BUDGET x (1 + weight) URLs, the
    weight a ranking file's (n / rank) else the domains seen linking to it."""
    web = make_web(domains=3, pages=80, **{**QUIET, "cross_share": 0})
    ranks = tmp_path / "ranks.csv"
    ranks.write_text("1,d0.test\n2,d1.test\n")  # weights 2 and 1; d2.test unranked, linked from no domain
    proc = subprocess.run([sys.executable, "-m", "scrapy", *billion(seeds=seeds_of(web, tmp_path), settings=(
        "CRAWLER_DOMAIN_BUDGET=8", f"CRAWLER_RANKS={ranks}"))],
        cwd=ROOT, env=env(redis_url), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = redis.Redis.from_url(redis_url)
    admitted = {d: int(client.hget(f"crawler:{{billion:0}}:dom:{d}", "admitted")) for d in web.domains}
    assert admitted == {"d0.test": 24, "d1.test": 16, "d2.test": 8}
    pages = Counter(e.domain for e in web.log() if e.path != "/robots.txt")
    assert pages == Counter(admitted)  # each admitted URL fetched once, no more
    stats = {k.decode(): int(v) for k, v in client.hgetall("crawler:{billion:0}:stats").items()}
    assert stats["budgets_spent"] == 3 and stats["over_budget"] > 0
    shown = subprocess.run([sys.executable, "-m", "scrapy", "frontier", "billion"], cwd=ROOT, env=env(redis_url),
                           capture_output=True, text=True, timeout=60).stdout
    assert "budget        8 URLs a domain, up to 1,000,000 by its weight (x (1 + weight)); 3 domains reached" in shown


@pytest.mark.parametrize("separate_redis", [False, True])
def test_cross_shard_links_are_delivered_once(redis_url: str, make_web, tmp_path: Path,
                                              separate_redis: bool) -> None:
    web = make_web(domains=6, pages=15, **{**QUIET, "cross_share": 0.5})
    seeds = seeds_of(web, tmp_path)
    urls = {0: redis_url, 1: redis_url}
    other = None
    if separate_redis:
        other = RedisServer(tmp_path / "redis1").start()
        urls[1] = other.url
    mapping = json.dumps({str(k): v for k, v in urls.items()})
    try:
        procs = []
        for shard in (0, 1):
            feed = tmp_path / f"items{shard}.jsonl"
            cmd = billion("-a", f"shard={shard}", "-a", "shards=2", seeds=seeds, settings=(
                f"CRAWLER_SHARD_REDIS_URLS={mapping}", "SCHEDULER_IDLE_BEFORE_CLOSE=3",
                f"FEEDS={json.dumps({str(feed): {'format': 'jsonlines'}})}"))
            procs.append(subprocess.Popen([sys.executable, "-m", "scrapy", *cmd], cwd=ROOT,
                                          env=env(urls[shard]), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        errs = []
        for p in procs:
            _, err = p.communicate(timeout=180)
            errs.append(err)
            assert p.returncode == 0, err[-3000:]
    finally:
        if other is not None:
            other.stop()
    fetched = Counter((e.domain, e.path) for e in web.log() if e.path != "/robots.txt")
    every_page = {(d, f"/p/{k}.html") for d in web.domains for k in range(1, 15)}
    assert every_page <= set(fetched)  # nothing lost
    assert max(fetched.values()) == 1  # nothing doubled
    for shard in (0, 1):
        items = [json.loads(x) for x in (tmp_path / f"items{shard}.jsonl").read_text().splitlines()]
        assert items, errs[shard][-4000:]
        assert {shard_of(domain_of(i["url"]), 2) for i in items} == {shard}
    assert {shard_of(d, 2) for d in web.domains} == {0, 1}


@pytest.mark.parametrize("project", [{}, {"scrapy.spidermiddlewares.depth.DepthMiddleware": 900}])
def test_spider_middlewares_for_requests_only_are_left_out_unless_the_project_lists_them(project: dict) -> None:
    from scrapy.crawler import CrawlerRunner
    from scrapy.settings import Settings
    from scrapy.spidermiddlewares.depth import DepthMiddleware
    from scrapy.spidermiddlewares.httperror import HttpErrorMiddleware
    from scrapy.spidermiddlewares.referer import RefererMiddleware
    from scrapy.utils.conf import build_component_list
    from scrapy.utils.misc import load_object

    from crawler.spiders.billion import BillionSpider

    # as `scrapy crawl` builds it: a crawler made, then given to the process,
    # which merges its own settings into it
    runner = CrawlerRunner(Settings({"SPIDER_MIDDLEWARES": project}, priority="project"))
    settings = runner.create_crawler(runner.create_crawler(BillionSpider)).settings
    enabled = {load_object(path) for path in build_component_list(
        settings.get_component_priority_dict_with_base("SPIDER_MIDDLEWARES"))}
    assert RefererMiddleware not in enabled and HttpErrorMiddleware in enabled
    assert (DepthMiddleware in enabled) == bool(project)
