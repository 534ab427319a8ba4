"""The response to one request, from the bytes received to the body kept.

An :class:`Exchange` is fed what the connection receives: it finds the head
(at most ``max_head`` bytes, interim 1xx responses skipped), asks
:func:`~crawler.fetch._http11.framing` how the body is delimited, reads it
with that framing's reader and keeps it decoded, to ``limit`` bytes. It does
no I/O: :class:`~crawler.fetch._connection.Connection` feeds it, and paces
the decoding of a body that inflates far (:attr:`Exchange.waiting`).

Its :class:`State` says where it is, and whether the connection can carry
another exchange: only one that reached ``DONE`` with a framing that ends
the body before the connection's end, from a server that keeps connections
(:attr:`Exchange.keep_alive`).

Two callbacks let the consumer stop: ``on_head`` once the head is in,
``on_data`` with each piece of the decoded body (at most :data:`PIECE`
bytes, as Scrapy's handler passes its reads on); either returns False to
stop there (state ``CUT``: the body kept is what was passed on).

With ``raw=True`` the exchange also keeps the response as received, for WARC
records (:mod:`crawler.fetch.received`): the final status line and header
lines with the empty line ending them (:attr:`Exchange.raw_head`), and the body
bytes before any decoding, chunk framing included, up to where reading stopped
(:meth:`Exchange.raw_body`). Where nothing is decoded or de-chunked, the raw
body is the body itself: no second copy.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from scrapy.exceptions import DownloadCancelledError, DownloadFailedError

from crawler.fetch._decode import decoder
from crawler.fetch._http11 import (
    Data,
    EndOfMessage,
    Framing,
    Head,
    Incomplete,
    Kind,
    Malformed,
    Refusal,
    framing,
    parse_head,
    reader_for,
    split_head,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from crawler.fetch._decode import Decoder
    from crawler.fetch._http11 import Event, HeaderList, Reader

#: decoded bytes made in one step: a body that inflates far (a decompression
#: bomb, up to a 50 MiB cap) is decoded in steps of this size, the connection
#: letting the event loop run between them with reading paused
DECODE_STEP = 1 << 20
#: the most body bytes passed to ``on_data`` at once: Scrapy's handler passes
#: on each read of Twisted's transport, at most 2**16 bytes for TCP
#: (``twisted.internet.abstract.FileDescriptor.bufferSize``) and 2**15 for
#: TLS (``twisted.protocols.tls.TLSMemoryBIOProtocol._flushReceiveBIO``,
#: Twisted 26.10); the smaller holds for both schemes
PIECE = 1 << 15


class HeadTooLarge(DownloadFailedError):
    """The response's status line and headers exceed the allowed size."""


class TooLarge(DownloadCancelledError):
    """The response is over ``DOWNLOAD_MAXSIZE`` (as sent, or once decoded)."""


class BodyDecodeError(DownloadFailedError):
    """The body cannot be decoded from its ``Content-Encoding``."""


class State(Enum):
    HEAD = "head"  # reading the status line and headers
    BODY = "body"  # reading the body
    DRAINING = "draining"  # the body is in; decoded output still waits to be pulled
    DONE = "done"  # the body ended where its framing says
    CUT = "cut"  # reading stopped before the end: the cap, or the consumer
    LOST = "lost"  # the connection ended before the body did (data loss)
    FAILED = "failed"  # :attr:`Exchange.error` says why


_ENDED = (State.DONE, State.CUT, State.LOST, State.FAILED)
_HEAD, _BODY = State.HEAD, State.BODY  # looked up once: read for every network read


