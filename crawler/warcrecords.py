"""WARC/1.1 records of a fetch, each a gzip member: no I/O (``crawler/warcfile.py`` writes them).

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

A revisit of a capture (``Page.refers``) is written as a ``revisit`` record
instead of a response (design/recrawl.md, C.6): a 304 (``not_modified``) as
``server-not-modified``, its block the 304's head; a 200 whose payload equals
the original's as ``identical-payload-digest``, its block the response head
with the body left out. ``Page.capture`` tells the caller what was written.

Each record is one gzip member (ISA-L, ``isal``), so any WARC reader
(warcio, the Internet Archive's tools) reads the files and can seek to a
record. A body that arrived compressed (``Content-Encoding``: its bytes as
received are fewer than the body they decode to) is not compressed a second
time: its record's gzip member holds the WARC and HTTP heads deflated and
the body in stored blocks, cheaper than compressing bytes that cannot
shrink, and no larger (docs/benchmarks.md, "Where the CPU goes").
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http import HTTPStatus

from isal import isal_zlib

from crawler.clock import SYSTEM, Clock

_HOP_BY_HOP = {b"content-encoding", b"transfer-encoding", b"content-length"}
#: a response body whose bytes as received are under this share of the decoded
#: body arrived compressed: it is stored, not compressed again
_COMPRESSED = 0.9
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no mtime, unknown OS
_STORED_MAX = 65_535  # bytes in one stored deflate block
Headers = Sequence[tuple[bytes, bytes]]
#: the WARC 1.1 revisit profiles (iipc/warc-specifications, specifications/warc-format/warc-1.1)
NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"


@dataclass(frozen=True)
class Refers:
    """The capture a revisit refers to: a response record written before for
    the same URL (its target URI is the page's URL)."""

    date: str | datetime = ""  # its WARC-Date ("" unknown); a naive datetime is UTC
    record_id: str = ""  # its WARC-Record-ID, "<urn:uuid:...>" ("" unknown)
    payload_digest: str = ""  # a prefix of its WARC-Payload-Digest, "sha1:..." ("" unknown)


@dataclass(frozen=True)
class Capture:
    """What :func:`page_records` wrote for a page's response."""

    record_id: str
    date: str  # WARC-Date, exactly as written
    payload_digest: str  # WARC-Payload-Digest ("" for a 304's revisit, which has none)
    profile: str = ""  # "": a response record, the capture a later revisit refers to; else the revisit's WARC-Profile


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
    refers: Refers | None = None  # a revisit of this capture (None: not known to be one)
    not_modified: bool = False  # a 304 to a conditional request: a server-not-modified revisit
    identical: bool = False  # with refers: the payload is the original's (else the digest prefix tells)
    capture: Capture | None = field(default=None, compare=False)  # set by page_records
    #: told the capture once the page's records are in the file, before the writer counts it written
    on_capture: Callable[[Capture], None] | None = field(default=None, compare=False, repr=False)


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
    # uuid.UUID(bytes=random, version=4), formatted here without building the object
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
    characters, no padding), by 10-bit pairs from one integer."""
    n = int.from_bytes(digest, "big")
    return "".join([_B32_PAIRS[(n >> shift) & 1023] for shift in _SHIFTS])


_EMPTY_SHA1 = "sha1:" + base64.b32encode(hashlib.sha1(b"").digest()).decode()


def page_records(page: Page, clock: Clock = SYSTEM) -> list[list[bytes]]:
    """The request and response (or revisit) records of ``page``, each as a
    list of parts; dated ``page.date``, else now on ``clock`` (its wall-clock
    face). Sets ``page.capture`` to what the second record is."""
    # "2026-12-04T15:21:05.702256Z": isoformat, cheaper than strftime (docs/benchmarks.md)
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
    payload_digest = _sha1(payload)
    profile = _revisit_profile(page, payload_digest)
    if profile:
        response = _revisit(page, profile, date, response_id, ip, response_head, payload_digest)
    else:
        extra = [*ip, ("WARC-Block-Digest", _sha1(response_head, payload)),
                 ("WARC-Payload-Digest", payload_digest)]
        if page.truncated:
            extra.append(("WARC-Truncated", "length"))
        elif page.dataloss:
            extra.append(("WARC-Truncated", "disconnect"))
        response = [
            _warc_headers("response", page.url, date, "application/http; msgtype=response",
                          len(response_head) + len(payload), extra, response_id),
            response_head, payload, b"\r\n\r\n",
        ]
    page.capture = Capture(response_id, date, "" if profile == NOT_MODIFIED else payload_digest, profile)
    request = [
        _warc_headers("request", page.url, date, "application/http; msgtype=request",
                      len(request_head) + len(page.request_body),
                      [("WARC-Concurrent-To", response_id), *ip,
                       ("WARC-Block-Digest", _sha1(request_head, page.request_body)),
                       ("WARC-Payload-Digest", _sha1(page.request_body))]),
        request_head, page.request_body, b"\r\n\r\n",
    ]
    return [request, response]


def _revisit_profile(page: Page, payload_digest: str) -> str:
    """The revisit profile of ``page``'s response record, "" for a response."""
    if page.not_modified:
        return NOT_MODIFIED
    refers = page.refers
    if refers is None or page.status != 200 or page.truncated or page.dataloss:
        return ""
    prefix = refers.payload_digest
    if page.identical or (len(prefix) > len("sha1:") and payload_digest.startswith(prefix)):
        return IDENTICAL
    return ""


