"""robots.txt as the real web serves it, crawled with ``scrapy crawl billion``
and audited in the test web's request log: redirect chains, outages,
timeouts, hostile files, page-level directives and the seed fallback."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import redis

from devkit.testweb.control import LogEntry, TestWebProcess, consecutive
from devkit.testweb.site import Site
from tests.servers import free_port, run_scrapy, scrapy_env

QUIET = dict(links=6, size_fixed=3000, private_share=0.3, cross_share=0, dup_share=0, crawl_delay_share=0)
FAST_ROBOTS = ("CRAWLER_ROBOTS_RETRY=1", "CRAWLER_ROBOTS_ERROR_TTL=2")


def crawl(web: TestWebProcess, redis_url: str, tmp_path: Path, seeds: list[str], *settings: str,
          timeout: float = 240) -> tuple[dict, list[dict]]:
    """Run billion on ``seeds``; its stats and items."""
    (tmp_path / "seeds.txt").write_text("\n".join(seeds) + "\n")
    stats_file, feed = tmp_path / "stats.json", tmp_path / "items.jsonl"
    args = ["crawl", "billion", "-a", f"seeds={tmp_path / 'seeds.txt'}"]
    for s in ("CRAWLER_PROGRESS_INTERVAL=0", f"CRAWLER_STATS_FILE={stats_file}",
              f"CRAWLER_WARC_DIR={tmp_path / 'warc'}", f"FEEDS={json.dumps({str(feed): {'format': 'jsonlines'}})}",
              *((f"CRAWLER_TLS_CA_FILE={web.ca_file}",) if web.ca_file else ()), *settings):
        args += ["-s", s]
    result = run_scrapy(args, scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"), timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    items = [json.loads(line) for line in feed.read_text().splitlines()] if feed.exists() else []
    return json.loads(stats_file.read_text()), items


def by_domain(log: list[LogEntry]) -> dict[str, list[LogEntry]]:
    found: dict[str, list[LogEntry]] = defaultdict(list)
    for e in log:
        found[e.domain].append(e)
    return found


def pages(entries: list[LogEntry]) -> set[str]:
    """The pages fetched, "/" and /p/0.html being one page."""
    return {"/" if e.path == "/p/0.html" else e.path for e in entries if e.path == "/" or e.path.startswith("/p/")}


def test_redirected_and_unreachable_robots_lose_no_site(redis_url: str, make_web, tmp_path: Path) -> None:
    faults = {"redirect": 0.12, "https": 0.12, "www": 0.12, "loop": 0.12, "hops6": 0.12, "outage": 0.12,
              "timeout": 0.12}
    web = make_web(domains=24, pages=8, tls=True, also_plain=True, robots_faults=faults,
                   robots_outage_s=6, robots_timeout_ms=3000, **QUIET)
    site = Site(web.config, web.port, web.plain_port)
    kinds = {web.config.domain(d): site.robots_fault(d) for d in range(24)}
    assert {"redirect", "https", "www", "loop", "hops6", "outage", "timeout", None} <= set(kinds.values())
    seeds = [web.url(d, plain=site.robots_fault(d) == "https") for d in range(24)]
    stats, _ = crawl(web, redis_url, tmp_path, seeds, "CRAWLER_DOMAIN_DELAY=0.5", "DOWNLOAD_TIMEOUT=1",
                     "CRAWLER_LOCK_TTL=40", *FAST_ROBOTS)
    log = web.log()
    hosts = by_domain(log)
    every_page = {"/", *(f"/p/{k}.html" for k in range(1, 8))}
    for name, kind in kinds.items():
        entries = hosts[name]
        robots = [e.path for e in entries if e.path.startswith("/robots")]
        private = [e for e in entries if e.path.startswith("/private/")]
        assert pages(entries) == every_page, (name, kind)  # no site lost, whatever its robots.txt did
        if kind in ("loop", "hops6"):  # RFC 9309 2.3.1.3: unavailable, so no restrictions
            assert private, (name, kind)
        else:
            assert not private, (name, kind, private)
        if kind == "redirect":
            assert robots == ["/robots.txt", "/robots/hop/1", "/robots/hop/0"]
        elif kind == "hops6":  # five redirects followed, the sixth not
            assert robots == ["/robots.txt", "/robots/hop/5", "/robots/hop/4", "/robots/hop/3", "/robots/hop/2",
                              "/robots/hop/1"]
        elif kind == "loop":
            assert robots == ["/robots.txt", "/robots/loop"]
        elif kind == "www":  # the apex answered 301; the rules came from www and apply to the apex
            assert robots == ["/robots.txt"] and [e.path for e in hosts["www." + name]] == ["/robots.txt"]
        elif kind in ("outage", "timeout"):  # tried again with backoff until it answered
            assert len(robots) >= 2 and robots == ["/robots.txt"] * len(robots)
        elif kind == "https":  # http://host/robots.txt -> https://host/robots.txt
            plain = [e for e in entries if e.path == "/robots.txt" and e.host.endswith(f":{web.plain_port}")]
            assert len(plain) == 1 and plain[0].status == 301
    # every hop is a request the site sees: no two requests to a domain closer than the delay
    short = [(a.path, b.path, round(b.ms - a.ms)) for a, b in consecutive(log) if b.ms - a.ms < 500]
    assert not short, short
    # each outage or timeout was met at least once (the test web starts it with the domain's
    # first robots.txt request) and postponed the request that asked
    down = sum(kind in ("outage", "timeout") for kind in kinds.values())
    assert stats["crawler/robots/unreachable"] >= down and stats["crawler/robots/postponed"] >= down, down
    assert stats["crawler/robots/redirects_unavailable"] == sum(k in ("loop", "hops6") for k in kinds.values())
    assert stats.get("crawler/dlq/robots_unreachable", 0) == 0


def test_robots_unreachable_past_the_deadline_turns_its_urls_into_dead_letters(
        redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=6, pages=5, robots_faults={"503": 0.5}, **QUIET)
    site = Site(web.config, web.port)
    down = [d for d in range(6) if site.robots_fault(d) == "503"]
    assert down and len(down) < 6
    stats, _ = crawl(web, redis_url, tmp_path, [web.url(d) for d in range(6)], "CRAWLER_DOMAIN_DELAY=0",
                     "CRAWLER_ROBOTS_UNREACHABLE_MAX=3", *FAST_ROBOTS)
    hosts = by_domain(web.log())
    for d in range(6):
        fetched = pages(hosts[web.config.domain(d)])
        assert (fetched == set()) if d in down else (fetched == {"/", *(f"/p/{k}.html" for k in range(1, 5))}), (d, down, fetched)
        if d in down:  # asked again until the deadline, never a page
            assert len([e for e in hosts[web.config.domain(d)] if e.path == "/robots.txt"]) >= 2
    letters = [json.loads(x) for x in redis.Redis.from_url(redis_url).lrange("crawler:{billion:0}:dlq", 0, -1)]
    assert sorted(x["url"] for x in letters if x["reason"] == "robots_unreachable") == sorted(
        web.url(d) for d in down)
    assert stats["crawler/dlq/robots_unreachable"] == len(down)
    shown = run_scrapy(["frontier", "billion", "--json"], scrapy_env(redis_url))
    assert shown.returncode == 0, shown.stderr[-2000:]
    (report,) = json.loads(shown.stdout)  # one shard
    assert report["robots_postponed"] == stats["crawler/robots/postponed"] >= len(down)
    assert report["dead_letters"] == {"robots_unreachable": len(down)}


def test_hostile_robots_files_are_read_to_500_kib_without_stalling(redis_url: str, make_web,
                                                                   tmp_path: Path) -> None:
    web = make_web(domains=6, pages=6, robots_faults={"big": 0.5, "wildcards": 0.5}, **QUIET)
    site = Site(web.config, web.port)
    assert {site.robots_fault(d) for d in range(6)} == {"big", "wildcards"}
    # both files are longer than DOWNLOAD_MAXSIZE: still read, to the first 500 KiB
    stats, _ = crawl(web, redis_url, tmp_path, [web.url(d) for d in range(6)], "CRAWLER_DOMAIN_DELAY=0",
                     "DOWNLOAD_MAXSIZE=100000")
    hosts = by_domain(web.log())
    for d in range(6):
        entries = hosts[web.config.domain(d)]
        # "big" ends with "Disallow: /p/" past 500 KiB: ignored, as RFC 9309 allows
        assert pages(entries) == {"/", *(f"/p/{k}.html" for k in range(1, 6))}
        assert not [e for e in entries if e.path.startswith("/private/")]
    assert stats["crawler/robots/truncated"] == 6
    assert stats["crawler/links/robots_disallowed"] > 0  # the spider checked links against the 20,000 rules
    assert stats["crawler/loop/lag_max_ms"] < 500, stats["crawler/loop/lag_max_ms"]


def test_meta_robots_and_x_robots_tag_stop_link_extraction(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=2, pages=30, meta_nofollow_share=0.2, header_nofollow_share=0.2,
                   **{**QUIET, "links": 10})
    site = Site(web.config, web.port)
    stats, items = crawl(web, redis_url, tmp_path, [web.url(d) for d in range(2)], "CRAWLER_DOMAIN_DELAY=0")
    flagged = 0
    for item in items:
        path = "/" + item["url"].split("/", 3)[3]
        d = int(item["url"].split("//", 1)[1].split(".", 1)[0][1:])
        k = 0 if path == "/" else int(path.split("/")[2].split(".")[0])
        said = site.nofollow(d, k)
        assert item["nofollow"] is (said is not None), (item, said)
        if said:
            flagged += 1
            assert item["links"] == 0 and item["offered"] == 0
    assert flagged >= 4 and stats["crawler/links/nofollow_pages"] == flagged


@pytest.mark.parametrize("obey", [True, False])
def test_seeds_fall_back_to_the_other_scheme(redis_url: str, make_web, tmp_path: Path, obey: bool) -> None:
    web = make_web(domains=2, pages=4, **QUIET)  # plain HTTP only
    closed = free_port()
    seeds = [f"https://d0.test:{web.port}/",  # the server does not speak TLS
             f"http://d1.test:{closed}/"]  # nothing listens: https is tried once too, and fails
    stats, items = crawl(web, redis_url, tmp_path, seeds, "CRAWLER_DOMAIN_DELAY=0", "CRAWLER_MAX_ATTEMPTS=1",
                         "DOWNLOAD_TIMEOUT=2", "CRAWLER_LOCK_TTL=40", "CRAWLER_ROBOTS_UNREACHABLE_MAX=2",
                         f"ROBOTSTXT_OBEY={obey}", *FAST_ROBOTS)
    # robots.txt could not connect (obey), or the page could not: the seed went to its fallback
    assert stats["crawler/fallback/http"] == 1 and stats["crawler/fallback/https"] == 1
    assert pages(by_domain(web.log())["d0.test"]) == {"/", "/p/1.html", "/p/2.html", "/p/3.html"}
    assert any(i["url"] == f"http://d0.test:{web.port}/" for i in items)
    # d1 cannot connect either way: its fallback became a dead letter
    letters = [json.loads(x) for x in redis.Redis.from_url(redis_url).lrange("crawler:{billion:0}:dlq", 0, -1)]
    if obey:  # waited for robots.txt until the deadline
        assert [(x["url"], x["reason"]) for x in letters] == [(f"https://d1.test:{closed}/", "robots_unreachable")]
    else:
        assert sorted((x["url"], x["reason"]) for x in letters) == [
            (f"http://d1.test:{closed}/", "retries_exhausted"), (f"https://d0.test:{web.port}/", "retries_exhausted"),
            (f"https://d1.test:{closed}/", "retries_exhausted")]


def test_the_process_keeps_rules_for_their_lifetime_on_the_crawls_clock(redis_url: str, clock) -> None:
    import asyncio

    from crawler.clock import use_clock
    from crawler.middlewares.robots import _LOCAL_TTL, SharedRobotsMiddleware
    from crawler.scheduler import FrontierScheduler
    from tests.servers import crawler_for

    crawler = crawler_for(redis_url, ROBOTSTXT_OBEY=True, SCHEDULER="crawler.scheduler.FrontierScheduler")
    use_clock(crawler, clock)
    scheduler = FrontierScheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    try:
        robots = SharedRobotsMiddleware(crawler)
        store = crawler.worker_session.robots
        origin = "http://a.test"
        store.put(origin, {"mode": "parse", "body": "User-agent: *\nDisallow: /a\n"}, 3600)
        assert not asyncio.run(robots.verdict(origin)).allowed(origin + "/a")  # read from Redis, kept here
        store.put(origin, {"mode": "parse", "body": "User-agent: *\nDisallow: /b\n"}, 3600)  # changed since
        clock.advance(_LOCAL_TTL - 0.001)
        assert not asyncio.run(robots.verdict(origin)).allowed(origin + "/a")  # still this process's copy
        clock.advance(0.001)  # its lifetime is over: read again
        rules = asyncio.run(robots.verdict(origin))
        assert rules.allowed(origin + "/a") and not rules.allowed(origin + "/b")
        assert crawler.stats.get_value("crawler/robots/shared_hits") == 2
    finally:
        scheduler.close("finished")


def test_a_robots_fetch_mark_is_not_kept_when_redis_fails_after_it(tmp_path: Path) -> None:
    """A robots.txt fetched, then Redis lost before its record is stored: the
    request is handed back to wait for Redis, and the fetch's mark (kept for
    the request's lease, per origin) goes with it; it stayed behind for good
    when the frontier then leased the domain to another process. The engine
    is a stand-in whose download stops the real Redis and fails, to place the
    loss exactly between the fetch and the store."""
    import asyncio

    from scrapy import Request

    from crawler.middlewares.robots import SharedRobotsMiddleware
    from crawler.scheduler import FrontierScheduler
    from tests.servers import RedisServer, crawler_for

    server = RedisServer(tmp_path / "redis").start()
    try:
        crawler = crawler_for(server.url, ROBOTSTXT_OBEY=True, SCHEDULER="crawler.scheduler.FrontierScheduler",
                              REDIS_PARAMS={"socket_timeout": 2, "socket_connect_timeout": 2})
        scheduler = FrontierScheduler.from_crawler(crawler)
        scheduler.open(crawler.spider)
        robots = SharedRobotsMiddleware(crawler)

        async def download_async(request: Request) -> None:
            assert request.url == "http://a.test/robots.txt"
            server.stop()
            raise ConnectionRefusedError("the site is down too")

        crawler.engine.download_async = download_async  # type: ignore[union-attr,method-assign]
        handed_back = asyncio.run(robots.process_request(Request("http://a.test/p")))
        assert handed_back is not None and handed_back.url == "http://a.test/p"
        assert crawler.stats.get_value("crawler/robots/fetched") == 1
        assert crawler.stats.get_value("crawler/robots/redis_unavailable") == 1
        assert robots.fetched == {}, robots.fetched
        assert robots.fetching == {} and robots.pins == {}
    finally:
        server.stop()


def test_the_rules_a_process_keeps_are_bounded_in_bytes(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts' rules kept in a process are capped in count and in bytes: a
    crawl meeting many hosts with big robots.txt files (an index of about
    3 MB for 500 kB of wildcard rules) keeps what fits, the oldest out first."""
    from crawler.middlewares import robots as module
    from crawler.robots import Rules
    from tests.servers import crawler_for

    monkeypatch.setattr(module, "_LOCAL_BYTES", 2_000_000)
    robots = module.SharedRobotsMiddleware(crawler_for(redis_url, ROBOTSTXT_OBEY=True,
                                                       SCHEDULER="crawler.scheduler.FrontierScheduler"))
    big = "User-agent: *\n" + "".join(f"Disallow: /s{i}/*x{i}.php$\n" for i in range(2000))
    for i in range(20):
        robots._keep(f"https://d{i}.test", Rules({"mode": "parse", "body": big}, "crawler"), 3600)
        robots._keep(f"https://small{i}.test", Rules({"mode": "allow"}, "crawler"), 3600)
        assert robots.local_bytes == sum(rules.weight for rules, _ in robots.local.values()) <= 2_000_000
    weight = robots.local["https://d19.test"][0].weight
    assert weight > 400_000  # the test is about big files
    kept = [origin for origin in robots.local if origin.startswith("https://d")]
    assert kept == [f"https://d{i}.test" for i in range(20 - len(kept), 20)] and 1 <= len(kept) < 20
    robots._keep("https://d19.test", robots.local["https://d19.test"][0], 3600)  # a refresh: counted once
    assert robots.local_bytes == sum(rules.weight for rules, _ in robots.local.values())
