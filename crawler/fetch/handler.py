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
- Requests with a ``proxy`` in their meta take the same path
  (:mod:`crawler.fetch._proxy`): the target's address is checked before
  anything is sent to the proxy, and the same caps apply. Whether its name
  is resolved here or by the proxy is ``CRAWLER_PROXY_DNS``'s choice
  (:meth:`DownloadHandler.check_proxied`).
- Of the page cap and ``DOWNLOAD_MAXSIZE`` (or ``meta["download_maxsize"]``),
  the smaller acts as soon as the length is known: a ``Content-Length`` over
  a smaller ``DOWNLOAD_MAXSIZE`` is cancelled at the headers, as in Scrapy; a
  longer page under a smaller page cap is read to the cap.
- A request's own ``Accept-Encoding`` is sent as it is; the value Scrapy's
  ``HttpCompressionMiddleware`` puts in, or none, becomes the codings
  decoded here.
- At most ``CRAWLER_KEEPALIVE_MAX_IDLE`` idle connections are kept, the least recently used
  closed first.
- With ``CRAWLER_WARC_DIR`` set, each response is also kept as received
  (head and undecoded body, :mod:`crawler.fetch.received`) for the WARC
  extension; the response Scrapy sees is unchanged.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from OpenSSL import SSL
from scrapy import signals
from scrapy.core.downloader.handlers.base import BaseDownloadHandler
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    IgnoreRequest,
    NotSupported,
    ResponseDataLossError,
    StopDownload,
    UnsupportedURLSchemeError,
)
from scrapy.http import Headers
from scrapy.responsetypes import responsetypes
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.ssl import Certificate
from twisted.python.failure import Failure

from crawler.clock import clock_of
from crawler.fetch import received
from crawler.fetch._address import Address, Addresses, NoSuchHost, PrivateAddressRefused
from crawler.fetch._decode import accepted
from crawler.fetch._exchange import Connection, Exchange, HeadTooLarge, TooLarge
from crawler.fetch._proxy import Proxy, Tunnel, connect_request, proxy_for
from crawler.fetch._tls import TLS, TLSProtocol
from crawler.meta import ADDRESS, page_limit
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from urllib.parse import ParseResult

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

Bind = tuple[str, int] | None
# scheme, host, port, local address, proxy, the address the frontier charged ("": none)
Key = tuple[str, str, int, Bind, Proxy | None, str]
_DEFAULT_PORTS = {"http": 80, "https": 443}
# What Scrapy's HttpCompressionMiddleware puts in every request (scrapy 2.19)
_SCRAPY_ACCEPT_ENCODING = b"gzip, deflate, br, zstd"


class RefusedURL(IgnoreRequest):
    """The URL is one this handler never fetches (too long, port 0)."""


class UnsupportedScheme(NotSupported, UnsupportedURLSchemeError):
    """Not http or https: Scrapy's dispatcher says NotSupported, its handler
    UnsupportedURLSchemeError; either ``except`` catches this."""


def keeps_alive(settings: BaseSettings) -> bool:
    """Whether connections are kept for the host's next request: with
    ``CRAWLER_KEEPALIVE``, unless the delay between two requests to a domain
    is as long as the idle timeout (the connection would expire unused)."""
    return bool(setting(settings, "CRAWLER_KEEPALIVE")) and (
        setting(settings, "CRAWLER_DOMAIN_DELAY") < setting(settings, "CRAWLER_KEEPALIVE_TIMEOUT"))


