"""WARC records as received: the response's bytes as the server sent them
(gzip kept, chunk framing kept, cut at the cap), block and payload digests on
every record, request and response linked; checked by warcio and FastWARC."""

from __future__ import annotations

import asyncio
import gzip
import random
import subprocess
import sys
from pathlib import Path

import pytest
from fastwarc.warc import ArchiveIterator as FastIterator
from fastwarc.warc import WarcRecordType
from scrapy import Request
from scrapy.utils.test import get_crawler
from warcio.archiveiterator import ArchiveIterator

from crawler.fetch import DownloadHandler, received
from crawler.fetch._exchange import Exchange
from crawler.warcfile import Page, WarcWriter
from tests.rawserver import RawServer, base_settings
from tests.servers import run_scrapy, scrapy_env
from tests.test_fetch_handler import ThreadServer

PAGE = b"<!DOCTYPE html><html><body><p>" + b"stored as received " * 400 + b"</p></body></html>"
GZ = gzip.compress(PAGE, mtime=0)
NOISE = random.Random(7).randbytes(300_000).hex().encode()  # 600,000 bytes, gzip keeps about half
BIG_GZ = gzip.compress(NOISE, 1, mtime=0)
CAP = 100_000


def chunked(data: bytes, size: int, extension: bytes = b"") -> bytes:
    out = [b"%x%s\r\n%s\r\n" % (len(data[i:i + size]), extension, data[i:i + size])
           for i in range(0, len(data), size)]
    return b"".join(out) + b"0\r\n\r\n"


def head(*lines: bytes) -> bytes:
    return b"\r\n".join(lines) + b"\r\n\r\n"


ANSWERS = {
    "/gzip": head(b"HTTP/1.1 200 OK", b"Content-Type: text/html", b"content-encoding:   gzip",
                  b"X-Odd:  spaced  ", b"Content-Length: %d" % len(GZ)) + GZ,
    "/chunked-gzip": head(b"HTTP/1.1 200 Fine", b"Content-Type: text/html", b"Transfer-Encoding: chunked",
                          b"Content-Encoding: gzip") + chunked(GZ, 700, b";x=1"),
    "/chunked": head(b"HTTP/1.1 200 OK", b"Content-Type: text/html; charset=utf-8",
                     b"Transfer-Encoding: chunked") + chunked(PAGE, 1000),
    "/big": head(b"HTTP/1.1 200 OK", b"Content-Type: text/html", b"Content-Length: %d" % len(NOISE)) + NOISE,
    "/big-gzip": head(b"HTTP/1.1 200 OK", b"Content-Type: text/html", b"Content-Encoding: gzip",
                      b"Content-Length: %d" % len(BIG_GZ)) + BIG_GZ,
}
CUT = {"/big", "/big-gzip"}


def answer(request_head: bytes) -> bytes:
    path = request_head.split(b" ", 2)[1].decode()
    return ANSWERS.get(path, head(b"HTTP/1.1 404 Not Found", b"Content-Length: 0"))


