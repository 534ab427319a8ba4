"""Content decoding with a cap on the decoded bytes.

Each decoder turns compressed input into at most ``room`` bytes per call, so
a small body that expands to gigabytes (a decompression bomb) costs no more
memory than the cap: the exchange stops reading once the cap is reached.
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


class Decoder(Protocol):
    def feed(self, data: bytes, room: int) -> bytes: ...


class _Zlib:
    def __init__(self, gzip: bool) -> None:
        self.gzip = gzip
        # 32 + 15: a gzip or zlib header, told apart by the first bytes
        self.inflate = zlib.decompressobj(47 if gzip else 15)
        self.started = False

    def feed(self, data: bytes, room: int) -> bytes:
        if self.inflate.eof:
            return b""
        try:
            out = self.inflate.decompress(data, room)
        except zlib.error:
            if self.gzip or self.started:
                raise
            # "deflate" sent raw, without the zlib header (old IIS)
            self.inflate = zlib.decompressobj(-15)
            out = self.inflate.decompress(data, room)
        self.started = True
        return out


class _Brotli:
    def __init__(self) -> None:
        self.inflate = brotli.Decompressor()

    def feed(self, data: bytes, room: int) -> bytes:
        if self.inflate.is_finished():
            return b""
        return self.inflate.process(data, output_buffer_limit=room)[:room]


class _Zstd:
    def __init__(self) -> None:
        self.inflate = zstd.ZstdDecompressor()

    def feed(self, data: bytes, room: int) -> bytes:
        if self.inflate.eof:
            return b""
        return self.inflate.decompress(data, max_length=room)


def accepted() -> bytes:
    """The ``Accept-Encoding`` value for the codings decoded here."""
    names = [b"gzip", b"deflate"]
    if brotli is not None:
        names.append(b"br")
    if zstd is not None:
        names.append(b"zstd")
    return b", ".join(names)


def decoder(coding: bytes) -> Decoder | None:
    """A decoder for one ``Content-Encoding`` value, or None if unknown."""
    coding = coding.strip().lower()
    if coding in (b"gzip", b"x-gzip"):
        return _Zlib(gzip=True)
    if coding == b"deflate":
        return _Zlib(gzip=False)
    if coding == b"br" and brotli is not None:
        return _Brotli()
    if coding == b"zstd" and zstd is not None:
        return _Zstd()
    return None
