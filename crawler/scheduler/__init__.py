"""The Redis frontier: ``SCHEDULER = "crawler.scheduler.FrontierScheduler"``."""

from crawler.scheduler.scheduler import FrontierScheduler

__all__ = ["FrontierScheduler"]
