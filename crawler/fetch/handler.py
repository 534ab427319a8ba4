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
  with the decoded body in pieces of at most 32 KiB, none larger than one
  read of Scrapy's handler (:mod:`crawler.fetch._response`); ``StopDownload``
  from either works as in Scrapy.
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
  closed first (:mod:`crawler.fetch._pool`).
- At most ``RESPONSES_PER_TURN`` responses are handed on to Scrapy in one
  turn of the event loop; the rest of a wave that ended together waits for
  the turns after (:mod:`crawler.fetch._turns`).
- With ``CRAWLER_WARC_DIR`` set, each response is also kept as received
  (head and undecoded body, :mod:`crawler.fetch.received`) for the WARC
  extension; the response Scrapy sees is unchanged.

One response, from bytes to Scrapy's Response: :meth:`DownloadHandler.fetch`
takes a connection (``_pool``, ``_connect``), sends the request
(``_request``), and awaits the :class:`~crawler.fetch._exchange.Exchange`
the :class:`~crawler.fetch._connection.Connection` feeds; the exchange reads
the head and the body with the framing and readers of ``_http11`` and
decodes it (``_decode``); ``_response`` sends the signals and builds the
response.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.core.downloader.handlers.base import BaseDownloadHandler
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadFailedError,
    DownloadTimeoutError,
    IgnoreRequest,
    NotSupported,
    UnsupportedURLSchemeError,
)
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.ssl import Certificate

from crawler.clock import clock_of
from crawler.fetch._address import Address, Addresses, NoSuchHost, PrivateAddressRefused
from crawler.fetch._connect import Connector
from crawler.fetch._decode import accepted
from crawler.fetch._exchange import Exchange, HeadTooLarge, TooLarge
from crawler.fetch._pool import Bind, Key, Pool
from crawler.fetch._proxy import Proxy, proxy_for
from crawler.fetch._request import serialize
from crawler.fetch._response import Reception, Responses
from crawler.fetch._tls import TLS
from crawler.fetch._turns import TurnGate
from crawler.meta import ADDRESS, page_limit
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from urllib.parse import ParseResult

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: responses handed on to Scrapy in one turn of the event loop: the rest of a
#: wave of answers that ended together wait for the turns after (``_turns.py``)
RESPONSES_PER_TURN = 8

_DEFAULT_PORTS = {"http": 80, "https": 443}


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
        self.timeout = settings.getfloat("DOWNLOAD_TIMEOUT")
        capped = setting(settings, "CRAWLER_SIZECAP_ENABLED")
        self.page_bytes = setting(settings, "CRAWLER_MAX_PAGE_BYTES") if capped else 0
        self.max_head = setting(settings, "CRAWLER_MAX_HEADER_BYTES")
        self.max_url = setting(settings, "CRAWLER_MAX_URL_LENGTH")
        self.bind = _bind_address(settings.get("DOWNLOAD_BIND_ADDRESS"))
        self.accept_encoding = accepted()
        self.clock = clock_of(crawler)
        self.addresses = Addresses(settings, crawler.stats, self.clock)
        self.proxy_dns = setting(settings, "CRAWLER_PROXY_DNS")  # who resolves a proxied target's name
        self.nx_lookups = setting(settings, "CRAWLER_DNS_NX_RETRIES") + 1
        self.tls = TLS(settings)
        self.connector = Connector(self.tls, crawler.stats)
        idle_timeout = setting(settings, "CRAWLER_KEEPALIVE_TIMEOUT") if keeps_alive(settings) else 0.0
        self.pool = Pool(idle_timeout, setting(settings, "CRAWLER_KEEPALIVE_MAX_IDLE"), crawler.stats)
        self.responses = Responses(crawler, self.clock)
        self.keep_raw = bool(setting(settings, "CRAWLER_WARC_DIR"))  # responses as received, for WARC
        self.turns = TurnGate(RESPONSES_PER_TURN)  # responses handed on in one turn of the loop (_turns.py)

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
                response = await self.fetch(request, url, key, (scheme, host, port), proxy)
        except TimeoutError:
            raise DownloadTimeoutError(f"Getting {request.url} took longer than {timeout} seconds.") from None
        # no more than RESPONSES_PER_TURN handed on in one turn of the loop (WARC, parse, links:
        # about 2 ms each); a wave of answers that ended together waits for the turns after
        await self.turns.enter()
        return response

    async def fetch(self, request: Request, url: ParseResult, key: Key, target: tuple[str, str, int],
                    proxy: Proxy | None) -> Response:
        start = self.clock.monotonic()
        scheme, host, port = target
        if proxy is None:
            connection = self.pool.take(key)
            if connection is None:
                # the address the frontier charged, and no other: a failed connect is
                # retried under a new lease, never silently sent to a second address
                addresses = [self.addresses.permit(host, key[5])] if key[5] else await self.resolve(host)
                connection = await self.connector.connect(target, addresses, key[3])
        else:
            await self.check_proxied(host)  # the target is refused before the proxy hears of it
            connection = self.pool.take(key)
            if connection is None:
                connection = await self.connector.connect_proxy(target, proxy, key[3])
        reception = Reception(self.responses, request, start)
        # a request's own cap (robots.txt has one) holds even without the size-cap middleware; 0: none
        exchange = Exchange(reception.head, page_limit(request.meta, self.page_bytes) or 1 << 62,
                            int(request.meta.get("download_maxsize", self.maxsize)), self.max_head,
                            head_only=request.method == "HEAD", raw=self.keep_raw,
                            on_data=reception.data if self.responses.listened(signals.bytes_received) else None)
        done = connection.send(serialize(request, url, target, proxy, self.accept_encoding), exchange)
        try:
            await done
        except BaseException as e:
            connection.abort()
            if isinstance(e, HeadTooLarge):
                self.stats.inc_value("crawler/refused/header_size")
            elif isinstance(e, TooLarge):
                logger.warning("%s in request %s.", e, request)  # as Scrapy's handler warns
            raise
        finally:
            connection.release()
        certificate = tls = None
        if scheme == "https":
            assert connection.transport is not None
            tls = connection.transport.get_extra_info("ssl_object")
            if not exchange.dataloss:
                self.tls.keep(host, tls)
            peer = tls.get_peer_certificate()
            certificate = Certificate(peer) if peer is not None else None
        if exchange.keep_alive and self.pool.idle_timeout:
            if tls is not None:
                self.tls.pooled(tls)
            self.pool.put(key, connection)
        else:
            connection.close()
        return reception.response(exchange, connection.address, certificate)

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

    async def close(self) -> None:
        self.pool.close()
        self.addresses.close()


def _bind_address(value: Any) -> Bind:
    if not value:
        return None
    if isinstance(value, str):
        return (value, 0)
    host, port = value
    return (str(host), int(port))


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
