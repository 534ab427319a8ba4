from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import Response, TextResponse
from scrapy.linkextractors import LinkExtractor


class FollowAllSpider(scrapy.Spider):
    """Plain Scrapy: follow every link with Scrapy's LinkExtractor."""

    name = "followall"

    def __init__(self, start_urls: str = "", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start_urls = start_urls.split(",")
        self.links = LinkExtractor()

    def parse(self, response: Response) -> Iterator[Any]:
        if not isinstance(response, TextResponse):
            return
        for link in self.links.extract_links(response):
            yield scrapy.Request(link.url, callback=self.parse)
        yield {"url": response.url}
