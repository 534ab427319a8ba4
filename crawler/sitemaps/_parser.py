"""The push parser: raw body bytes in, :class:`Entry` lists out, no I/O.

Three layers, each a step of an explicit state machine (:class:`State`):

1. transport: the first two raw bytes say gzip or not (``_sniff.detect_transport``);
2. format: the first content bytes say XML, text, empty or nested gzip
   (``_sniff.detect_format``), XML's root element then says which XML kind;
3. reading: one reader per format (``_xml.XmlReader``, ``_text.TextReader``).

Every call does a bounded amount of work (``work_bytes`` of content, a slice of
raw input at a time); what it could not get to stays queued and
:attr:`SitemapParser.pending` says so.
"""

from __future__ import annotations

import enum

from crawler.sitemaps._entry import Entry, EntryKind, clean_url
from crawler.sitemaps._sniff import detect_format, detect_transport
from crawler.sitemaps._text import TextReader
from crawler.sitemaps._transport import Gunzip, Identity, RawInput, TransportError
from crawler.sitemaps._xml import XmlReader, XmlStop

MAX_URLS = 50_000  # sitemaps.org: per file
MAX_BYTES = 52_428_800  # sitemaps.org: 50 MiB uncompressed, per file
MAX_URL_LENGTH = 2_000  # as CRAWLER_MAX_URL_LENGTH
WORK_BYTES = 65_536  # content bytes parsed per call, at most
MAX_TOKEN_BYTES = 262_144  # XML input expat may hold without an event
_SLICE = 16_384  # content bytes handed to a reader at once


class State(enum.Enum):
    SNIFF_TRANSPORT = "sniff-transport"  # fewer than two raw bytes seen
    SNIFF_FORMAT = "sniff-format"  # transport known, content format not yet
    READ = "read"  # a reader has the content
    DONE = "done"  # finished: complete, cut at a limit, or not a sitemap
    FAILED = "failed"  # stopped by an error; entries before it were kept


