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


# --- the layout lua/dequeue.lua reads the host from (per-address politeness) ---

def _str_header(n: int) -> bytes:
    """The msgpack str header of a string of n bytes."""
    if n < 32:
        return bytes([0xA0 + n])
    if n < 256:
        return b"\xd9" + n.to_bytes(1, "big")
    if n < 65536:
        return b"\xda" + n.to_bytes(2, "big")
    return b"\xdb" + n.to_bytes(4, "big")


class _Many(scrapy.Request):
    """A request class with more fields than a fixmap holds (16 and more)."""

    attributes = (*scrapy.Request.attributes, "one", "two", "three")

    def __init__(self, *args, one=1, two=2, three=3, **kwargs):
        super().__init__(*args, **kwargs)
        self.one, self.two, self.three = one, two, three


# fixstr, str8, str16 (a URL longer than 255 bytes), str32 (longer than 65,535)
LENGTHS = {"fixstr": 20, "str8": 200, "str16": 3_000, "str32": 70_000}


def _url(length: int, host: str = "a.test") -> str:
    head = f"http://{host}/"
    return head + "p" * (length - len(head))


@pytest.mark.parametrize("kind", sorted(LENGTHS))
def test_an_entry_opens_with_its_url(kind: str) -> None:
    spider = _Spider.from_crawler(get_crawler(_Spider))
    url = _url(LENGTHS[kind])
    for request, map_header in ((scrapy.Request(url, meta={"url": "http://elsewhere.test/"}), None),
                                (_Many(url), b"\xde")):
        entry = codec.encode(request, spider)
        opening = b"R" + (map_header or b"")
        assert entry.startswith(opening)
        at = len(opening) if map_header else 2  # a fixmap's header is its first byte
        if map_header:
            at += 2
        else:
            assert 0x80 <= entry[1] <= 0x8F
        assert entry[at:at + 4] == b"\xa3url"
        assert entry[at + 4:].startswith(_str_header(len(url)) + url.encode())
    assert codec.encode_url(url, 3) == b"U3 " + url.encode()


def _gated(client, clock):
    from crawler.store import AddressPoliteness, Frontier, Keys

    f = Frontier(client, Keys("crawler", "codec", 0), addresses=AddressPoliteness(delay=1.0), clock=clock)
    f.open()
    return f


def test_the_frontier_reads_the_host_of_every_encoding(redis_client, clock) -> None:
    from crawler.store import Item

    spider = _Spider.from_crawler(get_crawler(_Spider))
    entries = {}
    for kind, length in LENGTHS.items():
        entries[f"{kind}.test"] = codec.encode(scrapy.Request(_url(length, f"{kind}.test")), spider)
        entries[f"map16-{kind}.test"] = codec.encode(_Many(_url(length, f"map16-{kind}.test")), spider)
        entries[f"bulk-{kind}.test"] = codec.encode_url(_url(length, f"bulk-{kind}.test"))
    f = _gated(redis_client, clock)
    f.add([Item(bytes([i]) * 32, domain, 0, entry) for i, (domain, entry) in enumerate(entries.items())])
    got = f.take(100)
    assert sorted(got.lookups) == sorted((d, d) for d in entries)  # each host looked up, none handed out
    assert got.items == []
    counters = redis_client.hgetall(f.keys.stats)
    assert b"ip_layout_errors" not in counters and b"ip_unreadable" not in counters


def test_an_entry_laid_out_otherwise_is_refused_loudly(redis_client, clock) -> None:
    # "url" is not the first key: its host is never guessed from elsewhere in
    # the entry (here meta's "url"); counted, logged by Redis, handed out
    # uncharged (so nothing is lost)
    import msgpack

    from crawler.store import Item

    entry = b"R" + msgpack.packb({"meta": {"url": "http://elsewhere.test/"}, "url": "http://right.test/"})
    f = _gated(redis_client, clock)
    f.add([Item(b"1" * 32, "right.test", 0, entry)])
    got = f.take(10)
    assert got.lookups == []
    assert [(x.domain, x.address) for x in got.items] == [("right.test", "")]
    assert redis_client.hget(f.keys.stats, "ip_layout_errors") == b"1"
