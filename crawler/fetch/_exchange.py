"""One HTTP/1.1 connection and the exchange it carries.

:class:`Connection` is the asyncio protocol; it feeds what arrives to the
current :class:`Exchange`, which parses the status line and headers (at
most ``max_head`` bytes), then the body framed by ``Content-Length``,
``chunked`` or the connection's end, decoded as it arrives and kept to
``limit`` bytes. Parsing happens in the transport's callbacks: no task
wakes up until the exchange is over.

Tolerated as browsers and Scrapy's handler do: lines ended by a bare LF
(head and chunk lines), header lines without a colon (skipped, counted in
``bad_header_lines``), repeated identical ``Content-Length`` values, spaces
and tabs after a chunk size. Refused, never guessed: ``Transfer-Encoding``
with ``Content-Length``, a ``Transfer-Encoding`` other than ``chunked``,
differing lengths, chunk sizes that are not plain hex digits.

With ``raw=True`` the exchange also keeps the response as received, for WARC
records (:mod:`crawler.fetch.received`): the final status line and header
lines with the empty line ending them (:attr:`Exchange.raw_head`), and the body
bytes before any decoding, chunk framing included, up to where reading stopped
(:meth:`Exchange.raw_body`). Where nothing is decoded or de-chunked, the raw
body is the body itself: no second copy.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
from typing import TYPE_CHECKING

from scrapy.exceptions import DownloadCancelledError, DownloadFailedError

from crawler.fetch._decode import decoder

if TYPE_CHECKING:
    from collections.abc import Callable
    from ipaddress import IPv4Address, IPv6Address

    from scrapy.exceptions import StopDownload
    from scrapy.http import Headers

    from crawler.fetch._decode import Decoder

HeaderList = list[tuple[bytes, bytes]]
#: decoded bytes made in one turn of the event loop: a body that inflates
#: far (a decompression bomb, up to a 50 MiB cap) is decoded in steps of
#: this size with the loop let run between them, reading paused meanwhile
#: (one step of zeros is a few milliseconds of zlib)
DECODE_STEP = 1 << 20
_CHUNK_LINE_MAX = 4096
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}[ \t]*")  # up to the ";" of an extension


class HeadTooLarge(DownloadFailedError):
    """The response's status line and headers exceed the allowed size."""


class TooLarge(DownloadCancelledError):
    """The response is over ``DOWNLOAD_MAXSIZE`` (as sent, or once decoded)."""


class BodyDecodeError(DownloadFailedError):
    """The body cannot be decoded from its ``Content-Encoding``."""


