"""Every fetched page to local disk as gzip WARC/1.1.

On when ``CRAWLER_WARC_DIR`` is set. One writer per process; files are named
``<spider>-<shard>-<host>-<pid>-<UTC time>-<n>.warc.gz`` (no two processes
share a file) and rotated at ``CRAWLER_WARC_MAX_BYTES`` (1 GB). Each page is a
request record and a response record. With the crawler's download handler the
response record holds the HTTP response as received (status line, headers,
body bytes before decoding; cut at the page cap, then marked
``WARC-Truncated: length``; :mod:`crawler.fetch.received`); with another
handler it is rebuilt from the decoded response. Digests and record links:
:mod:`crawler.warcrecords`.

Revisits (design/recrawl.md C.6): every 304 is written as a
``server-not-modified`` revisit record, never as a response record; a
response to a revisit whose history (``meta[RECRAWL_STATE]``) has a WARC
part refers to that capture (``WARC-Refers-To-*``: the request's URL, the
stored WARC-Date and record ID), and a 200 whose payload SHA-1 begins with
the stored ``wd`` is an ``identical-payload-digest`` revisit (head only).
Once a tracked page's records are in the file, and before :meth:`stored`
says so, ``meta[RECRAWL_SEEN]["capture"]`` holds what was written:
``{"profile": "response" | "server-not-modified" |
"identical-payload-digest", "wd": 6 bytes, "rdate": µs, "rid": 16 bytes}``
(:func:`capture_of`); revisit records count in
``crawler/warc/revisit_records/<profile>``.

Records are compressed with ISA-L at ``CRAWLER_WARC_LEVEL`` (0-3, default 1)
and written by a thread (:mod:`crawler.warcfile`); at most
``CRAWLER_WARC_QUEUE`` pages wait for it, then the crawl waits for the disk.
``CRAWLER_WARC_THREAD`` (``auto``) uses the thread only when the process may
run on more than one CPU (docs/benchmarks.md has the measurement).

A page is stored once its records are in a file: only then does the frontier
count its URL as stored and release its lease. A write that finds the disk
full (``ENOSPC``, ``EDQUOT``) pauses fetching at once: the file is cut back
to its last whole record, the page and those after it wait (their leases
held, not acknowledged) and are written, in order, when space returns, and
fetching resumes, one log line each way (the pause counts in
``crawler/warc/low_space_pauses`` and ``low_space_seconds``). When a write
fails otherwise (read-only, an I/O error, a file too large), the crawl stops
taking work, the pages not stored go back to the frontier when it closes,
one line names the file and the error, and the crawl ends with
``warc_failed`` (a non-zero exit). Before the disk is full,
``CRAWLER_WARC_MIN_FREE`` pauses fetching until space returns; a crawl that
closes while still paused either way (``CLOSESPIDER_TIMEOUT``, a shutdown)
did not finish: the pages waiting for space are given up, its URLs wait in
the frontier, and it says so as its exit error (a non-zero exit,
``crawler/warc/closed_paused``).
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import task

from crawler.clock import clock_of
from crawler.fetch import received as raw_responses
from crawler.meta import NOT_MODIFIED, RECRAWL_SEEN, RECRAWL_STATE, ROBOTS, TRUNCATED, WARC
from crawler.recrawl import record as history_record
from crawler.worker import session_of
from crawler.settings_registry import setting
from crawler.warcfile import Page, WarcFailed, WarcWriter
from crawler.warcrecords import IDENTICAL, NOT_MODIFIED as NOT_MODIFIED_PROFILE, Capture, Refers

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0  # seconds between looks at the writer and the free space
NOT_STORED = -1
#: a capture's profile, as RECRAWL_SEEN["capture"] names it, by the record's WARC-Profile
PROFILES = {"": "response", NOT_MODIFIED_PROFILE: "server-not-modified", IDENTICAL: "identical-payload-digest"}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class WarcExtension:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        directory = setting(settings, "CRAWLER_WARC_DIR")
        if not directory:
            raise NotConfigured
        self.directory = Path(directory)
        self.max_bytes = setting(settings, "CRAWLER_WARC_MAX_BYTES")
        self.level = setting(settings, "CRAWLER_WARC_LEVEL")
        self.max_queued = setting(settings, "CRAWLER_WARC_QUEUE")
        self.min_free = setting(settings, "CRAWLER_WARC_MIN_FREE")
        choice = setting(settings, "CRAWLER_WARC_THREAD")  # auto, true, false, 1 or 0
        thread = len(os.sched_getaffinity(0)) > 1 if choice == "auto" else choice in ("true", "1")
        if not thread:
            self.max_queued = 0  # written by the reactor's thread
        self.crawler = crawler
        self.clock = clock_of(crawler)  # pause lengths, blocked time, record dates; its timers run check()
        self.stats = crawler.stats
        self.prefix = ""
        self.writer: WarcWriter | None = None
        self.failed = False
        self.paused_at: float | None = None
        self.full: OSError | None = None  # a write found the disk full: pages wait for space
        self.free: int | None = None  # bytes free in the folder at the last look
        self._checker = task.LoopingCall(self.check)
        self._checker.clock = self.clock.timers
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.response_received, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> WarcExtension:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        shard = int(getattr(spider, "shard", 0))
        self.prefix = f"{spider.name}-{shard:03d}-{socket.gethostname()}-{os.getpid()}"
        self.writer = WarcWriter(self._name, level=self.level, max_bytes=self.max_bytes,
                                 max_queued=self.max_queued, on_file=self._opened, clock=self.clock,
                                 on_space=self._on_space, retry_seconds=CHECK_INTERVAL)
        session = session_of(self.crawler)
        if session is not None:
            session.keep_pages_with(self)  # a page's lease is released once it is stored
        try:
            writable(self.directory)
        except OSError as exc:
            self._fail(f"the WARC folder {self.directory} is not writable: {exc.strerror or exc}")
            return
        self._checker.start(CHECK_INTERVAL, now=True)

    def _name(self, n: int) -> Path:
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        return self.directory / f"{self.prefix}-{stamp}-{n:05d}.warc.gz"

    def _opened(self, path: Path) -> None:  # on the writer's thread
        self.stats.inc_value("crawler/warc/files")
        logger.info("Writing WARC file %s", path)

    def _on_space(self, error: OSError | None) -> None:  # on the writer's thread, or in put()
        from twisted.internet import reactor

        reactor.callFromThread(self._space_changed, error)  # type: ignore[attr-defined]

    def _space_changed(self, error: OSError | None) -> None:
        """A write found the disk full (``error``), or the page waiting went in (None)."""
        if error is not None:
            self.full = error
            logger.warning("No space left for WARC files in %s (%s): fetching paused until space returns; "
                           "%d pages wait to be written, their leases held", self.directory,
                           error.strerror or error, self._waiting())
            self._pause()
            return
        if self.full is None:
            return
        self.full = None
        free = self._free()
        if self.min_free and free is not None and free < self.min_free:
            return  # written, but still under CRAWLER_WARC_MIN_FREE: paused on
        self._resume(f"Disk space for WARC files is back ({'?' if free is None else free // 10**6} MB free)")

    def _waiting(self) -> int:
        writer = self.writer
        return 0 if writer is None else max(0, writer.queued - writer.written)

    def _free(self) -> int | None:
        """Bytes free in the folder now (kept in :attr:`free`); None if it cannot be read."""
        try:
            st = os.statvfs(self.directory)
        except OSError:
            return None
        self.free = st.f_bavail * st.f_frsize
        return self.free

    def _pause(self) -> None:
        engine = self.crawler.engine
        if self.paused_at is not None or engine is None or self.failed:
            return
        self.paused_at = self.clock.monotonic()
        engine.pause()
        self.stats.inc_value("crawler/warc/low_space_pauses")

    def _resume(self, what: str) -> None:
        engine = self.crawler.engine
        if self.paused_at is None or engine is None:
            return
        paused = self.clock.monotonic() - self.paused_at
        self.paused_at = None
        engine.unpause()
        self.stats.inc_value("crawler/warc/low_space_seconds", round(paused, 3))
        logger.info("%s: fetching resumed after %.0f s", what, paused)

    def spider_closed(self) -> None:
        if self._checker.running:
            self._checker.stop()
        if self.writer is not None:
            self.writer.close()  # gives up the pages waiting for space, if any
            self.stats.set_value("crawler/warc/blocked_seconds", round(self.writer.blocked, 3))
            self.stats.set_value("crawler/warc/pages_stored", self.writer.written)
            self._check_writer()
        if self.paused_at is not None:
            self._closed_paused()

    def response_received(self, response: Response, request: Request, spider: Spider) -> None:
        received = raw_responses.take(request)
        if request.meta.get(ROBOTS) or self.writer is None:
            return
        if self.failed:
            request.meta[WARC] = NOT_STORED
            return
        truncated = bool(request.meta.get(TRUNCATED))
        raw_head: bytes | None = None
        raw_body = b""
        dataloss = False
        if received is not None:
            raw_head, raw_body, dataloss = received.head, received.body, received.dataloss
            truncated = truncated or received.cut
        # the headers of Scrapy's response are only read to rebuild a head not received
        response_headers = [] if raw_head is not None else [
            (k, v) for k, vs in response.headers.items() for v in vs]
        meta = request.meta
        page = Page(
            request.url, request.method,
            [(k, v) for k, vs in request.headers.items() for v in vs], request.body or b"",
            response.status, response_headers, response.body,
            truncated=truncated, date=self.clock.time(), raw_head=raw_head, raw_body=raw_body,
            dataloss=dataloss, ip=str(response.ip_address or ""),
        )
        # a revisit (design/recrawl.md C.6): every 304 is a server-not-modified
        # revisit record, never a response record; a 200 refers to the capture
        # its history names, and is an identical-payload revisit when its payload is that one's
        history = _history(meta.get(RECRAWL_STATE))
        known = history.refers if history is not None else None
        if response.status == 304:
            page.not_modified = True
        if known is not None:
            page.refers = refers_of(known)  # its target URI is the page's own
        seen = meta.get(RECRAWL_SEEN)
        if page.not_modified or page.refers is not None or isinstance(seen, dict):
            page.on_capture = self._on_capture(seen if isinstance(seen, dict) else None, known)
        try:
            meta[WARC] = self.writer.put(page)
        except WarcFailed:
            request.meta[WARC] = NOT_STORED
            self._check_writer()
            return
        self.stats.inc_value("crawler/warc/records", 2)

    def _on_capture(self, seen: dict[str, Any] | None,
                    known: history_record.Refers | None) -> Any:
        """What the writer tells once ``seen``'s page is written (on its
        thread, before the page counts as stored): the capture, into
        ``seen["capture"]``, and the revisit record's count."""
        stats = self.stats

        def told(capture: Capture) -> None:
            profile = PROFILES.get(capture.profile, capture.profile)
            if profile != "response":
                stats.inc_value(f"crawler/warc/revisit_records/{profile}")
            if seen is not None:
                try:
                    seen["capture"] = capture_of(capture, known)
                except ValueError as exc:  # never the writer's failure: the history keeps its old capture
                    logger.error("WARC capture of %s not read back: %s", capture.record_id, exc)

        return told

    # --- what the frontier asks --------------------------------------------

    def stored(self, request: Request) -> bool:
        """True once ``request``'s page is in a WARC file (or it has none)."""
        ticket = request.meta.get(WARC)
        if ticket is None:
            return not self.failed or bool(request.meta.get(ROBOTS))
        return 0 < ticket <= (self.writer.written if self.writer is not None else 0)

    def flush(self) -> None:
        """Wait for the pages queued to the writer (the frontier is closing);
        on a full disk, give up those waiting for space: they go back to the frontier."""
        if self.writer is not None:
            if self.writer.no_space is not None:
                self.writer.abandon()
            self.writer.flush()

    # --- failures and free space -------------------------------------------

    def check(self) -> None:
        self._check_writer()
        writer = self.writer
        if writer is not None and writer.no_space is not None and not writer.threaded:
            writer.retry()  # written by put(): the pages waiting for space are tried here
        if self.min_free and not self.failed:
            self._check_space()

    def _check_writer(self) -> None:
        writer = self.writer
        if writer is not None and writer.error is not None and not self.failed and not writer.abandoned:
            error = writer.error
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            self._fail(f"writing {writer.path or self.directory} failed: {reason}")

    def _fail(self, reason: str) -> None:
        self.failed = True
        stored = self.writer.written if self.writer is not None else 0
        message = (f"WARC storage failed: {reason}; {stored} pages stored, the pages not stored "
                   "go back to the frontier; stopping the crawl")
        logger.error(message)
        self.stats.set_value("crawler/exit/error", message)
        self.stats.set_value("crawler/warc/failed", 1)
        if self._checker.running:
            self._checker.stop()
        if self.crawler.engine is not None:
            self.crawler.engine.pause()  # no new work from now on
        from twisted.internet import reactor

        reactor.callLater(0, self._close)  # type: ignore[attr-defined]  # the reactor's next turn: not a time

    def _close(self) -> None:
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            deferred_from_coro(engine.close_spider_async(reason="warc_failed"))

    def _check_space(self) -> None:
        free = self._free()
        if free is None or self.crawler.engine is None:
            return
        if free < self.min_free and self.paused_at is None:
            self._pause()
            logger.warning("Low disk space for WARC files in %s: %d MB free, under CRAWLER_WARC_MIN_FREE "
                           "(%d MB): fetching paused until space returns", self.directory, free // 10**6,
                           self.min_free // 10**6)
        elif free >= self.min_free and self.paused_at is not None and self.full is None:
            self._resume(f"Disk space for WARC files is back ({free // 10**6} MB free)")

    def _closed_paused(self) -> None:
        """The crawl closes while fetching is paused for disk space: it did
        not finish (what it did not fetch waits in the frontier), and its
        exit error says why, unless an earlier one (a failed write) already does."""
        assert self.paused_at is not None
        paused = self.clock.monotonic() - self.paused_at
        self.paused_at = None
        self.stats.inc_value("crawler/warc/low_space_seconds", round(paused, 3))
        self.stats.set_value("crawler/warc/closed_paused", 1)
        self._free()  # unreadable: the last look's figure
        free = "?" if self.free is None else f"{self.free // 10**6}"
        if self.stats.get_value("crawler/exit/error"):
            return
        if self.full is not None:
            self.stats.set_value(
                "crawler/exit/error",
                f"closed while fetching was paused for disk space for {paused:.0f} s: no space left in "
                f"{self.directory} ({self.full.strerror or self.full}); the pages not written and the URLs not "
                "fetched wait in the frontier")
        else:
            self.stats.set_value(
                "crawler/exit/error",
                f"closed while fetching was paused for disk space for {paused:.0f} s: {free} MB free in "
                f"{self.directory}, under CRAWLER_WARC_MIN_FREE ({self.min_free // 10**6} MB); the URLs not "
                "fetched wait in the frontier")


def _history(state: object) -> history_record.History | None:
    if not isinstance(state, dict):
        return None
    try:
        return history_record.unpack(state.get("record"))
    except ValueError:
        return None


def refers_of(known: history_record.Refers) -> Refers:
    """The WARC writer's :class:`~crawler.warcrecords.Refers` for a history's
    WARC part: its WARC-Date (µs), its record ID, and the first 45 bits of
    its payload digest that ``wd``'s 48 hold whole, as base32 (9 characters)."""
    return Refers(date=_EPOCH + timedelta(microseconds=known.rdate),
                  record_id=f"<urn:uuid:{uuid.UUID(bytes=known.rid)}>",
                  payload_digest="sha1:" + base64.b32encode(known.wd + bytes(4)).decode()[:9])


def capture_of(capture: Capture, known: history_record.Refers | None = None) -> dict[str, Any]:
    """``RECRAWL_SEEN["capture"]``: ``{"profile": "response" |
    "server-not-modified" | "identical-payload-digest", "wd": 6 bytes,
    "rdate": µs, "rid": 16 bytes}`` of the record written. ``wd`` is the
    first 6 bytes of its payload SHA-1; a 304's revisit has no payload
    digest, so its ``wd`` is the one of the capture it refers to (``known``),
    or 6 zero bytes when none is known."""
    if capture.payload_digest.startswith("sha1:"):
        wd = base64.b32decode(capture.payload_digest[5:])[:6]
    else:
        wd = known.wd if known is not None else bytes(6)
    date = datetime.strptime(capture.date, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    delta = date - _EPOCH
    rdate = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    rid = uuid.UUID(capture.record_id.strip("<>").removeprefix("urn:uuid:")).bytes
    return {"profile": PROFILES.get(capture.profile, capture.profile), "wd": wd, "rdate": rdate, "rid": rid}


def writable(directory: Path) -> None:
    """Create ``directory`` if needed and prove a file can be written in it
    (raises ``OSError``)."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".writable-"):
        pass
