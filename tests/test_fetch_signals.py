"""Scrapy's signals while a body arrives, through crawler.fetch against
servers on 127.0.0.1: ``bytes_received`` in pieces no larger than one read
of Scrapy's own handler, ``StopDownload`` stopping at the piece it was
raised in (Scrapy's test_bytes_received_stop_download_callback and
_errback, at the handler and in a crawl), and a body decoded in steps over
HTTPS and on a kept-alive connection."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from typing import Any

import pytest
import trustme
from scrapy import signals
from scrapy.exceptions import StopDownload

from crawler.fetch._exchange import DECODE_STEP, PIECE
from tests.servers import ROOT
from tests.test_fetch_handler import fetch, handler, serve  # noqa: F401 - serve is a fixture

FULL = 2 ** 18  # the body of Scrapy's BytesReceivedCallbackSpider: 256 KiB
PAGE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % FULL + b"x" * FULL


def test_pieces_are_no_larger_than_a_read_of_scrapys_handler(serve) -> None:
    """A body that comes in one large write is passed on in pieces of at
    most PIECE bytes (Twisted's TLS read; its TCP read is 2**16), every
    byte once, over HTTP and HTTPS."""
    ca = trustme.CA()
    body = bytes(range(256)) * 4096  # 1 MiB
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    plain, tls = serve(answer), serve(answer, tls=ca)
    h = handler(CRAWLER_MAX_PAGE_BYTES=0, DOWNLOAD_MAXSIZE=0)
    pieces: list[bytes] = []
    h.crawler.signals.connect(lambda data, **_: pieces.append(data), signal=signals.bytes_received, weak=False)
    first, second = fetch(h, plain.url(), tls.url(host="a.test", scheme="https"))
    assert first.body == second.body == body
    assert b"".join(pieces) == body * 2
    assert max(len(p) for p in pieces) <= PIECE == 2 ** 15
    assert len(pieces) >= 2 * len(body) // PIECE


@pytest.mark.parametrize("fail", [False, True])
def test_bytes_received_stop_download_keeps_the_pieces_passed_on(serve, fail: bool) -> None:
    """Scrapy's test_bytes_received_stop_download_callback (fail=False) and
    _errback (fail=True), at the handler: the response (on the exception
    for fail=True) carries the bytes the one signal carried, fewer than the
    whole body, flagged download_stopped."""
    server = serve(PAGE)
    h = handler()
    seen: list[bytes] = []

    def stop(data: bytes, **_: Any) -> None:
        seen.append(data)
        raise StopDownload(fail=fail)

    h.crawler.signals.connect(stop, signal=signals.bytes_received, weak=False)
    (result,) = fetch(h, server.url())
    if fail:
        assert isinstance(result, StopDownload), repr(result)
        result = result.response
    assert len(seen) == 1  # the signal was sent once
    assert result.body == seen[0] and 0 < len(result.body) < FULL
    assert len(result.body) <= PIECE
    assert "download_stopped" in result.flags


def test_a_stop_at_the_first_piece_ends_the_download_there(serve) -> None:
    """Reading stops at the piece: of a 64 MiB body, one piece is kept, and
    the connection is not kept (its end was not reached)."""
    big = 64 << 20
    server = serve(lambda head: [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % big + b"x" * 100_000,
                                 b"y" * (big - 100_000)])
    h = handler(CRAWLER_MAX_PAGE_BYTES=0, DOWNLOAD_MAXSIZE=0, DOWNLOAD_TIMEOUT=30)

    def stop(**_: Any) -> None:
        raise StopDownload(fail=False)

    h.crawler.signals.connect(stop, signal=signals.bytes_received, weak=False)
    first, second = fetch(h, server.url(), server.url())
    assert len(first.body) <= PIECE and len(second.body) <= PIECE
    assert len(server.peers) == 2  # each on a connection of its own


_CRAWL = r"""
import json, sys
from scrapy import Request, Spider, signals
from scrapy.crawler import CrawlerProcess
from scrapy.exceptions import StopDownload

url, fail = sys.argv[1], sys.argv[2] == "errback"
meta = {}


class BytesReceived(Spider):
    # as Scrapy's BytesReceivedCallbackSpider / BytesReceivedErrbackSpider
    name = "bytes_received"

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.bytes_received, signals.bytes_received)
        return spider

    async def start(self):
        yield Request(url, errback=self.errback)

    def parse(self, response):
        meta["response"] = {"body": len(response.body), "flags": response.flags,
                            "same": response.body == meta["data"]}

    def errback(self, failure):
        response = getattr(failure.value, "response", None)
        meta["failure"] = {"kind": type(failure.value).__name__, "body": len(response.body) if response else -1,
                           "same": response is not None and response.body == meta["data"]}

    def bytes_received(self, data, request, spider):
        meta["data"] = data
        meta["signals"] = meta.get("signals", 0) + 1
        raise StopDownload(fail=fail)


