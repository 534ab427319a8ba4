"""Dead letters: requests that failed for good go to the frontier's DLQ.

The downloader middleware sits next to the engine: it records final HTTP
errors (404, 410, other 4xx; 5xx that no retry handled) and final download
errors, named by ``crawler.fetch.errors.reason`` (``data_loss``,
``decode_failure``, ``too_large``, ``refused_address``, ``bad_host``,
``refused_url``, ``unsupported_scheme``, else ``download_error``). The redirect middleware records the redirects it gives up on. The
spider middleware records exceptions raised by callbacks (``parse_error``).
Requests refused on purpose (robots.txt, filters) are not dead letters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
from scrapy.exceptions import IgnoreRequest, NotConfigured, StopDownload
from scrapy.spidermiddlewares.httperror import HttpError

from crawler.fetch.errors import REFUSED, reason
from crawler.meta import DEAD, ROBOTS
from crawler.worker import uses_frontier
from crawler.worker import session_of
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
        session = session_of(self.crawler)
        if session is not None:
            request.meta[DEAD] = True
            session.dead_letter(request, reason, status=status, exception=exception)


class DeadLetterMiddleware(_DeadLetterBase):
    def process_response(self, request: Request, response: Response) -> Response:
        if response.status >= 400:
            self.record(request, f"http_{response.status}", status=response.status)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if isinstance(exception, StopDownload) or (
                isinstance(exception, IgnoreRequest) and not isinstance(exception, REFUSED)):
            return  # stopped or refused on purpose (non-HTML content, robots.txt, filters)
        self.record(request, reason(exception, "download_error"), exception=exception)


class DeadLetterRedirectMiddleware(RedirectMiddleware):
    """Scrapy's RedirectMiddleware, whose give-ups are dead letters:
    ``too_many_redirects`` (``REDIRECT_MAX_TIMES``, loops included) and
    ``redirect_unsupported_scheme`` (a ``Location`` that is not http(s),
    which Scrapy hands on as the 3xx response). Scrapy raises the first from
    ``process_response``, where no ``process_exception`` sees it."""

    letters: DeadLetterMiddleware | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DeadLetterRedirectMiddleware:
        middleware = super().from_crawler(crawler)
        try:
            middleware.letters = DeadLetterMiddleware(crawler)
        except NotConfigured:
            pass
        return middleware

    def process_response(self, request: Request, response: Response, spider: object = None) -> Request | Response:
        try:
            result = super().process_response(request, response)
        except IgnoreRequest as exc:
            if self.letters is not None:
                self.letters.record(request, "too_many_redirects", status=response.status, exception=exc)
            raise
        if (result is response and self.letters is not None and response.status in _REDIRECTS
                and b"Location" in response.headers and not _handled(request, response, self.crawler)):
            self.letters.record(request, "redirect_unsupported_scheme", status=response.status,
                                exception=response.headers[b"Location"].decode("latin-1")[:200])
        return result


_REDIRECTS = (301, 302, 303, 307, 308)


def _handled(request: Request, response: Response, crawler: Crawler) -> bool:
    """The 3xx is the spider's to handle, as RedirectMiddleware decides it."""
    meta = request.meta
    return bool(meta.get("dont_redirect") or meta.get("handle_httpstatus_all")
                or response.status in meta.get("handle_httpstatus_list", ())
                or response.status in getattr(crawler.spider, "handle_httpstatus_list", ()))


class DeadLetterSpiderMiddleware(_DeadLetterBase):
    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        if isinstance(exception, (HttpError, IgnoreRequest)) or response.request is None:
            return
        self.record(response.request, "parse_error", status=response.status, exception=exception)
