"""HTTP/1.1 responses as bytes in, events out: no sockets, no event loop.

Three parts, each testable with bytes alone:

- :func:`split_head` and :func:`parse_head` find and read a response's
  status line and header lines.
- :func:`framing` decides how the body is delimited, from the status, the
  request method and the headers (RFC 9112 section 6.3), or refuses.
- One reader per framing (:class:`LengthReader`, :class:`ChunkedReader`,
  :class:`CloseReader`) turns the body's bytes into :class:`Data` and
  :class:`EndOfMessage` events, or a :class:`Malformed` one; at the
  connection's end :meth:`eof` says whether the body was complete
  (:class:`EndOfMessage`) or not (:class:`Incomplete`).

Tolerated as browsers and Scrapy's handler do: lines ended by a bare LF
(head and chunk lines), header lines without a colon (skipped, counted in
``bad_header_lines``), repeated identical ``Content-Length`` values, spaces
and tabs after a chunk size. Refused, never guessed: ``Transfer-Encoding``
with ``Content-Length``, a ``Transfer-Encoding`` other than ``chunked``,
differing lengths, chunk sizes that are not plain hex digits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

HeaderList = list[tuple[bytes, bytes]]

CHUNK_LINE_MAX = 4096  # a chunk size, line end or trailer line without its LF past this: refused
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}[ \t]*")  # up to the ";" of an extension


# the head

#: the header fields read here: framing, persistence, decoding
_READ_HERE = frozenset((b"content-length", b"transfer-encoding", b"connection", b"content-encoding"))


@dataclass(slots=True)
class Head:
    """A response's status line and header lines, as parsed."""

    status: int
    version: bytes  # as the server said: b"HTTP/1.1", b"HTTP/1.0"
    headers: HeaderList
    bad_header_lines: int = 0  # skipped: no colon
    #: the lines of the fields read here (framing, persistence, decoding), names in lower case
    fields: HeaderList = field(default_factory=list)

    @property
    def interim(self) -> bool:
        """A 1xx other than 101: the real response follows."""
        return 100 <= self.status < 200 and self.status != 101

    @property
    def persistent(self) -> bool:
        """Whether the server lets the connection carry another exchange:
        HTTP/1.1 without ``Connection: close``."""
        return self.version == b"HTTP/1.1" and not any(
            n == b"connection" and b"close" in v.lower() for n, v in self.fields)

    @property
    def codings(self) -> list[bytes]:
        """The ``Content-Encoding`` values, in their order."""
        return [v for n, v in self.fields if n == b"content-encoding"]


def split_head(buffer: bytes | bytearray, max_head: int) -> tuple[int, int] | None:
    """Where the head in ``buffer`` ends: (its length without the empty line,
    the length of the line ends there), None while it has not ended; a
    ``ValueError`` if it is over ``max_head`` bytes. The head ends at the
    first empty line, its line ends CRLF or LF."""
    end = buffer.find(b"\n\r\n")
    lf = buffer.find(b"\n\n", 0, len(buffer) if end == -1 else end)
    if lf != -1:
        end, skip = lf, 2
    else:
        skip = 3
    if end == -1 or end > max_head:
        if end != -1 or len(buffer) > max_head:
            raise ValueError(f"response headers over {max_head} bytes")
        return None
    return end, skip


