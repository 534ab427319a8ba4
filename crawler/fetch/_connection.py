"""One HTTP/1.1 client connection on asyncio, carrying one exchange at a time.

:class:`Connection` is the asyncio protocol: it feeds what arrives to the
current :class:`~crawler.fetch._exchange.Exchange` in the transport's
callbacks (no task wakes up until the exchange is over) and resolves the
future :meth:`Connection.send` returned once the exchange has finished. A
body whose decoded output waits in the decoder (:attr:`Exchange.waiting`) is
pulled one step per turn of the event loop, reading paused meanwhile, so a
decompression bomb never holds the loop.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ipaddress import IPv4Address, IPv6Address

    from crawler.fetch._exchange import Exchange

_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close with a reset, unsent bytes dropped


class Connection(asyncio.Protocol):
    """An HTTP/1.1 client connection: one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.done: asyncio.Future[None] | None = None  # the exchange's end
        self.closed = False
        self.paused = False  # reading paused while a decoder's output waits
        self.pulling = False  # a pull of that output is scheduled
        self.idle: asyncio.TimerHandle | None = None
        self.address: IPv4Address | IPv6Address | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, data: bytes, exchange: Exchange) -> asyncio.Future[None]:
        """Send a request; the future ends with ``exchange`` (its error, if it failed)."""
        assert self.transport is not None
        self.exchange = exchange
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.done

    def release(self) -> None:
        """The exchange is over for its consumer."""
        self.exchange = self.done = None

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None or exchange.finished:
            self.abort()  # bytes nobody asked for
            return
        exchange.feed(data)
        self._advance(exchange)

    def eof_received(self) -> None:
        if self.exchange is not None:
            self.exchange.ended(None)
            self._advance(self.exchange)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.idle is not None:
            self.idle.cancel()
        if self.exchange is not None:
            self.exchange.ended(exc)
            self._advance(self.exchange)

    def _advance(self, exchange: Exchange) -> None:
        """After the exchange was fed: end the future, or pull what waits."""
        if exchange.finished:
            self._resume()
            done = self.done
            if done is not None and not done.done():
                if exchange.error is not None:
                    done.set_exception(exchange.error)
                else:
                    done.set_result(None)
        elif exchange.waiting and not self.pulling:
            self.pulling = True
            if self.transport is not None and not self.paused and not self.transport.is_closing():
                self.paused = True
                self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._pull, exchange)

    def _pull(self, exchange: Exchange) -> None:
        self.pulling = False
        if exchange is not self.exchange:
            return  # given up on meanwhile
        exchange.pull()
        self._advance(exchange)
        if not self.pulling:
            self._resume()

    def _resume(self) -> None:
        if self.paused:
            self.paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()

    @property
    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        """End politely: TLS close_notify keeps the host's session resumable."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        """End at once, and take back what the site has not received: a
        reset (``SO_LINGER`` 0) drops the bytes the kernel still holds to
        send. A plain close keeps sending them after the connection is given
        up on: a request timed out while the network to the site was cut
        would reach the site once it is back, with nobody waiting for its
        answer (fetched twice, and at a time politeness never chose)."""
        if self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                except (OSError, AttributeError):
                    pass  # not a TCP socket: closed as it comes
            self.transport.abort()
