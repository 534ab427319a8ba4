"""Sitemaps in real crawls (``crawler/middlewares/sitemaps.py``): real
``scrapy crawl`` against real Redis and the test web's sitemap sites
(``devkit/testweb/sitemaps.py``): maps.test, whose pages only its sitemaps
list; evil.test's hostile sitemaps; big.test's 60,000 URLs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scrapy.exceptions import NotConfigured
from warcio.archiveiterator import ArchiveIterator

from crawler.meta import ANY_TYPE, CHANGEFREQ, LASTMOD, MAX_PAGE_BYTES, PRIORITY, SITEMAP
from crawler.identity import domain_of
from crawler.sitemaps import Entry
from crawler.middlewares.sitemaps import SitemapMiddleware, robots_sitemaps
from devkit.testweb.config import WebConfig
from devkit.testweb.control import LogEntry, TestWebProcess
from tests.servers import RedisServer, crawler_for, run_scrapy, scrapy_env

DELAY = 0.25
MAPS_FILES = ["/sitemap_index.xml", "/sm/text.txt", "/sm/plain.xml", "/sm/pages.xml.gz", "/sm/rss.xml",
              "/sm/atom.xml", "/sm/nest1.xml", "/sm/nest2.xml", "/sm/leaf.xml"]


class Crawl:
    def __init__(self, web: TestWebProcess, log: list[LogEntry], stats: dict[str, Any], frontier: dict[str, Any],
                 warc: Path) -> None:
        self.web, self.log, self.stats, self.frontier, self.warc = web, log, stats, frontier, warc

    def paths(self, host: str) -> list[str]:
        return [e.target for e in self.log if e.domain == host]


def env(redis_url: str) -> dict[str, str]:
    return scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org")


@pytest.fixture(scope="module")
def crawl(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    """One billion crawl of the three sitemap sites, the domain delay 0.25 s."""
    redis_server.client().flushall()
    tmp = tmp_path_factory.mktemp("sitemaps")
    web = TestWebProcess(WebConfig(domains=1, pages=3, size_fixed=2000, crawl_delay_share=0, sitemaps=True)).start()
    try:
        seeds = tmp / "seeds.txt"
        seeds.write_text("\n".join(web.url(host) for host in ("maps.test", "evil.test", "big.test")) + "\n")
        stats_file = tmp / "stats.json"
        result = run_scrapy(["crawl", "billion", "-a", f"seeds={seeds}", "-s", f"CRAWLER_DOMAIN_DELAY={DELAY}",
                             "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", f"CRAWLER_WARC_DIR={tmp / 'warc'}",
                             "-s", f"CRAWLER_STATS_FILE={stats_file}", "-s", "MEMUSAGE_CHECK_INTERVAL_SECONDS=0.05"],
                            env(redis_server.url))
        assert result.returncode == 0, result.stderr[-3000:]
        frontier = run_scrapy(["frontier", "billion", "--json"], env(redis_server.url))
        text = run_scrapy(["frontier", "billion"], env(redis_server.url))
        assert frontier.returncode == 0 and text.returncode == 0, frontier.stderr[-2000:]
        report = json.loads(frontier.stdout)[0]  # one shard
        report["text"] = text.stdout
        yield Crawl(web, web.log(), json.loads(stats_file.read_text()), report, tmp / "warc")
    finally:
        web.stop()


def test_a_site_listed_only_in_its_sitemaps_is_crawled_completely(crawl: Crawl) -> None:
    pages = sorted(int(p[3:-5]) for p in crawl.paths("maps.test") if p.startswith("/s/"))
    assert pages == [k for k in range(24) if k != 3]
    assert crawl.paths("www.maps.test") == ["/robots.txt", "/s/3.html"]  # same registered domain: kept
    # every format: an index, text, plain and gzip urlsets, RSS, Atom, three levels of nesting
    assert sorted(p for p in crawl.paths("maps.test") if not p.startswith("/s/")) == sorted(
        ["/robots.txt", "/", *MAPS_FILES])
    assert all(e.status == 200 for e in crawl.log)


def test_a_url_robots_txt_disallows_is_never_fetched(crawl: Crawl) -> None:
    assert not [p for p in crawl.paths("maps.test") if p.startswith("/private/")]
    assert crawl.paths("big.test") == ["/robots.txt", "/big.xml", "/"]
    assert crawl.stats["crawler/sitemaps/disallowed"] == 1 + 50_000


def test_each_sitemap_is_fetched_once_and_loops_are_not_refetched(crawl: Crawl) -> None:
    sitemaps = [e.target for e in crawl.log if e.target.endswith((".xml", ".gz", ".txt"))
                and e.target != "/robots.txt"]
    assert len(sitemaps) == len(set(sitemaps)) == 9 + 9 + 1
    assert crawl.stats["crawler/sitemaps/loops"] == 2  # loop.xml lists itself; loop2.xml lists loop.xml
    assert "/e/0.html" in crawl.paths("evil.test")  # what the loop led to was read


def test_hostile_sitemaps(crawl: Crawl) -> None:
    stats, evil = crawl.stats, crawl.paths("evil.test")
    assert stats["crawler/sitemaps/invalid/entities"] == 1  # XXE: never expanded
    assert stats["crawler/sitemaps/invalid/gzip-truncated"] == 1
    assert {"/e/2.html", "/e/3.html"} <= set(evil)  # read before the gzip was cut: kept
    assert "/e/40.html" in evil  # a urlset served as text/html
    assert "/e/41.html" in evil  # the bomb's one URL
    # both bombs (1 GiB, gzip file and Content-Encoding) cut at 50 MiB, memory bounded
    assert stats["crawler/sitemaps/truncated"] == 3  # the two bombs and big.test's 60,000 URLs
    assert stats["memusage/max"] < 500 * 2**20


def test_at_most_50000_urls_a_file(crawl: Crawl) -> None:
    assert crawl.stats["crawler/sitemaps/dropped_urls"] == 10_000


def test_offsite_urls_are_dropped_and_counted(crawl: Crawl) -> None:
    assert crawl.stats["crawler/sitemaps/offsite"] == 4
    assert {e.domain for e in crawl.log} == {"maps.test", "www.maps.test", "evil.test", "big.test"}


def test_sitemap_fetches_obey_the_domain_delay(crawl: Crawl) -> None:
    by_domain: dict[str, list[LogEntry]] = {}
    for entry in crawl.log:
        by_domain.setdefault(domain_of(f"http://{entry.host}/"), []).append(entry)
    gaps = []
    for entries in by_domain.values():
        entries.sort(key=lambda e: e.ms)
        gaps += [(b.ms - a.done, b.target) for a, b in zip(entries, entries[1:])]  # billion: from the finish
    assert len(gaps) > 50
    assert sum(target.endswith((".xml", ".gz", ".txt")) for _, target in gaps) >= 18
    assert [g for g in gaps if g[0] < DELAY * 1000] == []


def test_stats_frontier_command_and_ledger(crawl: Crawl) -> None:
    stats, report = crawl.stats, crawl.frontier
    assert stats["crawler/sitemaps/fetched"] == 19
    assert stats["crawler/sitemaps/discovered"] == 2 + 7 + 1 + 2  # www.maps.test's robots.txt too
    assert stats["crawler/sitemaps/urls"] == stats["crawler/sitemaps/kept"] + stats["crawler/sitemaps/offsite"] \
        + stats["crawler/sitemaps/loops"] + stats["crawler/sitemaps/disallowed"]
    assert stats["crawler/sitemaps/invalid"] == 2
    for name in ("fetched", "urls", "kept", "offsite", "truncated", "invalid", "loops", "discovered"):
        assert report["sitemaps"][name] == stats[f"crawler/sitemaps/{name}"], name
    assert "  sitemaps      12 named in robots.txt, 19 read" in report["text"]
    assert report["ledger"]["adds_up"] and stats["crawler/ledger/adds_up"] == 1
    assert stats["crawler/ledger/admitted"] == stats["crawler/ledger/stored"]


def test_the_warc_holds_the_sitemaps(crawl: Crawl) -> None:
    uris = set()
    for path in crawl.warc.glob("*.warc.gz"):
        with open(path, "rb") as fh:
            uris |= {r.rec_headers.get_header("WARC-Target-URI") for r in ArchiveIterator(fh)
                     if r.rec_type == "response"}
    for path in (*MAPS_FILES[:4], "/bomb.xml.gz"):
        host = "evil.test" if "bomb" in path else "maps.test"
        assert crawl.web.url(host, path) in uris, path


def test_depth_limit_once_per_crawl_and_outside_billion(redis_url: str, make_web, tmp_path: Path) -> None:
    """The demo spider with CRAWLER_SITEMAPS: depth 3 stops before the leaf;
    a second run (robots.txt refetched, the frontier resumed) fetches no
    sitemap again."""
    web = make_web(domains=1, pages=2, crawl_delay_share=0, sitemaps=True)
    runs = []
    for n, depth in enumerate(("3", "5")):
        stats_file = tmp_path / f"stats{n}.json"
        result = run_scrapy(["crawl", "demo", "-a", f"start_urls={web.url('maps.test', f'/?run={n}')}",
                             "-s", "CRAWLER_SITEMAPS=True", "-s", f"CRAWLER_SITEMAP_DEPTH={depth}",
                             "-s", "CRAWLER_ROBOTS_TTL=1", "-s", "CRAWLER_DOMAIN_DELAY=0.02",
                             "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", f"CRAWLER_STATS_FILE={stats_file}"],
                            env(redis_url))
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(json.loads(stats_file.read_text()))
    assert runs[0]["crawler/sitemaps/too_deep"] == 1
    paths = [e.target for e in web.log() if e.domain == "maps.test"]
    assert "/sm/leaf.xml" not in paths and not {f"/s/{k}.html" for k in range(20, 24)} & set(paths)
    assert {f"/s/{k}.html" for k in range(20) if k != 3} <= set(paths)
    assert paths.count("/robots.txt") >= 2  # read again (a 1 s lifetime), in the second run at least
    assert runs[1]["crawler/sitemaps/discovered"] == 2 and runs[1].get("crawler/sitemaps/fetched", 0) == 0
    fetched = [p for p in paths if p in MAPS_FILES]
    assert len(fetched) == len(set(fetched)) == len(MAPS_FILES) - 1  # each once, the leaf never


def test_robots_sitemap_lines() -> None:
    body = ("User-agent: *\nDisallow: /x\n  SITEMAP :http://a.test/1.xml # one\nsitemap: /relative.xml\n"
            "Sitemap: ftp://a.test/x\nSitemap: https://b.test/2.xml.gz\nSitemap: http://a.test/1.xml\n")
    assert robots_sitemaps(body) == ["http://a.test/1.xml", "https://b.test/2.xml.gz"]


def test_off_unless_asked_and_what_a_listed_url_carries(redis_url: str) -> None:
    settings = {"SCHEDULER": "crawler.scheduler.FrontierScheduler", "ROBOTSTXT_OBEY": True}
    with pytest.raises(NotConfigured):
        SitemapMiddleware(crawler_for(redis_url, **settings))
    crawler = crawler_for(redis_url, **settings, CRAWLER_SITEMAPS=True, CRAWLER_SITEMAP_PRIORITY=-3,
                          CRAWLER_SITEMAP_DEPTH=2)
    middleware = SitemapMiddleware(crawler)
    queued: list = []
    crawler.engine.crawl = queued.append  # type: ignore[union-attr,method-assign]
    middleware.robots_txt_read("http://www.site.test", "Sitemap: http://cdn.other.test/s.xml\n")
    sitemap = queued.pop()
    assert sitemap.meta[SITEMAP] == {"site": "site.test", "level": 1, "up": []}
    assert sitemap.meta[ANY_TYPE] and sitemap.meta[MAX_PAGE_BYTES] == 52_428_800 and sitemap.priority == -3
    counts: dict[str, int] = dict.fromkeys(("kept", "offsite", "too_deep", "loops", "disallowed"), 0)
    middleware.robots = False
    middleware._listed([Entry("http://site.test/a", "page", "2025-01-02", "daily", 0.5),
                        Entry("http://cdn.other.test/b", "page", None, None, None),
                        Entry("http://site.test/child.xml", "sitemap", None, None, None)],
                       sitemap.meta[SITEMAP], ["http://cdn.other.test/s.xml"], counts)
    page, child = queued
    assert page.meta == {"depth": 0, LASTMOD: "2025-01-02", CHANGEFREQ: "daily", PRIORITY: 0.5}
    assert page.priority == -3
    assert child.meta[SITEMAP] == {"site": "site.test", "level": 2, "up": ["http://cdn.other.test/s.xml"]}
    assert counts == {"kept": 2, "offsite": 1, "too_deep": 0, "loops": 0, "disallowed": 0}
    queued.clear()
    middleware._listed([Entry("http://site.test/deeper.xml", "sitemap", None, None, None)],
                       child.meta[SITEMAP], [], counts)
    assert queued == [] and counts["too_deep"] == 1


def test_guess_finds_an_unnamed_sitemap_only_when_asked(redis_url: str, make_web, tmp_path: Path) -> None:
    """robots.txt names no sitemap, /sitemap.xml lists the site's pages, and
    the crawl starts at a page with no links (a 404): without
    CRAWLER_SITEMAP_GUESS only that page is fetched; with it, /sitemap.xml
    once and every page it lists."""
    web = make_web(domains=1, pages=6, crawl_delay_share=0, private_share=0, cross_share=0, dup_share=0,
                   sitemap_unnamed=True)
    host = web.domains[0]
    for guess in ("False", "True"):
        result = run_scrapy(["crawl", "demo", "-a", f"start_urls={web.url(host, '/none')}", "-s", "CRAWLER_SITEMAPS=True",
                             "-s", f"CRAWLER_SITEMAP_GUESS={guess}", "-s", "CRAWLER_DOMAIN_DELAY=0.02",
                             "-s", "SCHEDULER_FLUSH_ON_START=True", "-s", "CRAWLER_PROGRESS_INTERVAL=0"],
                            env(redis_url))
        assert result.returncode == 0, result.stderr[-3000:]
        paths = [e.target for e in web.log() if e.domain == host]
        pages = {f"/p/{k}.html" for k in range(1, 6)}
        if guess == "False":
            assert "/sitemap.xml" not in paths and not pages & set(paths), paths
        else:
            assert paths.count("/sitemap.xml") == 1 and pages <= set(paths), paths