class SitemapParser:
    """Parse one sitemap body, fed in chunks as downloaded (gzip or not).

    Contract:

    * :meth:`feed` takes the next raw chunk (``b""`` for none) and returns the
      entries found since the last call. It parses at most ``work_bytes`` of
      content per call and keeps the rest queued; while :attr:`pending` is true,
      call ``feed(b"")`` again (on a later event-loop turn) to go on.
    * :meth:`close` says the body has ended; it too does one bounded step and
      returns new entries. Call it again until :attr:`done`.
    * Input after the parser is done (a limit hit, an error, not a sitemap) is
      dropped at once, so it costs neither memory nor time.
    * Limits: at most ``max_urls`` entries (more are counted in
      :attr:`dropped_urls`), ``max_bytes`` of content (decompressed) and
      ``max_compressed_bytes`` of gzip body; past a limit the rest is dropped,
      counted in :attr:`dropped_bytes` (raw bytes) and :attr:`truncated` is set.
    * Errors (:attr:`error`): ``'gzip'`` (corrupt), ``'gzip-truncated'`` (cut
      short), ``'malformed'`` (XML), ``'entities'`` (an entity declaration or
      reference: never expanded), ``'token-too-large'``, ``'too-deep'``.
      Entries returned before an error stand.
    * URLs must be absolute http(s), at most ``max_url_length`` characters,
      without whitespace inside; others are skipped and counted in
      :attr:`invalid_urls`.
    """

    def __init__(
        self,
        max_urls: int = MAX_URLS,
        max_bytes: int = MAX_BYTES,
        max_compressed_bytes: int | None = None,
        max_url_length: int = MAX_URL_LENGTH,
        work_bytes: int = WORK_BYTES,
        max_token_bytes: int = MAX_TOKEN_BYTES,
    ) -> None:
        if min(max_urls, max_bytes, max_url_length, work_bytes, max_token_bytes) < 0 or work_bytes == 0:
            raise ValueError("limits must be positive")
        self.max_urls = max_urls
        self.max_bytes = max_bytes
        self.max_compressed_bytes = max_bytes if max_compressed_bytes is None else max_compressed_bytes
        self.max_url_length = max_url_length
        self._work_bytes = work_bytes
        self._max_token_bytes = max_token_bytes

        self.state = State.SNIFF_TRANSPORT
        self.kind: str | None = None
        self.transport: str | None = None
        self.truncated = False
        self.error: str | None = None
        self.error_detail: str | None = None
        self.urls = 0
        self.dropped_urls = 0
        self.invalid_urls = 0
        self.dropped_bytes = 0
        self.content_bytes = 0

        self._raw = RawInput()
        self._raw_head = b""
        self._accepted = 0
        self._eof = False
        self._cut = False  # stopped at a byte limit: later input counts as dropped
        self._input_cut = False  # raw input went past its cap: the body read is not whole
        self._source: Identity | Gunzip | None = None
        self._head = bytearray()
        self._reader: XmlReader | TextReader | None = None
        self._out: list[Entry] = []

    # -- public --------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.state in (State.DONE, State.FAILED)

    @property
    def pending(self) -> bool:
        """True while queued input (or, after :meth:`close`, the ending) awaits a call."""
        if self.done:
            return False
        if self.state is State.SNIFF_TRANSPORT:  # one byte so far: wait for the next
            return self._eof
        return self._eof or self._raw.size > 0 or (self._source is not None and self._source.has_more())

    @property
    def pending_bytes(self) -> int:
        """Raw bytes queued, not parsed yet: a caller may wait for it to fall before feeding more."""
        return self._raw.size

    def feed(self, data: bytes | bytearray | memoryview = b"") -> list[Entry]:
        if data:
            if self._eof:
                raise ValueError("feed() after close()")
            self._accept(data if isinstance(data, bytes) else bytes(data))
        self._run()
        return self._take()

    def close(self) -> list[Entry]:
        self._eof = True
        self._run()
        return self._take()

    # -- input ---------------------------------------------------------------

    def _accept(self, data: bytes) -> None:
        if self.done:
            if self._cut:
                self.dropped_bytes += len(data)
            return
        if self.transport is None:
            head = (self._raw_head + data[:2])[:2]
            transport = detect_transport(head, final=False)
            if transport is None:
                self._raw_head = head
                self._raw.push(data)
                self._accepted += len(data)
                return
            self._set_transport(transport)
        cap = self.max_compressed_bytes if self.transport == "gzip" else self.max_bytes
        room = cap - self._accepted
        if len(data) > room:
            self.dropped_bytes += len(data) - max(room, 0)
            self.truncated = True
            self._input_cut = True
            data = data[: max(room, 0)]
        self._accepted += len(data)
        self._raw.push(data)

    def _set_transport(self, transport: str) -> None:
        self.transport = transport
        self._source = Gunzip(self._raw) if transport == "gzip" else Identity(self._raw)
        self.state = State.SNIFF_FORMAT

    # -- the state machine ---------------------------------------------------

    def _run(self) -> None:
        budget = self._work_bytes
        try:
            while budget > 0 and not self.done:
                if self.state is State.SNIFF_TRANSPORT:
                    if not self._eof:
                        return  # fewer than two bytes so far: wait
                    self._set_transport(detect_transport(self._raw_head, final=True) or "identity")
                source = self._source
                assert source is not None
                room = self.max_bytes - self.content_bytes
                if room <= 0:
                    probe, _ = source.read(1)
                    if probe:
                        self._stop_at_limit()
                        return
                    if self._eof and not source.has_more():
                        self._finish()
                    return
                data, used = source.read(min(_SLICE, budget, room))
                if not data and not used:
                    if self._eof and not source.has_more():
                        self._finish()
                    return
                budget -= max(len(data), used)
                if data:
                    self.content_bytes += len(data)
                    self._content(data)
        except TransportError as exc:
            self._fail(exc.code, exc.detail)
        except XmlStop as exc:
            if exc.code is None:
                self._end(State.DONE)
            else:
                self._fail(exc.code, exc.detail)

    def _content(self, data: bytes) -> None:
        if self.state is State.SNIFF_FORMAT:
            self._head += data
            fmt, skip = detect_format(bytes(self._head), final=False)
            del self._head[:skip]
            if fmt is None:
                return
            data = bytes(self._head)
            self._head.clear()
            self._start_reader(fmt)
            if self.done:
                return
        assert self._reader is not None
        self._reader.feed(data)

    def _start_reader(self, fmt: str) -> None:
        if fmt == "xml":
            self._reader = XmlReader(self._emit_xml, self._set_kind, self.max_url_length, self._max_token_bytes)
        elif fmt == "text":
            self.kind = "text"
            self._reader = TextReader(self._emit_text, self._count_invalid, self.max_url_length)
        else:  # 'empty', or a gzip inside the gzip: not read
            self.kind = "unknown"
            self._end(State.DONE)
            return
        self.state = State.READ

    def _finish(self) -> None:
        """The body has ended and every byte kept of it was read."""
        assert self._source is not None
        if self._input_cut:  # what was kept ends mid-body: neither malformed nor a cut gzip
            self._stop_at_limit()
            return
        try:
            self._source.finish()
        except TransportError:
            if isinstance(self._reader, TextReader):
                self._reader.close(complete=False)
            raise
        if self.state is State.SNIFF_FORMAT:
            head = bytes(self._head)
            self._head.clear()
            fmt, skip = detect_format(head, final=True)
            self._start_reader(fmt or "empty")
            if self.done:
                return
            assert self._reader is not None
            self._reader.feed(head[skip:])
        if isinstance(self._reader, TextReader):
            self._reader.close(complete=True)
        elif self._reader is not None:
            self._reader.close()
        self._end(State.DONE)

    def _stop_at_limit(self) -> None:
        """``max_bytes`` of content read and there is more: drop the rest."""
        self.truncated = True
        self._cut = True
        if isinstance(self._reader, TextReader):
            self._reader.close(complete=False)  # the last line may be a cut URL
        self._end(State.DONE)

    def _fail(self, code: str, detail: str) -> None:
        self.error = code
        self.error_detail = detail
        self._end(State.FAILED)

    def _end(self, state: State) -> None:
        self.state = state
        dropped = self._raw.clear()
        if self._cut:
            self.dropped_bytes += dropped
        self._source = None
        self._reader = None
        self._head = bytearray()
        if self.kind is None:
            self.kind = "unknown"

    # -- entries -------------------------------------------------------------

    def _set_kind(self, kind: str) -> None:
        self.kind = kind

    def _count_invalid(self) -> None:
        self.invalid_urls += 1

    def _emit_text(self, text: str) -> None:
        self._emit_xml(text, "page", None, None, None)

    def _emit_xml(
        self, text: str, kind: str, lastmod: str | None, changefreq: str | None, priority: float | None
    ) -> None:
        url = clean_url(text, self.max_url_length)
        if url is None:
            self.invalid_urls += 1
            return
        if self.urls >= self.max_urls:
            self.dropped_urls += 1
            self.truncated = True
            return
        self.urls += 1
        entry_kind: EntryKind = "sitemap" if kind == "sitemap" else "page"
        self._out.append(Entry(url, entry_kind, lastmod, changefreq, priority))

    def _take(self) -> list[Entry]:
        out = self._out
        self._out = []
        return out
