"""Size cap and content filter.

Bodies are cut at ``CRAWLER_MAX_PAGE_BYTES`` (250,000 in ``billion``; 0, the
default elsewhere, cuts nothing): the download stops
(``StopDownload(fail=False)``) once that many bytes have arrived, and the
body is trimmed to exactly that many bytes and flagged ``truncated``
(``response.meta["crawler_truncated"]`` is True). With ``CRAWLER_HTML_ONLY`` (``billion``'s),
a response whose Content-Type is not HTML is stopped at its headers and
never downloaded. robots.txt requests have their own limit
(``CRAWLER_ROBOTS_MAX_BYTES``) and are never filtered by type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured, StopDownload

from crawler.fetch import keeps_alive
from crawler.meta import (
    ANY_TYPE,
    NON_HTML,
    ROBOTS,
    TRUNCATED,
    page_limit,
)
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Headers, Response

HTML_TYPES = ("text/html", "application/xhtml+xml")


class SizeCapMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "CRAWLER_SIZECAP_ENABLED"):
            raise NotConfigured
        self.max_bytes = setting(settings, "CRAWLER_MAX_PAGE_BYTES")
        self.html_only = setting(settings, "CRAWLER_HTML_ONLY")
        self.keepalive = keeps_alive(settings)
        self.stats = crawler.stats
        # bytes so far per request being downloaded; weak: a response that never reaches
        # process_response here (a redirect the middleware before this one follows) leaves nothing
        self.received: WeakKeyDictionary[Request, int] = WeakKeyDictionary()
        crawler.signals.connect(self.headers_received, signal=signals.headers_received)
        crawler.signals.connect(self.bytes_received, signal=signals.bytes_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SizeCapMiddleware:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        if not self.keepalive:
            request.headers.setdefault(b"Connection", b"close")

    def limit(self, request: Request) -> int:
        return page_limit(request.meta, self.max_bytes)

    def headers_received(self, headers: Headers, body_length: int, request: Request, **kwargs: Any) -> None:
        if not self.html_only or request.meta.get(ROBOTS) or request.meta.get(ANY_TYPE):
            return
        content_type = (headers.get(b"Content-Type") or b"").decode("latin-1").split(";")[0].strip().lower()
        if content_type and content_type not in HTML_TYPES:
            request.meta[NON_HTML] = content_type
            raise StopDownload(fail=False)

    def bytes_received(self, data: bytes, request: Request, **kwargs: Any) -> None:
        total = self.received.get(request, 0) + len(data)
        self.received[request] = total
        self.stats.inc_value("crawler/bytes_received", len(data))
        limit = self.limit(request)
        if limit and total >= limit:
            self.received.pop(request, None)
            raise StopDownload(fail=False)

    def process_response(self, request: Request, response: Response) -> Response:
        self.received.pop(request, None)
        if request.meta.get(NON_HTML):
            self.stats.inc_value("crawler/skipped/non_html")
            raise IgnoreRequest(f"not HTML ({request.meta[NON_HTML]}): not downloaded")
        limit = self.limit(request)
        if limit and (len(response.body) > limit or "download_stopped" in response.flags):
            self.stats.inc_value("crawler/truncated")
            request.meta[TRUNCATED] = True
            # the handler ends a cut body at the cap: no copy of it (a sitemap's is 50 MiB)
            body = response.body if len(response.body) <= limit else response.body[:limit]
            return response.replace(body=body, flags=[*response.flags, "truncated"])
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self.received.pop(request, None)
