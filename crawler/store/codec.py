"""Requests to bytes and back, for the frontier's queues: msgpack, never pickle.

Two kinds of entries: ``U<depth> <url>`` for links added in bulk (they become
plain GET requests to the spider's ``parse`` when dequeued), and ``R`` +
msgpack of ``Request.to_dict()`` for any other request (callbacks by name).

The layout the frontier's scripts rely on: per-address politeness
(``lua/dequeue.lua``'s ``host_of``) reads the host of a queued entry without
unpacking it, from ``U<depth> <url>``, or from an ``R`` entry whose msgpack
map (fixmap, map16 or map32) has ``url`` as its first key and the URL as a
str (fixstr, str8, str16 or str32). :func:`encode` keeps ``url`` first; an
entry laid out otherwise is counted (``ip_layout_errors``) and handed out
without its address's turn. ``tests/test_codec.py`` holds both sides to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.utils.request import request_from_dict

from crawler import serializers
from crawler.meta import ADDRESS, LEASE

if TYPE_CHECKING:
    from scrapy import Spider


def encode_url(url: str, depth: int = 0) -> bytes:
    return b"U%d %s" % (depth, url.encode())


def encode(request: Request, spider: Spider) -> bytes:
    """Raises ``TypeError`` or ``ValueError`` when the request cannot travel
    (a callback that is not a spider method; meta holding a value msgpack
    cannot carry, the message naming its key)."""
    data = request.to_dict(spider=spider)
    if next(iter(data)) != "url":  # the scripts read the host there (above)
        data = {"url": data["url"], **data}
    meta = data.get("meta")
    if meta and (LEASE in meta or ADDRESS in meta):  # this lease's, never the next one's
        data["meta"] = meta = {k: v for k, v in meta.items() if k != LEASE and k != ADDRESS}
    try:
        return b"R" + serializers.dumps(data)
    except TypeError as exc:
        for key, value in (meta or {}).items():
            try:
                serializers.dumps(value)
            except TypeError:
                raise TypeError(f"meta[{key!r}] is a {type(value).__name__}, which cannot travel "
                                "through Redis (msgpack; never pickle)") from None
        raise exc


def decode(entry: bytes, spider: Spider) -> Request:
    kind = entry[:1]
    if kind == b"U":
        depth, _, url = entry[1:].partition(b" ")
        return Request(url.decode(), meta={"depth": int(depth)})
    if kind == b"R":
        return request_from_dict(serializers.loads(entry[1:]), spider=spider)
    raise ValueError(f"unknown frontier entry {entry[:20]!r}")
