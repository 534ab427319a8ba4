"""Acknowledging leases: a dequeued request is done when its page's output
has been handed to the frontier, or when it has failed for good.

Both middlewares sit next to the engine, so they see what every other
middleware left: a response whose callback output is exhausted (including the
empty output of an HTTP error), or an exception no middleware turned into a
retry. A retried or redirected copy carries the lease back into the
scheduler, which acknowledges it once the copy is stored.

Each acknowledgement says how the request ended: a page whose callback output
is exhausted is stored (once the WARC writer holds it, when WARC is on), a
request given up on is a dead letter, one refused on purpose (robots.txt, a
filter) is disallowed or skipped, as the middlewares noted on it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured

from crawler.meta import LEASE
from crawler.worker import DEAD, SKIPPED, STORED, end_of
from crawler.worker import uses_frontier
from crawler.worker import session_of

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class _Acker:
    def __init__(self, crawler: Crawler) -> None:
        if not uses_frontier(crawler):
            raise NotConfigured("SCHEDULER is not the frontier scheduler")
        self.crawler = crawler

    def ack(self, request: Request, end: str) -> None:
        session = session_of(self.crawler)
        lease = session.lease_of(request) if session is not None else None
        if lease is not None:
            lease.ack(end_of(request, end), request)


class FrontierAckSpiderMiddleware(_Acker):
    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierAckSpiderMiddleware:
        return cls(crawler)

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        lease = response.meta.get(LEASE)
        async for item in result:
            if lease is not None and isinstance(item, Request) and item.meta.get(LEASE) == lease:
                del item.meta[LEASE]  # a child that copied its parent's meta
            yield item
        if lease is not None:
            self.ack(response.request, STORED)  # type: ignore[arg-type]

    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        if response.request is not None and LEASE in response.meta:
            self.ack(response.request, DEAD)


class FrontierAckDownloaderMiddleware(_Acker):
    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierAckDownloaderMiddleware:
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        if LEASE in request.meta:
            self.ack(request, SKIPPED if isinstance(exception, IgnoreRequest) else DEAD)
