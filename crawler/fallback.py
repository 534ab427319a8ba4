"""A URL's second chance: ``meta["crawler_fallback_url"]`` is tried once when
the first URL's server cannot be connected to (refused, or no TLS).

billion's seeds carry one (``https://`` <-> ``http://``). The robots.txt
middleware honours it when the robots.txt of the first origin cannot
connect; the spider's errback when the page itself cannot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import DownloadConnectionRefusedError, DownloadFailedError
from twisted.internet.error import ConnectError, TCPTimedOutError, TimeoutError

from crawler.meta import FALLBACK

if TYPE_CHECKING:
    from scrapy import Request

# A timeout is not among them: a server that connected and then said
# nothing in time is slow, not absent.
_CONNECT_ERRORS = (DownloadConnectionRefusedError, ConnectError, TCPTimedOutError, TimeoutError)


def cannot_connect(error: BaseException) -> bool:
    """The server refused the connection or did not speak TLS."""
    if isinstance(error, _CONNECT_ERRORS):
        return True
    return isinstance(error, DownloadFailedError) and "TLS handshake" in str(error)


def fallback_request(request: Request) -> Request | None:
    """``request`` sent to its fallback URL (which has none of its own), or None."""
    url = request.meta.get(FALLBACK)
    if not url:
        return None
    meta = {k: v for k, v in request.meta.items() if k != FALLBACK}
    return request.replace(url=url, meta=meta, dont_filter=True)
