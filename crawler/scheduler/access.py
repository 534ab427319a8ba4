"""Finding the running frontier scheduler from a component."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.scheduler.scheduler import FrontierScheduler


def frontier_scheduler(crawler: Crawler) -> FrontierScheduler | None:
    """The crawl's :class:`FrontierScheduler`, or None (not open, or another scheduler)."""
    from crawler.scheduler.scheduler import FrontierScheduler

    engine = crawler.engine
    scheduler = getattr(engine, "scheduler", None) if engine is not None else None
    return scheduler if isinstance(scheduler, FrontierScheduler) else None


def uses_frontier(crawler: Crawler) -> bool:
    """Whether the crawl is configured with the frontier scheduler."""
    from scrapy.utils.misc import load_object

    from crawler.scheduler.scheduler import FrontierScheduler

    scheduler = crawler.settings.get("SCHEDULER")
    cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    return isinstance(cls, type) and issubclass(cls, FrontierScheduler)
