"""Revisit records (design/recrawl.md, C.6): a 304 as server-not-modified, a
200 whose payload is the original's as identical-payload-digest, written by
the real writer, read back with warcio and FastWARC, resolved to their
original as pywb does and replayed; an ordinary page's records unchanged."""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastwarc.warc import ArchiveIterator as FastIterator
from warcio.archiveiterator import ArchiveIterator

from crawler.warcfile import Page, WarcWriter, page_members, page_records
from crawler.warcrecords import IDENTICAL, NOT_MODIFIED, Refers

URL = "http://example.test/a/b?c=1#frag"
BODY = b"<!DOCTYPE html><html><body>" + b"the same page " * 300 + b"</body></html>"
GZ = gzip.compress(BODY, mtime=0)
HEAD_200 = b'HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: "v1"\r\nContent-Length: %d\r\n\r\n' % len(BODY)
HEAD_304 = b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\nCache-Control: max-age=60\r\n\r\n'
DATE = 1_796_000_000.123456


def fetched(status: int, raw_head: bytes | None, body: bytes, date: float, **fields: Any) -> Page:
    headers = [(b"User-Agent", b"test"), (b"Accept", b"*/*")]
    if fields.get("not_modified"):
        headers.append((b"If-None-Match", b'"v1"'))
    return Page(url=URL, method="GET", request_headers=headers, request_body=b"", status=status,
                response_headers=[(b"Content-Type", b"text/html")], body=body, date=date,
                raw_head=raw_head, raw_body=body, ip="127.0.0.1", **fields)


