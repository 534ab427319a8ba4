from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.http import Response
from scrapy_redis.spiders import RedisSpider
from selectolax.lexbor import LexborHTMLParser


class RedisStartSpider(RedisSpider):
    """An ordinary scrapy-redis spider: start URLs from ``<name>:start_urls``."""

    name = "redisstart"

    def parse(self, response: Response) -> Iterator[Any]:
        for a in LexborHTMLParser(response.body).css("a[href]"):
            href = a.attributes.get("href")
            if href and href.startswith("/p/"):
                yield response.follow(href, callback=self.parse)


class BulkSpider(RedisStartSpider):
    """Hands its links to the frontier as plain URLs, in one call per page,
    through the frontier service; reports page 3 of each site as a dead letter."""

    name = "bulk"

    def parse(self, response: Response) -> Iterator[Any]:
        links = [response.urljoin(a.attributes["href"])
                 for a in LexborHTMLParser(response.body).css("a[href]") if a.attributes.get("href")]
        depth = response.meta.get("depth", 0) + 1
        frontier = self.crawler.frontier
        frontier.offer(links, depth=depth)
        if response.url.endswith("/p/3.html"):
            frontier.dead_letter(response.request, "spider_says_so")
        yield {"url": response.url, "depth": response.meta.get("depth", 0)}
        return


class QuietSpider(RedisStartSpider):
    """Follows nothing: one item per start URL."""

    name = "quiet"

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}
