"""Proxies through the crawler's own handler (crawler.fetch._proxy): a small
forward proxy on 127.0.0.1 written here (CONNECT tunnels and absolute-URI
requests, Basic credentials checked), targets on 127.0.0.1 behind it. The
target's address is checked before anything reaches the proxy, whose own
loopback address is the user's choice; the caps are those of a direct
request; credentials go where Scrapy's handler sends them."""

from __future__ import annotations

import asyncio
import base64
import gzip
import ssl
from typing import Any
from urllib.parse import urlsplit

import pytest
import trustme
from scrapy import Request
from scrapy.downloadermiddlewares.httpproxy import HttpProxyMiddleware
from scrapy.exceptions import CannotResolveHostError, DownloadConnectionRefusedError, NotSupported
from scrapy.utils.test import get_crawler

from crawler.fetch import DownloadHandler
from crawler.fetch._address import BadHost, PrivateAddressRefused
from crawler.fetch._proxy import TunnelError
from crawler.settings_registry import SettingsError
from tests.test_fetch_handler import LoopThread, fetch, scrapy_reference, serve  # noqa: F401 - serve: a fixture

CREDENTIALS = b"Basic " + base64.b64encode(b"user:pass")
OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


class ForwardProxy(LoopThread):
    """An HTTP forward proxy on 127.0.0.1 (HTTPS with ``tls``): CONNECT opens a
    tunnel, an absolute URI is fetched from its origin (which must close the
    connection after its answer). Names ending in .test lead to 127.0.0.1, those
    of ``names`` where it says; others are resolved by the system.
    Logs each request's method, target and headers."""

    def __init__(self, auth: bytes | None = None, tls: trustme.CA | None = None,
                 names: dict[str, str] | None = None) -> None:
        self.auth = auth
        self.names = names or {}  # the proxy's own resolver: name -> address
        self.log: list[tuple[bytes, bytes, dict[bytes, bytes]]] = []
        self.context: ssl.SSLContext | None = None
        if tls is not None:
            self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.issue_cert("127.0.0.1").configure_cert(self.context)
        self.start()

    def url(self, credentials: str = "") -> str:
        scheme = "https" if self.context else "http"
        return f"{scheme}://{credentials}127.0.0.1:{self.port}"

    def where(self, host: str) -> str:
        if host in self.names:
            return self.names[host]
        return "127.0.0.1" if host.endswith(".test") else host

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                line, *lines = head[:-4].split(b"\r\n")
                method, target, _ = line.split(b" ")
                headers = dict(h.split(b": ", 1) for h in lines)
                self.log.append((method, target, headers))
                if self.auth and headers.get(b"Proxy-Authorization") != self.auth:
                    writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                                 b"Proxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                if method == b"CONNECT":
                    host, _, port = target.decode().rpartition(":")
                    up_reader, up_writer = await asyncio.open_connection(self.where(host), int(port))
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
                    return
                url = urlsplit(target.decode())
                up_reader, up_writer = await asyncio.open_connection(self.where(url.hostname), url.port or 80)
                forwarded = [h for h in lines if not h.lower().startswith((b"proxy-", b"connection:"))]
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                up_writer.write(b"\r\n".join([f"{method.decode()} {path} HTTP/1.1".encode(), *forwarded,
                                              b"Connection: close", b"", b""]))
                writer.write(await up_reader.read())  # the origin closes after its answer
                await writer.drain()
                up_writer.close()
        finally:
            writer.close()



async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


@pytest.fixture
def proxy() -> Any:
    started: list[ForwardProxy] = []

    def factory(**kw: Any) -> ForwardProxy:
        server = ForwardProxy(**kw)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()


def handler(**settings: Any) -> DownloadHandler:
    base = {"CRAWLER_HOST_MAP": {"*.test": "127.0.0.1", "*.internal": "169.254.169.254"},
            "CRAWLER_BLOCK_PRIVATE": True,
            "CRAWLER_ALLOW_PRIVATE": ["*.test"]}  # the proxy's 127.0.0.1 is not allowed as a target
    return DownloadHandler(get_crawler(settings_dict={**base, **settings}))


