"""Scrapy's HTTP/1.1 download handler, made polite and cheap.

    DOWNLOAD_HANDLERS = {"http": "crawler.download.HTTPDownloadHandler",
                         "https": "crawler.download.HTTPSDownloadHandler"}

- No silent re-sends: Twisted's connection pool sends a request again, on a
  new connection, when a kept-alive one fails before the answer (the site
  may well have received the first); the site then sees two requests at
  once, which no politeness rule allowed. Here such a failure is an error
  like any other, retried by the backoff middleware after its wait.
- HTTPS through :class:`crawler.tls.ReusingContextFactory`: one TLS context,
  sessions resumed per host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler

from crawler.tls import ReusingContextFactory

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class HTTPDownloadHandler(HTTP11DownloadHandler):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._pool.retryAutomatically = False


class HTTPSDownloadHandler(HTTPDownloadHandler):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._contextFactory = ReusingContextFactory.from_crawler(crawler)
