"""Retries with exponential backoff and jitter, replacing RetryMiddleware.

Retryable: the exceptions of ``RETRY_EXCEPTIONS`` (timeouts, DNS and
connection errors, ...), HTTP 429 and every 5xx. Attempt *n* waits
``min(CRAWLER_BACKOFF_MAX, CRAWLER_BACKOFF_BASE * 2 ** n) + uniform(0,
CRAWLER_BACKOFF_JITTER)`` seconds, or the response's ``Retry-After`` (seconds
or an HTTP date, capped at ``CRAWLER_RETRY_AFTER_MAX``) when that is longer.
The wait happens in the frontier's delayed set, not in the worker. A 429 or
503 also pushes the whole domain back by that wait. After
``CRAWLER_MAX_ATTEMPTS`` attempts the request goes to the dead-letter queue.

Scrapy's retry settings keep their meaning: ``RETRY_ENABLED = False`` is one
attempt (a failure goes straight to the dead-letter queue); ``RETRY_TIMES``,
when the project sets it and ``CRAWLER_MAX_ATTEMPTS`` is unset, is
``RETRY_TIMES + 1`` attempts; ``RETRY_HTTP_CODES``, when set, replaces "429
and every 5xx"; ``RETRY_PRIORITY_ADJUST``, when set, is added to a retry's
priority; the meta keys ``dont_retry`` and ``max_retry_times`` (retries of
that request) are obeyed. ``RETRY_EXCEPTIONS`` is read as Scrapy does.
"""

from __future__ import annotations

import logging
import random
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import load_object

from crawler.clock import SYSTEM, Clock, clock_of
from crawler.fetch.errors import FINAL
from crawler.fetch.errors import reason as failure_reason
from crawler.meta import ATTEMPTS, DEAD, DELAY, ROBOTS
from crawler.worker import uses_frontier
from crawler.worker import session_of
from crawler.settings_registry import SettingsError, setting

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

PUSH_DOMAIN = (429, 503)


def _set_by_project(settings: BaseSettings, name: str) -> bool:
    """``name`` was set above Scrapy's defaults (project, spider, command line)."""
    return settings.get(name) is not None and settings.getpriority(name) > 0


def retry_http_codes(settings: BaseSettings) -> frozenset[int] | None:
    """``RETRY_HTTP_CODES`` as integers when the project sets it, else None
    (429 and every 5xx). Scrapy's form: a list of integers, which the
    registry's ``list`` form (strings) does not describe."""
    if not _set_by_project(settings, "RETRY_HTTP_CODES"):
        return None
    codes = settings.getlist("RETRY_HTTP_CODES")
    try:
        parsed = frozenset(int(c) for c in codes)
    except (TypeError, ValueError):
        raise SettingsError(f"RETRY_HTTP_CODES must be a list of HTTP status codes, got {codes!r}") from None
    if not all(100 <= c <= 599 for c in parsed):
        raise SettingsError(f"RETRY_HTTP_CODES must be a list of HTTP status codes, got {codes!r}")
    return parsed