def via(url: str, proxy_url: str, **kw: Any) -> Request:
    """A request through ``proxy_url`` as HttpProxyMiddleware leaves it
    (credentials in the URL become a Proxy-Authorization header)."""
    request = Request(url, meta={"proxy": proxy_url}, **kw)
    HttpProxyMiddleware().process_request(request)
    return request


def test_https_through_a_connect_tunnel_kept_alive(serve, proxy) -> None:
    target = serve(OK, tls=trustme.CA())
    forward = proxy()
    url = target.url("/page", host="a.test", scheme="https")
    first, second = fetch(handler(), via(url, forward.url()), via(url, forward.url()))
    assert first.status == second.status == 200 and first.body == second.body == b"ok"
    assert first.certificate is not None  # the target's, through the tunnel
    assert [(m, t) for m, t, _ in forward.log] == [(b"CONNECT", f"a.test:{target.port}".encode())]
    assert forward.log[0][2][b"Host"] == f"a.test:{target.port}".encode()
    assert [r.split(b"\r\n")[0] for r in target.requests] == [b"GET /page HTTP/1.1"] * 2
    assert str(first.ip_address) == "127.0.0.1"


def test_plain_http_through_an_absolute_uri(serve, proxy) -> None:
    target = serve(OK, close=True)
    forward = proxy()
    url = target.url("/page?q=1", host="a.test")
    (response,) = fetch(handler(), via(url, forward.url()))
    assert response.status == 200 and response.body == b"ok"
    assert [(m, t) for m, t, _ in forward.log] == [(b"GET", url.encode())]
    assert forward.log[0][2][b"Host"] == f"a.test:{target.port}".encode()
    assert target.requests[0].startswith(b"GET /page?q=1 HTTP/1.1\r\n")


@pytest.mark.parametrize("mode", ["auto", "proxy", "local"])
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_the_target_address_is_refused_before_the_proxy_hears_of_it(serve, proxy, scheme: str, mode: str) -> None:
    """Addresses in the URL and names of CRAWLER_HOST_MAP, in every CRAWLER_PROXY_DNS mode."""
    forward = proxy()  # on loopback, which a target may not be here
    h = handler(CRAWLER_PROXY_DNS=mode)
    results = fetch(h, via(f"{scheme}://169.254.169.254/latest/meta-data/", forward.url()),
                    via(f"{scheme}://metadata.internal/latest/meta-data/", forward.url()),  # a name that leads there
                    via(f"{scheme}://127.0.0.1:{forward.port}/", forward.url()),
                    via(f"{scheme}://[fe80::1]/", forward.url()))
    assert all(isinstance(r, PrivateAddressRefused) for r in results), results
    assert forward.log == []  # nothing reached the proxy
    assert h.crawler.stats.get_value("crawler/refused/private_address") == 4


def test_credentials_go_to_the_proxy_only(serve, proxy) -> None:
    tls_target = serve(OK, tls=trustme.CA())
    plain_target = serve(OK, close=True)
    forward = proxy(auth=CREDENTIALS)
    proxy_url = forward.url("user:pass@")
    https_url = tls_target.url("/s", host="a.test", scheme="https")
    http_url = plain_target.url("/p", host="a.test")
    tunnelled, plain = fetch(handler(), via(https_url, proxy_url), via(http_url, proxy_url))
    assert tunnelled.status == plain.status == 200
    connect, get = forward.log
    assert connect[0] == b"CONNECT" and connect[2][b"Proxy-Authorization"] == CREDENTIALS
    assert b"Proxy-Authorization" not in tls_target.requests[0]  # not inside the tunnel
    assert get[0] == b"GET" and get[2][b"Proxy-Authorization"] == CREDENTIALS  # kept on an absolute URI
    # Scrapy's handler sends them to the same places
    forward.log.clear()
    for url in (https_url, http_url):
        reference = scrapy_reference(url.replace("a.test", "127.0.0.1"), meta={"proxy": forward.url()},
                                     headers={"Proxy-Authorization": CREDENTIALS.decode()})
        assert reference["status"] == 200, reference
    assert [h.get(b"Proxy-Authorization") for _, _, h in forward.log] == [CREDENTIALS, CREDENTIALS]
    assert b"Proxy-Authorization" not in tls_target.requests[-1]


