"""WARC/1.1 records, gzip-compressed per record, written by a thread.

Each record is one gzip member (ISA-L, ``isal``), so any WARC reader
(warcio, the Internet Archive's tools) reads the files and can seek to a
record. Compression and writing happen on a thread of their own: ISA-L and
the file writes release the GIL, so they run beside the reactor instead of
in its way. The queue between the two is bounded (``max_queued`` pages);
when the disk falls behind, :meth:`WarcWriter.put` blocks the crawl until
there is room, so memory stays flat.

A killed process leaves at most one truncated record at the end of a file;
``close`` (spider closed, SIGTERM, or interpreter exit) writes everything
queued first. A write that finds the disk full (``ENOSPC``, ``EDQUOT``) cuts
the file back to its last whole record and waits for space: the page is
written again every ``retry_seconds`` (by the thread; without one, by
:meth:`WarcWriter.retry`, pages put meanwhile kept in order behind it), and
``on_space`` is told when the disk fills (the error) and when the page went
in (None); :meth:`WarcWriter.abandon` gives up the pages waiting (the crawl
closes while the disk is full). Any other failure (read-only, I/O error, a
file too large) stops the writer: the file is cut back to its last whole
record, pages still queued are dropped. :attr:`WarcWriter.written` tells
which pages are in the files (each :meth:`~WarcWriter.put` returns the
page's number, from 1; pages are written in that order).

A page's response record holds the HTTP response as received when the page
has it (``raw_head``, ``raw_body``: status line, headers and body bytes as
they came off the wire, ``Content-Encoding`` and chunk framing included),
else one rebuilt from the decoded response (a status line, the headers less
``Content-Encoding``, ``Transfer-Encoding`` and ``Content-Length``, a
``Content-Length`` of the decoded body). Every record has a
``WARC-Block-Digest``; request and response records a
``WARC-Payload-Digest`` over the bytes after the HTTP head, as stored (for a
chunked body: with its framing, which is what warcio and FastWARC check);
the request record names its response in ``WARC-Concurrent-To``.

A body that arrived compressed (``Content-Encoding``: its bytes as received
are fewer than the body they decode to) is not compressed a second time: its
record's gzip member holds the WARC and HTTP heads deflated and the body in
stored blocks, 7 times cheaper than ISA-L's level 1 over bytes it cannot
shrink, and no larger (docs/benchmarks.md, "Where the CPU goes").
"""

from __future__ import annotations

import atexit
import base64
import errno
import hashlib
import logging
import os
import queue
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from http import HTTPStatus
from pathlib import Path
from typing import IO

from isal import isal_zlib

from crawler.clock import SYSTEM, Clock

logger = logging.getLogger(__name__)

_HOP_BY_HOP = {b"content-encoding", b"transfer-encoding", b"content-length"}
#: a response body whose bytes as received are under this share of the decoded
#: body arrived compressed: it is stored, not compressed again
_COMPRESSED = 0.9
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no mtime, unknown OS
_STORED_MAX = 65_535  # bytes in one stored deflate block
_IOV_MAX = 1024  # pieces one writev takes (Linux's IOV_MAX)
Headers = Sequence[tuple[bytes, bytes]]
#: a write that fails so waits for space instead of stopping the writer
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the quota) is full."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


@dataclass
class Page:
    """One fetch as it goes into the WARC file: a request and a response record."""

    url: str
    method: str
    request_headers: Headers
    request_body: bytes
    status: int
    response_headers: Headers
    body: bytes
    truncated: bool = False
    date: float = 0.0  # epoch seconds of the fetch
    raw_head: bytes | None = None  # the response's head as received (None: rebuild it)
    raw_body: bytes = b""  # with raw_head: the body as received, before decoding
    dataloss: bool = False  # the connection ended before the body's end
    ip: str = ""  # the server's address


_ids: list[bytes] = []  # random bytes for the next record IDs
os.register_at_fork(after_in_child=_ids.clear)  # a child draws its own


