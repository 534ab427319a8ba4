"""Raw bytes in, content bytes out, a bounded slice at a time.

:class:`RawInput` queues the caller's chunks without copying them;
:class:`Identity` and :class:`Gunzip` hand out at most ``n`` content bytes per
:meth:`read`, consuming at most :data:`IN_SLICE` raw bytes, so neither a large
chunk nor a compression bomb costs more than one slice of work or memory.
"""

from __future__ import annotations

import zlib
from collections import deque

IN_SLICE = 65_536  # raw bytes given to zlib at once: bounds the copy of its unconsumed tail


class TransportError(Exception):
    """The gzip stream is corrupt (``code`` 'gzip') or cut short ('gzip-truncated')."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class RawInput:
    """A FIFO of byte chunks, read through views of the head chunk."""

    __slots__ = ("_chunks", "_pos", "size")

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._pos = 0
        self.size = 0

    def push(self, data: bytes) -> None:
        if data:
            self._chunks.append(data)
            self.size += len(data)

    def peek(self, n: int) -> memoryview:
        """Up to ``n`` bytes from the head chunk (empty when the queue is)."""
        if not self._chunks:
            return memoryview(b"")
        return memoryview(self._chunks[0])[self._pos : self._pos + n]

    def advance(self, n: int) -> None:
        self.size -= n
        self._pos += n
        while self._chunks and self._pos >= len(self._chunks[0]):
            self._pos -= len(self._chunks.popleft())

    def clear(self) -> int:
        dropped = self.size
        self._chunks.clear()
        self._pos = self.size = 0
        return dropped


class Identity:
    """The body is the content."""

    __slots__ = ("_raw",)

    def __init__(self, raw: RawInput) -> None:
        self._raw = raw

    def read(self, n: int) -> tuple[bytes, int]:
        """``(content, raw bytes consumed)``; empty content when starved."""
        view = self._raw.peek(n)
        data = bytes(view)
        self._raw.advance(len(data))
        return data, len(data)

    def has_more(self) -> bool:
        return self._raw.size > 0

    def finish(self) -> None:
        """End of input: nothing can be missing from an identity body."""


class Gunzip:
    """gzip members, one after the other, decompressed ``n`` bytes at a time.

    Bytes after the last member that do not start another one are ignored.
    """

    __slots__ = ("_raw", "_z", "_owed", "_ended", "_error")

    def __init__(self, raw: RawInput) -> None:
        self._raw = raw
        self._z: zlib._Decompress | None = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._owed = False  # zlib filled its output last time: it may hold more without input
        self._ended = False  # past the last member (or trailing garbage): ignore the rest
        self._error: TransportError | None = None  # raised by the read after the salvaged output

    def read(self, n: int) -> tuple[bytes, int]:
        if self._error is not None:
            raise self._error
        parts: list[bytes] = []
        produced = consumed = 0
        while produced < n and consumed < IN_SLICE:
            if self._ended:
                consumed += self._raw.clear()
                break
            z = self._z
            if z is None or z.eof:
                self._owed = False
                head = self._raw.peek(2)
                if not head:
                    break
                if head[0] != 0x1F:
                    self._ended = True
                    continue
                z = self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
            src = self._raw.peek(min(IN_SLICE - consumed, IN_SLICE))
            if not src and not self._owed:
                break
            want = n - produced
            before = z.copy()
            try:
                out = z.decompress(src, want)
            except zlib.error as exc:
                # keep what the stream held before the damage; fail on the next read
                self._error = TransportError("gzip", str(exc))
                salvaged = _salvage(before, src, want)
                if salvaged:
                    parts.append(salvaged)
                    produced += len(salvaged)
                break
            used = len(src) - len(z.unconsumed_tail) - len(z.unused_data)
            self._raw.advance(used)
            consumed += used
            self._owed = len(out) == want and not z.eof
            if out:
                parts.append(out)
                produced += len(out)
            elif not used and not z.eof:
                break  # zlib wants more input than there is
        return b"".join(parts), consumed

    def has_more(self) -> bool:
        return self._raw.size > 0 or self._owed or self._error is not None

    def finish(self) -> None:
        """End of input: a member left open means the body was cut short."""
        if self._error is not None:
            raise self._error
        if self._z is not None and not self._z.eof and not self._ended:
            raise TransportError("gzip-truncated", "the gzip stream ends before its end marker")


def _salvage(z: zlib._Decompress, src: memoryview, want: int) -> bytes:
    """The output of ``src`` up to the damage, decompressed again from ``z`` (the
    stream's state before ``src``): by 256-byte pieces, then the failing piece a
    byte at a time, so that nothing before the damage is lost."""
    parts: list[bytes] = []
    produced = pos = 0
    step = 256
    while pos < len(src) and produced < want:
        piece = src[pos : pos + step]
        before = z.copy() if step > 1 else z
        try:
            out = z.decompress(piece, want - produced)
        except zlib.error:
            if step == 1:
                break
            z, step = before, 1
            continue
        parts.append(out)
        produced += len(out)
        pos += len(piece) - len(z.unconsumed_tail)
        if z.eof:
            break
    return b"".join(parts)
