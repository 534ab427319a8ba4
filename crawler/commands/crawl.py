"""``scrapy crawl``, with every setting checked and the Redis connection
settled before the crawl starts, and an exit status that tells the truth.

Before the crawl: the settings are validated (:func:`crawler.settings_registry.validate`;
an unknown ``CRAWLER_*`` name is a warning in the log, with the name probably
meant), the embedded Redis is started when ``REDIS_URL`` is unset, and a bad
setting (exit status 2), a bad URL or an unreachable server (exit status 1)
ends the command with one line, ``crawler: error: ...``, not a traceback.

After it: the exit status is 1 when the crawl could not start, when a
component set the stat ``crawler/exit/error`` (a one-line reason: a WARC
writer that failed, a crawl closed while paused for disk space, a frontier
Redis lost, ...), or when the finish reason is one of ours that means
failure (:data:`FAILURE_REASONS`); the last log line is then ``Crawl
failed: <reason>``. Clean reasons (``finished``,
``shutdown``, ``closespider_*``, a spider's own) exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging

from scrapy.commands.crawl import Command as ScrapyCrawl
from scrapy.crawler import Crawler
from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings
from scrapy.spiderloader import get_spider_loader
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from crawler.commands._fail import fail, say, status
from crawler.connection import RedisUnavailable, get_redis, redis_url
from crawler.middlewares.useragent import contact_of
from crawler.settings_registry import SettingsError, validate, warn_unknown

logger = logging.getLogger(__name__)

#: finish reasons of this project that mean the crawl lost work or failed
FAILURE_REASONS = frozenset({"warc_failed", "frontier_lost"})

EXIT_ERROR = "crawler/exit/error"


class Command(ScrapyCrawl):
    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        assert self.settings is not None
        try:
            validate(self.settings, unknown=False)  # unknown names: said in run(), once logging is set up
            spidercls = check_spider(self.settings, args[0], opts.spargs) if args else None
            url = redis_url(self.settings, spidercls)  # the spider may be scrapy-redis's kind
            self.settings.set("REDIS_URL", url, priority="cmdline")
            get_redis(self.settings).close()
        except (SettingsError, RedisUnavailable, FileNotFoundError, RuntimeError) as exc:
            fail(self.settings, exc)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) < 1:
            raise UsageError
        if len(args) > 1:
            raise UsageError("running 'scrapy crawl' with more than one spider is not supported")
        assert self.crawler_process
        crawler = self._create_crawler(args[0])  # kept: the process forgets finished crawlers
        warn_unknown(crawler.settings)  # -s, the project's and the spider's settings, in the log
        errors: list[BaseException] = []
        _on_error(self.crawler_process.crawl(crawler, **opts.spargs), errors.append)
        self.crawler_process.start()
        errors = [_reported(e) for e in errors]
        reason = failure_reason(crawler, errors, self.crawler_process.bootstrap_failed)
        if reason is None:
            return
        self.exitcode = status(errors[0]) if errors else 1
        if errors and isinstance(errors[0], SettingsError | RedisUnavailable):
            say(self.settings, reason, logging_on=True)  # the one line, also in a Scrapyd job's log
            return
        if errors:
            logger.error("The crawl could not start", exc_info=errors[0])
        logger.error("Crawl failed: %s", reason)




def check_spider(settings: BaseSettings, name: str, spargs: dict[str, str]) -> type | None:
    """The class of the spider ``name`` (None if unknown: Scrapy says so);
    ``SettingsError`` when it cannot run with ``spargs``: its module's
    ``check_arguments(**spargs)`` refuses them, or it crawls the open web
    (``requires_contact``) and CRAWLER_CONTACT is unset. Also what ``scrapy
    cluster schedule`` checks before submitting a job."""
    try:
        spidercls = get_spider_loader(settings).load(name)
    except KeyError:
        return None  # Scrapy reports unknown spiders itself
    check = getattr(importlib.import_module(spidercls.__module__), "check_arguments", None)
    if check is not None:
        try:
            check(**spargs)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
    if getattr(spidercls, "requires_contact", False) and not contact_of(settings):
        raise SettingsError(
            f"the {name} spider crawls the open web: set CRAWLER_CONTACT to a URL or e-mail address where "
            "site owners can reach you (-s CRAWLER_CONTACT=..., the environment variable, or cluster's --setting)"
        )
    return spidercls


def _on_error(started: object, record: object) -> None:
    """Hand the exception a crawl failed to start with to ``record``
    (retrieved, so neither Twisted nor asyncio prints it at exit)."""
    if isinstance(started, Deferred):
        def errback(failure: Failure) -> None:
            record(failure.value)  # type: ignore[operator]

        started.addErrback(errback)
    elif isinstance(started, asyncio.Future):
        def done(task: asyncio.Future) -> None:
            if not task.cancelled() and task.exception() is not None:
                record(task.exception())  # type: ignore[operator]

        started.add_done_callback(done)


def _reported(error: BaseException) -> BaseException:
    """The SettingsError or RedisUnavailable behind ``error``, if any: Scrapy
    may raise another error while closing an engine that failed to open."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, SettingsError | RedisUnavailable):
            return seen
        seen = seen.__cause__ or seen.__context__
    return error


def failure_reason(crawler: Crawler, errors: list[BaseException], bootstrap_failed: bool) -> str | None:
    """Why the crawl failed, in one line; None if it did not."""
    if errors:
        error = errors[0]
        if isinstance(error, SettingsError | RedisUnavailable):
            return str(error)
        return f"could not start: {type(error).__name__}: {error}"
    if bootstrap_failed or crawler.stats is None:
        return "could not start (see the errors above)"
    error = crawler.stats.get_value(EXIT_ERROR)
    finish = crawler.stats.get_value("finish_reason")
    if error:
        return f"{error} (finish reason {finish})" if finish else str(error)
    if finish in FAILURE_REASONS:
        return f"finish reason {finish}"
    return None