def _record_id() -> str:
    """A random (version 4) UUID URN, from 4 KiB of ``os.urandom`` at a time:
    one system call per 256 records instead of one per record."""
    try:
        random = _ids.pop()
    except IndexError:
        pool = os.urandom(4096)
        _ids.extend(pool[i:i + 16] for i in range(16, 4096, 16))
        random = pool[:16]
    # uuid.UUID(bytes=random, version=4), formatted here in a third of its time
    h = (int.from_bytes(random, "big") & _UUID_KEEP | _UUID_V4).to_bytes(16, "big").hex()
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}>"


_UUID_KEEP = ~(0xF000 << 64 | 0xC000 << 48) & (1 << 128) - 1  # the version's and the variant's bits cleared
_UUID_V4 = 0x4000 << 64 | 0x8000 << 48


def _warc_headers(kind: str, url: str, date: str, content_type: str, length: int,
                  extra: Sequence[tuple[str, str]] = (), record_id: str = "") -> bytes:
    lines = [
        "WARC/1.1",
        f"WARC-Type: {kind}",
        f"WARC-Record-ID: {record_id or _record_id()}",
        f"WARC-Date: {date}",
    ]
    if url:
        lines.append(f"WARC-Target-URI: {url}")
    lines += [f"{name}: {value}" for name, value in extra]
    lines += [f"Content-Type: {content_type}", f"Content-Length: {length}", "", ""]
    return "\r\n".join(lines).encode("utf-8")


def _http_head(first_line: str, headers: Headers) -> bytes:
    out = [first_line.encode("latin-1"), b"\r\n"]
    for name, value in headers:
        out += [name, b": ", value, b"\r\n"]
    out.append(b"\r\n")
    return b"".join(out)


def _sha1(*parts: bytes) -> str:
    if len(parts) == 1 and not parts[0]:
        return _EMPTY_SHA1  # a request's body, nearly always
    digest = hashlib.sha1(parts[0])
    for part in parts[1:]:  # no concatenated copy
        digest.update(part)
    return "sha1:" + _base32(digest.digest())


