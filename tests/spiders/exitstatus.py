from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.exceptions import CloseSpider
from scrapy.http import Response

from crawler.spiders.demo import DemoSpider


class ExitStatusSpider(DemoSpider):
    """The demo spider, ending its crawl after the first page as ``how`` says:
    ``stat`` sets ``crawler/exit/error`` as a component that lost work does,
    ``reason`` closes with the failure reason ``frontier_lost``, ``clean``
    closes with a spider's own reason (``done``)."""

    name = "exitstatus"

    def __init__(self, how: str = "clean", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.how = how

    def parse(self, response: Response) -> Iterator[Any]:
        if self.how == "stat":
            self.crawler.stats.set_value("crawler/exit/error", "exitstatus: 3 pages not stored")
            raise CloseSpider("finished")
        raise CloseSpider("frontier_lost" if self.how == "reason" else "done")
        yield
