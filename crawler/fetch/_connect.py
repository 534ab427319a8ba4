"""Opening connections: to a host's addresses in turn, or through a proxy
(a CONNECT tunnel for HTTPS targets), TLS handshakes included."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import TYPE_CHECKING

from OpenSSL import SSL
from scrapy.exceptions import DownloadConnectionRefusedError, DownloadFailedError

from crawler.fetch._connection import Connection
from crawler.fetch._proxy import Tunnel, connect_request
from crawler.fetch._tls import TLSProtocol

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.fetch._address import Address
    from crawler.fetch._pool import Bind
    from crawler.fetch._proxy import Proxy
    from crawler.fetch._tls import TLS


class Connector:
    def __init__(self, tls: TLS, stats: StatsCollector) -> None:
        self.tls = tls
        self.stats = stats

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


def _tls_reason(error: Exception) -> str:
    if isinstance(error, SSL.Error) and error.args and isinstance(error.args[0], list):
        return "; ".join(str(part[-1]) for part in error.args[0]) or str(error)
    return str(error) or type(error).__name__
