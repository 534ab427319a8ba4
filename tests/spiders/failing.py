from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.http import Response

from crawler.spiders.demo import DemoSpider


class FailingSpider(DemoSpider):
    """The demo spider, but its callback raises on pages ending in 3.html."""

    name = "failing"

    def parse(self, response: Response) -> Iterator[Any]:
        if response.url.endswith("3.html"):
            raise ValueError("cannot parse this page")
        yield from super().parse(response)


class OpenWebSpider(DemoSpider):
    """Stands for a crawl of the open web: it needs a contact."""

    name = "openweb"
    requires_contact = True
