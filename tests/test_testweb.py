"""The test web serves what its configuration says, and logs it exactly."""

from __future__ import annotations

import http.client
import statistics
import time
from collections import Counter
from urllib.parse import urlsplit

import pytest
from selectolax.lexbor import LexborHTMLParser

from devkit.testweb.config import WebConfig
from devkit.testweb.site import Site


def hrefs(body: bytes) -> list[str]:
    return [a.attributes["href"] for a in LexborHTMLParser(body).css("a[href]")]


def test_page_sizes_follow_the_open_web_distribution() -> None:
    site = Site(WebConfig(domains=40, pages=50), port=80)
    sizes = [site.page_size(d, k) for d in range(40) for k in range(50)]
    assert abs(statistics.median(sizes) / 138_000 - 1) < 0.08
    assert abs(statistics.mean(sizes) / 242_000 - 1) < 0.12


def test_served_sizes_and_links_match_the_config(make_web) -> None:
    web = make_web(domains=4, pages=30, links=40, cross_share=0.25, dup_share=0.2)
    site = Site(web.config, web.port)
    counts: Counter[str] = Counter()
    total = 0
    for d in range(4):
        for k in range(0, 30, 3):
            status, headers, body = web.fetch(d, f"/p/{k}.html")
            assert status == 200
            assert len(body) == int(headers["Content-Length"]) == site.page_size(d, k)
            links = hrefs(body)
            assert links == site.page_links(d, k) and len(links) == 40
            for href in links:
                total += 1
                if href.startswith("http://") and urlsplit(href).hostname != web.config.domain(d):
                    counts["cross"] += 1
                elif "?" in href or "#" in href:
                    counts["dup"] += 1
    assert abs(counts["cross"] / total - 0.25) < 0.05
    assert abs(counts["dup"] / total - 0.2) < 0.05


def test_fixed_size_and_home_page(make_web) -> None:
    web = make_web(domains=2, pages=5, size_fixed=5000)
    status, _, home = web.fetch(1, "/")
    assert status == 200 and len(home) == 5000
    assert web.fetch(1, "/p/0.html")[2] == home
    assert web.fetch(1, "/p/5.html")[0] == 404  # beyond pages
    assert web.fetch("other.test", "/")[0] == 404


def test_every_page_is_reachable_from_the_home_page(make_web) -> None:
    web = make_web(domains=1, pages=25, links=3, size_fixed=2000, cross_share=0, dup_share=0)
    seen, todo = set(), ["/"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo += [h for h in hrefs(web.fetch(0, path)[2]) if h.startswith("/p/")]
    assert {f"/p/{k}.html" for k in range(25)} <= seen


def test_same_config_same_bytes(make_web) -> None:
    config = WebConfig(domains=3, pages=10)
    a, b = make_web(config), make_web(config)
    for path in ("/", "/p/7.html", "/robots.txt"):
        body_a = a.fetch(2, path)[2].replace(str(a.port).encode(), b"PORT")
        body_b = b.fetch(2, path)[2].replace(str(b.port).encode(), b"PORT")
        assert body_a == body_b


def test_robots_txt_disallows_private_and_sets_crawl_delay(make_web) -> None:
    web = make_web(domains=30, pages=5, crawl_delay_share=0.3, crawl_delay=2)
    with_delay = 0
    for d in range(30):
        status, headers, body = web.fetch(d, "/robots.txt")
        assert status == 200 and headers["Content-Type"] == "text/plain"
        text = body.decode()
        assert "Disallow: /private/" in text
        with_delay += "Crawl-delay: 2" in text
    assert 4 <= with_delay <= 16
    assert web.fetch(0, "/private/1.html")[0] == 200  # served to whoever ignores robots


def test_robots_faults(make_web) -> None:
    web = make_web(domains=30, pages=2, robots_faults={"404": 0.3, "503": 0.3, "invalid": 0.3})
    kinds = Counter()
    for d in range(30):
        status, _, body = web.fetch(d, "/robots.txt")
        kinds["invalid" if status == 200 and b"not robots" in body else str(status)] += 1
    assert set(kinds) == {"404", "503", "invalid", "200"}


@pytest.mark.parametrize("kind", ["404", "410", "500"])
def test_status_faults_by_path(make_web, kind: str) -> None:
    web = make_web(domains=1, pages=2)
    assert web.fetch(0, f"/fault/{kind}")[0] == int(kind)


@pytest.mark.parametrize("kind", ["429", "503"])
def test_retry_after_faults(make_web, kind: str) -> None:
    web = make_web(domains=1, pages=2, retry_after=7)
    status, headers, _ = web.fetch(0, f"/fault/{kind}")
    assert status == int(kind) and headers["Retry-After"] == "7"
    assert web.fetch(0, f"/fault/{kind}/3")[1]["Retry-After"] == "3"


def test_faults_by_share_hit_that_share_of_pages(make_web) -> None:
    web = make_web(domains=2, pages=200, size_fixed=2000, faults={"404": 0.1, "429": 0.05, "410": 0.05})
    statuses = Counter(web.fetch(d, f"/p/{k}.html")[0] for d in range(2) for k in range(1, 200))
    assert abs(statuses[404] / 398 - 0.1) < 0.04
    assert abs(statuses[429] / 398 - 0.05) < 0.03
    assert abs(statuses[410] / 398 - 0.05) < 0.03
    assert web.fetch(0, "/")[0] == 200  # the home page is never faulted


def test_slow_response(make_web) -> None:
    web = make_web(domains=1, pages=2)
    started = time.monotonic()
    assert web.fetch(0, "/fault/slow/600")[0] == 200
    assert time.monotonic() - started >= 0.6


def test_dropped_connection(make_web) -> None:
    web = make_web(domains=1, pages=2)
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=5)
    conn.request("GET", "/fault/drop", headers={"Host": "d0.test"})
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        conn.getresponse()
    assert web.log()[-1].status == 0


