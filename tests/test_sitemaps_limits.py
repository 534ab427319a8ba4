"""What a sitemap may cost a crawl (``crawler/middlewares/sitemaps.py``):
its counts when Redis goes away while it is read, a download cut at its
cap without the size-cap middleware, and the bytes all sitemaps in flight
hold together (``CRAWLER_SITEMAP_MEMORY``)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.http import XmlResponse

from crawler.meta import DELAY, SITEMAP
from crawler.middlewares.sitemaps import STATS, SitemapMiddleware
from devkit import chaos
from devkit.testweb.sitemaps import _urlset
from tests.servers import RedisServer, crawler_for, run_scrapy, scrapy_env, wait_until


def _answers(call: Any) -> bool:
    try:
        call()
        return True
    except (redis.RedisError, OSError):
        return False


def _sitemap(url: str, urls: list[str]) -> XmlResponse:
    request = Request(url, meta={SITEMAP: {"site": "site.test", "level": 1, "up": []}})
    return XmlResponse(url, body=_urlset(urls), request=request)


def test_sitemap_counts_met_by_a_redis_outage_reach_the_frontier_once_it_is_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Redis stopped (SIGSTOP) while a sitemap is read: the frontier's shared
    counters (``scrapy frontier``) missed its counts, said at DEBUG only.
    Now the outage is said (WARNING, ``crawler/sitemaps/redis_unavailable``)
    and the counts are kept and sent once Redis answers: the frontier's
    counters match the crawl's stats."""
    from crawler.scheduler import FrontierScheduler
    from crawler.worker import session_of

    server = RedisServer(tmp_path / "redis").start()
    try:
        crawler = crawler_for(server.url, ROBOTSTXT_OBEY=True, CRAWLER_SITEMAPS=True,
                              SCHEDULER="crawler.scheduler.FrontierScheduler",
                              REDIS_PARAMS={"socket_timeout": 0.5, "socket_connect_timeout": 0.5})
        # the crawl's own client: a silent server costs one timeout, then calls are refused unsent
        scheduler = FrontierScheduler.from_crawler(crawler)
        scheduler.open(crawler.spider)
        try:
            middleware = SitemapMiddleware(crawler)
            middleware.robots = False
            session = session_of(crawler)
            assert session is not None
            pages = [[f"http://site.test/{n}/{k}.html" for k in range(5 + n)] for n in range(3)]
            asyncio.run(middleware.read(_sitemap("http://site.test/0.xml", pages[0])))
            assert server.proc is not None
            with caplog.at_level(logging.INFO, logger="crawler.middlewares.sitemaps"), \
                    chaos.stopped(server.proc.pid):
                asyncio.run(middleware.read(_sitemap("http://site.test/1.xml", pages[1])))
            wait_until(lambda: _answers(session.store.client.ping), 10, "Redis answers the crawl's client")
            asyncio.run(middleware.read(_sitemap("http://site.test/2.xml", pages[2])))
            stored = {k.decode(): int(v) for k, v in server.client().hgetall(session.store.keys.stats).items()}
            for name in STATS:
                assert stored.get(f"sitemaps_{name}", 0) == crawler.stats.get_value(f"crawler/sitemaps/{name}", 0), name
            assert stored["sitemaps_urls"] == 5 + 6 + 7
            assert crawler.stats.get_value("crawler/sitemaps/redis_unavailable", 0) >= 1
            assert [r for r in caplog.records if r.levelno == logging.WARNING and "Redis unreachable" in r.message]
        finally:
            scheduler.close("finished")
    finally:
        server.stop()


