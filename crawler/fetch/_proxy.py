"""HTTP proxies: where ``meta["proxy"]`` leads, and CONNECT tunnels.

A plain-HTTP target is asked of the proxy with its absolute URI; an HTTPS
target gets a CONNECT tunnel (:class:`Tunnel`), then TLS with the target
inside it. ``Proxy-Authorization``, as Scrapy's ``HttpProxyMiddleware`` sets
it, goes to the proxy: on the CONNECT request for a tunnel (and not inside
it), on the request itself otherwise. An ``https://`` proxy is reached over
TLS, for either kind of target. Both carry the target's name as written in
the URL, so a proxy can resolve what the crawler does not
(``CRAWLER_PROXY_DNS``, :meth:`crawler.fetch.handler.DownloadHandler.check_proxied`).
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlparse

from scrapy.exceptions import DownloadFailedError, NotSupported
from scrapy.utils.url import add_http_if_no_scheme

if TYPE_CHECKING:
    from scrapy import Request

_STATUS = re.compile(rb"HTTP/1\.\d\s+(?P<status>\d{3})(?P<reason>[^\r\n]*)")
_MAX_HEAD = 16 * 1024


class TunnelError(DownloadFailedError):
    """The proxy did not open a CONNECT tunnel."""


class Proxy(NamedTuple):
    scheme: str
    host: str
    port: int
    auth: bytes | None  # the Proxy-Authorization value


def proxy_for(request: Request) -> Proxy | None:
    """The proxy in ``request.meta["proxy"]``, or None."""
    value = request.meta.get("proxy")
    if not value:
        return None
    parsed = urlparse(add_http_if_no_scheme(str(value)))
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise NotSupported(f"unsupported proxy {value!r}: http:// or https:// proxies only")
    try:
        port = parsed.port
    except ValueError:
        port = 0
    if port is None:
        port = 443 if parsed.scheme == "https" else 80
    if not 0 < port < 65536:
        raise NotSupported(f"bad port in the proxy {value!r}")
    return Proxy(parsed.scheme, parsed.hostname, port, request.headers.get(b"Proxy-Authorization"))


def connect_request(host: str, port: int, auth: bytes | None) -> bytes:
    """A CONNECT request for ``host:port``, as Scrapy sends it (an IPv6
    address in brackets)."""
    authority = (f"[{host}]" if ":" in host else host).encode("ascii") + b":%d" % port
    lines = [b"CONNECT " + authority + b" HTTP/1.1", b"Host: " + authority]
    if auth:
        lines.append(b"Proxy-Authorization: " + auth)
    return b"\r\n".join(lines) + b"\r\n\r\n"


class Tunnel(asyncio.Protocol):
    """Sends ``request`` (a CONNECT) and reads the proxy's answer; on a 200,
    hands the transport to ``app`` (a TLS protocol) and carries its bytes."""

    def __init__(self, request: bytes, app: asyncio.Protocol, proxy: str) -> None:
        self.request = request
        self.app = app
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if self.open:
            self.app.data_received(data)
            return
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end == -1:
            if len(self.buffer) > _MAX_HEAD:
                self._fail(TunnelError(f"Could not open CONNECT tunnel with proxy {self.proxy}: "
                                       f"answer headers over {_MAX_HEAD} bytes"))
            return
        head, rest = bytes(self.buffer[:end]), bytes(self.buffer[end + 4:])
        self.buffer.clear()
        match = _STATUS.match(head)
        if match is None or match["status"] != b"200":
            extra = ({"status": int(match["status"]), "reason": match["reason"].strip().decode("latin-1")}
                     if match else head[:32])
            self._fail(TunnelError(f"Could not open CONNECT tunnel with proxy {self.proxy} [{extra!r}]"))
            return
        self.open = True
        self.ready.set_result(None)
        assert self.transport is not None
        self.app.connection_made(self.transport)
        if rest:
            self.app.data_received(rest)

    def _fail(self, error: Exception) -> None:
        if not self.ready.done():
            self.ready.set_exception(error)
        if self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> bool | None:
        if self.open:
            return self.app.eof_received()
        self._fail(TunnelError(f"Could not open CONNECT tunnel with proxy {self.proxy}: connection closed"))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.open:
            self.app.connection_lost(exc)
        elif not self.ready.done():
            reason = f": {exc}" if exc else ": connection closed"
            self.ready.set_exception(TunnelError(f"Could not open CONNECT tunnel with proxy {self.proxy}{reason}"))