process = CrawlerProcess({
    "DOWNLOAD_HANDLERS": {"http": "crawler.fetch.DownloadHandler", "https": "crawler.fetch.DownloadHandler"},
    "DOWNLOAD_TIMEOUT": 10, "RETRY_ENABLED": False, "TELNETCONSOLE_ENABLED": False, "LOG_LEVEL": "INFO",
    "CRAWLER_ALLOW_PRIVATE": ["127.0.0.1/32"],
})
process.crawl(BytesReceived)
process.start()
meta.pop("data", None)
print(json.dumps(meta))
"""


@pytest.mark.parametrize("how", ["callback", "errback"])
def test_bytes_received_stop_download_in_a_crawl(serve, how: str) -> None:
    """Scrapy's two crawl tests with this handler in a plain Scrapy crawl:
    one signal, a body shorter than the page's, the signal's bytes."""
    server = serve(PAGE)
    result = subprocess.run([sys.executable, "-c", _CRAWL, server.url("/alpayload"), how], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    meta = json.loads(result.stdout.splitlines()[-1])
    assert meta["signals"] == 1, meta
    if how == "callback":
        assert "failure" not in meta, meta
        outcome = meta["response"]
        assert "download_stopped" in outcome["flags"]
    else:
        assert "response" not in meta, meta
        outcome = meta["failure"]
        assert outcome["kind"] == "StopDownload"
    assert outcome["same"] and 0 < outcome["body"] < FULL, meta


def _inflating(size: int) -> tuple[bytes, bytes]:
    body = b"<html>" + b"\0" * size
    packed = gzip.compress(body, mtime=0)
    return body, (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(packed) + packed)


def test_a_body_decoded_in_steps_over_https(serve) -> None:
    """Reading pauses between decoding steps over TLS too."""
    body, answer = _inflating(DECODE_STEP * 3)
    server = serve(answer, tls=trustme.CA())
    (response,) = fetch(handler(CRAWLER_MAX_PAGE_BYTES=0, DOWNLOAD_MAXSIZE=0, DOWNLOAD_TIMEOUT=20),
                        server.url(host="a.test", scheme="https"))
    assert not isinstance(response, Exception), repr(response)
    assert response.body == body


def test_a_connection_kept_after_a_body_decoded_in_steps_reads_again(serve) -> None:
    """The body ended on the wire while its decoded output waited: once it is
    out, the kept connection reads the next response."""
    body, answer = _inflating(DECODE_STEP * 3)
    server = serve(answer)
    h = handler(CRAWLER_MAX_PAGE_BYTES=0, DOWNLOAD_MAXSIZE=0, DOWNLOAD_TIMEOUT=5)
    results = fetch(h, server.url("/1"), server.url("/2"))
    assert [r.body == body for r in results if not isinstance(r, Exception)] == [True, True], results
    assert len(server.peers) == 1  # the second on the kept connection