def test_a_sitemap_cut_at_its_cap_is_truncated_without_the_size_cap_middleware(
        redis_url: str, make_web, tmp_path: Path) -> None:
    """``CRAWLER_SIZECAP_ENABLED=False``: the handler still cuts the sitemap at
    ``CRAWLER_SITEMAP_MAX_BYTES`` (its request's own cap); the cut sitemap
    was counted invalid (malformed XML where the cut fell). It is truncated,
    not invalid, and every URL before the cut is read."""
    web = make_web(domains=1, pages=2, crawl_delay_share=0, sitemaps=True, sitemap_big_urls=5000,
                   sitemap_bomb_mib=1)
    cap = 100_000
    stats_file = tmp_path / "stats.json"
    result = run_scrapy(["crawl", "demo", "-a", f"start_urls={web.url('big.test', '/')}",
                         "-s", "CRAWLER_SITEMAPS=True", "-s", "CRAWLER_SIZECAP_ENABLED=False",
                         "-s", f"CRAWLER_SITEMAP_MAX_BYTES={cap}", "-s", "CRAWLER_DOMAIN_DELAY=0.02",
                         "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", f"CRAWLER_STATS_FILE={stats_file}"],
                        scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))
    assert result.returncode == 0, result.stderr[-3000:]
    stats = json.loads(stats_file.read_text())
    body = _urlset([web.url("big.test", f"/b/{i}.html") for i in range(5000)])
    assert len(body) > 2 * cap  # the test is about a cut
    assert stats["crawler/sitemaps/fetched"] == 1
    assert stats.get("crawler/sitemaps/invalid", 0) == 0, stats
    assert stats["crawler/sitemaps/truncated"] == 1
    assert stats["crawler/sitemaps/urls"] == body[:cap].count(b"</url>")
    assert stats["crawler/sitemaps/disallowed"] == stats["crawler/sitemaps/urls"]  # big.test's robots.txt


def test_the_sitemaps_in_flight_hold_at_most_the_memory_bound_and_all_are_read(redis_url: str) -> None:
    """Twelve sitemaps of about 300 kB named at once, each capped at 400 kB,
    and ``CRAWLER_SITEMAP_MEMORY`` 1 MB: the engine here sends every request
    through the middleware's ``process_request`` (when it has one, as
    Scrapy's downloader does), downloads what it lets through, hands that to
    ``read``, and queues what it hands back. The bodies held (downloading or
    not read yet) never pass 1 MB; those past it wait (``postponed``, with a
    delay in the frontier), and every sitemap is read in the end."""
    cap, bound = 400_000, 1_000_000
    crawler = crawler_for(redis_url, ROBOTSTXT_OBEY=True, CRAWLER_SITEMAPS=True,
                          SCHEDULER="crawler.scheduler.FrontierScheduler",
                          CRAWLER_SITEMAP_MAX_BYTES=cap, CRAWLER_SITEMAP_MEMORY=bound)
    middleware = SitemapMiddleware(crawler)
    middleware.robots = False
    queued: list[Request] = []
    crawler.engine.crawl = queued.append  # type: ignore[union-attr,method-assign]
    names = [f"http://site.test/{n}.xml" for n in range(12)]
    middleware.robots_txt_read("http://site.test", "".join(f"Sitemap: {url}\n" for url in names))
    bodies = {url: _urlset([f"http://site.test/{n}/{k:06d}.html" for k in range(6000)]) for n, url in enumerate(names)}
    assert all(250_000 < len(body) <= cap for body in bodies.values())
    admit = getattr(middleware, "process_request", None)

    async def engine() -> int:
        peak = 0
        held: dict[str, int] = {}  # url -> body bytes, from admission to the end of its read
        reads: set[asyncio.Task[Any]] = set()

        async def download_and_read(request: Request) -> None:
            await asyncio.sleep(0)  # the download: other requests go on meanwhile
            response = XmlResponse(request.url, body=bodies[request.url], request=request)
            response = middleware.process_response(request, response)
            await request.callback(response)  # type: ignore[misc]
            del held[request.url]

        while queued or reads:
            for request in queued[:]:
                queued.remove(request)
                again = admit(request) if admit is not None else None
                if again is not None:
                    assert again.meta[DELAY] > 0 and again.url == request.url
                    queued.append(again)  # waits in the frontier, tried later
                    continue
                held[request.url] = len(bodies[request.url])
                task = asyncio.create_task(download_and_read(request))
                reads.add(task)
                task.add_done_callback(reads.discard)
            peak = max(peak, sum(held.values()))
            await asyncio.sleep(0)
            if reads:
                await asyncio.wait(reads, return_when=asyncio.FIRST_COMPLETED)
        return peak

    peak = asyncio.run(engine())
    assert peak <= bound, peak
    stats = crawler.stats
    assert stats.get_value("crawler/sitemaps/fetched") == 12
    assert stats.get_value("crawler/sitemaps/urls") == 12 * 6000
    assert stats.get_value("crawler/sitemaps/postponed") >= 10 - 2
    assert stats.get_value("crawler/sitemaps/memory_max") <= bound
    assert middleware.held_bytes() == 0


