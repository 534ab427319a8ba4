"""Bodies that arrived compressed are stored in their record's gzip member,
not compressed a second time; the files still pass warcio's and FastWARC's
checks and read back byte for byte. Record IDs drawn from a pool stay unique,
in a forked child too."""

from __future__ import annotations

import gzip
import os
import random
import uuid
import zlib
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from crawler import warcrecords
from crawler.warcfile import Page, WarcWriter
from tests.test_warc_records import checks, chunked, head

HTML = b"<!DOCTYPE html><html><body>" + b"<p>a page of the open web</p>" * 2_000 + b"</body></html>"
GZ = gzip.compress(HTML, 6, mtime=0)
# over one stored block (65,535 bytes): hex noise, which gzip only halves
NOISE = random.Random(3).randbytes(120_000).hex().encode()
NOISE_GZ = gzip.compress(NOISE, 1, mtime=0)


def received(url: str, decoded: bytes, raw_head: bytes, raw_body: bytes) -> Page:
    return Page(url, "GET", [(b"User-Agent", b"crawler/0.1")], b"", 200,
                [(b"Content-Type", b"text/html")], decoded, raw_head=raw_head, raw_body=raw_body, ip="127.0.0.1")


def members(raw: bytes) -> list[bytes]:
    """The compressed bytes of each gzip member of a file."""
    out = []
    while raw:
        d = zlib.decompressobj(31)
        d.decompress(raw)
        out.append(raw[: len(raw) - len(d.unused_data)])
        raw = d.unused_data
    return out


def write(tmp_path: Path, pages: list[Page], level: int = 1) -> Path:
    writer = WarcWriter(lambda n: tmp_path / f"f{n}.warc.gz", level=level, max_queued=0)
    for page in pages:
        writer.put(page)
    writer.close()
    [path] = sorted(tmp_path.glob("*.warc.gz"))
    return path


def test_compressed_bodies_are_stored_as_received(tmp_path: Path) -> None:
    gz_head = head(b"HTTP/1.1 200 OK", b"Content-Type: text/html", b"Content-Encoding: gzip",
                   b"Content-Length: %d" % len(GZ))
    chunked_head = head(b"HTTP/1.1 200 OK", b"Transfer-Encoding: chunked", b"Content-Encoding: gzip")
    big_head = head(b"HTTP/1.1 200 OK", b"Content-Encoding: gzip")
    plain_head = head(b"HTTP/1.1 200 OK", b"Content-Type: text/html", b"Content-Length: %d" % len(HTML))
    sent = {
        "https://a.test/gzip": (HTML, gz_head, GZ),
        "https://a.test/chunked-gzip": (HTML, chunked_head, chunked(GZ, 1000, b";x=1")),
        "https://a.test/big-gzip": (NOISE, big_head, NOISE_GZ),  # two stored blocks and a part
        "https://a.test/plain": (HTML, plain_head, HTML),
    }
    path = write(tmp_path, [received(url, *answer) for url, answer in sent.items()])
    checks([path])  # warcio and FastWARC: every block and payload digest present and passing
    with open(path, "rb") as fh:
        blocks = {r.rec_headers.get_header("WARC-Target-URI"): r.raw_stream.read()
                  for r in ArchiveIterator(fh, no_record_parse=True) if r.rec_type == "response"}
    for url, (_, raw_head, raw_body) in sent.items():
        assert blocks[url] == raw_head + raw_body
    with open(path, "rb") as fh:  # and a replay tool decodes them
        bodies = {r.rec_headers.get_header("WARC-Target-URI"): r.content_stream().read()
                  for r in ArchiveIterator(fh) if r.rec_type == "response"}
    assert bodies == {url: decoded for url, (decoded, _, _) in sent.items()}
    # warcinfo, then a request and a response member per page
    found = members(path.read_bytes())
    assert len(found) == 1 + 2 * len(sent)
    responses = dict(zip(sent, found[2::2]))
    # the compressed bytes are in the member as they came, not deflated again
    assert GZ in responses["https://a.test/gzip"]
    assert GZ[:900] in responses["https://a.test/chunked-gzip"]
    assert NOISE_GZ[:65_535] in responses["https://a.test/big-gzip"]
    assert NOISE_GZ[65_535:131_070] in responses["https://a.test/big-gzip"]
    assert len(responses["https://a.test/big-gzip"]) < len(NOISE_GZ) + 1000  # the heads, 3 block headers
    # a body that came uncompressed is compressed
    assert HTML[:2000] not in responses["https://a.test/plain"]
    assert len(responses["https://a.test/plain"]) < len(HTML) // 10


def test_a_coding_that_did_not_shrink_the_body_is_compressed(tmp_path: Path) -> None:
    # "Content-Encoding: gzip" on bytes that are not smaller than the page: compressed as any body
    path = write(tmp_path, [received("https://a.test/x", HTML, head(b"HTTP/1.1 200 OK", b"Content-Encoding: gzip"),
                                     HTML)])
    response = members(path.read_bytes())[2]
    assert HTML[:2000] not in response and len(response) < len(HTML) // 10


def test_record_ids_are_unique_and_a_forked_child_draws_its_own() -> None:
    ids = [warcrecords._record_id() for _ in range(3_000)]  # more than one pool of 256
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("<urn:uuid:") and i[24] == "4" for i in ids)  # version 4
    parsed = [uuid.UUID(i[10:-1]) for i in ids]
    assert {(u.version, u.variant) for u in parsed} == {(4, uuid.RFC_4122)}
    assert [str(u) for u in parsed] == [i[10:-1] for i in ids]
    read, write_ = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ID
        os.write(write_, warcrecords._record_id().encode())
        os._exit(0)
    os.close(write_)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child.startswith("<urn:uuid:")
    assert child != warcrecords._record_id()  # not the parent's next one from the same pool
