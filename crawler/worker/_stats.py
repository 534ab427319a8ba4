from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector


def inc(stats: StatsCollector | None, key: str, count: int = 1) -> None:
    """Count ``key``; a zero count leaves no key behind."""
    if count and stats is not None:
        stats.inc_value(key, count)