def parse_retry_after(value: bytes | None, now: float | None = None, *, clock: Clock = SYSTEM) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date,
    whose distance is taken from ``now``, else ``clock.time()``: the crawl's
    clock, ``crawler/clock.py``); None for anything else (``"²".isdigit()``
    is true: ASCII digits only)."""
    if not value:
        return None
    text = value.decode("latin-1").strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (clock.time() if now is None else now))


class BackoffMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "CRAWLER_BACKOFF_ENABLED"):
            raise NotConfigured
        if not uses_frontier(crawler):
            raise NotConfigured("BackoffMiddleware needs the frontier scheduler")
        self.crawler = crawler
        self.clock = clock_of(crawler)  # what a Retry-After date is measured from
        self.stats = crawler.stats
        self.base = setting(settings, "CRAWLER_BACKOFF_BASE")
        self.max = setting(settings, "CRAWLER_BACKOFF_MAX")
        self.jitter = setting(settings, "CRAWLER_BACKOFF_JITTER")
        self.retry_after_max = setting(settings, "CRAWLER_RETRY_AFTER_MAX")
        self.max_attempts = setting(settings, "CRAWLER_MAX_ATTEMPTS")
        if settings.get("CRAWLER_MAX_ATTEMPTS") is None and _set_by_project(settings, "RETRY_TIMES"):
            self.max_attempts = setting(settings, "RETRY_TIMES") + 1
        if not setting(settings, "RETRY_ENABLED"):
            self.max_attempts = 1  # Scrapy's meaning: no retries; failures still reach the dead-letter queue
        self.retry_enabled = setting(settings, "RETRY_ENABLED")
        self.codes = retry_http_codes(settings)
        self.priority_adjust = (setting(settings, "RETRY_PRIORITY_ADJUST")
                                if _set_by_project(settings, "RETRY_PRIORITY_ADJUST") else 0)
        self.exceptions = tuple(
            load_object(e) if isinstance(e, str) else e for e in settings.getlist("RETRY_EXCEPTIONS")
        )
        self.random = random.Random()  # seeded from os.urandom: each worker its own pattern

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BackoffMiddleware:
        return cls(crawler)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        wait = min(self.max, self.base * 2**attempt)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.retry_after_max))
        return wait + self.random.uniform(0, self.jitter)

    def process_response(self, request: Request, response: Response) -> Request | Response:
        status = response.status
        if request.meta.get("dont_retry") or request.meta.get(ROBOTS):
            return response
        if not self._retryable(status):
            return response
        header = response.headers.get(b"Retry-After")
        retry_after = parse_retry_after(header, clock=self.clock)
        if header and retry_after is None:
            self.stats.inc_value("crawler/backoff/retry_after_ignored")
        retry = self._retry(request, f"http_{status}", status, retry_after,
                            push_domain=status in PUSH_DOMAIN)
        return retry or response

    def _retryable(self, status: int) -> bool:
        if self.codes is not None:
            return status in self.codes
        return status == 429 or 500 <= status <= 599

    def process_exception(self, request: Request, exception: Exception) -> Request | None:
        if request.meta.get("dont_retry") or request.meta.get(ROBOTS):
            return None
        if not isinstance(exception, self.exceptions) or isinstance(exception, FINAL):
            return None  # FINAL: another attempt would fail the same way
        return self._retry(request, type(exception).__name__, None, None, exception=exception)

    def _retry(self, request: Request, reason: str, status: int | None, retry_after: float | None,
               *, push_domain: bool = False, exception: Exception | None = None) -> Request | None:
        attempts = int(request.meta.get(ATTEMPTS, 1))
        session = session_of(self.crawler)
        limit = self.max_attempts
        if self.retry_enabled and request.meta.get("max_retry_times") is not None:
            limit = int(request.meta["max_retry_times"]) + 1  # Scrapy's meta key: retries of this request
        wait = self.delay(attempts, retry_after)
        if push_domain and session is not None:
            # the site asked the whole domain to wait (429/503): it waits
            # whether or not this request is tried again
            session.push_domain(request.url, wait)
        if attempts >= limit:
            self.stats.inc_value("crawler/backoff/exhausted")
            logger.info("Gave up on %s after %d attempts (%s)", request, attempts, reason)
            if session is not None:
                why = "retries_exhausted" if exception is None else failure_reason(exception, "retries_exhausted")
                session.dead_letter(request, why, status=status, exception=exception)
            request.meta[DEAD] = True
            return None
        self.stats.inc_value("crawler/backoff/retries")
        self.stats.inc_value(f"crawler/backoff/reason/{reason}")
        logger.debug("Retrying %s in %.2fs (attempt %d, %s)", request, wait, attempts + 1, reason)
        retry = request.replace(dont_filter=True, priority=request.priority + self.priority_adjust)
        retry.meta[ATTEMPTS] = attempts + 1
        retry.meta[DELAY] = wait
        return retry
