"""Responses as they came off the wire, for WARC records.

When WARC storage is on (``CRAWLER_WARC_DIR``), :class:`~crawler.fetch.DownloadHandler`
keeps, for each response it builds, the bytes the server sent: the status
line and header lines as received (``Content-Encoding`` and
``Transfer-Encoding`` included) and the body before decoding, chunk framing
included, cut where reading stopped (the page cap, ``DOWNLOAD_MAXSIZE``, a
``StopDownload``). The response itself means what Scrapy says it means
(decoded body, ``Content-Encoding`` dropped).

They are held here, keyed weakly by the request, not in ``request.meta``:
meta is copied into retries and redirects and travels to Redis with them,
and raw bytes must do neither. :func:`take` hands them over once; a request
nobody takes them for drops them when it is freed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from scrapy import Request


@dataclass(slots=True)
class Received:
    head: bytes  # status line and header lines as received, with the empty line that ends them
    body: bytes  # body bytes as received: before decoding, chunk framing included
    cut: bool = False  # reading stopped before the body's end
    dataloss: bool = False  # the connection ended before the body's end


_received: WeakKeyDictionary[Request, Received] = WeakKeyDictionary()


def keep(request: Request, received: Received) -> None:
    _received[request] = received


def take(request: Request) -> Received | None:
    """``request``'s response as received (once), or None: not fetched by
    this handler, or WARC storage is off."""
    return _received.pop(request, None)
