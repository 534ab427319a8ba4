"""HTTP/1.1 and HTTPS on asyncio, for crawling many hosts politely and cheaply.

    DOWNLOAD_HANDLERS = {"http": "crawler.fetch.DownloadHandler",
                         "https": "crawler.fetch.DownloadHandler"}

What it does differently from Scrapy's Twisted handler:

- HTTPS with one TLS context per process, each host offered its last
  session (:mod:`crawler.fetch._tls`).
- The address is checked after resolution, redirects included, and refused
  if not global (:mod:`crawler.fetch._address`).
- Bodies are decoded (gzip, deflate, br, zstd) as they arrive and kept to the
  page cap (``CRAWLER_MAX_PAGE_BYTES``) of *decoded* bytes; reading stops
  there, so a decompression bomb costs no more than the cap.
- Headers over ``CRAWLER_MAX_HEADER_BYTES`` and URLs over
  ``CRAWLER_MAX_URL_LENGTH`` are refused and counted.
- ``headers_received`` is sent once the headers are in, ``bytes_received``
  once per response with the whole body (not per network read);
  ``StopDownload`` from either works as in Scrapy.
- A request is sent once: a kept-alive connection that fails is an error
  for the retry middleware, never a silent second send.
- Requests with a ``proxy`` in their meta go through Scrapy's handler.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from OpenSSL import SSL
from scrapy import signals
from scrapy.core.downloader.handlers.base import BaseDownloadHandler
from scrapy.exceptions import (
    DownloadCancelledError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    IgnoreRequest,
    ResponseDataLossError,
    StopDownload,
)
from scrapy.http import Headers
from scrapy.responsetypes import responsetypes
from scrapy.utils.httpobj import urlparse_cached
from twisted.python.failure import Failure

from crawler.fetch._address import Address, Addresses
from crawler.fetch._decode import accepted
from crawler.fetch._exchange import Connection, Exchange, HeadTooLarge
from crawler.fetch._tls import TLS, TLSProtocol
from crawler.middlewares.sizecap import page_limit
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from urllib.parse import ParseResult

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

Key = tuple[str, str, int]
_DEFAULT_PORTS = {"http": 80, "https": 443}


class DownloadHandler(BaseDownloadHandler):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        from crawler.settings_check import check_settings  # it imports the middlewares

        check_settings(settings)  # a SettingsError names a bad value
        self.stats = crawler.stats
        self.maxsize = settings.getint("DOWNLOAD_MAXSIZE")
        self.warnsize = settings.getint("DOWNLOAD_WARNSIZE")
        self.fail_on_dataloss = settings.getbool("DOWNLOAD_FAIL_ON_DATALOSS")
        capped = setting(settings, "CRAWLER_SIZECAP_ENABLED")
        self.page_bytes = setting(settings, "CRAWLER_MAX_PAGE_BYTES") if capped else 0
        self.max_head = setting(settings, "CRAWLER_MAX_HEADER_BYTES")
        self.max_url = setting(settings, "CRAWLER_MAX_URL_LENGTH")
        keepalive = setting(settings, "CRAWLER_KEEPALIVE")
        self.idle_timeout = setting(settings, "CRAWLER_KEEPALIVE_TIMEOUT") if keepalive else 0.0
        bind = settings.get("DOWNLOAD_BIND_ADDRESS")
        self.bind = (bind, 0) if isinstance(bind, str) else tuple(bind) if bind else None
        self.accept_encoding = accepted()
        self.addresses = Addresses(settings, crawler.stats)
        self.tls = TLS(settings)
        self.idle: dict[Key, list[Connection]] = {}
        self.warned_dataloss = False
        self._proxied: BaseDownloadHandler | None = None

    async def download_request(self, request: Request) -> Response:
        if request.meta.get("proxy"):
            return await self.proxied().download_request(request)
        url = urlparse_cached(request)
        host = (url.hostname or "").lower()
        if not host:
            raise DownloadFailedError(f"no host in {request.url}")
        if self.max_url and len(request.url) > self.max_url:
            self.stats.inc_value("crawler/refused/url_length")
            raise IgnoreRequest(f"URL longer than CRAWLER_MAX_URL_LENGTH ({self.max_url}): {request.url[:100]}...")
        key = (url.scheme, host, url.port or _DEFAULT_PORTS[url.scheme])
        timeout = float(request.meta.get("download_timeout") or 180)
        try:
            async with asyncio.timeout(timeout):
                return await self.fetch(request, url, key)
        except TimeoutError:
            raise DownloadTimeoutError(f"Getting {request.url} took longer than {timeout} seconds.") from None

    async def fetch(self, request: Request, url: ParseResult, key: Key) -> Response:
        start = time.monotonic()
        connection = self.pooled(key)
        if connection is None:
            connection = await self.connect(key, await self.addresses.resolve(key[1]))
        exchange = Exchange(lambda e: self.head_received(request, start, e),
                            page_limit(request, self.page_bytes) if self.page_bytes else 1 << 62,
                            int(request.meta.get("download_maxsize", self.maxsize)), self.max_head,
                            head_only=request.method == "HEAD")
        connection.send(self.serialize(request, url, key), exchange)
        try:
            await exchange.done
        except BaseException as e:
            connection.abort()
            if isinstance(e, HeadTooLarge):
                self.stats.inc_value("crawler/refused/header_size")
            raise
        finally:
            connection.exchange = None
        if key[0] == "https" and not exchange.dataloss:
            self.tls.keep(key[1], connection.transport.get_extra_info("ssl_object"))
        if exchange.keep_alive and self.idle_timeout:
            self.release(key, connection)
        else:
            connection.close()
        return self.response(request, exchange, connection.address)

    def serialize(self, request: Request, url: ParseResult, key: Key) -> bytes:
        target = url.path or "/"
        if url.params:
            target += ";" + url.params
        if url.query:
            target += "?" + url.query
        headers = request.headers
        lines = [f"{request.method} {target} HTTP/1.1".encode("ascii")]
        if b"Host" not in headers:
            host = url.netloc.rpartition("@")[2]
            lines.append(b"Host: " + host.encode("ascii"))
        for name, values in headers.items():
            if name == b"Accept-Encoding":
                values = [self.accept_encoding]  # what is decoded here, under the cap
            for value in values:
                lines.append(name + b": " + value)
        body = request.body
        if body or request.method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: " + str(len(body)).encode("ascii"))
        lines.append(b"\r\n")
        return b"\r\n".join(lines) + body

    def pooled(self, key: Key) -> Connection | None:
        connections = self.idle.get(key)
        while connections:
            connection = connections.pop()
            if connection.idle is not None:
                connection.idle.cancel()
            if connection.usable:
                return connection
        return None

    def release(self, key: Key, connection: Connection) -> None:
        self.idle.setdefault(key, []).append(connection)
        connection.idle = asyncio.get_running_loop().call_later(self.idle_timeout, self.expire, key, connection)

    def expire(self, key: Key, connection: Connection) -> None:
        connections = self.idle.get(key)
        if connections and connection in connections:
            connections.remove(connection)
            if not connections:
                del self.idle[key]
        connection.close()

    async def connect(self, key: Key, address: Address) -> Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        connection = Connection()
        connection.address = address
        tls = TLSProtocol(self.tls.connection(host), connection) if scheme == "https" else None
        try:
            await loop.create_connection(lambda: tls or connection, str(address), port, local_addr=self.bind)
        except OSError as e:
            raise DownloadConnectionRefusedError(f"cannot connect to {host} ({address}:{port}): {e}") from e
        if tls is not None:
            try:
                await tls.ready
            except (SSL.Error, OSError) as e:
                raise DownloadFailedError(f"TLS handshake with {host} failed: {_tls_reason(e)}") from e
            self.stats.inc_value("crawler/tls/handshakes")
            if tls.resumed:
                self.stats.inc_value("crawler/tls/resumed")
        return connection

    def head_received(self, request: Request, start: float, exchange: Exchange) -> bool:
        request.meta["download_latency"] = time.monotonic() - start
        headers = exchange.scrapy_headers = Headers(exchange.headers)
        expected = exchange.length if exchange.length >= 0 and not exchange.chunked else None
        if expected and exchange.maxsize and expected > exchange.maxsize:
            exchange.fail(DownloadCancelledError(
                f"Content-Length {expected} over DOWNLOAD_MAXSIZE ({exchange.maxsize}) for {request.url}"))
            return False
        exchange.stop = self.signal(signals.headers_received, request, headers=headers, body_length=expected)
        return exchange.stop is None

    def signal(self, signal: object, request: Request, **kwargs: Any) -> StopDownload | None:
        results = self.crawler.signals.send_catch_log(signal=signal, request=request, spider=self.crawler.spider,
                                                      dont_log=StopDownload, **kwargs)
        for _, result in results:
            if isinstance(result, Failure) and isinstance(result.value, StopDownload):
                return result.value
        return None

    def response(self, request: Request, exchange: Exchange, address: Address) -> Response:
        headers: Headers = exchange.scrapy_headers
        stop = exchange.stop
        body = b"" if stop is not None else exchange.body()
        if exchange.decoder is not None:
            headers.pop(b"Content-Encoding", None)
        flags: list[str] = []
        if exchange.dataloss:
            if request.meta.get("download_fail_on_dataloss", self.fail_on_dataloss):
                if not self.warned_dataloss:
                    self.warned_dataloss = True
                    logger.warning("Got data loss in %s. Set DOWNLOAD_FAIL_ON_DATALOSS = False to keep "
                                   "broken responses; this message is not shown again.", request.url)
                raise ResponseDataLossError(f"the connection ended before the body of {request.url}")
            flags.append("dataloss")
        if stop is None and body:
            stop = self.signal(signals.bytes_received, request, data=body)
        if stop is not None or exchange.cut:
            flags.append("download_stopped")
        warnsize = request.meta.get("download_warnsize", self.warnsize)
        if warnsize and exchange.received > warnsize:
            logger.warning("Received %d bytes, over DOWNLOAD_WARNSIZE (%d), for %s",
                           exchange.received, warnsize, request)
        respcls = responsetypes.from_args(headers=headers, url=request.url, body=body)
        response = respcls(url=request.url, status=exchange.status, headers=headers, body=body, flags=flags,
                           ip_address=address, protocol="HTTP/1.1")
        if stop is not None and stop.fail:
            stop.response = response
            raise stop
        return response

    def proxied(self) -> BaseDownloadHandler:
        if self._proxied is None:
            from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
            self._proxied = HTTP11DownloadHandler(self.crawler)
        return self._proxied

    async def close(self) -> None:
        for connections in self.idle.values():
            for connection in connections:
                connection.abort()
        self.idle.clear()
        self.addresses.close()
        if self._proxied is not None:
            await self._proxied.close()


def _tls_reason(error: Exception) -> str:
    if isinstance(error, SSL.Error) and error.args and isinstance(error.args[0], list):
        return "; ".join(str(part[-1]) for part in error.args[0]) or str(error)
    return str(error) or type(error).__name__