def test_wrong_credentials(serve, proxy) -> None:
    tls_target = serve(OK, tls=trustme.CA())
    plain_target = serve(OK, close=True)
    forward = proxy(auth=CREDENTIALS)
    proxy_url = forward.url("user:wrong@")
    tunnel, plain = fetch(handler(), via(tls_target.url(host="a.test", scheme="https"), proxy_url),
                          via(plain_target.url(host="a.test"), proxy_url))
    assert isinstance(tunnel, TunnelError), tunnel
    assert "Could not open CONNECT tunnel with proxy 127.0.0.1" in str(tunnel) and "407" in str(tunnel)
    assert plain.status == 407  # the proxy's answer, as Scrapy gives it
    assert tls_target.requests == plain_target.requests == []


def test_environment_proxy_via_httpproxymiddleware(serve, proxy, monkeypatch) -> None:
    target = serve(OK, tls=trustme.CA())
    forward = proxy(auth=CREDENTIALS)
    monkeypatch.setenv("HTTPS_PROXY", forward.url("user:pass@"))
    request = Request(target.url(host="a.test", scheme="https"))
    HttpProxyMiddleware().process_request(request)  # reads the environment
    (response,) = fetch(handler(), request)
    assert response.status == 200
    assert forward.log[0][0] == b"CONNECT" and forward.log[0][2][b"Proxy-Authorization"] == CREDENTIALS


def test_caps_are_those_of_a_direct_request(serve, proxy) -> None:
    bomb = gzip.compress(b"<html>" + b"x" * 2_000_000)
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n"
              b"Content-Length: %d\r\n\r\n" % len(bomb) + bomb)
    tls_target = serve(answer, tls=trustme.CA())
    plain_target = serve(answer, close=True)
    forward = proxy()
    h = handler(CRAWLER_MAX_PAGE_BYTES=10_000)
    direct, tunnelled, plain = fetch(
        h, tls_target.url(host="a.test", scheme="https"),
        via(tls_target.url(host="a.test", scheme="https"), forward.url()),
        via(plain_target.url(host="a.test"), forward.url()))
    for response in (direct, tunnelled, plain):
        assert len(response.body) == 10_000 and "download_stopped" in response.flags
        assert b"Content-Encoding" not in response.headers
    (error,) = fetch(handler(CRAWLER_SIZECAP_ENABLED=False, DOWNLOAD_MAXSIZE=100_000),
                     via(tls_target.url(host="a.test", scheme="https"), forward.url()))
    assert "DOWNLOAD_MAXSIZE" in str(error), error  # decoded bytes count


def test_https_proxy_carries_both_kinds_of_target(serve, proxy) -> None:
    tls_target = serve(OK, tls=trustme.CA())
    plain_target = serve(OK, close=True)
    forward = proxy(tls=trustme.CA())
    tunnelled, plain = fetch(handler(), via(tls_target.url(host="a.test", scheme="https"), forward.url()),
                             via(plain_target.url(host="a.test"), forward.url()))
    assert tunnelled.status == plain.status == 200  # TLS to the target inside TLS to the proxy
    assert [m for m, _, _ in forward.log] == [b"CONNECT", b"GET"]


@pytest.mark.parametrize("value", ["socks5://127.0.0.1:1080", "http://127.0.0.1:0"])
def test_unusable_proxies_are_not_supported(value: str) -> None:
    (error,) = fetch(handler(), Request("http://a.test/", meta={"proxy": value}))
    assert isinstance(error, NotSupported), error