def test_a_crawl_under_a_tight_sitemap_memory_reads_every_sitemap(redis_url: str, make_web, tmp_path: Path) -> None:
    """A real crawl of the three sitemap sites (19 sitemaps, two 50 MiB bombs
    among them) with ``CRAWLER_SITEMAP_MEMORY`` room for one full sitemap:
    sitemaps of different sites come due together, some wait their turn
    (``postponed``), the most held stays under the bound, and every one is
    read, the frontier's ledger adding up."""
    web = make_web(domains=1, pages=3, size_fixed=2000, crawl_delay_share=0, sitemaps=True, sitemap_bomb_mib=64)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(web.url(host) for host in ("maps.test", "evil.test", "big.test")) + "\n")
    stats_file, bound = tmp_path / "stats.json", 60_000_000
    result = run_scrapy(["crawl", "billion", "-a", f"seeds={seeds}", "-s", "CRAWLER_DOMAIN_DELAY=0.05",
                         "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", f"CRAWLER_STATS_FILE={stats_file}",
                         "-s", f"CRAWLER_SITEMAP_MEMORY={bound}"],
                        scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))
    assert result.returncode == 0, result.stderr[-3000:]
    stats = json.loads(stats_file.read_text())
    assert stats["crawler/sitemaps/fetched"] == 19  # as without the bound (tests/test_sitemaps.py)
    assert stats["crawler/sitemaps/postponed"] >= 1
    assert 52_428_800 <= stats["crawler/sitemaps/memory_max"] <= bound
    assert stats["crawler/ledger/adds_up"] == 1 and stats["crawler/ledger/admitted"] == stats["crawler/ledger/stored"]


def test_a_sitemap_that_leaves_unseen_holds_its_bytes_only_for_a_while(redis_url: str, clock) -> None:
    """Sitemaps that leave the downloader by a way the middleware never sees
    (a retry, a redirect, a hand-back of a middleware after it), kept alive
    here as a reference cycle or a frozen object would keep them: their
    bytes count for ``DOWNLOAD_TIMEOUT`` + 120 s on the crawl's clock, then
    no more, so the bound cannot close for good. A sitemap answered with an
    error status is not read: its body is not held."""
    from scrapy.http import Response

    from crawler.clock import use_clock

    crawler = crawler_for(redis_url, ROBOTSTXT_OBEY=True, CRAWLER_SITEMAPS=True, DOWNLOAD_TIMEOUT=30,
                          SCHEDULER="crawler.scheduler.FrontierScheduler",
                          CRAWLER_SITEMAP_MAX_BYTES=400_000, CRAWLER_SITEMAP_MEMORY=1_000_000)
    use_clock(crawler, clock)
    middleware = SitemapMiddleware(crawler)
    queued: list[Request] = []
    crawler.engine.crawl = queued.append  # type: ignore[union-attr,method-assign]
    middleware.robots_txt_read("http://site.test", "".join(f"Sitemap: http://site.test/{n}.xml\n" for n in range(4)))
    first, second, third, fourth = queued
    assert middleware.process_request(first) is None and middleware.process_request(second) is None
    assert middleware.process_request(third) is not None  # 1.2 MB would be held: it waits
    clock.advance(30 + 120 - 1)
    assert middleware.process_request(third) is not None
    clock.advance(2)
    assert middleware.held_bytes() == 0 and middleware.process_request(third) is None
    middleware.process_response(third, Response(third.url, status=404, body=b"x" * 300_000, request=third))
    assert middleware.held_bytes() == 0
    assert middleware.process_request(fourth) is None and middleware.held_bytes() == 400_000
