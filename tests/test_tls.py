"""HTTPS: one TLS context, sessions resumed (counted by the test web, the
server side), certificate verification off by default and on by setting."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
from OpenSSL import SSL
from scrapy.settings import Settings

from crawler.fetch._tls import TLS, TLSProtocol
from crawler.settings_registry import SettingsError, validate
from tests.servers import run_scrapy, scrapy_env

WEB = dict(domains=3, pages=12, links=4, size_fixed=3000, tls=True, crawl_delay_share=0,
           private_share=0, cross_share=0.2)


def crawl(web, tmp_path: Path, redis_url: str, *settings: str):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(web.url(d) for d in range(web.config.domains)))
    args = ["crawl", "billion", "-a", f"seeds={seeds}", "-s", "CRAWLER_DOMAIN_DELAY=0",
            "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CRAWLER_WARC_DIR="]
    for setting in settings:
        args += ["-s", setting]
    return run_scrapy(args, scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))


def pages(web) -> int:
    return sum(1 for e in web.log() if e.path != "/robots.txt" and e.status == 200)


def test_sessions_are_resumed_per_host(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(**WEB)
    result = crawl(web, tmp_path, redis_url, "LOG_LEVEL=DEBUG", "CRAWLER_KEEPALIVE=False")  # a connection per request
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Using asyncio event loop: uvloop.Loop" in result.stderr  # the project's loop
    counters = web.counters()  # its own connection is the only one not the crawler's
    assert counters["tls_handshakes"] == counters["connections"] == 39 + 3 + 1
    # every connection but the first to each host resumes its session
    assert counters["tls_resumed"] == 39
    assert pages(web) == 39
    assert f"'crawler/tls/resumed': {counters['tls_resumed']}" in result.stderr


def test_scrapy_stock_handler_resumes_nothing(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(**WEB)
    stock = "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler"
    result = crawl(web, tmp_path, redis_url, f'DOWNLOAD_HANDLERS={{"https": "{stock}"}}')
    assert result.returncode == 0, result.stderr[-3000:]
    assert pages(web) == 39
    assert web.counters()["tls_resumed"] == 0  # what the handler above saves


def test_certificates_verified_when_asked(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(**WEB)
    result = crawl(web, tmp_path, redis_url, "DOWNLOAD_VERIFY_CERTIFICATES=True",
                   f"CRAWLER_TLS_CA_FILE={web.ca_file}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert pages(web) == 39
    other = make_web(**WEB)  # a CA we do not trust: nothing fetched
    # robots.txt off: an unreachable one would hold the pages back for a minute and more;
    # one attempt: a failed verification is retried with backoff as Scrapy retries it (25 s here)
    result = crawl(other, tmp_path, redis_url, "DOWNLOAD_VERIFY_CERTIFICATES=True",
                   f"CRAWLER_TLS_CA_FILE={web.ca_file}", "ROBOTSTXT_OBEY=False", "RETRY_ENABLED=False")
    assert result.returncode == 0, result.stderr[-3000:]
    assert pages(other) == 0
    assert "certificate verify failed" in result.stderr


@pytest.mark.parametrize("verify", [False, True])
def test_context_follows_the_settings(verify: bool) -> None:
    tls = TLS(Settings({"DOWNLOAD_VERIFY_CERTIFICATES": verify, "CRAWLER_TLS_SESSIONS": 2}))
    assert bool(tls.context.get_verify_mode() & SSL.VERIFY_PEER) == verify
    assert tls.connection("a.test").get_servername() == b"a.test"
    assert tls.connection("127.0.0.1").get_servername() is None  # no SNI for an address
    with pytest.raises(SettingsError, match="CRAWLER_TLS_SESSIONS must be an integer >= 0, got -1"):
        validate(Settings({"CRAWLER_TLS_SESSIONS": -1}))
    with pytest.raises(SettingsError, match="CRAWLER_TLS_GROUPS: OpenSSL knows none of 'nonsense'"):
        validate(Settings({"CRAWLER_TLS_GROUPS": "nonsense"}))
    with pytest.raises(ValueError, match="CRAWLER_TLS_GROUPS: OpenSSL knows none of 'nonsense'"):
        TLS(Settings({"CRAWLER_TLS_GROUPS": "nonsense"}))
    with pytest.raises(SettingsError, match="CRAWLER_TLS13_CIPHERSUITES: OpenSSL knows none of 'AES'"):
        validate(Settings({"CRAWLER_TLS13_CIPHERSUITES": "AES"}))


class _Page(asyncio.Protocol):
    """Reads one answer, then aborts: no close_notify from this side's close()."""

    def __init__(self) -> None:
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def eof_received(self) -> None:
        self.transport.abort()  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        self.done.set_result(None)


async def _fetch_and_abort(tls: TLS, host: str, port: int, path: str) -> TLSProtocol:
    page = _Page()
    protocol = TLSProtocol(tls.connection(host), page)
    await asyncio.get_running_loop().create_connection(lambda: protocol, "127.0.0.1", port)
    await protocol.ready
    protocol.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    await page.done
    tls.keep(host, protocol.tls)
    return protocol


@pytest.mark.parametrize(("suites", "negotiated"), [
    (None, "TLS_AES_128_GCM_SHA256"),  # browsers' order, taken by the test web as by nginx
    ("TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256"),
    ("", "TLS_AES_256_GCM_SHA384"),  # OpenSSL's own order
])
def test_tls13_suites_offered_in_the_configured_order(make_web, suites: str | None, negotiated: str) -> None:
    web = make_web(**WEB)
    host, port = web.domains[0], int(web.base.rpartition(":")[2])
    settings = Settings() if suites is None else Settings({"CRAWLER_TLS13_CIPHERSUITES": suites})

    async def main() -> str | None:
        protocol = await _fetch_and_abort(TLS(settings), host, port, "/p/0.html")
        return protocol.tls.get_cipher_name()

    assert asyncio.run(main()) == negotiated


def test_session_stays_resumable_after_an_abort(make_web) -> None:
    web = make_web(**WEB)
    host, port = web.domains[0], int(web.base.rpartition(":")[2])

    async def main() -> list[bool]:
        tls = TLS(Settings())
        resumed = []
        for k in range(4):
            resumed.append((await _fetch_and_abort(tls, host, port, f"/p/{k}.html")).resumed)
            gc.collect()  # the connection is freed: OpenSSL judges how it ended
        return resumed

    # each connection resumes the ticket the one before it ended with
    assert asyncio.run(main()) == [False, True, True, True]
    assert web.counters()["tls_resumed"] == 3
