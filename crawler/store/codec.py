"""Requests to bytes and back, for the frontier's queues: msgpack, never pickle.

Three kinds of entries: ``U<depth> <url>`` for links added in bulk (they
become plain GET requests to the spider's ``parse`` when dequeued), ``R`` +
msgpack of ``Request.to_dict()`` for any other request (callbacks by name),
and ``V<k>:<trust>:<mu>:<record>`` for a revisit of a tracked URL, which only
``lua/dequeue.lua`` makes (design/recrawl.md E): ``k`` the URL's history key
(decimal), ``trust`` the host's trust bits (decimal: 1 no If-None-Match, 2 no
If-Modified-Since, 4 no validators), ``mu`` the domain's change rate (a
float, or empty) and ``record`` its packed history
(:mod:`crawler.recrawl.record`), whose last part is the ``U`` or ``R`` entry
the URL was leased as. :func:`decode` turns it into that entry's request with
``meta[RECRAWL_STATE] = {"k": str, "record": bytes, "trust": int, "mu": float
| None}``; a retry of it is encoded as an ``R`` entry that keeps that state
(its bytes travel in msgpack), and what the last answer showed
(``RECRAWL_SEEN``) is left behind, as the lease is. A ``V`` entry that is not
one (fields missing, not numbers, a record :func:`~crawler.recrawl.record.unpack`
refuses) raises a one-line ``ValueError``, as an unknown entry does.

The layout the frontier's scripts rely on: per-address politeness
(``lua/dequeue.lua``'s ``host_of``) reads the host of a queued entry without
unpacking it, from ``U<depth> <url>``, or from an ``R`` entry whose msgpack
map (fixmap, map16 or map32) has ``url`` as its first key and the URL as a
str (fixstr, str8, str16 or str32). :func:`encode` keeps ``url`` first; an
entry laid out otherwise is counted (``ip_layout_errors``) and handed out
without its address's turn. A ``V`` entry's host is its record's inner
entry's: the record starts right after the third ``:``, and its entry after
the fixed part (39 bytes, 69 with flag 0x01, the WARC part), the ETag's
length byte and the ETag (``crawler/recrawl/record.py``).
``tests/test_codec.py`` holds both sides to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.utils.request import request_from_dict

from crawler import serializers
from crawler.meta import ADDRESS, LEASE, RECRAWL_SEEN, RECRAWL_STATE
from crawler.recrawl.record import unpack

if TYPE_CHECKING:
    from scrapy import Spider


#: meta of one attempt, never carried into the next: its lease, its address, its answer
_LEFT_BEHIND = frozenset({LEASE, ADDRESS, RECRAWL_SEEN})


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
    if meta and (LEASE in meta or ADDRESS in meta or RECRAWL_SEEN in meta):  # this lease's, never the next one's
        data["meta"] = meta = {k: v for k, v in meta.items() if k not in _LEFT_BEHIND}
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
    """Raises ``ValueError`` (one line) for an entry that is none of the three kinds."""
    kind = entry[:1]
    if kind == b"V":
        return _revisit(entry, spider)
    if kind == b"U":
        depth, _, url = entry[1:].partition(b" ")
        return Request(url.decode(), meta={"depth": int(depth)})
    if kind == b"R":
        return request_from_dict(serializers.loads(entry[1:]), spider=spider)
    raise ValueError(f"unknown frontier entry {entry[:20]!r}")


def encode_revisit(k: str, trust: int, mu: float | None, record: bytes) -> bytes:
    """The ``V`` entry ``lua/dequeue.lua`` leases a revisit as (tests and tools)."""
    return b"V%s:%d:%s:%s" % (k.encode(), trust, b"" if mu is None else repr(float(mu)).encode(), record)


def _revisit(entry: bytes, spider: Spider) -> Request:
    parts = entry[1:].split(b":", 3)
    if len(parts) != 4:
        raise ValueError(f"malformed revisit entry {entry[:40]!r}: V<k>:<trust>:<mu>:<record> expected")
    k, trust, mu, record = parts
    if not k.isdigit() or not trust.isdigit() or (mu and not _is_float(mu)):
        raise ValueError(f"malformed revisit entry {entry[:40]!r}: k and trust must be decimal, mu a number or empty")
    try:
        history = unpack(record)  # its entry is a U or an R entry, or it is refused
    except ValueError as exc:
        raise ValueError(f"malformed revisit entry {entry[:40]!r}: {exc}") from None
    request = decode(history.entry, spider)
    request.meta[RECRAWL_STATE] = {"k": k.decode(), "record": bytes(record), "trust": int(trust),
                                   "mu": float(mu) if mu else None}
    return request


def _is_float(text: bytes) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return value == value and value not in (float("inf"), float("-inf"))
