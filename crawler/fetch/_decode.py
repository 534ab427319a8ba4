"""Content decoding with a cap on the decoded bytes.

Each decoder turns compressed input into at most ``room`` bytes per call, so
a small body that expands to gigabytes (a decompression bomb) costs no more
memory than the cap: the exchange stops reading once the cap is reached.

A decoder keeps whatever input it could not turn into output yet: a call
that returns fewer than ``room`` bytes has used all its input, one that
returns ``room`` bytes may give more when called again with ``b""``. That is
what lets :class:`_Stack` pull stacked codings (``gzip, br``) through layers
of bounded size, the last one bounded by the caller's ``room``.
"""

from __future__ import annotations

import sys
import zlib
from typing import Protocol

try:
    import brotli
except ImportError:  # pragma: no cover - Scrapy depends on it
    brotli = None

if sys.version_info >= (3, 14):  # pragma: no cover
    from compression import zstd
else:
    try:
        from backports import zstd
    except ImportError:  # pragma: no cover
        zstd = None

MAX_LAYERS = 4  # more codings than this on one body: refused
_STEP = 1 << 16  # bytes asked of an inner layer per pull


class Decoder(Protocol):
    def feed(self, data: bytes, room: int) -> bytes: ...


class TooManyCodings(ValueError):
    pass


class _Gzip:
    """gzip members one after the other, as ``gzip.GzipFile`` reads them.

    The members' CRC and length are not checked: Scrapy keeps the data of a
    member whose check fails, and so does this. Bytes after a member that do
    not start another one (zero padding, garbage) are ignored, as Scrapy does.
    """

    def __init__(self) -> None:
        self.inflate: zlib._Decompress | None = None  # the current member's deflate stream
        self.pending = b""  # bytes between members: trailer, next header
        self.skip = 0  # trailer bytes still to drop
        self.members = 0
        self.over = False  # garbage after a member: the rest is ignored

    def feed(self, data: bytes, room: int) -> bytes:
        out = b""
        while True:
            inflate = self.inflate
            if inflate is None:
                data = self._start(data)
                inflate = self.inflate
                if inflate is None:
                    return out
            elif inflate.unconsumed_tail:
                data = inflate.unconsumed_tail + data
            chunk = inflate.decompress(data, room - len(out))
            out = out + chunk if out else chunk
            if not inflate.eof:
                return out
            self.inflate = None  # the member's end: its trailer, maybe another member
            self.pending, self.skip = inflate.unused_data, 8
            if len(out) >= room:
                return out
            data = b""

    def _start(self, data: bytes) -> bytes:
        """Past the trailer and the next member's header: its deflate data."""
        if self.over:
            return b""
        buf = self.pending + data if self.pending else data
        if self.skip:
            dropped = min(self.skip, len(buf))
            buf = buf[dropped:]
            self.skip -= dropped
        if self.members:
            buf = buf.lstrip(b"\x00")  # padding, as gzip.GzipFile allows
        self.pending = b""
        if not buf:
            return b""
        size = _gzip_header(buf)
        if size < 0:
            if not self.members:
                raise zlib.error("not gzip data")
            self.over = True
            return b""
        if size == 0:
            self.pending = buf
            return b""
        self.members += 1
        self.inflate = zlib.decompressobj(-15)
        return buf[size:]


def _gzip_header(buf: bytes) -> int:
    """The size of the gzip member header ``buf`` starts with; 0: incomplete; -1: not gzip."""
    magic = b"\x1f\x8b\x08"
    if buf[:3] != magic[:len(buf)]:
        return -1
    if len(buf) < 10:
        return 0
    flags = buf[3]
    pos = 10
    if flags & 4:  # FEXTRA
        if len(buf) < pos + 2:
            return 0
        pos += 2 + int.from_bytes(buf[pos:pos + 2], "little")
    for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & flag:
            end = buf.find(b"\x00", pos)
            if end == -1:
                return 0
            pos = end + 1
    if flags & 2:  # FHCRC
        pos += 2
    return pos if pos <= len(buf) else 0


class _Deflate:
    def __init__(self) -> None:
        self.inflate = zlib.decompressobj(15)
        self.started = False

    def feed(self, data: bytes, room: int) -> bytes:
        inflate = self.inflate
        if inflate.eof:
            return b""
        tail = inflate.unconsumed_tail
        if tail:
            data = tail + data
        try:
            out = inflate.decompress(data, room)
        except zlib.error:
            if self.started:
                raise
            # "deflate" sent raw, without the zlib header (old IIS)
            self.inflate = zlib.decompressobj(-15)
            out = self.inflate.decompress(data, room)
        self.started = True
        return out