def ordinary() -> list[Page]:
    """Pages of every shape a response record takes today."""
    common = dict(url=URL, method="GET", request_headers=[(b"User-Agent", b"test"), (b"Accept", b"*/*")],
                  request_body=b"", date=DATE)
    return [
        Page(status=200, response_headers=[(b"Content-Type", b"text/html")], body=BODY, ip="127.0.0.1",
             raw_head=b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(BODY),
             raw_body=BODY, **common),
        Page(status=200, response_headers=[(b"Content-Type", b"text/html"), (b"Content-Encoding", b"gzip"),
                                           (b"Content-Length", b"9")], body=BODY[:1000], truncated=True, **common),
        Page(status=200, response_headers=[], body=BODY, dataloss=True, ip="::1",
             raw_head=b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n", raw_body=GZ, **common),
        Page(status=304, response_headers=[(b"ETag", b'"v1"')], body=b"",
             raw_head=b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n\r\n', raw_body=b"", **common),
    ]


def normalized(records: list[list[bytes]]) -> list[bytes]:
    return [re.sub(rb"urn:uuid:[0-9a-f-]{36}", b"urn:uuid:ID", b"".join(record)) for record in records]


#: SHA-256 of the normalized records of ordinary() built by the code before
#: revisits (commit 818452e), and the pieces of each page's write
BEFORE = "310d7dd3935fea963bc05118d990b58f589c9fac1fb2a910a0e06498bb03d584"
BEFORE_PIECES = [2, 2, 9, 2]


def test_an_ordinary_page_is_written_as_before() -> None:
    pages = ordinary()
    built = [normalized(page_records(page)) for page in pages]
    assert hashlib.sha256(repr(built).encode()).hexdigest() == BEFORE
    assert [len(page_members(page, 1)) for page in pages] == BEFORE_PIECES
    for page, (_request, response) in zip(pages, built):
        assert b"WARC-Type: response\r\n" in response and b"WARC-Profile" not in response
        assert page.capture is not None and page.capture.profile == ""


def read(path: Path) -> list[dict]:
    """Every record of ``path`` through warcio with its digests checked."""
    out = []
    with open(path, "rb") as fh:
        for record in ArchiveIterator(fh, check_digests=True):
            head = record.http_headers.to_bytes() if record.http_headers else b""
            block = record.content_stream().read()
            assert not record.digest_checker.problems, record.digest_checker.problems
            # warcio checks no digest of a revisit (digestverifyingreader.py): FastWARC and hashlib do below
            assert record.digest_checker.passed is (None if record.rec_type == "revisit" else True)
            out.append({"type": record.rec_type, "headers": dict(record.rec_headers.headers),
                        "http": record.http_headers, "head": head, "body": block})
    with open(path, "rb") as fh:
        fast = [(record.verify_block_digest(), record.reader.read())
                for record in FastIterator(fh, parse_http=False)]
    assert len(fast) == len(out)
    for (verified, raw), record in zip(fast, out):
        assert verified is True
        assert int(record["headers"]["Content-Length"]) == len(raw)
        digest = "sha1:" + base64.b32encode(hashlib.sha1(raw).digest()).decode()
        assert record["headers"]["WARC-Block-Digest"] == digest
    return out


def test_revisits_resolve_to_their_original_and_replay(tmp_path: Path) -> None:
    writer = WarcWriter(lambda n: tmp_path / f"revisit-{n}.warc.gz", max_queued=0)
    original = fetched(200, HEAD_200, BODY, DATE)
    writer.put(original)
    capture = original.capture
    assert capture is not None and capture.profile == ""
    # as a fetch history keeps it: the date, the id and a 48-bit prefix of the payload digest
    known = Refers(date=capture.date, record_id=capture.record_id, payload_digest=capture.payload_digest[:15])
    not_modified = fetched(304, HEAD_304, b"", DATE + 3600, refers=known, not_modified=True)
    identical = fetched(200, HEAD_200, BODY, DATE + 7200,
                        refers=Refers(date=datetime.fromtimestamp(DATE, timezone.utc), record_id=capture.record_id,
                                      payload_digest=capture.payload_digest[:15]))
    changed = fetched(200, HEAD_200, BODY + b"<!-- changed -->", DATE + 9000, refers=known)
    for page in (not_modified, identical, changed):
        writer.put(page)
    writer.close()
    assert not_modified.capture is not None and not_modified.capture.profile == NOT_MODIFIED
    assert not_modified.capture.payload_digest == ""
    assert identical.capture is not None and identical.capture.profile == IDENTICAL
    assert changed.capture is not None and changed.capture.profile == ""  # a new capture in full

    [path] = tmp_path.iterdir()
    records = read(path)
    assert [r["type"] for r in records] == ["warcinfo", "request", "response", "request", "revisit",
                                            "request", "revisit", "request", "response"]
    first, revisit_304, revisit_200 = records[2], records[4], records[6]
    assert first["headers"]["WARC-Record-ID"] == capture.record_id
    assert first["headers"]["WARC-Date"] == capture.date
    assert first["headers"]["WARC-Payload-Digest"] == capture.payload_digest
    for request, revisit in ((records[3], revisit_304), (records[5], revisit_200)):
        assert request["headers"]["WARC-Concurrent-To"] == revisit["headers"]["WARC-Record-ID"]
    assert b'If-None-Match: "v1"' in records[3]["head"]

    h = revisit_304["headers"]
    assert h["WARC-Profile"] == "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
    assert "WARC-Payload-Digest" not in h
    assert revisit_304["head"] == HEAD_304 and revisit_304["body"] == b""  # the 304 as received
    assert int(h["Content-Length"]) == len(HEAD_304)
    h = revisit_200["headers"]
    assert h["WARC-Profile"] == "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
    assert h["WARC-Payload-Digest"] == capture.payload_digest  # this payload's, equal to the original's
    assert revisit_200["head"] == HEAD_200 and revisit_200["body"] == b""  # the body left out
    assert int(h["Content-Length"]) == len(HEAD_200)

    originals = {(r["headers"]["WARC-Target-URI"], r["headers"]["WARC-Date"]): r
                 for r in records if r["type"] == "response"}
    for revisit in (revisit_304, revisit_200):
        h = revisit["headers"]
        assert h["Content-Type"] == "application/http; msgtype=response"
        assert h["WARC-IP-Address"] == "127.0.0.1"
        assert h["WARC-Refers-To-Target-URI"] == h["WARC-Target-URI"] == URL
        # pywb: the original by URI and date, then checked by its id
        found = originals[(h["WARC-Refers-To-Target-URI"], h["WARC-Refers-To-Date"])]
        assert found["headers"]["WARC-Record-ID"] == h["WARC-Refers-To"]
        assert found is first
    # the replay: the revisit's head over the original's body
    replay = revisit_200["http"]
    assert int(replay.get_header("Content-Length")) == len(first["body"]) and first["body"] == BODY
    assert replay.get_header("ETag") == revisit_304["http"].get_header("ETag") == first["http"].get_header("ETag")
    assert revisit_304["http"].get_statuscode() == "304" and first["http"].get_statuscode() == "200"


def test_a_revisit_without_a_known_record_still_names_its_target(tmp_path: Path) -> None:
    writer = WarcWriter(lambda n: tmp_path / f"revisit-{n}.warc.gz", max_queued=0)
    writer.put(fetched(304, HEAD_304, b"", DATE, not_modified=True))
    writer.put(fetched(200, HEAD_200, BODY, DATE + 1, refers=Refers(), identical=True))
    writer.put(fetched(200, HEAD_200, BODY, DATE + 2, refers=Refers(payload_digest="sha1:")))  # no digest: full
    writer.close()
    [path] = tmp_path.iterdir()
    records = [r for r in read(path) if r["type"] in ("revisit", "response")]
    assert [r["type"] for r in records] == ["revisit", "revisit", "response"]
    for record in records[:2]:
        assert record["headers"]["WARC-Refers-To-Target-URI"] == URL
        assert "WARC-Refers-To-Date" not in record["headers"] and "WARC-Refers-To" not in record["headers"]


def test_a_compressed_identical_payload_is_left_out_too() -> None:
    """A body that arrived gzipped is stored, not compressed, in a response;
    in a revisit it is not there at all."""
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(GZ)
    page = Page(url=URL, method="GET", request_headers=[], request_body=b"", status=200, response_headers=[],
                body=BODY, raw_head=head, raw_body=GZ, date=DATE, refers=Refers(record_id="<urn:uuid:x>"),
                identical=True)
    members = page_members(page, 1)
    assert len(members) == 2
    assert gzip.decompress(members[1]).endswith(head + b"\r\n\r\n")
