"""Whether a crawl is configured with the frontier scheduler (components
that need it raise ``NotConfigured`` otherwise). What they ask of the open
frontier goes through ``crawler.frontier`` (``service.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def uses_frontier(crawler: Crawler) -> bool:
    """Whether the crawl is configured with the frontier scheduler."""
    from scrapy.utils.misc import load_object

    from crawler.scheduler.scheduler import FrontierScheduler  # it imports the components that ask

    scheduler = crawler.settings.get("SCHEDULER")
    cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    return isinstance(cls, type) and issubclass(cls, FrontierScheduler)