def parse_head(head: bytes) -> Head:
    """The status line and header lines of ``head`` (without its empty
    line); a ``ValueError`` if it is not an HTTP/1.x response."""
    lines = head.split(b"\n")
    status_line = lines[0].rstrip(b"\r")
    version, _, rest = status_line.partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or not code.isdigit():
        raise ValueError(f"not an HTTP/1.x response: {status_line[:80]!r}")
    parsed = Head(int(code), version, [])
    headers = parsed.headers
    read_here: list[int] = []  # where the fields read here are in headers
    for line in lines[1:]:  # a CR before the LF goes with the strip()s below
        if line[:1] in (b" ", b"\t") and headers:  # obsolete line folding
            name, value = headers[-1]
            headers[-1] = (name, value + b" " + line.strip())
            continue
        name, colon, value = line.partition(b":")
        name = name.strip()
        if not colon or not name:
            parsed.bad_header_lines += 1
            continue
        if name[0] in b"cCtT" and name.lower() in _READ_HERE:
            read_here.append(len(headers))
        headers.append((name, value.strip()))
    parsed.fields = [(headers[i][0].lower(), headers[i][1]) for i in read_here]
    return parsed


# the framing

class Kind(Enum):
    NONE = "none"  # no body
    LENGTH = "length"  # Content-Length bytes
    CHUNKED = "chunked"  # Transfer-Encoding: chunked
    CLOSE = "close"  # until the connection ends


@dataclass(frozen=True, slots=True)
class Framing:
    kind: Kind
    length: int = 0  # Kind.LENGTH: the body's bytes
    merged: bool = False  # Kind.LENGTH from several identical values: given as one, as Scrapy's handler does


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str


def framing(status: int, head_request: bool, headers: HeaderList) -> Framing | Refusal:
    """How the body of a final response is delimited, RFC 9112 section 6.3's
    steps in its order (the steps that concern requests left out)."""
    # 1. A response to HEAD, a 204 or a 304 has no body, whatever its header
    #    fields say. (The other 1xx are interim, never framed: parse_head's
    #    caller skips them; 101 answers an Upgrade this client never asks for.)
    if head_request or status in (204, 304):
        return Framing(Kind.NONE)
    # 2. A 2xx to CONNECT is a tunnel: proxies' CONNECT is answered in
    #    _proxy.Tunnel, never here.
    lengths: list[bytes] = []
    transfer: list[bytes] = []
    for name, value in headers:
        lower = name.lower()
        if lower == b"content-length":
            lengths += value.split(b",")
        elif lower == b"transfer-encoding":
            transfer += value.split(b",")
    if transfer:
        # 3. Transfer-Encoding with Content-Length "ought to be handled as an
        #    error": a sign of response splitting. Refused.
        if lengths:
            return Refusal("ambiguous framing: both Transfer-Encoding and Content-Length")
        # 4. chunked, the final coding, frames the body; a server may also read
        #    to the end, but no coding but chunked is undone here: refused.
        if [t.strip().lower() for t in transfer] != [b"chunked"]:
            return Refusal(f"ambiguous framing: Transfer-Encoding {b','.join(transfer)[:80]!r}, not chunked")
        return Framing(Kind.CHUNKED)
    if lengths:
        # 5. An invalid Content-Length is an error; a list of one value
        #    repeated ("42, 42", or two lines) may stand for that value.
        values = {v.strip() for v in lengths}
        if len(values) > 1 or not next(iter(values)).isdigit():
            return Refusal(f"bad Content-Length {b','.join(lengths)[:80]!r}")
        # 6. A valid Content-Length is the body's length.
        return Framing(Kind.LENGTH, int(next(iter(values))), merged=len(lengths) > 1)
    # 7. (a request without either has no body)
    # 8. Otherwise the body runs to the connection's end.
    return Framing(Kind.CLOSE)


# the body's events

@dataclass(slots=True)
class Data:
    data: bytes  # body bytes, framing removed
    #: where this data ends in the bytes fed to the reader, framing included
    #: (so the bytes received can be cut where reading stopped)
    end: int = field(default=0, compare=False)


@dataclass(slots=True)
class EndOfMessage:
    extra: int = 0  # bytes fed after the body's end (something is off: the connection is not reused)


@dataclass(slots=True)
class Malformed:
    reason: str


@dataclass(slots=True)
class Incomplete:
    """The connection ended before the body did."""


Event = Data | EndOfMessage | Malformed | Incomplete