def _revisit(page: Page, profile: str, date: str, record_id: str, ip: list[tuple[str, str]],
             response_head: bytes, payload_digest: str) -> list[bytes]:
    """A revisit record whose block is ``response_head`` alone (the body left out).

    Followed: WARC 1.1, the 'revisit' record type (iipc/warc-specifications,
    warc-format/warc-1.1): the two profiles' URIs, WARC-Refers-To-Target-URI
    and WARC-Refers-To-Date for a lookup by URI and date, WARC-Refers-To when
    the record is known, and for server-not-modified no payload digest
    (warcio's ``tester.py`` prohibits one; we keep only a prefix of the
    original's, and one over the empty body would be false). warcio
    (``recordbuilder.py`` ``create_revisit_record``) writes the same headers
    with Content-Type ``application/http; msgtype=response`` and a head-only
    block; its reader parses that head (``recordloader.py``, ``rec_type ==
    'revisit'``) and checks no digest of a revisit (``digestverifyingreader.py``):
    FastWARC checks the block digest.
    """
    refers = page.refers or Refers()
    extra = [*ip, ("WARC-Profile", profile), ("WARC-Refers-To-Target-URI", page.url)]
    if refers.date:
        extra.append(("WARC-Refers-To-Date", _warc_date(refers.date)))
    if refers.record_id:
        extra.append(("WARC-Refers-To", refers.record_id))
    extra.append(("WARC-Block-Digest", _sha1(response_head)))
    if profile == IDENTICAL:
        extra.append(("WARC-Payload-Digest", payload_digest))  # this payload's: equal to the original's
    return [_warc_headers("revisit", page.url, date, "application/http; msgtype=response",
                          len(response_head), extra, record_id),
            response_head, b"", b"\r\n\r\n"]


def _warc_date(date: str | datetime) -> str:
    """A WARC-Date as :func:`page_records` writes it ("2026-12-04T15:21:05.702256Z")."""
    if isinstance(date, str):
        return date
    if date.tzinfo is None:
        date = date.replace(tzinfo=timezone.utc)
    return date.astimezone(timezone.utc).isoformat(timespec="microseconds")[:-6] + "Z"


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
    if arrived_compressed(page) and response[2]:  # a revisit's block has no body to store
        return [gzip_member(request, level), *gzip_member_stored(response[:2], response[2], response[3], level)]
    return [gzip_member(request, level), gzip_member(response, level)]
