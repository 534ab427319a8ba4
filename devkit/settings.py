"""The project's settings for the demo, the tests and the benchmarks: the
local test web's ``*.test`` hosts resolve to 127.0.0.1 and may be fetched
(private addresses are refused otherwise). Use it with
``SCRAPY_SETTINGS_MODULE=devkit.settings`` and the checkout on ``PYTHONPATH``.
"""

from crawler.settings import *  # noqa: F403

CRAWLER_HOST_MAP = {"*.test": "127.0.0.1"}
CRAWLER_ALLOW_PRIVATE = ["*.test"]
# The test web answers every domain on 127.0.0.1: one server built to take
# the load of all of them, as a CDN's front end is. Declared so, billion's
# per-address politeness (CRAWLER_IP_DELAY) gives it no turn of its own and
# the demo and tests keep each domain's pace; a test web spread over
# 127.1.x.y (WebConfig.addresses) gets the full per-address turn.
CRAWLER_IP_SHARED = ["127.0.0.1/32"]
CRAWLER_IP_SHARED_DELAY = 0.0
CRAWLER_IP_SHARED_CONCURRENCY = 100_000
