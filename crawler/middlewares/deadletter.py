"""Dead letters: requests that failed for good go to the frontier's DLQ.

The downloader middleware sits next to the engine: it records final HTTP
errors (404, 410, other 4xx; 5xx that no retry handled) and final download
errors. The spider middleware records exceptions raised by callbacks
(``parse_error``). Requests refused on purpose (robots.txt, filters) are not
dead letters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest, NotConfigured, StopDownload
from scrapy.spidermiddlewares.httperror import HttpError

from crawler.meta import DEAD, ROBOTS
from crawler.scheduler.access import frontier_scheduler, uses_frontier
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class _DeadLetterBase:
    def __init__(self, crawler: Crawler) -> None:
        if not setting(crawler.settings, "CRAWLER_DLQ_ENABLED") or not uses_frontier(crawler):
            raise NotConfigured
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler):  # type: ignore[no-untyped-def]
        return cls(crawler)

    def record(self, request: Request, reason: str, *, status: int | None = None,
               exception: BaseException | None = None) -> None:
        if request.meta.get(DEAD) or request.meta.get(ROBOTS):
            return
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is not None:
            request.meta[DEAD] = True
            scheduler.reports.dead_letter(request, reason, status=status, exception=exception)


class DeadLetterMiddleware(_DeadLetterBase):
    def process_response(self, request: Request, response: Response) -> Response:
        if response.status >= 400:
            self.record(request, f"http_{response.status}", status=response.status)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if isinstance(exception, StopDownload):
            return  # stopped on purpose (non-HTML content)
        if isinstance(exception, IgnoreRequest):
            if "max redirections" in str(exception):
                self.record(request, "too_many_redirects", exception=exception)
            return
        self.record(request, "download_error", exception=exception)


class DeadLetterSpiderMiddleware(_DeadLetterBase):
    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        if isinstance(exception, (HttpError, IgnoreRequest)) or response.request is None:
            return
        self.record(response.request, "parse_error", status=response.status, exception=exception)
