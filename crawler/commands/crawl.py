"""``scrapy crawl``, with the Redis connection settled before the crawl starts.

The frontier settings are checked, the embedded Redis is started when
``REDIS_URL`` is unset, and a bad setting, a bad URL or an unreachable server
ends the command with one error line, not a traceback.
"""

from __future__ import annotations

import argparse
import importlib

from scrapy.commands.crawl import Command as ScrapyCrawl
from scrapy.spiderloader import get_spider_loader

from crawler.connection import RedisUnavailable, get_redis, redis_url
from crawler.scheduler.config import SettingsError, exit_with
from crawler.settings_check import check_settings
from crawler.settings_registry import setting


class Command(ScrapyCrawl):
    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        assert self.settings is not None
        try:
            check_settings(self.settings)
            self._check_spider(args, opts)
            url = redis_url(self.settings)
            self.settings.set("REDIS_URL", url, priority="cmdline")
            get_redis(self.settings).close()
        except (SettingsError, RedisUnavailable, FileNotFoundError, RuntimeError) as exc:
            exit_with(exc)

    def _check_spider(self, args: list[str], opts: argparse.Namespace) -> None:
        """A spider module's ``check_arguments(**spargs)`` is run, and spiders of
        the open web (``requires_contact``) need CRAWLER_CONTACT."""
        if not args:
            return
        try:
            spidercls = get_spider_loader(self.settings).load(args[0])
        except KeyError:
            return  # Scrapy reports unknown spiders itself
        check = getattr(importlib.import_module(spidercls.__module__), "check_arguments", None)
        if check is not None:
            try:
                check(**opts.spargs)
            except ValueError as exc:
                raise SettingsError(str(exc)) from None
        if getattr(spidercls, "requires_contact", False) and not str(
            setting(self.settings, "CRAWLER_CONTACT") or ""
        ).strip():
            raise SettingsError(
                f"the {args[0]} spider crawls the open web: set CRAWLER_CONTACT to a URL or "
                "e-mail address where site owners can reach you (-s CRAWLER_CONTACT=... or the "
                "environment variable)"
            )