class LengthReader:
    """A body of ``length`` bytes (0 for none)."""

    def __init__(self, length: int) -> None:
        self.left = length
        self.consumed = 0

    def feed(self, data: bytes) -> list[Event]:
        size = len(data)
        take = min(size, self.left)
        events: list[Event] = []
        if take:
            self.left -= take
            events.append(Data(data if take == size else data[:take], self.consumed + take))
        self.consumed += take
        if not self.left:
            events.append(EndOfMessage(size - take))
        return events

    def eof(self) -> list[Event]:
        return [Incomplete()] if self.left else [EndOfMessage()]


class CloseReader:
    """A body that ends with the connection."""

    def __init__(self) -> None:
        self.consumed = 0

    def feed(self, data: bytes) -> list[Event]:
        self.consumed += len(data)
        return [Data(data, self.consumed)] if data else []

    def eof(self) -> list[Event]:
        return [EndOfMessage()]


class Chunk(Enum):
    SIZE = "size"  # a chunk size line
    DATA = "data"  # a chunk's data
    DATA_END = "data end"  # the line end after a chunk's data
    TRAILERS = "trailers"  # trailer lines, up to an empty line
    DONE = "done"


_SIZE, _DATA, _DATA_END, _TRAILERS, _DONE = Chunk  # the states, looked up once


class ChunkedReader:
    """A ``Transfer-Encoding: chunked`` body. Chunk data is passed on whole
    or sliced once; only an unfinished line waits for the next read."""

    def __init__(self) -> None:
        self.state = _SIZE
        self.left = 0  # _DATA: bytes of the chunk still to come
        self.line = b""  # the start of a line not ended yet
        self.consumed = 0  # bytes fed and read, the unfinished line aside

    def feed(self, data: bytes) -> list[Event]:
        if self.line:
            data = self.line + data
            self.line = b""
        events: list[Event] = []
        base = self.consumed
        pos = 0
        size = len(data)
        while self.state is not _DONE:
            if self.state is _DATA:
                take = min(size - pos, self.left)
                if not take:
                    break
                events.append(Data(data if take == size else data[pos:pos + take], base + pos + take))
                pos += take
                self.left -= take
                if not self.left:
                    self.state = _DATA_END
                continue
            end = data.find(b"\n", pos)
            if end == -1:
                if size - pos > CHUNK_LINE_MAX:
                    events.append(Malformed("chunk size line too long"))
                    return events
                break
            line = data[pos:end - 1 if end > pos and data[end - 1] == 13 else end]
            pos = end + 1
            problem = self._line(line)
            if problem:
                events.append(Malformed(problem))
                return events
            if self.state is _DONE:
                events.append(EndOfMessage(size - pos))
        self.consumed = base + pos
        if pos < size and self.state is not _DONE:
            self.line = data[pos:]
        return events

    def _line(self, line: bytes) -> str:
        """Read one line in the current state; the problem with it, if any."""
        if self.state is _SIZE:
            size_field = line.split(b";", 1)[0]
            if _CHUNK_SIZE.fullmatch(size_field) is None:
                return f"bad chunk size {size_field[:20]!r}"
            self.left = int(size_field, 16)
            self.state = _DATA if self.left else _TRAILERS
        elif self.state is _DATA_END:
            if line:
                return "malformed chunked body"
            self.state = _SIZE
        elif not line:  # _TRAILERS: each line skipped, up to an empty one
            self.state = _DONE
        return ""

    def eof(self) -> list[Event]:
        return [EndOfMessage()] if self.state is _DONE else [Incomplete()]


Reader = LengthReader | ChunkedReader | CloseReader


def reader_for(frame: Framing) -> Reader:
    if frame.kind is Kind.CHUNKED:
        return ChunkedReader()
    if frame.kind is Kind.CLOSE:
        return CloseReader()
    return LengthReader(frame.length)  # Kind.NONE: length 0
