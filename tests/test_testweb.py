"""The test web serves what its configuration says, and logs it exactly."""

from __future__ import annotations

import http.client
import socket
import statistics
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

import pytest
from selectolax.lexbor import LexborHTMLParser

from crawler.resolver import HostMap, parse_host_map
from devkit.testweb.config import WebConfig, domain_addresses, layout_counts, skewed_counts
from devkit.testweb.control import LogEntry, consecutive, max_in_flight
from devkit.testweb.server import listen
from devkit.testweb.site import Site
from tests.servers import wait_until


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
    assert {e.address for e in log} == {"127.0.0.1"}  # no layout: everything on 127.0.0.1
    assert [e.ms for e in log] == sorted(e.ms for e in log)
    assert web.log(since=4) == log[4:]


def test_bad_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown page fault 'teapot'"):
        WebConfig(faults={"teapot": 0.1})
    with pytest.raises(ValueError, match="cross_share must be within 0..1"):
        WebConfig(cross_share=2)
    with pytest.raises(ValueError, match="unknown keys"):
        WebConfig.from_json('{"domain": 3}')


def test_domains_are_served_on_their_layout_addresses(make_web) -> None:
    web = make_web(domains=12, pages=3, size_fixed=1000, addresses=4)
    layout = [web.address_of(d) for d in range(12)]
    assert set(layout) == {"127.1.0.1", "127.1.0.2", "127.1.0.3", "127.1.0.4"}
    assert layout == domain_addresses(web.config)
    for d in range(12):
        assert web.fetch(d, "/p/1.html")[0] == 200  # through the domain's own address
    assert web.fetch(3, "/p/2.html", address="127.0.0.1")[0] == 200  # the server listens there too
    log = web.log()
    assert [(e.domain, e.address) for e in log] == [
        *((f"d{d}.test", layout[d]) for d in range(12)), ("d3.test", "127.0.0.1")]
    # what a crawler resolves through the host map: each name to its address, others to 127.0.0.1
    hosts = HostMap(parse_host_map(web.host_map()))
    for d in range(12):
        assert hosts.lookup(f"d{d}.test") == hosts.lookup(f"WWW.d{d}.test") == layout[d]
    assert hosts.lookup("maps.test") == "127.0.0.1"
    assert "www.d0.test" not in web.host_map(www=False)
    assert web.address_of("www.d5.test:80") == layout[5] and web.address_of("other.test") == "127.0.0.1"


def test_layout_over_tls_and_plain_http(make_web) -> None:
    web = make_web(domains=3, pages=2, size_fixed=1000, address_counts=[2, 1], tls=True, also_plain=True)
    for d in range(3):
        assert web.fetch(d)[0] == 200  # HTTPS to the address, the domain's name in the handshake
    conn = http.client.HTTPConnection(web.address_of(2), web.plain_port, timeout=10)
    conn.request("GET", "/", headers={"Host": "d2.test"})
    assert conn.getresponse().status == 200
    conn.close()
    assert [e.address for e in web.log()] == ["127.1.0.1", "127.1.0.1", "127.1.0.2", "127.1.0.2"]


def test_skewed_layout_is_shared_hosting() -> None:
    counts = skewed_counts(3000, 200, 0.8)
    assert sum(counts) == 3000 and len(counts) == 200 and min(counts) >= 1
    assert counts == sorted(counts, reverse=True)
    assert 500 <= counts[0] <= 1200  # one address with hundreds of domains
    assert counts[1] <= counts[0] / 2
    assert 5 <= sum(10 <= n < 100 for n in counts) <= 40  # a few with tens
    assert sum(n <= 5 for n in counts) >= 100  # most with one or a few
    assert sum(n <= 2 for n in counts) >= 60
    flatter = skewed_counts(3000, 200, 2.0)  # a higher exponent spreads them more evenly
    assert flatter[0] < counts[0] / 4 and min(flatter) > 2
    assert skewed_counts(5, 5, 0.8) == [1, 1, 1, 1, 1]


