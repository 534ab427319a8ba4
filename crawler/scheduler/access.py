"""Finding the running frontier scheduler from a component."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.scheduler.scheduler import FrontierScheduler


@cache
def _frontier_class() -> type[FrontierScheduler]:
    # imported on first use, not at import time (the scheduler imports this
    # module), and once: it is called for every request
    from crawler.scheduler.scheduler import FrontierScheduler

    return FrontierScheduler


def frontier_scheduler(crawler: Crawler) -> FrontierScheduler | None:
    """The crawl's :class:`FrontierScheduler`, or None (not open, or another scheduler)."""
    engine = crawler.engine
    scheduler = getattr(engine, "scheduler", None) if engine is not None else None
    return scheduler if isinstance(scheduler, _frontier_class()) else None


def uses_frontier(crawler: Crawler) -> bool:
    """Whether the crawl is configured with the frontier scheduler."""
    from scrapy.utils.misc import load_object

    scheduler = crawler.settings.get("SCHEDULER")
    cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    return isinstance(cls, type) and issubclass(cls, _frontier_class())
