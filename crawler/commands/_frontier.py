"""What the frontier commands (``dlq``, ``frontier``) share: finding a frontier."""

from __future__ import annotations

import argparse

from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings

from crawler.commands._fail import fail
from crawler.connection import RedisUnavailable, get_redis, mask_url, redis_url
from crawler.worker.config import FrontierSettings
from crawler.store import Frontier
from crawler.store import Keys
from crawler.settings_registry import SettingsError


def add_frontier_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shard", type=int, default=None, help="shard number (default: CRAWLER_SHARD)")


def open_frontiers(settings: BaseSettings, spider: str, shard: int | None,
                   *, every_shard: bool = False) -> list[Frontier]:
    """The existing frontier of ``shard`` (None: ``CRAWLER_SHARD``), or with
    ``every_shard`` and no ``shard``, those of every shard of the spider found
    in Redis; bare (no settings applied). UsageError if there is none."""
    try:
        config = FrontierSettings.from_settings(settings)
        client = get_redis(settings)
    except (SettingsError, RedisUnavailable) as exc:
        fail(settings, exc)  # exit status 2 for a bad setting, 1 for an unreachable Redis
    if shard is not None and shard < 0:
        raise UsageError(f"--shard must be >= 0, got {shard}", print_help=False)
    frontier = Frontier(client, Keys(config.prefix, spider, config.shard if shard is None else shard))
    if every_shard and shard is None:
        shards = frontier.shards()
        if shards:
            return [Frontier(client, Keys(config.prefix, spider, s)) for s in shards]
        raise UsageError(f"no frontier of spider {spider!r} in Redis at {mask_url(redis_url(settings))} "
                         "(unknown spider?)", print_help=False)
    if not frontier.exists():
        raise UsageError(
            f"no frontier {frontier.keys.base} in Redis at {mask_url(redis_url(settings))} "
            "(unknown spider or shard?)", print_help=False)
    return [frontier]