_B32_PAIRS = [a + b for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"]
_SHIFTS = tuple(range(150, -10, -10))


def _base32(digest: bytes) -> str:
    """``base64.b32encode(digest).decode()`` of a 20-byte digest (32
    characters, no padding), in half the time."""
    n = int.from_bytes(digest, "big")
    return "".join([_B32_PAIRS[(n >> shift) & 1023] for shift in _SHIFTS])


_EMPTY_SHA1 = "sha1:" + base64.b32encode(hashlib.sha1(b"").digest()).decode()


def page_records(page: Page, clock: Clock = SYSTEM) -> list[list[bytes]]:
    """The request and response records of ``page``, each as a list of
    parts; dated ``page.date``, else now on ``clock`` (its wall-clock face)."""
    # "2026-12-04T15:21:05.702256Z": isoformat is half strftime's cost
    date = datetime.fromtimestamp(page.date or clock.time(), timezone.utc).isoformat(
        timespec="microseconds")[:-6] + "Z"
    parts = page.url.split("/", 3)
    target = "/" + (parts[3] if len(parts) > 3 else "")
    target = target.split("#", 1)[0]
    host = parts[2] if len(parts) > 2 else ""
    request_head = _http_head(f"{page.method} {target} HTTP/1.1",
                              [*page.request_headers, (b"Host", host.encode("latin-1"))])
    if page.raw_head is not None:  # as received
        response_head, payload = page.raw_head, page.raw_body
    else:  # another download handler: rebuilt from the decoded response
        try:
            reason = HTTPStatus(page.status).phrase
        except ValueError:
            reason = "Unknown"
        response_head = _http_head(
            f"HTTP/1.1 {page.status} {reason}",
            [(k, v) for k, v in page.response_headers if k.lower() not in _HOP_BY_HOP]
            + [(b"Content-Length", str(len(page.body)).encode())],
        )
        payload = page.body
    response_id = _record_id()
    ip = [("WARC-IP-Address", page.ip)] if page.ip else []
    extra = [*ip, ("WARC-Block-Digest", _sha1(response_head, payload)),
             ("WARC-Payload-Digest", _sha1(payload))]
    if page.truncated:
        extra.append(("WARC-Truncated", "length"))
    elif page.dataloss:
        extra.append(("WARC-Truncated", "disconnect"))
    response = [
        _warc_headers("response", page.url, date, "application/http; msgtype=response",
                      len(response_head) + len(payload), extra, response_id),
        response_head, payload, b"\r\n\r\n",
    ]
    request = [
        _warc_headers("request", page.url, date, "application/http; msgtype=request",
                      len(request_head) + len(page.request_body),
                      [("WARC-Concurrent-To", response_id), *ip,
                       ("WARC-Block-Digest", _sha1(request_head, page.request_body)),
                       ("WARC-Payload-Digest", _sha1(page.request_body))]),
        request_head, page.request_body, b"\r\n\r\n",
    ]
    return [request, response]


def warcinfo_record(filename: str, fields: dict[str, str], clock: Clock = SYSTEM) -> list[bytes]:
    """A warcinfo record, dated now on ``clock`` (its wall-clock face)."""
    date = datetime.fromtimestamp(clock.time(), timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = "".join(f"{k}: {v}\r\n" for k, v in fields.items()).encode()
    head = _warc_headers("warcinfo", "", date, "application/warc-fields", len(body),
                         [("WARC-Filename", filename), ("WARC-Block-Digest", _sha1(body))])
    return [head, body, b"\r\n\r\n"]


def gzip_member(parts: Sequence[bytes], level: int) -> bytes:
    """``parts`` as one gzip member, in one call (one release of the GIL)."""
    return isal_zlib.compress(b"".join(parts), level=level, wbits=31)


def gzip_member_stored(head: Sequence[bytes], body: bytes, tail: bytes, level: int) -> list[bytes | memoryview]:
    """``head``, ``body`` and ``tail`` as one gzip member in which ``body``
    is not compressed: ``head`` deflated (and flushed to a byte boundary),
    then ``body`` and ``tail`` in stored blocks, the last one final. For
    bytes that are compressed already (a body as received with a
    ``Content-Encoding``). The member's pieces, in order: ``body`` is not
    copied."""
    head_bytes = b"".join(head)
    deflate = isal_zlib.compressobj(level, isal_zlib.DEFLATED, -15)
    out: list[bytes | memoryview] = [_GZIP_HEADER, deflate.compress(head_bytes), deflate.flush(isal_zlib.Z_SYNC_FLUSH)]
    view = memoryview(body)
    for start in range(0, len(body), _STORED_MAX):
        block = view[start:start + _STORED_MAX]
        out += [struct.pack("<BHH", 0, len(block), len(block) ^ 0xFFFF), block]
    out += [struct.pack("<BHH", 1, len(tail), len(tail) ^ 0xFFFF), tail]
    crc = isal_zlib.crc32(tail, isal_zlib.crc32(body, isal_zlib.crc32(head_bytes)))
    out.append(struct.pack("<II", crc, (len(head_bytes) + len(body) + len(tail)) & 0xFFFFFFFF))
    return out


def arrived_compressed(page: Page) -> bool:
    """The response's body as received is compressed (fewer bytes than the
    body they decode to): storing it costs less than compressing it again."""
    return page.raw_head is not None and 0 < len(page.raw_body) < len(page.body) * _COMPRESSED


def page_members(page: Page, level: int, clock: Clock = SYSTEM) -> list[bytes | memoryview]:
    """``page``'s request and response records, each a gzip member, as the
    pieces of one write."""
    request, response = page_records(page, clock)
    if arrived_compressed(page):
        return [gzip_member(request, level), *gzip_member_stored(response[:2], response[2], response[3], level)]
    return [gzip_member(request, level), gzip_member(response, level)]


class WarcFailed(Exception):
    """Writing a WARC file failed; nothing more is stored."""

    def __init__(self, path: Path | None, error: BaseException) -> None:
        super().__init__(f"{path or 'WARC file'}: {error}")
        self.path = path
        self.error = error


class WarcWriter:
    """Writes pages to rotating ``.warc.gz`` files from a thread of its own
    (or, with ``max_queued=0``, in :meth:`put` itself).

    ``name_file(n)`` gives the path of the n-th file (n from 1). Files are
    opened with ``"x"``: two writers never share one.
    """

    def __init__(self, name_file: Callable[[int], Path], *, level: int = 1,
                 max_bytes: int = 1_000_000_000, max_queued: int = 256,
                 on_file: Callable[[Path], None] | None = None, clock: Clock = SYSTEM,
                 on_space: Callable[[OSError | None], None] | None = None, retry_seconds: float = 1.0) -> None:
        if not 0 <= level <= 3:
            raise ValueError(f"WARC compression level must be 0..3 (ISA-L), got {level}")
        self.name_file = name_file
        self.level = level
        self.max_bytes = max_bytes
        self.on_file = on_file
        self.clock = clock  # blocked time (monotonic) and the records' dates (time), crawler/clock.py
        self.queue: queue.Queue[Page | None] = queue.Queue(maxsize=max(max_queued, 1))
        self.file: IO[bytes] | None = None
        self.size = 0  # bytes written to the current file
        self.count = 0
        self.path: Path | None = None  # the file being written
        self.queued = 0  # pages put
        self.written = 0  # pages whose records are all in a file, in order
        self.blocked = 0.0  # seconds put() waited for room, on the clock
        self.waiting = 0  # put() calls waiting for room now
        self.error: BaseException | None = None
        self.on_space = on_space  # told the disk filled (the error), and that space returned (None)
        self.retry_seconds = retry_seconds  # between two tries of a page the full disk refused
        self.no_space: OSError | None = None  # the disk is full: a page waits for space
        self.abandoned = False  # the pages waiting for space were given up (abandon())
        self._abandon = threading.Event()
        self._pending: list[Page] = []  # without a thread: pages waiting for space, in order
        self._closed = False
        self._thread: threading.Thread | None = None  # None: written by put() itself
        if max_queued:
            self._thread = threading.Thread(target=self._run, name="warc-writer", daemon=True)
            self._thread.start()
        atexit.register(self.close)

    def put(self, page: Page) -> int:
        """Queue ``page`` and return its number; blocks while the queue is
        full (back-pressure). Raises :class:`WarcFailed` once a write failed."""
        if self._closed:
            raise RuntimeError("WARC writer is closed")
        if self.error is not None:
            raise WarcFailed(self.path, self.error)
        self.queued += 1
        if self._thread is None:
            if self._pending or self.abandoned:  # behind pages waiting for space: in order
                if not self.abandoned:
                    self._pending.append(page)
                return self.queued
            try:
                self._write(page)
            except Exception as exc:
                if no_space(exc):
                    self._pending.append(page)
                    self._space(exc)  # type: ignore[arg-type]
                    return self.queued
                self.error = exc
                self._close_file()
                raise WarcFailed(self.path, exc) from exc
            return self.queued
        try:
            self.queue.put_nowait(page)
        except queue.Full:
            start = self.clock.monotonic()
            self.waiting += 1
            try:
                self.queue.put(page)
            finally:
                self.waiting -= 1
            self.blocked += self.clock.monotonic() - start
        return self.queued

    @property
    def threaded(self) -> bool:
        """Written by a thread of its own (else by :meth:`put`, and :meth:`retry`)."""
        return self._thread is not None

    def retry(self) -> bool:
        """Without a thread: write the pages waiting for space, in order,
        until the disk refuses one again; whether none waits now."""
        while self._pending and not self.abandoned:
            try:
                self._write(self._pending[0])
            except Exception as exc:
                if no_space(exc):
                    return False
                self.error = exc
                self._pending.clear()
                self._close_file()
                return True
            self._pending.pop(0)
            if not self._pending:
                self._space(None)
        return True

    def abandon(self) -> None:
        """Give up the pages waiting for space (and those queued behind
        them): they are never written, so never counted in ``written``."""
        self.abandoned = True
        self._abandon.set()
        self._pending.clear()

    def flush(self) -> None:
        """Wait until every page queued is written (or the writer failed, or
        gave up the pages waiting for space)."""
        if self._thread is not None and not self._closed:
            self.queue.join()

    def close(self) -> None:
        """Write everything queued, then close the file; pages waiting for
        space on a full disk are given up. Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self.no_space is not None:
            self.abandon()
        if self._thread is None:
            self._close_file()
            return
        self.queue.put(None)
        self._thread.join()

    def _space(self, error: OSError | None) -> None:
        """The disk filled (``error``) or space returned (None): told once each way."""
        if (error is None) == (self.no_space is None):
            return
        self.no_space = error
        if self.on_space is not None:
            self.on_space(error)

    def _store(self, page: Page) -> None:
        """Write ``page`` on the thread, waiting for space while the disk is full."""
        while True:
            if self.abandoned:
                return  # given up, with the pages queued behind it
            try:
                self._write(page)
            except Exception as exc:
                if not no_space(exc):
                    raise
                self._space(exc)  # type: ignore[arg-type]
                self._abandon.wait(self.retry_seconds)
                continue
            self._space(None)
            return

    def _run(self) -> None:
        try:
            while True:
                page = self.queue.get()
                try:
                    if page is None:
                        break
                    self._store(page)
                finally:
                    self.queue.task_done()
        except BaseException as exc:  # reported by put(); the crawl stops storing
            self.error = exc
            while True:  # keep put() and flush() from blocking forever
                page = self.queue.get()
                self.queue.task_done()
                if page is None:
                    break
        finally:
            self._close_file()

    def _close_file(self) -> None:
        if self.file is not None:
            file, self.file = self.file, None
            try:
                file.close()
            except OSError as exc:  # an unbuffered file has nothing left to write
                logger.warning("Closing %s: %s", self.path, exc)

    def _write(self, page: Page) -> None:
        whole = self.size if self.file is not None else 0
        opened = False
        try:
            if self.file is None:
                opened = True
                self.count += 1
                self.path = self.name_file(self.count)
                self.file = open(self.path, "xb", buffering=0)  # a member reaches the OS whole
                self.size = 0
                self._put(gzip_member(warcinfo_record(self.path.name, {
                    "software": "polite-crawler", "format": "WARC File Format 1.1"}, self.clock), self.level))
                if self.on_file is not None:
                    self.on_file(self.path)
            self._put(*page_members(page, self.level, self.clock))
        except BaseException:
            self._cut(whole)
            if opened and self.file is None:
                self.count -= 1  # not even its warcinfo record: the next try takes the name again
            raise
        self.written += 1
        if self.size >= self.max_bytes:
            self._close_file()

    def _cut(self, size: int) -> None:
        """Cut the file back to its last whole record (shrinking needs no space)."""
        if self.file is None:
            return
        try:
            os.ftruncate(self.file.fileno(), size)
            os.lseek(self.file.fileno(), size, os.SEEK_SET)  # the next record follows it, with no hole
        except OSError:
            return
        self.size = size
        if size == 0 and self.path is not None:  # not even its warcinfo record
            self._close_file()
            self.path.unlink(missing_ok=True)

    def _put(self, *pieces: bytes | memoryview) -> None:
        """Write ``pieces`` in order, in one system call when the OS takes them all."""
        assert self.file is not None
        total = sum(len(piece) for piece in pieces)
        if len(pieces) == 1:
            view = memoryview(pieces[0])
        elif len(pieces) > _IOV_MAX:  # a body of over 30 MB stored as it came
            view = memoryview(b"".join(pieces))
        else:
            done = os.writev(self.file.fileno(), pieces)
            view = memoryview(b"".join(pieces))[done:] if done < total else memoryview(b"")
        while view:  # an unbuffered write may take less than it was given
            view = view[self.file.write(view) or 0:]
        self.size += total