def test_redirect_chain_and_loop(make_web) -> None:
    web = make_web(domains=1, pages=10, redirect_hops=3, faults={"redirect": 1.0})
    path, hops = "/p/4.html", 0
    while True:
        status, headers, body = web.fetch(0, path)
        if status != 302:
            break
        path, hops = headers["Location"], hops + 1
    assert (status, path, hops) == (200, "/moved/4.html", 5)
    assert web.fetch(0, "/fault/loop/0")[1]["Location"] == "/fault/loop/1"
    assert web.fetch(0, "/fault/loop/1")[1]["Location"] == "/fault/loop/0"


def test_calendar_trap_is_infinite(make_web) -> None:
    web = make_web(domains=1, pages=2)
    path = "/calendar/2026/11"
    for expected in ("/calendar/2026/12", "/calendar/2027/1", "/calendar/2027/2"):
        status, _, body = web.fetch(0, path)
        assert status == 200
        path = hrefs(body)[0]
        assert path == expected


def test_big_pages_and_non_html(make_web) -> None:
    web = make_web(domains=1, pages=5, big_size=400_000, pdf_size=300_000)
    status, headers, body = web.fetch(0, "/big/1.html")
    assert status == 200 and len(body) == 400_000 and headers["Content-Type"].startswith("text/html")
    status, headers, body = web.fetch(0, "/doc/1.pdf")
    assert headers["Content-Type"] == "application/pdf" and body.startswith(b"%PDF")


def test_request_log_is_exact(make_web) -> None:
    web = make_web(domains=3, pages=5, size_fixed=2000)
    before = time.time() * 1000
    wanted = [(0, "/", 200), (1, "/robots.txt", 200), (2, "/p/3.html?utm_source=x", 200),
              (2, "/nope", 404), (0, "/fault/429", 429), (1, "/fault/drop", 0)]
    for d, path, _ in wanted:
        try:
            web.fetch(d, path)
        except (http.client.RemoteDisconnected, ConnectionResetError):
            pass
    after = time.time() * 1000
    log = web.log()
    assert [(e.domain, e.target, e.status) for e in log] == [
        (web.config.domain(d), path, status) for d, path, status in wanted
    ]
    assert all(before - 1 <= e.ms <= after + 1 for e in log)
    assert [e.ms for e in log] == sorted(e.ms for e in log)
    assert web.log(since=4) == log[4:]


def test_bad_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown page fault 'teapot'"):
        WebConfig(faults={"teapot": 0.1})
    with pytest.raises(ValueError, match="cross_share must be within 0..1"):
        WebConfig(cross_share=2)
    with pytest.raises(ValueError, match="unknown keys"):
        WebConfig.from_json('{"domain": 3}')
