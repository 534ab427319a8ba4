"""Requests through Redis: meta values of the common types come back as
themselves (msgpack extension types, never pickle); others are refused with
the meta key named."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
import scrapy
from scrapy.utils.test import get_crawler

from crawler.store import codec


class _Spider(scrapy.Spider):
    name = "codec"

    def parse(self, response):  # pragma: no cover - never called
        return None


VALUES = {
    "aware": dt.datetime(2026, 12, 3, 6, 1, 2, 345678, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "naive": dt.datetime(2026, 12, 3, 6, 1, 2),
    "date": dt.date(2026, 12, 3),
    "time": dt.time(6, 1, 2),
    "span": dt.timedelta(days=2, seconds=3, microseconds=4),
    "set": {1, "two", b"three"},
    "frozen": frozenset({("a", 1)}),
    "tuple": (1, ("nested", 2.5), [3]),
    "bytes": b"\x00\xff",
    "decimal": Decimal("12.3400"),
    "nested": {"when": [dt.date(2000, 1, 1), (None, True)]},
}


@pytest.mark.parametrize("key", sorted(VALUES))
def test_meta_values_round_trip_as_themselves(key: str) -> None:
    spider = _Spider.from_crawler(get_crawler(_Spider))
    request = scrapy.Request("https://example.test/", callback=spider.parse, meta={key: VALUES[key]})
    back = codec.decode(codec.encode(request, spider), spider)
    assert back.meta[key] == VALUES[key]
    assert type(back.meta[key]) is type(VALUES[key])
    if key == "tuple":
        assert type(back.meta[key][1]) is tuple and type(back.meta[key][2]) is list


def test_other_values_are_refused_naming_the_key() -> None:
    spider = _Spider.from_crawler(get_crawler(_Spider))
    request = scrapy.Request("https://example.test/", meta={"fine": 1, "handle": object()})
    with pytest.raises(TypeError, match=r"meta\['handle'\] is a object, which cannot travel through Redis"):
        codec.encode(request, spider)
