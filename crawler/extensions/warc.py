"""Every fetched page to local disk as gzip WARC/1.1 (warcio).

On when ``CRAWLER_WARC_DIR`` is set. One writer per process; files are named
``<spider>-<shard>-<host>-<pid>-<UTC time>-<n>.warc.gz`` (no two processes
share a file) and rotated at ``CRAWLER_WARC_MAX_BYTES`` (1 GB). Each page is a
request record and a response record holding the body as received (cut at
``CRAWLER_MAX_PAGE_BYTES``, then marked ``WARC-Truncated: length``).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from io import BytesIO
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import NotConfigured
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawler.middlewares.sizecap import ROBOTS, TRUNCATED

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)
_DROP = {b"content-encoding", b"transfer-encoding", b"content-length"}


class WarcExtension:
    def __init__(self, crawler: Crawler) -> None:
        directory = crawler.settings.get("CRAWLER_WARC_DIR")
        if not directory:
            raise NotConfigured
        self.directory = Path(directory)
        self.max_bytes = crawler.settings.getint("CRAWLER_WARC_MAX_BYTES", 1_000_000_000)
        self.stats = crawler.stats
        self.file: IO[bytes] | None = None
        self.writer: WARCWriter | None = None
        self.count = 0
        self.prefix = ""
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.response_received, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> WarcExtension:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        shard = int(getattr(spider, "shard", 0))
        self.prefix = f"{spider.name}-{shard:03d}-{socket.gethostname()}-{os.getpid()}"
        self.directory.mkdir(parents=True, exist_ok=True)

    def spider_closed(self) -> None:
        self._close()

    def _open(self) -> WARCWriter:
        if self.writer is None:
            self.count += 1
            stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
            path = self.directory / f"{self.prefix}-{stamp}-{self.count:05d}.warc.gz"
            self.file = open(path, "xb")  # "x": never two writers on one file
            self.writer = WARCWriter(self.file, gzip=True, warc_version="WARC/1.1")
            info = self.writer.create_warcinfo_record(path.name, {"software": "polite-crawler",
                                                                  "format": "WARC File Format 1.1"})
            self.writer.write_record(info)
            self.stats.inc_value("crawler/warc/files")
            logger.info("Writing WARC file %s", path)
        return self.writer

    def _close(self) -> None:
        if self.file is not None:
            self.file.close()
        self.file, self.writer = None, None

    def response_received(self, response: Response, request: Request, spider: Spider) -> None:
        if request.meta.get(ROBOTS):
            return
        writer = self._open()
        parts = urlsplit(request.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        request_headers = StatusAndHeaders(
            f"{request.method} {target} HTTP/1.1",
            [(k.decode("latin-1"), v.decode("latin-1")) for k, vs in request.headers.items() for v in vs]
            + [("Host", parts.netloc)],
            is_http_request=True,
        )
        response_headers = StatusAndHeaders(
            f"{response.status} {_reason(response.status)}",
            [(k.decode("latin-1"), v.decode("latin-1")) for k, vs in response.headers.items()
             for v in vs if k.lower() not in _DROP] + [("Content-Length", str(len(response.body)))],
            protocol="HTTP/1.1",
        )
        warc_headers = {"WARC-Truncated": "length"} if request.meta.get(TRUNCATED) else None
        writer.write_record(writer.create_warc_record(
            request.url, "request", payload=BytesIO(request.body or b""), http_headers=request_headers))
        writer.write_record(writer.create_warc_record(
            request.url, "response", payload=BytesIO(response.body), http_headers=response_headers,
            warc_headers_dict=warc_headers))
        self.stats.inc_value("crawler/warc/records", 2)
        assert self.file is not None
        if self.file.tell() >= self.max_bytes:
            self._close()


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
