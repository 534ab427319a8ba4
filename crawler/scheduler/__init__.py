"""Scrapy's scheduler on the worker session::

    SCHEDULER = "crawler.scheduler.FrontierScheduler"
    REQUEST_FINGERPRINTER_CLASS = "crawler.scheduler.Fingerprinter"

``scheduler`` adapts Scrapy's scheduler methods onto the worker session
(``crawler.worker``); ``Fingerprinter`` lives in ``crawler.identity``.
"""

from crawler.identity import Fingerprinter
from crawler.scheduler.scheduler import FrontierScheduler

__all__ = ["Fingerprinter", "FrontierScheduler"]