class Exchange:
    """The response to one request, parsed as it arrives."""

    def __init__(self, on_head: Callable[[Exchange], bool], limit: int, maxsize: int, max_head: int,
                 head_only: bool, raw: bool = False, on_data: Callable[[bytes], bool] | None = None) -> None:
        self.on_head = on_head  # False: stop at the headers
        self.on_data = on_data  # each piece of the body kept; False: stop there
        self.limit = limit  # decoded bytes kept; one more read marks a cut (the body ends at the cap)
        self.maxsize = maxsize  # bytes received, or decoded, before the download fails (0: none)
        # decoded bytes kept; one more read is a cut (the page cap) or, under maxsize, a failure
        self.cap = min(limit, maxsize) if maxsize else limit
        self.max_head = max_head
        self.head_only = head_only
        self.state = State.HEAD
        self.error: Exception | None = None  # State.FAILED: why
        self.buffer = bytearray()  # State.HEAD: what came so far
        self.status = 0
        self.version = b""  # as the server said: b"HTTP/1.1", b"HTTP/1.0"
        self.headers: HeaderList = []
        self.bad_header_lines = 0  # skipped: no colon
        self.persistent = False  # the server keeps the connection (HTTP/1.1, no Connection: close)
        self.framing = Framing(Kind.NONE)
        self.reader: Reader | None = None
        self.extra = False  # bytes came after the body's end: something is off
        self.decoder: Decoder | None = None
        self.codings_left: list[bytes] = []  # Content-Encoding not undone here, in the header's order
        self.waiting = False  # the decoder may hold more output: pull() it
        self._ending = State.DONE  # State.DRAINING: the state once the output is pulled
        self.parts: list[bytes] = []
        self.kept = 0
        self.received = 0
        self.pending: list[bytes] = []  # kept, not passed to on_data yet
        self.pending_bytes = 0
        self.raw_head = b""  # with raw: the final head as received, its empty line included
        # with raw: body bytes as received, where they differ from the parts kept (decoded or chunked)
        self.raw_parts: list[bytes] | None = [] if raw else None
        self.raw_end = -1  # chunked, cut: where reading stopped in the bytes received

    # what the consumer reads

    @property
    def finished(self) -> bool:
        return self.state in _ENDED

    @property
    def cut(self) -> bool:
        return self.state is State.CUT

    @property
    def dataloss(self) -> bool:
        return self.state is State.LOST

    @property
    def until_close(self) -> bool:
        """The body is framed by the connection's end."""
        return self.framing.kind is Kind.CLOSE

    @property
    def chunked(self) -> bool:
        return self.framing.kind is Kind.CHUNKED

    @property
    def expected(self) -> int | None:
        """The body's length as the head says it, if it does."""
        kind = self.framing.kind
        return self.framing.length if kind is Kind.LENGTH else 0 if kind is Kind.NONE else None

    @property
    def keep_alive(self) -> bool:
        """Whether the connection can carry another exchange."""
        return (self.state is State.DONE and self.persistent and not self.extra
                and self.framing.kind is not Kind.CLOSE)

    def body(self) -> bytes:
        return b"".join(self.parts)

    def raw_body(self, body: bytes) -> bytes:
        """The body as received (``body`` is :meth:`body`'s value): before
        decoding, chunk framing included, cut where reading stopped (a body
        neither decoded nor chunked: at the cap, as the response's is)."""
        if self.raw_parts is None or (self.decoder is None and not self.chunked):
            return body[:self.cap] if len(body) > self.cap else body
        raw = b"".join(self.raw_parts)
        if self.chunked:  # what the reader read: not an unfinished line, nor what came after
            end = self.raw_end if self.raw_end >= 0 else self.reader.consumed if self.reader else 0
            return raw[:end] if end < len(raw) else raw
        return raw

    # what the connection calls

    def feed(self, data: bytes) -> None:
        if self.state is _HEAD:
            self.buffer += data
            if not self._heads():
                return
            data = bytes(self.buffer)
            self.buffer.clear()
        elif self.state is not _BODY:
            if data:
                self.extra = True  # after the body's end: something is off
            return
        assert self.reader is not None
        self._events(self.reader.feed(data), data)

    def pull(self) -> None:
        """Decode one more step of what the decoder holds."""
        if self.waiting and not self.finished:
            self._decode(b"")

    def ended(self, error: Exception | None) -> None:
        """The connection is gone."""
        if self.state is State.HEAD:
            reason = f": {error}" if error else ""
            self.fail(DownloadFailedError(f"connection closed before the response{reason}"))
        elif self.state is State.BODY:
            assert self.reader is not None
            self._events(self.reader.eof(), b"")

    def fail(self, error: Exception) -> None:
        if not self.finished:
            self.state, self.error = State.FAILED, error

    # the head

    def _heads(self) -> bool:
        """Read heads while the buffer holds one; True once the final one is in."""
        buffer = self.buffer
        while self.state is State.HEAD:
            try:
                found = split_head(buffer, self.max_head)
            except ValueError as e:
                self.fail(HeadTooLarge(str(e)))
                return False
            if found is None:
                return False
            end, skip = found
            head = bytes(buffer[:end])
            if self.raw_parts is not None:
                self.raw_head = bytes(buffer[:end + skip])
            del buffer[:end + skip]
            try:
                parsed = parse_head(head)
            except ValueError as e:
                self.fail(DownloadFailedError(str(e)))
                return False
            if not parsed.interim and not self._head(parsed):
                return False
        return True

    def _head(self, parsed: Head) -> bool:
        self.status, self.version, self.headers = parsed.status, parsed.version, parsed.headers
        self.bad_header_lines = parsed.bad_header_lines
        self.persistent = parsed.persistent
        frame = framing(parsed.status, self.head_only, parsed.fields)
        if isinstance(frame, Refusal):
            self.fail(DownloadFailedError(frame.reason))
            return False
        self.framing = frame
        if frame.merged:  # one value, as Scrapy's handler gives it
            self.headers = [h for h in self.headers if h[0].lower() != b"content-length"]
            self.headers.append((b"Content-Length", str(frame.length).encode()))
        codings = parsed.codings
        if codings and frame.kind is not Kind.NONE:
            try:
                self.decoder, self.codings_left = decoder(codings)
            except ValueError as e:
                self.fail(DownloadFailedError(f"cannot decode the body: {e}"))
                return False
        self.state = State.BODY
        self.reader = reader_for(frame)
        if not self.on_head(self):
            if not self.finished:  # on_head may have failed it
                self.state = State.CUT
            return False
        return True

    # the body


    def _events(self, events: list[Event], data: bytes) -> None:
        chunked = self.framing.kind is Kind.CHUNKED
        if chunked and self.raw_parts is not None and data:
            self.raw_parts.append(data)  # as fed, framing included: cut to where reading stopped
        for event in events:
            if type(event) is Data:
                self._keep(event.data)
                if self.state in _ENDED:
                    if chunked and self.state is State.CUT:
                        self.raw_end = event.end
                    return
            elif isinstance(event, EndOfMessage):
                self.extra = event.extra > 0
                self._end(State.DONE)
            elif isinstance(event, Incomplete):
                self._end(State.LOST)
            elif isinstance(event, Malformed):
                self.fail(DownloadFailedError(event.reason))

    def _keep(self, data: bytes) -> None:
        room = self.cap + 1 - self.kept
        if self.decoder is None and len(data) > room:
            data = data[:room]  # past the cap: never counted against DOWNLOAD_MAXSIZE
        self.received += len(data)
        # undecoded, received is kept: over the cap below (the byte marking a cut is no failure)
        if self.decoder is None:
            self._kept(data)
            return
        if self.maxsize and self.received > self.maxsize:
            self.fail(TooLarge(f"response over DOWNLOAD_MAXSIZE ({self.maxsize} bytes)"))
            return
        if self.raw_parts is not None and not self.chunked:  # chunked: kept with their framing
            self.raw_parts.append(data)
        self._decode(data)

    def _decode(self, data: bytes) -> None:
        """Decode ``data`` (b"": what the decoder still holds), at most
        ``DECODE_STEP`` bytes now; :attr:`waiting` says whether more may wait."""
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
        self.waiting = len(out) == step < room  # fewer bytes than asked: the decoder used all it had
        if not self.waiting and self.state is State.DRAINING:
            self._end(self._ending)

    def _kept(self, data: bytes) -> None:
        if data:
            self.parts.append(data)
            self.kept += len(data)
            if self.on_data is not None:
                self.pending.append(data)
                self.pending_bytes += len(data)
        if self.kept > self.cap:
            if self.cap < self.limit:
                decoded = " once decoded" if self.decoder is not None else ""
                self.fail(TooLarge(f"response over DOWNLOAD_MAXSIZE ({self.maxsize} bytes){decoded}"))
                return
            excess = self.kept - self.cap  # the body ends at the cap, its flag says it was cut
            self.parts[-1] = self.parts[-1][:-excess]
            self.kept = self.cap
            if self.pending:
                self.pending[-1] = self.parts[-1]
                self.pending_bytes -= excess
            self._pass_on(final=True)
            if not self.finished:
                self.state = State.CUT
            return
        if self.pending_bytes >= PIECE:
            self._pass_on(final=False)

    def _pass_on(self, final: bool) -> None:
        """Give ``on_data`` the body kept so far in pieces of :data:`PIECE`
        bytes (what is left under that waits, unless ``final``); a False
        answer cuts the body after that piece."""
        if self.on_data is None or not self.pending_bytes:
            self.pending.clear()
            self.pending_bytes = 0
            return
        pending = self.pending[0] if len(self.pending) == 1 else b"".join(self.pending)
        size = len(pending)
        whole = size if final else size - size % PIECE
        passed = 0
        while passed < whole:
            piece = pending[passed:passed + PIECE] if size > PIECE else pending
            passed += len(piece)
            if not self.on_data(piece):
                self._cut_after(self.kept - size + passed)
                return
        rest = pending[passed:] if passed else pending
        self.pending = [rest] if rest else []
        self.pending_bytes = len(rest)

    def _cut_after(self, kept: int) -> None:
        """The body ends after its first ``kept`` bytes: stopped there."""
        self.pending.clear()
        self.pending_bytes = 0
        excess = self.kept - kept
        while excess:
            last = self.parts[-1]
            if len(last) > excess:
                self.parts[-1] = last[:-excess]
                break
            self.parts.pop()
            excess -= len(last)
        self.kept = kept
        if not self.finished:
            self.state = State.CUT

    def _end(self, state: State) -> None:
        """The body ended on the wire (``DONE``) or with the connection
        (``LOST``): finished once the decoder holds nothing more."""
        if self.waiting:
            self.state, self._ending = State.DRAINING, state
            return
        self._pass_on(final=True)
        if not self.finished:
            self.state = state
