"""WARC/1.1 files: records, gzip-compressed per record, written by a thread.

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
page's number, from 1; pages are written in that order). A page's
``on_capture`` is told what its response record became (``Page.capture``)
once its records are in the file, before :attr:`~WarcWriter.written` counts
it: whoever waits for ``written`` finds the capture already told.

The records themselves (what a page becomes, as gzip members) are built in
``crawler/warcrecords.py``; their names are importable from here too.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from crawler.clock import SYSTEM, Clock
from crawler.warcrecords import (
    Headers,
    Page,
    arrived_compressed,
    gzip_member,
    gzip_member_stored,
    page_members,
    page_records,
    warcinfo_record,
)

logger = logging.getLogger(__name__)

_IOV_MAX = 1024  # pieces one writev takes (Linux's IOV_MAX)
#: a write that fails so waits for space instead of stopping the writer
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the quota) is full."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


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
        if page.on_capture is not None and page.capture is not None:
            page.on_capture(page.capture)  # before ``written`` says the page is stored
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
        elif len(pieces) > _IOV_MAX:  # a body stored as it came, in more than _IOV_MAX blocks
            view = memoryview(b"".join(pieces))
        else:
            done = os.writev(self.file.fileno(), pieces)
            view = memoryview(b"".join(pieces))[done:] if done < total else memoryview(b"")
        while view:  # an unbuffered write may take less than it was given
            view = view[self.file.write(view) or 0:]
        self.size += total


__all__ = ["NO_SPACE", "Headers", "Page", "WarcFailed", "WarcWriter", "arrived_compressed", "gzip_member",
           "gzip_member_stored", "no_space", "page_members", "page_records", "warcinfo_record"]
