"""Sitemaps in a recrawl (docs/recrawl.md, "Sitemaps and robots.txt"): a real
``scrapy crawl billion`` whose pages are found through robots.txt's
sitemap, on a test web whose pages change on known schedules and whose
sitemaps give each page's true ``<lastmod>``. The sitemap is revisited on
its own pinned interval, read again, and its ``<lastmod>``s bring the
changed pages' visits sooner than their interval, once the host has
earned the trust; never sooner than ``CRAWLER_RECRAWL_MIN``. The audit
reads the site's own log."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


from devkit.testweb.config import WebConfig
from devkit.testweb.control import TestWebProcess
from tests.servers import RedisServer, run_scrapy, scrapy_env

MIN = 2.0  # CRAWLER_RECRAWL_MIN, s
INTERVAL = 60.0  # a page's fixed interval: longer than the crawl, so only hints bring a revisit
SITEMAP_EVERY = 3.0  # CRAWLER_RECRAWL_SITEMAP_INTERVAL
RUN = 22  # s

WEB = WebConfig(domains=2, pages=6, size_fixed=1500, links=0, crawl_delay_share=0, cross_share=0, dup_share=0,
                private_share=0, robots_sitemaps=True, sitemap_lastmod="live",
                change_share=1.0, change_mean_min_s=2.0, change_mean_max_s=4.0, validators={"etag": 1.0})


def test_a_revisited_sitemap_brings_changed_pages_sooner(redis_server: RedisServer, tmp_path: Path) -> None:
    redis_server.client().flushall()
    web = TestWebProcess(WEB).start()
    try:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("\n".join(web.url(d) for d in web.domains) + "\n")
        settings = {"CRAWLER_RECRAWL": "fixed", "CRAWLER_RECRAWL_INTERVAL": INTERVAL, "CRAWLER_RECRAWL_MIN": MIN,
                    "CRAWLER_RECRAWL_MAX": 120, "CRAWLER_RECRAWL_SITEMAP_INTERVAL": SITEMAP_EVERY,
                    "CRAWLER_DOMAIN_DELAY": 0.2, "CRAWLER_IP_DELAY": 0, "CLOSESPIDER_TIMEOUT": RUN,
                    "CRAWLER_PROGRESS_INTERVAL": 0, "CRAWLER_STATS_FILE": tmp_path / "stats.json",
                    "CRAWLER_ROBOTS_TTL": 3600}
        command = ["crawl", "billion", "-a", f"seeds={seeds}"]
        for name, value in settings.items():
            command += ["-s", f"{name}={value}"]
        result = run_scrapy(command, scrapy_env(redis_server.url, CRAWLER_CONTACT="ops@example.org"))
        assert result.returncode == 0, result.stderr[-3000:]
        stats = json.loads((tmp_path / "stats.json").read_text())
        log = web.log()
    finally:
        web.stop()

    visits: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in log:
        if e.status < 500:
            visits[(e.domain, e.path)].append(e.ms)
    sitemaps = {d: sorted(ms) for (d, path), ms in visits.items() if path == "/sitemap.xml"}
    pages = {key: sorted(ms) for key, ms in visits.items() if key[1].startswith("/p/")}
    # the sitemap is revisited on its own interval, and read again (it changed: its pages did)
    assert len(sitemaps) == 2 and all(len(ms) >= 3 for ms in sitemaps.values()), sitemaps
    assert stats["crawler/sitemaps/fetched"] >= 6
    # every page found through it; revisits came from hints alone (the interval is longer than the run)
    assert len(pages) == 12, sorted(pages)
    revisited = [key for key, ms in pages.items() if len(ms) >= 2]
    assert len(revisited) >= 6, {key: len(ms) for key, ms in pages.items()}
    assert stats["crawler/recrawl/hints/applied"] >= len(revisited)
    # never sooner than MIN after a visit, the hint's or the sitemap's
    for key, ms in [*pages.items(), *(((d, "/sitemap.xml"), ms) for d, ms in sitemaps.items())]:
        for a, b in zip(ms, ms[1:]):
            assert b - a >= MIN * 1000, (key, a, b)
    # the honest host earned the trust: its hinted visits found changes
    client = redis_server.client()
    counts = [client.hgetall(key) for key in client.scan_iter("*:stats") if client.type(key) == b"hash"]
    right = sum(int(c.get(b"rv_hints_right", 0)) for c in counts)
    wrong = sum(int(c.get(b"rv_hints_wrong", 0)) for c in counts)
    assert right >= 3 and right > 4 * wrong, (right, wrong)
    trusted = [key for key in client.scan_iter("*:rhost:*")
               if int(client.hget(key, "lastmod_ok") or 0) >= 3]
    print(f"sitemap visits {[len(ms) for ms in sitemaps.values()]}, page visits {sorted(len(ms) for ms in pages.values())}, "
          f"hints applied {stats['crawler/recrawl/hints/applied']} ignored {stats.get('crawler/recrawl/hints/ignored', 0)}, "
          f"right {right} wrong {wrong}")
    assert len(trusted) == 2, [(k, client.hgetall(k)) for k in client.scan_iter("*:rhost:*")]


def test_a_sitemap_is_tracked_on_its_own_interval_and_a_304_is_not_read(redis_url: str) -> None:
    """The middleware's half: with recrawl on, a sitemap request carries its
    pinned interval (none with recrawl off); a 304 to its revisit, routed by
    the recrawl middleware, reaches no reader and no spider callback, while
    a 200 is read."""
    from scrapy import Request
    from scrapy.http import Response, XmlResponse

    from crawler.meta import NOT_MODIFIED, RECRAWL, RECRAWL_STATE
    from crawler.middlewares.recrawl import RecrawlMiddleware, not_modified
    from crawler.middlewares.sitemaps import SitemapMiddleware
    from tests.servers import crawler_for

    common = {"ROBOTSTXT_OBEY": True, "CRAWLER_SITEMAPS": True, "SCHEDULER": "crawler.scheduler.FrontierScheduler"}
    for mode, pinned in (("off", None), ("fixed", 7200.0)):
        crawler = crawler_for(redis_url, CRAWLER_RECRAWL=mode, CRAWLER_RECRAWL_SITEMAP_INTERVAL=7200, **common)
        sitemaps = SitemapMiddleware(crawler)
        queued: list[Request] = []
        crawler.engine.crawl = queued.append  # type: ignore[union-attr,method-assign]
        sitemaps.robots_txt_read("http://site.test", "Sitemap: http://site.test/s.xml\n")
        (request,) = queued
        assert request.meta.get(RECRAWL) == pinned, mode

    recrawl = RecrawlMiddleware.from_crawler(crawler)
    revisit = request.replace(meta={**request.meta, RECRAWL_STATE: {"k": "1", "sent": "e"}})
    answer = recrawl.process_response(revisit, Response(revisit.url, status=304, request=revisit))
    answer = sitemaps.process_response(revisit, answer)
    assert answer.request is not None and answer.request.meta[NOT_MODIFIED]
    assert answer.request.callback is not_modified and revisit.callback is not_modified
    assert crawler.stats.get_value("crawler/sitemaps/not_modified") == 1
    fresh = request.replace(meta={**request.meta, RECRAWL_STATE: {"k": "1", "sent": "e"}})
    body = XmlResponse(fresh.url, body=b"<urlset/>", request=fresh)
    assert sitemaps.process_response(fresh, recrawl.process_response(fresh, body)) is body
    assert fresh.callback == sitemaps.read