def test_skewed_layout_is_served_as_computed(make_web) -> None:
    config = WebConfig(domains=400, pages=2, size_fixed=1000, addresses=40, address_skew=0.8, seed=7)
    web = make_web(config)
    counts = layout_counts(config)
    assert counts[0] >= 100 and sum(n <= 2 for n in counts) >= 15
    served = Counter(address for name, address in web.host_map(www=False).items() if not name.startswith("*"))
    assert [served[f"127.1.0.{i + 1}"] for i in range(40)] == counts
    # the same shape from another seed, other domains on each address
    other = domain_addresses(WebConfig(domains=400, addresses=40, seed=8))
    assert other != web.addresses and sorted(Counter(other).values()) == sorted(counts)
    assert domain_addresses(WebConfig(domains=400, addresses=40, seed=7)) == web.addresses
    # the server listens on every address: one domain of each, fetched through it
    firsts = {address: d for d, address in reversed(list(enumerate(web.addresses)))}
    for d in firsts.values():
        assert web.fetch(d, "/robots.txt")[0] == 200
    assert {e.address for e in web.log()} == set(firsts) and len(firsts) == 40


def test_address_counts_override(make_web) -> None:
    web = make_web(domains=6, pages=2, size_fixed=1000, address_counts=[4, 1, 1])
    assert web.addresses == ["127.1.0.1"] * 4 + ["127.1.0.2", "127.1.0.3"]
    for d in range(6):
        web.fetch(d)
    assert [e.address for e in web.log()] == web.addresses
    with pytest.raises(ValueError, match="address_counts add up to 5, not domains=6"):
        WebConfig(domains=6, address_counts=[4, 1])
    with pytest.raises(ValueError, match="addresses must be 0 or the length of address_counts"):
        WebConfig(domains=6, addresses=3, address_counts=[5, 1])
    with pytest.raises(ValueError, match="addresses must be within"):
        WebConfig(domains=6, addresses=7)


def test_many_addresses_on_one_port(make_web) -> None:
    web = make_web(domains=200, pages=2, size_fixed=1000, addresses=200)
    assert sorted(set(web.addresses)) == sorted(f"127.1.{i // 256}.{i % 256}" for i in range(1, 201))
    for address in set(web.addresses):  # listening on each, on the one port
        socket.create_connection((address, web.port), timeout=5).close()