def test_a_proxy_that_is_down_or_hangs_up(serve) -> None:
    hangs_up = serve(b"", close=True)  # reads the CONNECT, closes without a word
    down = serve(b"")
    down_url = f"http://127.0.0.1:{down.port}"
    down.stop()
    refused, closed = fetch(handler(), Request("https://a.test/", meta={"proxy": down_url}),
                            Request("https://a.test/", meta={"proxy": f"http://127.0.0.1:{hangs_up.port}"}))
    assert isinstance(refused, DownloadConnectionRefusedError) and "the proxy 127.0.0.1" in str(refused)
    assert isinstance(closed, TunnelError) and "connection closed" in str(closed), closed
    assert hangs_up.requests[0].startswith(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n")


# CRAWLER_PROXY_DNS: who resolves a proxied target's name

ONLY_THE_PROXY_KNOWS = "only-the-proxy-knows.invalid"  # .invalid: never resolved here (RFC 6761)


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("mode", ["auto", "proxy", "local"])
def test_a_name_only_the_proxy_can_resolve(serve, proxy, scheme: str, mode: str) -> None:
    target = serve(OK, tls=trustme.CA() if scheme == "https" else None, close=scheme == "http",
                   name=ONLY_THE_PROXY_KNOWS)
    forward = proxy(names={ONLY_THE_PROXY_KNOWS: "127.0.0.1"})
    url = target.url("/page", host=ONLY_THE_PROXY_KNOWS, scheme=scheme)
    h = handler(CRAWLER_PROXY_DNS=mode)  # no CRAWLER_HOST_MAP entry for it
    (result,) = fetch(h, via(url, forward.url()))
    if mode == "local":
        assert isinstance(result, CannotResolveHostError), result
        assert forward.log == []
        return
    assert not isinstance(result, Exception), result
    assert result.status == 200 and result.body == b"ok"
    sent = f"{ONLY_THE_PROXY_KNOWS}:{target.port}" if scheme == "https" else url
    assert [(m, t) for m, t, _ in forward.log] == [(b"CONNECT" if scheme == "https" else b"GET", sent.encode())]
    assert h.crawler.stats.get_value("crawler/proxy/resolved_by_proxy") == 1


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_in_proxy_mode_no_name_is_looked_up_here(serve, proxy, scheme: str) -> None:
    """``localhost`` resolves here to 127.0.0.1, which the address policy
    refuses; in ``proxy`` mode that answer is never asked for: the name goes
    to the proxy, which fetches the page, and the handler's DNS cache never
    holds an entry."""
    target = serve(OK, tls=trustme.CA() if scheme == "https" else None, close=scheme == "http",
                   name="localhost")
    forward = proxy()
    url = target.url("/", host="localhost", scheme=scheme)
    for mode in ("auto", "local"):
        h = handler(CRAWLER_PROXY_DNS=mode)
        (refused,) = fetch(h, via(url, forward.url()))
        assert isinstance(refused, PrivateAddressRefused), refused
        assert h.crawler.stats.get_value("crawler/dns/cache_size") == 1  # looked up here
    assert forward.log == []
    h = handler(CRAWLER_PROXY_DNS="proxy")
    (response,) = fetch(h, via(url, forward.url()))
    assert not isinstance(response, Exception), response
    assert response.status == 200 and response.body == b"ok"
    assert forward.log[0][1].startswith(b"localhost:" if scheme == "https" else b"http://localhost:")
    assert h.crawler.stats.get_value("crawler/dns/cache_size") is None  # no lookup here
    assert h.crawler.stats.get_value("crawler/refused/private_address") is None
    assert h.crawler.stats.get_value("crawler/proxy/resolved_by_proxy") == 1


def test_proxy_mode_still_refuses_what_cannot_be_a_name(proxy) -> None:
    forward = proxy()
    (error,) = fetch(handler(CRAWLER_PROXY_DNS="proxy"), via("http://a..b/", forward.url()))
    assert isinstance(error, BadHost), error
    assert forward.log == []


def test_a_bad_proxy_dns_mode_is_refused() -> None:
    with pytest.raises(SettingsError, match="CRAWLER_PROXY_DNS"):
        handler(CRAWLER_PROXY_DNS="remote")