class DownloadHandler(BaseDownloadHandler):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        self.stats = crawler.stats
        self.maxsize = settings.getint("DOWNLOAD_MAXSIZE")
        self.warnsize = settings.getint("DOWNLOAD_WARNSIZE")
        self.fail_on_dataloss = settings.getbool("DOWNLOAD_FAIL_ON_DATALOSS")
        self.timeout = settings.getfloat("DOWNLOAD_TIMEOUT")
        capped = setting(settings, "CRAWLER_SIZECAP_ENABLED")
        self.page_bytes = setting(settings, "CRAWLER_MAX_PAGE_BYTES") if capped else 0
        self.max_head = setting(settings, "CRAWLER_MAX_HEADER_BYTES")
        self.max_url = setting(settings, "CRAWLER_MAX_URL_LENGTH")
        self.idle_timeout = setting(settings, "CRAWLER_KEEPALIVE_TIMEOUT") if keeps_alive(settings) else 0.0
        self.bind = _bind_address(settings.get("DOWNLOAD_BIND_ADDRESS"))
        self.accept_encoding = accepted()
        self.clock = clock_of(crawler)
        self.addresses = Addresses(settings, crawler.stats, self.clock)
        self.proxy_dns = setting(settings, "CRAWLER_PROXY_DNS")  # who resolves a proxied target's name
        self.nx_lookups = setting(settings, "CRAWLER_DNS_NX_RETRIES") + 1
        self.tls = TLS(settings)
        self.idle: dict[Key, list[Connection]] = {}
        self.lru: OrderedDict[Connection, Key] = OrderedDict()  # every idle connection, oldest first
        self.max_idle = setting(settings, "CRAWLER_KEEPALIVE_MAX_IDLE")
        self.warned_dataloss = False
        self.keep_raw = bool(setting(settings, "CRAWLER_WARC_DIR"))  # responses as received, for WARC

    async def download_request(self, request: Request) -> Response:
        url = urlparse_cached(request)
        scheme = url.scheme
        if scheme not in _DEFAULT_PORTS:
            raise UnsupportedScheme(f"Unsupported URL scheme '{scheme}': {type(self).__name__} "
                                    f"fetches http and https only")
        host = (url.hostname or "").lower()
        if not host:
            raise DownloadFailedError(f"no host in {request.url}")
        if self.max_url and len(request.url) > self.max_url:
            self.stats.inc_value("crawler/refused/url_length")
            raise RefusedURL(f"URL longer than CRAWLER_MAX_URL_LENGTH ({self.max_url}): {request.url[:100]}...")
        try:
            port = url.port
        except ValueError:  # over 65535, or not a number
            port = 0
        if port is None:
            port = _DEFAULT_PORTS[scheme]
        elif not port:
            self.stats.inc_value("crawler/refused/bad_port")
            raise RefusedURL(f"bad port in {request.url}: ports are 1 to 65535")
        bind = _bind_address(request.meta.get("bindaddress")) or self.bind
        proxy = proxy_for(request)
        key: Key = (scheme, host, port, bind, proxy, self.pinned(request, host) if proxy is None else "")
        if proxy is not None and scheme == "http":
            key = ("http-proxy", "", 0, bind, proxy._replace(auth=None), "")  # one pool for every target
        timeout = float(request.meta.get("download_timeout") or self.timeout) or None
        try:
            async with asyncio.timeout(timeout):
                return await self.fetch(request, url, key, (scheme, host, port), proxy)
        except TimeoutError:
            raise DownloadTimeoutError(f"Getting {request.url} took longer than {timeout} seconds.") from None

    async def fetch(self, request: Request, url: ParseResult, key: Key, target: tuple[str, str, int],
                    proxy: Proxy | None) -> Response:
        start = self.clock.monotonic()
        scheme, host, port = target
        if proxy is None:
            connection = self.pooled(key)
            if connection is None:
                # the address the frontier charged, and no other: a failed connect is
                # retried under a new lease, never silently sent to a second address
                addresses = [self.addresses.permit(host, key[5])] if key[5] else await self.resolve(host)
                connection = await self.connect(target, addresses, key[3])
        else:
            await self.check_proxied(host)  # the target is refused before the proxy hears of it
            connection = self.pooled(key)
            if connection is None:
                connection = await self.connect_proxy(target, proxy, key[3])
        # a request's own cap (robots.txt has one) holds even without the size-cap middleware; 0: none
        exchange = Exchange(lambda e: self.head_received(request, start, e),
                            page_limit(request.meta, self.page_bytes) or 1 << 62,
                            int(request.meta.get("download_maxsize", self.maxsize)), self.max_head,
                            head_only=request.method == "HEAD", raw=self.keep_raw)
        connection.send(self.serialize(request, url, target, proxy), exchange)
        try:
            await exchange.done
        except BaseException as e:
            connection.abort()
            if isinstance(e, HeadTooLarge):
                self.stats.inc_value("crawler/refused/header_size")
            elif isinstance(e, TooLarge):
                logger.warning("%s in request %s.", e, request)  # as Scrapy's handler warns
            raise
        finally:
            connection.exchange = None
        certificate = tls = None
        if scheme == "https":
            assert connection.transport is not None
            tls = connection.transport.get_extra_info("ssl_object")
            if not exchange.dataloss:
                self.tls.keep(host, tls)
            peer = tls.get_peer_certificate()
            certificate = Certificate(peer) if peer is not None else None
        if exchange.keep_alive and self.idle_timeout:
            if tls is not None:
                self.tls.pooled(tls)
            self.release(key, connection)
        else:
            connection.close()
        return self.response(request, exchange, connection.address, certificate)

    def pinned(self, request: Request, host: str) -> str:
        """The address the frontier charged ``request`` to (``meta["crawler_address"]``,
        per-address politeness), while its host is the one it was charged for; "" if none."""
        pin = request.meta.get(ADDRESS)
        if not isinstance(pin, dict) or pin.get("host") != host:
            return ""
        address = str(pin.get("address") or "")
        if address == "!nx":
            self.stats.inc_value("crawler/dns/no_such_host")
            raise NoSuchHost(f"DNS: {host} does not exist (looked up {self.nx_lookups} times, "
                             f"CRAWLER_DNS_NX_RETRIES + 1)")
        if address == "!refused":
            self.stats.inc_value("crawler/refused/private_address")
            raise PrivateAddressRefused(f"{host} leads only to non-global addresses")
        return address

    async def resolve(self, host: str) -> list[Address]:
        return list(await self.addresses.resolve_all(host))

    async def check_proxied(self, host: str) -> None:
        """The address policy for a target reached through a proxy, as
        ``CRAWLER_PROXY_DNS`` says: an address in the URL or a name of
        ``CRAWLER_HOST_MAP`` is always checked here; another name is looked up
        here (``local``), never (``proxy``: the proxy resolves it), or here
        unless that fails (``auto``)."""
        if self.proxy_dns == "local" or self.addresses.known_here(host):
            await self.resolve(host)
            return
        if self.proxy_dns == "proxy":
            self.addresses.check_name(host)
        else:
            try:
                await self.resolve(host)
                return
            except CannotResolveHostError as e:
                logger.debug("Left %s to the proxy to resolve: %s", host, e)
        self.stats.inc_value("crawler/proxy/resolved_by_proxy")

    def serialize(self, request: Request, url: ParseResult, target: tuple[str, str, int],
                  proxy: Proxy | None) -> bytes:
        path = url.path or "/"
        if url.params:
            path += ";" + url.params
        if url.query:
            path += "?" + url.query
        netloc = url.netloc.rpartition("@")[2]
        if proxy is not None and target[0] == "http":
            path = f"http://{netloc}{path}"  # absolute-form, for the proxy
        headers = request.headers
        lines = [f"{request.method} {path} HTTP/1.1".encode("ascii")]
        if b"Host" not in headers:
            lines.append(b"Host: " + netloc.encode("ascii"))
        if b"Accept-Encoding" not in headers:
            lines.append(b"Accept-Encoding: " + self.accept_encoding)
        tunnelled = proxy is not None and target[0] == "https"
        for name, values in headers.items():
            if name == b"Accept-Encoding" and values == [_SCRAPY_ACCEPT_ENCODING]:
                values = [self.accept_encoding]  # what is decoded here, under the cap
            elif name == b"Proxy-Authorization" and (tunnelled or proxy is None):
                continue  # for the proxy only: on the CONNECT request, never to the target
            for value in values:
                lines.append(name + b": " + value)
        body = request.body
        if body or request.method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: " + str(len(body)).encode("ascii"))
        lines.append(b"\r\n")
        return b"\r\n".join(lines) + body

    def pooled(self, key: Key) -> Connection | None:
        connections = self.idle.get(key)
        if connections is None:
            return None
        found = None
        while connections:
            connection = connections.pop()
            self.lru.pop(connection, None)
            if connection.idle is not None:
                connection.idle.cancel()
            if connection.usable:
                found = connection
                break
        if not connections:
            del self.idle[key]
        return found

    def release(self, key: Key, connection: Connection) -> None:
        self.idle.setdefault(key, []).append(connection)
        self.lru[connection] = key
        connection.idle = asyncio.get_running_loop().call_later(self.idle_timeout, self.expire, key, connection)
        if len(self.lru) > self.max_idle:
            oldest, oldest_key = next(iter(self.lru.items()))
            self.stats.inc_value("crawler/pool/evicted")
            self.expire(oldest_key, oldest)

    def expire(self, key: Key, connection: Connection) -> None:
        self.lru.pop(connection, None)
        if connection.idle is not None:
            connection.idle.cancel()
        connections = self.idle.get(key)
        if connections and connection in connections:
            connections.remove(connection)
            if not connections:
                del self.idle[key]
        connection.close()

    async def connect(self, target: tuple[str, str, int], addresses: list[Address], bind: Bind) -> Connection:
        """A connection to the first of ``addresses`` that answers."""
        scheme, host, port = target
        loop = asyncio.get_running_loop()
        error: OSError | None = None
        for address in addresses:
            connection = Connection()
            connection.address = address
            tls = TLSProtocol(self.tls.connection(host), connection) if scheme == "https" else None
            try:
                transport, _ = await loop.create_connection(lambda: tls or connection, str(address), port,
                                                            local_addr=bind)
            except OSError as e:
                error = e
                continue
            if tls is not None:
                try:
                    await self.handshake(tls, host)
                except BaseException:
                    transport.abort()  # a timeout, too
                    raise
            return connection
        shown = ", ".join(str(a) for a in addresses)
        raise DownloadConnectionRefusedError(f"cannot connect to {host} ({shown}:{port}): {error}") from error

    async def connect_proxy(self, target: tuple[str, str, int], proxy: Proxy, bind: Bind) -> Connection:
        """A connection through ``proxy``: to the proxy itself for a plain-HTTP
        target, a CONNECT tunnel carrying TLS to the target for HTTPS."""
        scheme, host, port = target
        where = f"{proxy.host}:{proxy.port}"
        connection = Connection()
        tls = tunnel = None
        app: asyncio.Protocol = connection
        if scheme == "https":
            tls = TLSProtocol(self.tls.connection(host), connection)
            app = tunnel = Tunnel(connect_request(host, port, proxy.auth), tls, where)
        outer = TLSProtocol(self.tls.connection(proxy.host), app) if proxy.scheme == "https" else None
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_connection(lambda: outer or app, proxy.host, proxy.port,
                                                        local_addr=bind)
        except OSError as e:
            raise DownloadConnectionRefusedError(f"cannot connect to the proxy {where}: {e}") from e
        peer = transport.get_extra_info("peername")
        connection.address = ipaddress.ip_address(peer[0].split("%")[0]) if peer else None
        try:
            if outer is not None:
                await self.handshake(outer, proxy.host)
            if tunnel is not None:
                await tunnel.ready
                self.stats.inc_value("crawler/proxy/tunnels")
            if tls is not None:
                await self.handshake(tls, host)
        except BaseException:
            transport.abort()  # a timeout, too
            raise
        return connection

    async def handshake(self, tls: TLSProtocol, host: str) -> None:
        try:
            await tls.ready
        except (SSL.Error, OSError) as e:
            raise DownloadFailedError(f"TLS handshake with {host} failed: {_tls_reason(e)}") from e
        self.stats.inc_value("crawler/tls/handshakes")
        if tls.resumed:
            self.stats.inc_value("crawler/tls/resumed")

    def head_received(self, request: Request, start: float, exchange: Exchange) -> bool:
        request.meta["download_latency"] = self.clock.monotonic() - start
        headers = exchange.scrapy_headers = Headers(exchange.headers)
        expected = exchange.length if exchange.length >= 0 and not exchange.chunked else None
        # the smaller cap acts once the length is known: DOWNLOAD_MAXSIZE (or meta download_maxsize)
        # under the page cap fails here, as in Scrapy; a page cap as small or smaller reads to the cap
        if expected is not None and exchange.cap < exchange.limit and expected > exchange.maxsize:
            where = "meta download_maxsize" if "download_maxsize" in request.meta else "DOWNLOAD_MAXSIZE"
            exchange.fail(TooLarge(f"Expected to receive {expected} bytes which is larger than download max "
                                   f"size ({exchange.maxsize}, {where})"))
            return False
        exchange.stop = self.signal(signals.headers_received, request, headers=headers, body_length=expected)
        return exchange.stop is None

    def signal(self, signal: object, request: Request, **kwargs: Any) -> StopDownload | None:
        results = self.crawler.signals.send_catch_log(signal=signal, request=request, spider=self.crawler.spider,
                                                      dont_log=StopDownload, **kwargs)
        for _, result in results:
            if isinstance(result, Failure) and isinstance(result.value, StopDownload):
                # the traceback's frames hold the page and this frame: a cycle
                # that would keep the body until the next full collection
                result.tb = result.value.__traceback__ = None
                return result.value
        return None

    def response(self, request: Request, exchange: Exchange, address: Address | None,
                 certificate: Certificate | None) -> Response:
        headers: Headers = exchange.scrapy_headers
        stop = exchange.stop
        body = b"" if stop is not None else exchange.body()
        if exchange.decoder is not None:
            if exchange.codings_left:  # an unknown coding: what is left of the header, as Scrapy leaves it
                headers[b"Content-Encoding"] = exchange.codings_left
            else:
                headers.pop(b"Content-Encoding", None)
        if exchange.bad_header_lines:
            self.stats.inc_value("crawler/fetch/bad_header_lines", exchange.bad_header_lines)
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
        elif exchange.until_close and not exchange.dataloss:
            flags.append("partial")  # as Twisted's PotentialDataLoss: no length said where the body ends
        warnsize = request.meta.get("download_warnsize", self.warnsize)
        if warnsize and exchange.received > warnsize:
            logger.warning("Received %d bytes, over DOWNLOAD_WARNSIZE (%d), for %s",
                           exchange.received, warnsize, request)
        if exchange.raw_parts is not None:
            received.keep(request, received.Received(
                exchange.raw_head, exchange.raw_body(body),
                cut=exchange.cut or stop is not None, dataloss=exchange.dataloss))
        respcls = responsetypes.from_args(headers=headers, url=request.url, body=body)
        response = respcls(url=request.url, status=exchange.status, headers=headers, body=body, flags=flags,
                           certificate=certificate, ip_address=address,
                           protocol=exchange.version.decode("latin-1"))
        if stop is not None and stop.fail:
            stop.response = response
            try:
                raise stop
            finally:
                stop = None  # the traceback holds this frame: no cycle back to the exception
        return response

    async def close(self) -> None:
        for connections in self.idle.values():
            for connection in connections:
                if connection.idle is not None:
                    connection.idle.cancel()
                connection.abort()
        self.idle.clear()
        self.lru.clear()
        self.addresses.close()


def _bind_address(value: Any) -> Bind:
    if not value:
        return None
    if isinstance(value, str):
        return (value, 0)
    host, port = value
    return (str(host), int(port))


def _tls_reason(error: Exception) -> str:
    if isinstance(error, SSL.Error) and error.args and isinstance(error.args[0], list):
        return "; ".join(str(part[-1]) for part in error.args[0]) or str(error)
    return str(error) or type(error).__name__


def check_tls(settings: BaseSettings) -> None:
    """``SettingsError`` naming the first bad TLS setting (Scrapy's or the
    crawler's), if :class:`crawler.fetch.DownloadHandler` downloads http or https."""
    from scrapy.utils.misc import load_object

    for scheme in ("http", "https"):
        handler = settings.getdict("DOWNLOAD_HANDLERS").get(scheme)
        try:
            handler = load_object(handler) if isinstance(handler, str) else handler
        except (ImportError, ValueError, NameError, AttributeError):
            continue  # Scrapy names it when it loads the handlers
        if isinstance(handler, type) and issubclass(handler, DownloadHandler):
            TLS(settings)
            return
