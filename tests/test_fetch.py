"""The fetcher (crawler.fetch) against real servers on 127.0.0.1: framing,
keep-alive, caps on decoded bytes, headers and URLs, and the addresses it
refuses to reach."""

from __future__ import annotations

import asyncio
import re
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.exceptions import DownloadFailedError, IgnoreRequest
from scrapy.utils.test import get_crawler

from crawler.fetch import DownloadHandler
from crawler.fetch._address import PrivateAddressRefused
from tests import rawserver
from tests.servers import run_scrapy, scrapy_env

CAP = 250_000


def handler(**settings: Any) -> DownloadHandler:
    base = {"CRAWLER_HOST_MAP": {"*.test": "127.0.0.1", "*.internal": "127.0.0.1"},
            "CRAWLER_ALLOW_PRIVATE": ["*.test"],
            # billion's rules (the addon's defaults cut nothing and refuse nothing)
            "CRAWLER_BLOCK_PRIVATE": True, "CRAWLER_MAX_PAGE_BYTES": CAP}
    return DownloadHandler(get_crawler(settings_dict={**base, **settings}))


def run(make: Callable[[], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        return await make()
    return asyncio.run(main())


def fetch(h: DownloadHandler, *urls: str) -> list[Any]:
    """Fetch each URL in turn on one handler: responses, or the exceptions raised."""
    async def go() -> list[Any]:
        out: list[Any] = []
        for url in urls:
            try:
                out.append(await h.download_request(Request(url, headers={"Accept-Encoding": "gzip"})))
            except Exception as e:  # noqa: BLE001 - the test looks at it
                out.append(e)
        await h.close()
        return out
    return run(go)


def test_pages_and_keep_alive(make_web) -> None:
    web = make_web(domains=1, pages=5, size_fixed=3000, crawl_delay_share=0, private_share=0)
    h = handler()
    before = web.counters()["connections"]
    responses = fetch(h, *(f"{web.url(0)}p/{k}.html" for k in range(1, 4)))
    assert [r.status for r in responses] == [200, 200, 200]
    assert all(r.body.startswith(b"<!DOCTYPE html>") for r in responses)
    assert responses[0].body != responses[1].body
    assert web.counters()["connections"] - before == 2  # ours (one, kept alive) and the counters' own
    assert str(responses[0].ip_address) == "127.0.0.1"


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4  # pages of 4 kB


def test_pooled_tls_connections_keep_no_buffer_of_the_page(make_web) -> None:
    """An idle kept-alive HTTPS connection does not hold the room its page
    passed through (OpenSSL keeps it for as long as the buffer lives)."""
    web = make_web(domains=60, pages=2, size_fixed=200_000, tls=True, crawl_delay_share=0, private_share=0)
    h = handler()

    async def go() -> tuple[int, list[int]]:
        await h.download_request(Request(f"{web.url(0)}p/1.html"))  # warm: imports, first allocations
        before = _rss_kb()
        sizes = [len((await h.download_request(Request(f"{web.url(d)}p/1.html"))).body) for d in range(1, 60)]
        grown = _rss_kb() - before
        assert sum(len(c) for c in h.pool.idle.values()) == 60  # every connection kept
        await h.close()
        return grown, sizes

    grown, sizes = run(go)
    assert min(sizes) >= 190_000
    assert grown / 59 < 60, f"{grown / 59:.0f} kB per pooled connection"  # about 200 without the fresh buffer


def test_decompression_bomb_stops_at_the_cap(make_web) -> None:
    web = make_web(domains=1, pages=2, crawl_delay_share=0, private_share=0)
    h = handler()
    tracemalloc.start()
    (response,) = fetch(h, f"{web.url(0)}fault/bomb/1024")  # 1 MiB on the wire, 1 GiB inflated
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(response.body) == CAP and "download_stopped" in response.flags
    assert response.body.startswith(b"<!DOCTYPE html>")
    assert b"Content-Encoding" not in response.headers
    assert peak < 20_000_000, peak  # never near the gigabyte


def test_compressed_page_is_capped_after_decoding(make_web) -> None:
    web = make_web(domains=1, pages=2, crawl_delay_share=0, private_share=0)
    small, big = fetch(handler(), f"{web.url(0)}fault/gzip/100", f"{web.url(0)}fault/gzip/400")
    assert len(small.body) == 100 * 1024 and "download_stopped" not in small.flags
    assert len(big.body) == CAP and "download_stopped" in big.flags
    assert small.body.startswith(b"<!DOCTYPE html><html><body><p>") and big.body[:100] == small.body[:100]


def test_absurd_headers_and_urls_are_refused_and_counted(make_web) -> None:
    web = make_web(domains=1, pages=2, crawl_delay_share=0, private_share=0)
    h = handler()
    long_url = f"{web.url(0)}p/1.html?" + "x" * 3000
    ok, headers, url = fetch(h, f"{web.url(0)}fault/headers/32", f"{web.url(0)}fault/headers/100", long_url)
    assert ok.status == 200 and len(ok.headers[b"X-Filler"]) == 32 * 1024
    assert isinstance(headers, DownloadFailedError) and "response headers over 65536 bytes" in str(headers)
    assert isinstance(url, IgnoreRequest) and "CRAWLER_MAX_URL_LENGTH" in str(url)
    stats = h.crawler.stats
    assert stats.get_value("crawler/refused/header_size") == 1
    assert stats.get_value("crawler/refused/url_length") == 1
    assert not any("x" * 100 in e.target for e in web.log())  # never sent


def test_private_addresses_are_refused_before_connecting(make_web, caplog) -> None:
    web = make_web(domains=1, pages=3, crawl_delay_share=0, private_share=0)
    port = web.port
    h = handler()
    results = fetch(h,
                    f"http://127.0.0.1:{port}/p/1.html",   # an address
                    f"http://d0.internal:{port}/p/1.html",  # a name mapped to loopback, not allowed
                    f"http://d0.internal:{port}/p/2.html",
                    f"http://localhost:{port}/p/1.html",    # the system's resolver says loopback
                    f"http://[::ffff:127.0.0.1]:{port}/p/1.html",
                    f"{web.url(0)}p/1.html")                # allowed: *.test
    assert all(isinstance(r, PrivateAddressRefused) for r in results[:5]), results
    assert results[5].status == 200
    assert h.crawler.stats.get_value("crawler/refused/private_address") == 5
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Refused")]
    assert len(refusals) == 4  # once per host
    assert [e.domain for e in web.log()] == ["d0.test"]


def test_allow_list_takes_networks_and_blocking_can_be_off(make_web) -> None:
    web = make_web(domains=1, pages=2, crawl_delay_share=0, private_share=0)
    url = f"http://127.0.0.1:{web.port}/p/1.html"
    assert fetch(handler(CRAWLER_ALLOW_PRIVATE=["127.0.0.0/8"]), url)[0].status == 404  # no such domain
    assert fetch(handler(CRAWLER_BLOCK_PRIVATE=False), url)[0].status == 404
    with pytest.raises(ValueError, match="CRAWLER_ALLOW_PRIVATE: '10.0.0.0/33' is not a network"):
        handler(CRAWLER_ALLOW_PRIVATE=["10.0.0.0/33"])


class RawServer(rawserver.RawServer):
    """A server on 127.0.0.1 that answers every request with fixed bytes,
    written in small pieces, then closes or keeps the connection."""

    def __init__(self, answer: bytes, close: bool = False, piece: int = 7) -> None:
        super().__init__(answer, close, piece)  # kept alive by default here

    async def fetch(self, *paths: str, **settings: Any) -> list[Any]:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        h = handler(CRAWLER_ALLOW_PRIVATE=["127.0.0.1/32"], **settings)
        out: list[Any] = []
        for path in paths:
            try:
                out.append(await h.download_request(Request(f"http://127.0.0.1:{port}{path}")))
            except Exception as e:  # noqa: BLE001
                out.append(e)
        await h.close()
        server.close()
        return out


CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5;ext=1\r\nhello\r\n1A\r\n" + b"abcdefghijklmnopqrstuvwxyz" + b"\r\n0\r\nX-Trailer: 1\r\n\r\n")


def test_chunked_bodies_split_anywhere_and_connection_reused() -> None:
    server = RawServer(CHUNKED)
    first, second = run(lambda: server.fetch("/a", "/b"))
    assert first.body == second.body == b"hello" + b"abcdefghijklmnopqrstuvwxyz"
    assert len(server.requests) == 2 and server.requests[1].startswith(b"GET /b HTTP/1.1\r\n")


def test_body_until_close_and_interim_responses() -> None:
    answer = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n"
              b"Folded: one\r\n two\r\n\r\nno length, ends with the connection")
    (response,) = run(lambda: RawServer(answer, close=True).fetch("/"))
    assert response.status == 200 and response.body == b"no length, ends with the connection"
    assert response.headers[b"Folded"] == b"one two"


def test_truncated_body_is_data_loss() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"
    (error,) = run(lambda: RawServer(answer, close=True).fetch("/"))
    assert type(error).__name__ == "ResponseDataLossError"
    (response,) = run(lambda: RawServer(answer, close=True).fetch("/", DOWNLOAD_FAIL_ON_DATALOSS=False))
    assert response.body == b"only this" and "dataloss" in response.flags


@pytest.mark.parametrize("answer, message", [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 9\r\n\r\nnot gzip!", "cannot decode"),
])
def test_malformed_responses_are_errors(answer: bytes, message: str) -> None:
    (error,) = run(lambda: RawServer(answer, close=True).fetch("/"))
    assert isinstance(error, DownloadFailedError) and message in str(error), error


def test_a_crawl_never_reaches_private_addresses_even_through_redirects(
        redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=1, pages=4, size_fixed=3000, crawl_delay_share=0, private_share=0, cross_share=0)
    port = web.port
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join([
        f"{web.url(0)}fault/to/127.0.0.1/{port}/p/1.html",   # a public page redirects to an address
        f"{web.url(0)}fault/to/d1.internal/{port}/p/2.html",  # ... to a name that leads to loopback
        f"http://d2.internal:{port}/p/3.html",                # a seed that does
    ]))
    env = scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org")
    result = run_scrapy(["crawl", "billion", "-a", f"seeds={seeds}", "-s", "CRAWLER_DOMAIN_DELAY=0",
                         "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CRAWLER_WARC_DIR=",
                         "-s", 'CRAWLER_HOST_MAP={"*.test": "127.0.0.1", "*.internal": "127.0.0.1"}'], env)
    assert result.returncode == 0, result.stderr[-3000:]
    log = web.log()
    assert {e.domain for e in log} == {"d0.test"}  # nothing else reached the site
    assert sum(1 for e in log if e.target.startswith("/fault/to/")) == 2  # both redirects were followed
    for host in ("127.0.0.1", "d1.internal", "d2.internal"):
        assert result.stderr.count(f"Refused {host}: it leads to") == 1, result.stderr[-3000:]
    refused = re.search(r"'crawler/refused/private_address': (\d+)", result.stderr)
    assert refused and int(refused.group(1)) >= 3


class DropSecond(RawServer):
    """Answers the first request and keeps the connection; reads the second
    one and closes without answering, as a server whose keep-alive timed out."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        self.requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.close()


def test_a_failed_kept_alive_connection_is_an_error_never_a_second_send() -> None:
    server = DropSecond(b"")
    first, second = run(lambda: server.fetch("/a", "/b"))
    assert first.body == b"ok"
    assert isinstance(second, DownloadFailedError) and "closed before the response" in str(second)
    assert len(server.requests) == 2  # /b reached the server once, and was not sent again