class Exchange:
    """The response to one request, parsed as it arrives."""

    def __init__(self, on_head: Callable[[Exchange], bool], limit: int, maxsize: int, max_head: int,
                 head_only: bool, raw: bool = False) -> None:
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_head = on_head  # False: stop at the headers
        self.limit = limit  # decoded bytes kept; one more read marks a cut (the body ends at the cap)
        self.maxsize = maxsize  # bytes received, or decoded, before the download fails (0: none)
        # decoded bytes kept; one more read is a cut (the page cap) or, under maxsize, a failure
        self.cap = min(limit, maxsize) if maxsize else limit
        self.max_head = max_head
        self.head_only = head_only
        self.buffer = bytearray()
        self.status = 0
        self.version = b""  # as the server said: b"HTTP/1.1", b"HTTP/1.0"
        self.headers: HeaderList = []
        self.bad_header_lines = 0  # skipped: no colon
        self.in_body = False
        self.length = -1  # bytes of body left; -1: until the connection ends
        self.until_close = False  # the body is framed by the connection's end
        self.chunked = False
        self.chunk_left = 0  # >0: data, -1: line end after data, -2: trailers
        self.decoder: Decoder | None = None
        self.codings_left: list[bytes] = []  # Content-Encoding not undone here, in the header's order
        self.parts: list[bytes] = []
        self.kept = 0
        self.received = 0
        self.keep_alive = False
        self.cut = False  # stopped before the end of the body
        self.dataloss = False
        self.scrapy_headers: Headers | None = None
        self.stop: StopDownload | None = None  # from a signal handler
        self.raw_head = b""  # with raw: the final head as received, its empty line included
        # with raw: body bytes as received, where they differ from the parts kept (decoded or chunked)
        self.raw_parts: list[bytes] | None = [] if raw else None
        self.reading: asyncio.ReadTransport | None = None  # paused while decoded output waits
        self._pulling = False  # decoded output waits: pulled in the next turn of the loop
        self._end_waits = False  # the body ended while output waited: finish once it is pulled

    @property
    def finished(self) -> bool:
        return self.done.done()

    def body(self) -> bytes:
        return b"".join(self.parts)

    def raw_body(self, body: bytes) -> bytes:
        """The body as received (``body`` is :meth:`body`'s value): before
        decoding, chunk framing included, cut where reading stopped (a body
        neither decoded nor chunked: at the cap, as the response's is)."""
        if self.raw_parts is None or (self.decoder is None and not self.chunked):
            return body[:self.cap] if len(body) > self.cap else body
        return b"".join(self.raw_parts)

    def feed(self, data: bytes) -> None:
        if self.in_body:
            self._body(data)
            return
        self.buffer += data
        buffer = self.buffer
        while not self.in_body:
            # the head ends at the first empty line, its line ends CRLF or LF
            end = buffer.find(b"\n\r\n")
            lf = buffer.find(b"\n\n", 0, len(buffer) if end == -1 else end)
            if lf != -1:
                end, skip = lf, 2
            else:
                skip = 3
            if end == -1 or end > self.max_head:
                if end != -1 or len(buffer) > self.max_head:
                    self.fail(HeadTooLarge(f"response headers over {self.max_head} bytes"))
                return
            head = bytes(buffer[:end])
            if self.raw_parts is not None:
                self.raw_head = bytes(buffer[:end + skip])
            del buffer[:end + skip]
            if not self._head(head):
                return
        rest = bytes(self.buffer)
        self.buffer.clear()
        if self.length == 0:
            if rest:
                self.keep_alive = False
            self.finish()
        elif rest:
            self._body(rest)

    def _head(self, head: bytes) -> bool:
        lines = head.split(b"\n")
        status_line = lines[0].rstrip(b"\r")
        version, _, rest = status_line.partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            self.fail(DownloadFailedError(f"not an HTTP/1.x response: {status_line[:80]!r}"))
            return False
        status = int(code)
        if 100 <= status < 200 and status != 101:
            return True  # interim response: the real one follows
        headers: HeaderList = []
        for line in lines[1:]:  # a CR before the LF goes with the strip()s below
            if line[:1] in (b" ", b"\t") and headers:  # obsolete line folding
                name, value = headers[-1]
                headers[-1] = (name, value + b" " + line.strip())
                continue
            name, colon, value = line.partition(b":")
            name = name.strip()
            if not colon or not name:
                self.bad_header_lines += 1
                continue
            headers.append((name, value.strip()))
        self.status, self.version, self.headers, self.in_body = status, version, headers, True
        self.keep_alive = version == b"HTTP/1.1"
        lengths: list[bytes] = []
        transfer: list[bytes] = []
        codings: list[bytes] = []
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-length":
                lengths += value.split(b",")
            elif lower == b"transfer-encoding":
                transfer += value.split(b",")
            elif lower == b"connection" and b"close" in value.lower():
                self.keep_alive = False
            elif lower == b"content-encoding":
                codings.append(value)
        no_body = self.head_only or status in (204, 304)
        if no_body:
            self.length = 0
        elif transfer:
            if lengths:
                return self._refuse("ambiguous framing: both Transfer-Encoding and Content-Length")
            if [t.strip().lower() for t in transfer] != [b"chunked"]:
                return self._refuse(f"ambiguous framing: Transfer-Encoding {b','.join(transfer)[:80]!r}, not chunked")
            self.chunked = True
        elif lengths:
            values = {v.strip() for v in lengths}
            if len(values) > 1 or not next(iter(values)).isdigit():
                return self._refuse(f"bad Content-Length {b','.join(lengths)[:80]!r}")
            self.length = int(next(iter(values)))
            if len(lengths) > 1:  # one value, as Scrapy's handler gives it
                headers[:] = [h for h in headers if h[0].lower() != b"content-length"]
                headers.append((b"Content-Length", str(self.length).encode()))
        else:
            self.until_close = True
            self.keep_alive = False
        if codings and not no_body:
            try:
                self.decoder, self.codings_left = decoder(codings)
            except ValueError as e:
                return self._refuse(f"cannot decode the body: {e}")
        if not self.on_head(self):
            self.cut = True
            self.finish()
            return False
        return True

    def _refuse(self, reason: str) -> bool:
        self.fail(DownloadFailedError(reason))
        return False

    def _body(self, data: bytes) -> None:
        if self.chunked:
            self._chunks(data)
            return
        if self.length >= 0:
            if len(data) > self.length:
                data = data[:self.length]
                self.keep_alive = False  # bytes after the body: something is off
            self.length -= len(data)
        self._keep(data)
        if self.length == 0 and not self.finished:
            self.finish()

    def _chunks(self, data: bytes) -> None:
        # parsed in the read itself: chunk data is passed on whole or sliced once,
        # only an unfinished line waits in the buffer for the next read
        if self.buffer:
            data = bytes(self.buffer) + data
            self.buffer.clear()
        pos = 0
        size = len(data)
        while not self.finished:
            left = self.chunk_left
            if left > 0:
                take = size - pos
                if not take:
                    break
                if take > left:
                    take = left
                self._keep(data if take == size else data[pos:pos + take])
                pos += take
                self.chunk_left = left - take or -1
                continue
            end = data.find(b"\n", pos)
            if end == -1:
                if size - pos > _CHUNK_LINE_MAX:
                    self.fail(DownloadFailedError("chunk size line too long"))
                break
            line = data[pos:end - 1 if end > pos and data[end - 1] == 13 else end]
            pos = end + 1
            if left == -1:  # the line end closing a chunk's data
                if line:
                    self.fail(DownloadFailedError("malformed chunked body"))
                    break
                self.chunk_left = 0
            elif left == -2:  # trailers, up to an empty line
                if not line:
                    self.finish()
            else:
                size_field = line.split(b";", 1)[0]
                if _CHUNK_SIZE.fullmatch(size_field) is None:
                    self.fail(DownloadFailedError(f"bad chunk size {size_field[:20]!r}"))
                    break
                self.chunk_left = int(size_field, 16) or -2
        if self.raw_parts is not None and pos:
            self.raw_parts.append(data if pos >= size else data[:pos])  # the rest waits in the buffer
        if pos < size:
            if self.finished:
                self.keep_alive = False  # bytes after the body: something is off
            else:
                self.buffer += data[pos:] if pos else data

    def _keep(self, data: bytes) -> None:
        if self.finished or not data:
            return
        room = self.cap + 1 - self.kept
        if self.decoder is None and len(data) > room:
            data = data[:room]  # past the cap: never counted against DOWNLOAD_MAXSIZE
        self.received += len(data)
        # undecoded, received is kept: over the cap below (the byte marking a cut is no failure)
        if self.decoder is not None and self.maxsize and self.received > self.maxsize:
            self.fail(TooLarge(f"response over DOWNLOAD_MAXSIZE ({self.maxsize} bytes)"))
            return
        if self.decoder is None:
            self._kept(data)
            return
        if self.raw_parts is not None and not self.chunked:  # chunked: kept with their framing
            self.raw_parts.append(data)
        self._decode(data)

    def _decode(self, data: bytes) -> None:
        """Decode ``data`` (b"": what the decoder still holds), at most
        ``DECODE_STEP`` bytes now; the rest in later turns of the loop."""
        assert self.decoder is not None
        room = self.cap + 1 - self.kept
        step = min(room, DECODE_STEP)
        try:
            out = self.decoder.feed(data, step)
        except Exception as e:
            self.fail(BodyDecodeError(f"cannot decode the body: {e}"))
            return
        self._kept(out)
        if self.finished:
            return
        if len(out) == step < room:  # more may wait in the decoder
            if not self._pulling:
                self._pulling = True
                if self.reading is not None:
                    self.reading.pause_reading()
                asyncio.get_running_loop().call_soon(self._pull)
        elif self._pulling is False and self._end_waits:
            self._end_waits = False
            self.finish()

    def _pull(self) -> None:
        self._pulling = False
        if self.finished:
            return
        self._decode(b"")
        if not self._pulling and not self.finished and self.reading is not None and not self.reading.is_closing():
            self.reading.resume_reading()

    def _kept(self, data: bytes) -> None:
        if data:
            self.parts.append(data)
            self.kept += len(data)
        if self.kept > self.cap:
            if self.cap < self.limit:
                decoded = " once decoded" if self.decoder is not None else ""
                self.fail(TooLarge(f"response over DOWNLOAD_MAXSIZE ({self.maxsize} bytes){decoded}"))
                return
            self.cut = True  # the body ends at the cap, its flag says it was cut
            excess = self.kept - self.cap
            self.parts[-1] = self.parts[-1][:-excess]
            self.kept = self.cap
            self.finish()

    def finish(self) -> None:
        if self._pulling and not self.cut:
            self._end_waits = True  # decoded output still waits: the body ends once it is pulled
            return
        if self.cut or self.length > 0 or self.chunked and self.chunk_left != -2:
            self.keep_alive = False
        if not self.done.done():
            self.done.set_result(None)

    def fail(self, error: Exception) -> None:
        self.keep_alive = False
        if not self.done.done():
            self.done.set_exception(error)

    def ended(self, error: Exception | None) -> None:
        """The connection is gone."""
        if self.finished:
            return
        if not self.in_body:
            reason = f": {error}" if error else ""
            self.fail(DownloadFailedError(f"connection closed before the response{reason}"))
        elif self.until_close:
            self.finish()  # a body framed by the connection's end
        else:
            self.dataloss = True
            self.finish()


_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close with a reset, unsent bytes dropped


class Connection(asyncio.Protocol):
    """An HTTP/1.1 client connection: one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.closed = False
        self.idle: asyncio.TimerHandle | None = None
        self.address: IPv4Address | IPv6Address | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, data: bytes, exchange: Exchange) -> None:
        assert self.transport is not None
        self.exchange = exchange
        exchange.reading = self.transport  # paused while a body's decoded output waits
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None or exchange.finished:
            self.abort()  # bytes nobody asked for
            return
        exchange.feed(data)

    def eof_received(self) -> None:
        if self.exchange is not None:
            self.exchange.ended(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.idle is not None:
            self.idle.cancel()
        if self.exchange is not None:
            self.exchange.ended(exc)

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