def checks(paths: list[Path]) -> None:
    """Both readers' own checkers pass, with every digest present and checked."""
    for path in paths:
        result = subprocess.run([sys.executable, "-c", "from warcio.cli import main; main()", "check", "-v",
                                 str(path)], capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        records = result.stdout.count("WARC-Record-ID")
        assert records > 1
        assert result.stdout.count("digest pass") == records, result.stdout  # none "no digest to check"
        fast = subprocess.run([sys.executable, "-c", "from fastwarc.cli import main; main()", "check", "-p",
                               str(path)], capture_output=True, text=True, timeout=60, check=False)
        assert fast.returncode == 0, fast.stdout + fast.stderr
        assert f"{records} records were verified successfully" in fast.stdout, fast.stdout
        with open(path, "rb") as fh:
            blocks = [record.verify_block_digest() for record in FastIterator(fh, parse_http=False)]
        with open(path, "rb") as fh:
            payloads = [record.verify_payload_digest()
                        for record in FastIterator(fh, record_types=WarcRecordType.response)]
        assert len(blocks) == records and all(blocks)
        assert payloads and all(payloads)


def test_a_crawl_stores_responses_as_the_server_sent_them(redis_url: str, tmp_path: Path) -> None:
    server = ThreadServer(answer, close=True)
    try:
        urls = {path: f"http://w{n}.test:{server.port}{path}" for n, path in enumerate(ANSWERS)}
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("\n".join(urls.values()))
        warc_dir = tmp_path / "warc"
        result = run_scrapy(
            ["crawl", "billion", "-a", f"seeds={seeds}", "-s", "CRAWLER_DOMAIN_DELAY=0",
             "-s", f"CRAWLER_WARC_DIR={warc_dir}", "-s", f"CRAWLER_MAX_PAGE_BYTES={CAP}",
             "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CLOSESPIDER_TIMEOUT=60"],
            scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    files = sorted(warc_dir.glob("*.warc.gz"))
    checks(files)
    blocks: dict[str, tuple] = {}
    requests: dict[str, str] = {}
    ids: dict[str, str] = {}
    for path in files:
        with open(path, "rb") as fh:
            for record in ArchiveIterator(fh, no_record_parse=True):
                url = record.rec_headers.get_header("WARC-Target-URI")
                if record.rec_type == "response":
                    blocks[url] = (record.rec_headers, record.raw_stream.read())
                    ids[url] = record.rec_headers.get_header("WARC-Record-ID")
                elif record.rec_type == "request":
                    requests[url] = record.rec_headers.get_header("WARC-Concurrent-To")
    for path, url in urls.items():
        rec, block = blocks[url]
        sent = ANSWERS[path]
        assert requests[url] == ids[url]  # the request names its response
        assert rec.get_header("WARC-IP-Address") == "127.0.0.1"
        if path in CUT:
            assert rec.get_header("WARC-Truncated") == "length"
            assert sent.startswith(block)  # the bytes as received, up to where reading stopped
            assert len(block) < len(sent)
            if path == "/big":  # neither encoded nor chunked: cut at the cap exactly
                assert len(block) == sent.index(b"\r\n\r\n") + 4 + CAP
        else:
            assert rec.get_header("WARC-Truncated") is None
            assert block == sent  # exactly what the server sent
    # a replay tool decodes them as a browser would
    for path in files:
        with open(path, "rb") as fh:
            for record in ArchiveIterator(fh):
                url = record.rec_headers.get_header("WARC-Target-URI")
                if record.rec_type == "response" and url in (urls["/gzip"], urls["/chunked-gzip"],
                                                             urls["/chunked"]):
                    assert record.content_stream().read() == PAGE


@pytest.mark.parametrize("path", sorted(ANSWERS))
def test_the_handler_keeps_the_bytes_read_split_anywhere(path: str) -> None:
    sent = ANSWERS[path]

    async def go() -> tuple[object, received.Received | None]:
        handler = DownloadHandler(get_crawler(settings_dict=base_settings(
            CRAWLER_WARC_DIR="/nonexistent", CRAWLER_MAX_PAGE_BYTES=CAP)))
        server = RawServer(sent, piece=701)  # reads end inside chunk lines and heads
        port = await server.start()
        request = Request(f"http://127.0.0.1:{port}{path}")
        try:
            response = await handler.download_request(request)
        finally:
            server.stop()
            await handler.close()
        return response, received.take(request)

    response, raw = asyncio.run(go())
    assert raw is not None
    body_start = sent.index(b"\r\n\r\n") + 4
    assert raw.head == sent[:body_start]
    if path in CUT:
        assert raw.cut and sent[body_start:].startswith(raw.body)
        assert len(raw.body) == CAP if path == "/big" else len(raw.body) > 0
    else:
        assert not raw.cut and raw.head + raw.body == sent
    # the response still means what Scrapy says: decoded, Content-Encoding dropped
    assert b"Content-Encoding" not in response.headers
    assert response.body[:len(PAGE)] in (PAGE, NOISE[:len(PAGE)])


SMALL_CHUNKED = head(b"HTTP/1.1 200 OK", b"Transfer-Encoding: chunked", b"Content-Encoding: gzip") + \
    chunked(gzip.compress(b"<p>small</p>" * 20, mtime=0), 17, b"; name=value") + b"HTTP/1.1 200 OK"


@pytest.mark.parametrize("piece", [1, 2, 3, 5, 8, 13, 64])
def test_raw_bytes_are_exact_wherever_the_reads_end(piece: int) -> None:
    async def go() -> tuple[Exchange, bytes]:  # an exchange needs a running loop
        exchange = Exchange(lambda e: True, CAP, 0, 65536, head_only=False, raw=True)
        for i in range(0, len(SMALL_CHUNKED), piece):
            if exchange.finished:
                break
            exchange.feed(SMALL_CHUNKED[i:i + piece])
        return exchange, exchange.body()

    exchange, body = asyncio.run(go())
    sent = SMALL_CHUNKED[:-len(b"HTTP/1.1 200 OK")]  # bytes after the body are not the response's
    assert exchange.raw_head + exchange.raw_body(body) == sent
    assert body == b"<p>small</p>" * 20


def test_no_raw_bytes_without_warc_storage() -> None:
    async def go() -> received.Received | None:
        handler = DownloadHandler(get_crawler(settings_dict=base_settings()))
        server = RawServer(ANSWERS["/gzip"])
        port = await server.start()
        request = Request(f"http://127.0.0.1:{port}/gzip")
        try:
            await handler.download_request(request)
        finally:
            server.stop()
            await handler.close()
        return received.take(request)

    assert asyncio.run(go()) is None


def test_rebuilt_records_of_another_handler_pass_both_checkers(tmp_path: Path) -> None:
    writer = WarcWriter(lambda n: tmp_path / f"f{n}.warc.gz", max_queued=0)
    writer.put(Page("https://a.test/x?q=1", "POST", [(b"User-Agent", b"crawler/0.1")], b"a=1", 200,
                    [(b"Content-Type", b"text/html"), (b"Content-Encoding", b"gzip")], PAGE))
    writer.put(Page("https://a.test/cut", "GET", [], b"", 200, [(b"Content-Type", b"text/html")], PAGE[:500],
                    truncated=True))
    writer.close()
    files = sorted(tmp_path.glob("*.warc.gz"))
    checks(files)
    with open(files[0], "rb") as fh:
        records = [(r.rec_type, r.rec_headers, r.http_headers, r.content_stream().read()) for r in ArchiveIterator(fh)]
    responses = [r for r in records if r[0] == "response"]
    assert [r[3] for r in responses] == [PAGE, PAGE[:500]]
    assert responses[0][2].get_header("Content-Encoding") is None  # decoded body, header dropped
    requests = [r for r in records if r[0] == "request"]
    assert [r[1].get_header("WARC-Concurrent-To") for r in requests] == \
        [r[1].get_header("WARC-Record-ID") for r in responses]
    assert requests[0][3] == b"a=1"

