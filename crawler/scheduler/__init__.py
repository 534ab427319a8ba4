"""The Redis frontier and Scrapy's scheduler on it::

    SCHEDULER = "crawler.scheduler.FrontierScheduler"
    REQUEST_FINGERPRINTER_CLASS = "crawler.scheduler.Fingerprinter"

Public modules: ``scheduler`` (the scheduler), ``service`` (what components
may ask of the open frontier, ``crawler.frontier``), ``frontier`` (the
frontier in Redis, without Scrapy) and ``identity`` (canonical URLs,
fingerprints, registered domains). Modules whose names start with ``_`` are
internal.
"""

from crawler.scheduler.identity import Fingerprinter
from crawler.scheduler.scheduler import FrontierScheduler

__all__ = ["Fingerprinter", "FrontierScheduler"]