class _Brotli:
    def __init__(self) -> None:
        self.inflate = brotli.Decompressor()
        self.extra = b""  # output past the room asked (brotli's limit is a hint)
        self.held = b""  # input given while the decompressor could take none

    def feed(self, data: bytes, room: int) -> bytes:
        inflate = self.inflate
        if self.extra or self.held or not inflate.can_accept_more_data():
            return self._slow(data, room)
        if inflate.is_finished():
            return b""
        out = inflate.process(data, output_buffer_limit=room)
        if len(out) > room:
            self.extra = out[room:]
            out = out[:room]
        return out

    def _slow(self, data: bytes, room: int) -> bytes:
        inflate = self.inflate
        out, self.extra = self.extra[:room], self.extra[room:]
        self.held += data
        while len(out) < room and not inflate.is_finished():
            take = b""
            if inflate.can_accept_more_data():
                take, self.held = self.held, b""
            chunk = inflate.process(take, output_buffer_limit=room - len(out))
            if not chunk and not take:
                break
            out += chunk
        if len(out) > room:
            self.extra = out[room:] + self.extra
            out = out[:room]
        return out


class _Zstd:
    """zstd frames one after the other, as ``zstd.ZstdFile`` reads them."""

    def __init__(self) -> None:
        self.inflate = zstd.ZstdDecompressor()

    def feed(self, data: bytes, room: int) -> bytes:
        inflate = self.inflate
        if inflate.eof:
            data = inflate.unused_data + data
            if not data:
                return b""
            inflate = self.inflate = zstd.ZstdDecompressor()
        out = inflate.decompress(data, max_length=room)
        while inflate.eof and len(out) < room and inflate.unused_data:
            rest = inflate.unused_data
            inflate = self.inflate = zstd.ZstdDecompressor()
            out += inflate.decompress(rest, max_length=room - len(out))
        return out


class _Stack:
    """Stacked codings; ``layers`` from the outermost (the last applied)."""

    def __init__(self, layers: list[Decoder]) -> None:
        self.layers = layers

    def feed(self, data: bytes, room: int) -> bytes:
        return self._pull(len(self.layers) - 1, data, room)

    def _pull(self, i: int, data: bytes, room: int) -> bytes:
        layer = self.layers[i]
        if not i:
            return layer.feed(data, room)
        out: list[bytes] = []
        got = 0
        while got < room:
            piece = self._pull(i - 1, data, _STEP)
            data = b""
            chunk = layer.feed(piece, room - got)
            out.append(chunk)
            got += len(chunk)
            if not piece:
                break
        return b"".join(out)


_CODINGS = {b"gzip": _Gzip, b"x-gzip": _Gzip, b"deflate": _Deflate}
if brotli is not None:
    _CODINGS[b"br"] = _Brotli
if zstd is not None:
    _CODINGS[b"zstd"] = _Zstd


def accepted() -> bytes:
    """The ``Accept-Encoding`` value for the codings decoded here."""
    return b", ".join(name for name in _CODINGS if name != b"x-gzip")


def decoder(values: list[bytes]) -> tuple[Decoder | None, list[bytes]]:
    """A decoder for a body sent with these ``Content-Encoding`` values (one
    per header line, each maybe a list), and the codings it leaves.

    As Scrapy's ``HttpCompressionMiddleware``: codings are undone from the
    last applied, up to the first one not known here; that one and those
    before it are left, in their order (the body keeps them). ``identity``
    is no coding. Over ``MAX_LAYERS`` codings raise :class:`TooManyCodings`.
    """
    codings = [c for c in (part.strip().lower() for value in values for part in value.split(b","))
               if c and c != b"identity"]
    layers: list[Decoder] = []
    while codings and codings[-1] in _CODINGS:
        layers.append(_CODINGS[codings.pop()]())
    if len(layers) > MAX_LAYERS:
        raise TooManyCodings(f"{len(layers)} content codings, over {MAX_LAYERS}")
    if not layers:
        return None, codings
    return (layers[0] if len(layers) == 1 else _Stack(layers)), codings
