"""The project's settings for the demo, the tests and the benchmarks: the
local test web's ``*.test`` hosts resolve to 127.0.0.1 and may be fetched
(private addresses are refused otherwise). Use it with
``SCRAPY_SETTINGS_MODULE=devkit.settings`` and the checkout on ``PYTHONPATH``.
"""

from crawler.settings import *  # noqa: F403

CRAWLER_HOST_MAP = {"*.test": "127.0.0.1"}
CRAWLER_ALLOW_PRIVATE = ["*.test"]
