"""``demo``: follows every ``<a href>`` from its start URLs (selectolax).

    scrapy crawl demo -a start_urls=http://d0.test:8800/,http://d1.test:8800/

A small spider for the demo and the tests; the ``billion`` spider is the
real crawl.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response, TextResponse
from selectolax.lexbor import LexborHTMLParser


class DemoSpider(scrapy.Spider):
    name = "demo"

    def __init__(self, start_urls: str = "", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start_urls = [u.strip() for u in start_urls.split(",") if u.strip()]
        if not self.start_urls:
            raise ValueError("demo: pass -a start_urls=URL[,URL...]")

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for url in self.start_urls:
            self.crawler.stats.inc_value("crawler/requests_offered")
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[Any]:
        if not isinstance(response, TextResponse):
            return
        tree = LexborHTMLParser(response.body)
        hrefs = [a.attributes.get("href") for a in tree.css("a[href]")]
        links = 0
        for href in hrefs:
            if not href or href.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
                continue
            links += 1
            yield response.follow(href, callback=self.parse)
        self.crawler.stats.inc_value("crawler/requests_offered", links)
        yield {"url": response.url, "status": response.status, "links": links,
               "bytes": len(response.body), "truncated": "truncated" in response.flags}