def test_listen_on_a_taken_port_fails_and_port_zero_finds_one() -> None:
    taken = socket.socket()
    taken.bind(("127.1.0.9", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            listen(["127.0.0.1", "127.1.0.9"], port)
        chosen, sockets = listen(["127.0.0.1", "127.1.0.9"])
        assert chosen != port and [s.getsockname() for s in sockets] == [("127.0.0.1", chosen),
                                                                          ("127.1.0.9", chosen)]
        for s in sockets:
            s.close()
    finally:
        taken.close()


def test_pairs_and_requests_in_flight_by_address(make_web) -> None:
    # d0 and d1 share 127.1.0.1; d2 has 127.1.0.2
    web = make_web(domains=3, pages=2, size_fixed=1000, address_counts=[2, 1])
    slow = threading.Thread(target=web.fetch, args=(0, "/fault/slow/2000"))
    slow.start()
    wait_until(lambda: any(e.target == "/fault/slow/2000" and not e.done for e in web.log()), 10, "the slow request")
    assert web.fetch(1, "/fault/slow/100")[0] == 200  # while the first is still answered
    assert web.fetch(2, "/")[0] == 200  # the other address meanwhile
    slow.join()
    web.fetch(0, "/p/1.html")
    web.fetch(1, "/p/1.html")
    log = web.log()
    by_address = [(a.domain, a.target, b.domain, b.target) for a, b in consecutive(log, by="address")]
    assert by_address == [("d0.test", "/fault/slow/2000", "d1.test", "/fault/slow/100"),
                          ("d1.test", "/fault/slow/100", "d0.test", "/p/1.html"),
                          ("d0.test", "/p/1.html", "d1.test", "/p/1.html")]
    first, second = consecutive(log, by="address")[0]
    assert second.ms - first.done < 0  # overlapped: no interval at all
    assert sorted((a.domain, a.target, b.target) for a, b in consecutive(log)) == [
        ("d0.test", "/fault/slow/2000", "/p/1.html"), ("d1.test", "/fault/slow/100", "/p/1.html")]
    assert max_in_flight(log) == {"127.1.0.1": 2, "127.1.0.2": 1}
    assert max_in_flight(log, by="domain") == {"d0.test": 1, "d1.test": 1, "d2.test": 1}


def test_in_flight_counts_touching_and_unanswered_requests() -> None:
    def entry(ms: float, done: float, address: str = "a") -> LogEntry:
        return LogEntry(ms, "d0.test", "/", 200, done, address)

    # one arriving just as the other's answer ended follows it; one unanswered is in flight to the end
    assert max_in_flight([entry(0, 10), entry(10, 20), entry(20, 30)]) == {"a": 1}
    assert max_in_flight([entry(0, 0), entry(5, 6), entry(100, 101), entry(3, 4, "b")]) == {"a": 2, "b": 1}
    assert max_in_flight([entry(0, 50), entry(10, 20), entry(15, 30), entry(40, 60)]) == {"a": 3}
    with pytest.raises(ValueError, match="by must be"):
        consecutive([], by="host")  # type: ignore[arg-type]


def test_a_client_that_hangs_up_ends_its_request_in_flight_not_its_answer() -> None:
    import socket

    from devkit.testweb.control import TestWebProcess, max_in_flight

    with TestWebProcess(dict(domains=1, pages=2, size_fixed=2_000_000, bandwidth=100_000, addresses=1)) as web:
        address = web.address_of(0)
        with socket.create_connection((address, web.port)) as s:
            s.sendall(f"GET /p/1.html HTTP/1.1\r\nHost: {web.domains[0]}:{web.port}\r\n\r\n".encode())
            s.recv(1000)  # the answer has begun; hang up long before its 20 s end
        entry = wait_until(lambda: [e for e in web.log() if e.path == "/p/1.html" and e.hung], 10, "the hang-up")[0]
        assert entry.done == 0 and entry.hung > entry.ms  # not an answer's end: audits leave it out
        # the next request (robots.txt: a page here takes 20 s to arrive): never two in flight at once
        status, _, _ = web.fetch(0, "/robots.txt")
        assert status == 200
        assert max_in_flight(web.log()) == {address: 1}


def test_an_outage_takes_a_share_of_the_sites_down_with_503_then_ends(make_web) -> None:
    web = make_web(domains=10, pages=3, size_fixed=1000, retry_after=7)
    down = web.outage(0.2, 60, "503", seed=4)
    assert len(down) == 2 and set(down) <= set(web.domains)
    assert web.outage(0.2, 60, "503", seed=4) == down  # which ones: drawn from the seed
    up = [d for d in web.domains if d not in down]
    for name in down:
        for host in (name, "www." + name):
            for path in ("/", "/p/1.html", "/robots.txt"):
                status, headers, _ = web.fetch(host, path)
                assert (status, headers.get("Retry-After")) == (503, "7"), (host, path)
    assert all(web.fetch(name, "/p/1.html")[0] == 200 for name in up)
    assert web.fetch(up[0], "/robots.txt")[0] == 200
    assert web.outage(0.2, 0, "503", seed=4) == down  # 0 s: over at once
    assert all(web.fetch(name, "/p/1.html")[0] == 200 for name in down)
    statuses = Counter(e.status for e in web.log() if e.domain.removeprefix("www.") in down)
    assert statuses == {503: 12, 200: 2}  # every request of the outage logged
    with pytest.raises(ValueError, match="unknown outage mode 'flood'"):
        web.outage(0.1, 5, "flood")


def test_a_timeout_outage_holds_requests_unanswered_and_logs_their_hang_up(make_web) -> None:
    web = make_web(domains=4, pages=3, size_fixed=1000)
    [name] = web.outage(0.25, 2.0, "timeout", seed=1)
    with pytest.raises(TimeoutError):  # socket.timeout: not a byte within the client's 0.3 s
        web.fetch(name, "/p/1.html", timeout=0.3)
    hung = wait_until(lambda: [e for e in web.log() if e.path == "/p/1.html" and e.hung], 10, "the hang-up")[0]
    assert (hung.status, hung.done) == (0, 0) and hung.hung - hung.ms >= 300
    other = next(d for d in web.domains if d != name)
    assert web.fetch(other, "/robots.txt")[0] == 200  # the other sites answer meanwhile
    # a client that waits longer than the outage: closed without an answer when it ends
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        web.fetch(name, "/robots.txt", timeout=10)
    closed = [e for e in web.log() if e.domain == name and e.path == "/robots.txt"][0]
    assert closed.status == 0 and closed.hung == 0 and closed.done > closed.ms
    assert web.fetch(name, "/p/1.html")[0] == 200  # the outage is over
