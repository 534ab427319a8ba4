"""Scrapy's side of a response: its signals while it arrives, then the
:class:`~scrapy.http.Response` built from the exchange.

``headers_received`` is sent once the head is in, ``bytes_received`` with
each piece of the decoded body as it is kept (at most
:data:`~crawler.fetch._exchange.PIECE` bytes, as Scrapy's handler passes on
its reads; where nothing listens to it, as in a billion crawl, the body is
not cut into pieces at all); a ``StopDownload`` from either stops reading there, and the
response carries the body up to and including that piece, flagged
``download_stopped``, as with Scrapy's handler.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydispatch import dispatcher
from scrapy import signals
from scrapy.exceptions import ResponseDataLossError, StopDownload
from scrapy.http import Headers
from scrapy.responsetypes import responsetypes
from twisted.python.failure import Failure

from crawler.fetch import received
from crawler.fetch._exchange import TooLarge

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.internet.ssl import Certificate

    from crawler.clock import Clock
    from crawler.fetch._address import Address
    from crawler.fetch._exchange import Exchange

logger = logging.getLogger("crawler.fetch.handler")  # the handler's messages, as they always were


class Responses:
    """What every response of one handler shares: settings, signals, the
    data-loss warning given once."""

    def __init__(self, crawler: Crawler, clock: Clock) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.clock = clock
        self.fail_on_dataloss = settings.getbool("DOWNLOAD_FAIL_ON_DATALOSS")
        self.warnsize = settings.getint("DOWNLOAD_WARNSIZE")
        self.warned_dataloss = False

    def listened(self, signal: object) -> bool:
        """Whether anything is connected to ``signal`` now (a dictionary look-up
        or two): the body is cut into ``bytes_received`` pieces only for a listener."""
        return any(True for _ in dispatcher.liveReceivers(
            dispatcher.getAllReceivers(self.crawler.signals.sender, signal)))

    def signal(self, signal: object, request: Request, **kwargs: Any) -> StopDownload | None:
        results = self.crawler.signals.send_catch_log(signal=signal, request=request, spider=self.crawler.spider,
                                                      dont_log=StopDownload, **kwargs)
        for _, result in results:
            if isinstance(result, Failure) and isinstance(result.value, StopDownload):
                # the traceback's frames hold the page and this frame: a cycle
                # that would keep the body until the next full collection
                result.tb = result.value.__traceback__ = None
                return result.value
        return None


class Reception:
    """One response as it arrives: the exchange's callbacks, then the response."""

    def __init__(self, responses: Responses, request: Request, start: float) -> None:
        self.responses = responses
        self.request = request
        self.start = start
        self.headers: Headers | None = None
        self.stop: StopDownload | None = None  # from a signal handler

    def head(self, exchange: Exchange) -> bool:
        """The head is in: False stops the download here."""
        request = self.request
        request.meta["download_latency"] = self.responses.clock.monotonic() - self.start
        headers = self.headers = Headers(exchange.headers)
        expected = exchange.expected
        # the smaller cap acts once the length is known: DOWNLOAD_MAXSIZE (or meta download_maxsize)
        # under the page cap fails here, as in Scrapy; a page cap as small or smaller reads to the cap
        if expected is not None and exchange.cap < exchange.limit and expected > exchange.maxsize:
            where = "meta download_maxsize" if "download_maxsize" in request.meta else "DOWNLOAD_MAXSIZE"
            exchange.fail(TooLarge(f"Expected to receive {expected} bytes which is larger than download max "
                                   f"size ({exchange.maxsize}, {where})"))
            return False
        self.stop = self.responses.signal(signals.headers_received, request, headers=headers, body_length=expected)
        return self.stop is None

    def data(self, piece: bytes) -> bool:
        """A piece of the body is kept: False stops the download after it."""
        self.stop = self.responses.signal(signals.bytes_received, self.request, data=piece)
        return self.stop is None

    def response(self, exchange: Exchange, address: Address | None, certificate: Certificate | None) -> Response:
        """The response the exchange ended with (a ``StopDownload(fail=True)``
        raised with it attached, as Scrapy's handler does)."""
        request, responses = self.request, self.responses
        headers = self.headers
        assert headers is not None
        stop = self.stop
        body = exchange.body()
        if exchange.decoder is not None:
            if exchange.codings_left:  # an unknown coding: what is left of the header, as Scrapy leaves it
                headers[b"Content-Encoding"] = exchange.codings_left
            else:
                headers.pop(b"Content-Encoding", None)
        if exchange.bad_header_lines:
            responses.stats.inc_value("crawler/fetch/bad_header_lines", exchange.bad_header_lines)
        flags: list[str] = []
        if exchange.dataloss:
            if request.meta.get("download_fail_on_dataloss", responses.fail_on_dataloss):
                if not responses.warned_dataloss:
                    responses.warned_dataloss = True
                    logger.warning("Got data loss in %s. Set DOWNLOAD_FAIL_ON_DATALOSS = False to keep "
                                   "broken responses; this message is not shown again.", request.url)
                raise ResponseDataLossError(f"the connection ended before the body of {request.url}")
            flags.append("dataloss")
        if stop is not None or exchange.cut:
            flags.append("download_stopped")
        elif exchange.until_close and not exchange.dataloss:
            flags.append("partial")  # as Twisted's PotentialDataLoss: no length said where the body ends
        warnsize = request.meta.get("download_warnsize", responses.warnsize)
        if warnsize and exchange.received > warnsize:
            logger.warning("Received %d bytes, over DOWNLOAD_WARNSIZE (%d), for %s",
                           exchange.received, warnsize, request)
        if exchange.raw_parts is not None:
            received.keep(request, received.Received(
                exchange.raw_head, exchange.raw_body(body),
                cut=exchange.cut or stop is not None, dataloss=exchange.dataloss))
        respcls = responsetypes.from_args(headers=headers, url=request.url, body=body)
        response = respcls(url=request.url, status=exchange.status, headers=headers, body=body, flags=flags,
                           certificate=certificate, ip_address=address,
                           protocol=exchange.version.decode("latin-1"))
        self.stop = None
        if stop is not None and stop.fail:
            stop.response = response
            try:
                raise stop
            finally:
                stop = None  # the traceback holds this frame: no cycle back to the exception
        return response
