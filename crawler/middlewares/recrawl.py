"""Revisits over HTTP: validators out, what the answer showed in, and the 304
routed to no callback (design/recrawl.md C.3, C.4; the contract: E).

``RecrawlMiddleware`` is a downloader middleware at 585: responses reach it
after redirects (600) and decompression (590), before the size cap (580)
and backoff (550). The addon places it only when ``CRAWLER_RECRAWL`` is not
``off``; with ``off`` it refuses to load (``NotConfigured``).

**Requests.** A revisit (``meta[RECRAWL_STATE]``, set by
``crawler/store/codec.py`` from a ``V`` entry) goes with ``If-None-Match``
(the record's ETag as received, ``W/`` kept when weak) and
``If-Modified-Since`` (the record's Last-Modified as an HTTP date), each
unless the host's trust bits say no (:data:`NO_ETAG`, :data:`NO_LAST_MODIFIED`),
none with :data:`NO_VALIDATORS`, and none on a verification: when
``(int(k) + n) % CRAWLER_RECRAWL_VERIFY_EVERY == 0`` (n: the record's visits)
or the record's verify flag is set. Which were sent is noted as
``RECRAWL_STATE["sent"]`` and ``RECRAWL_SEEN["sent"]``: ``""``, ``"e"``,
``"m"`` or ``"em"``; the history builder judges lying hosts from it.
Counted: ``crawler/recrawl/conditional`` (sent with validators),
``crawler/recrawl/verify`` (a verification).

**Responses.** Every response to a tracked request (any request while
recrawl is on, except robots.txt requests and those with ``meta[RECRAWL]``
``False``) gets ``meta[RECRAWL_SEEN]``: ``{"status": int, "etag": bytes (as
received, b"" none), "weak": bool, "lm": Unix s (0 none), "date": the Date
header's Unix s (0 none), "length": body bytes, "chg": 6 bytes or None,
"sent": str}``. ``chg`` is the change key of a 200, None for any other
status: with ``CRAWLER_RECRAWL_SIGNATURE = digest`` the first 6 bytes of the
SHA-1 of the (decoded) body; with ``text`` 48 bits of the SHA-1 of its
visible text (:func:`text_key`, the tree read as
``crawler.links.LinkExtractor.page(..., signature=True)`` reads it), left
None here when the spider declares ``recrawl_signature = True`` (it sets
``chg`` in its callback, as billion does), and the digest for a body that is
not text.

**A 304 to a request that sent validators** (exactly as C.3 says):

- allowed by ``HttpErrorMiddleware``'s own rule (304 in the request's
  ``handle_httpstatus_list``, ``handle_httpstatus_all``, the spider's
  ``handle_httpstatus_list``, ``HTTPERROR_ALLOWED_CODES``,
  ``HTTPERROR_ALLOW_ALL``): ``meta[NOT_MODIFIED] = True`` and ``meta[END] =
  "n"``, and the response goes on to the callback as is;
- otherwise it goes on with a copy of its request, ``request.replace(
  callback=not_modified, errback=None)``, whose meta adds
  ``handle_httpstatus_list: [304]``, ``END: "n"`` and ``NOT_MODIFIED: True``.
  :func:`not_modified` returns nothing: neither the spider's callback nor
  its errback runs, no "Ignoring response" is logged, the WARC writer sees
  the copy (``response_received``) and the acknowledgement ends the lease
  ``n``. The response as received moves to the copy for the WARC record.

Both count in ``crawler/recrawl/not_modified``. A 304 to a request that sent
no validators is left to Scrapy, as before (not counted).
"""

from __future__ import annotations

import hashlib
import logging
from email.utils import formatdate, parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import NotConfigured
from scrapy.http import TextResponse
from selectolax.lexbor import LexborHTMLParser

from crawler._hrefscan import risky, visible_text
from crawler.fetch import received as raw_responses
from crawler.links import _HIDDEN, text_signature
from crawler.meta import END, NOT_MODIFIED, RECRAWL, RECRAWL_SEEN, RECRAWL_STATE, ROBOTS
from crawler.recrawl import TRUST_NO_ETAG, TRUST_NO_LM, TRUST_NONE
from crawler.recrawl.record import History, unpack
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: a host's trust bits, as ``lua/dequeue.lua`` writes them into a ``V`` entry
NO_ETAG = TRUST_NO_ETAG  # no If-None-Match
NO_LAST_MODIFIED = TRUST_NO_LM  # no If-Modified-Since
NO_VALIDATORS = TRUST_NONE  # neither
_U32 = 0xFFFFFFFF
#: the end a 304 gives its lease: ``crawler.store.ledger.NOT_MODIFIED`` (a
#: middleware imports no store module, tests/test_architecture.py)
END_NOT_MODIFIED = "n"


def not_modified(response: Response, **_: Any) -> list[Any]:
    """The callback of a 304 no callback of the spider's takes: nothing to do."""
    return []


def http_seconds(value: bytes | None) -> int:
    """An HTTP date header as Unix seconds, 0 when absent or not a date (or out of 0..2³²-1)."""
    if not value:
        return 0
    try:
        seconds = parsedate_to_datetime(value.decode("latin-1")).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0
    return int(seconds) if 0 <= seconds <= _U32 else 0


def digest_key(body: bytes) -> bytes:
    """``digest``'s change key: the first 6 bytes of the body's SHA-1."""
    return hashlib.sha1(body).digest()[:6]


def text_key(body: bytes) -> bytes:
    """``text``'s change key of an HTML body: the 6 bytes of
    :func:`crawler.links.text_signature` of its visible text, read as
    ``LinkExtractor.page(..., signature=True)`` reads it (the same value):
    ``<script>``, ``<style>``, ``<noscript>``, ``<template>`` stripped from
    the Lexbor tree, then the body's text; a page too deeply nested for a
    tree by the linear scan."""
    if risky(body):
        text = visible_text(body)
    else:
        tree = LexborHTMLParser(body)
        tree.strip_tags(_HIDDEN)
        top = tree.body or tree.root
        text = top.text(separator=" ") if top is not None else ""
    return text_signature(text).to_bytes(6, "big")


class RecrawlMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if setting(settings, "CRAWLER_RECRAWL") == "off":
            raise NotConfigured("CRAWLER_RECRAWL is off")
        self.crawler = crawler
        self.stats = crawler.stats
        self.verify_every = int(setting(settings, "CRAWLER_RECRAWL_VERIFY_EVERY"))
        self.text = setting(settings, "CRAWLER_RECRAWL_SIGNATURE") == "text"
        # HttpErrorMiddleware's own settings: whether a 304 reaches the callback
        self.allow_all = settings.getbool("HTTPERROR_ALLOW_ALL")
        self.allowed_codes = [int(code) for code in settings.getlist("HTTPERROR_ALLOWED_CODES")]

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlMiddleware:
        return cls(crawler)

    # --- requests ----------------------------------------------------------

    def process_request(self, request: Request) -> None:
        state = request.meta.get(RECRAWL_STATE)
        if not isinstance(state, dict):
            return
        headers = request.headers
        headers.pop(b"If-None-Match", None)  # a retry's are decided again
        headers.pop(b"If-Modified-Since", None)
        try:
            history = unpack(state["record"])
            k = int(state["k"])
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("Revisit of %s without a usable history (%s): fetched without validators",
                           request.url, exc)
            state["sent"] = ""
            return
        sent = self._validators(history, k, int(state.get("trust") or 0), headers)
        state["sent"] = sent
        if sent:
            self.stats.inc_value("crawler/recrawl/conditional")

    def _validators(self, history: History, k: int, trust: int, headers: Any) -> str:
        if history.verify or (k + history.n) % self.verify_every == 0:
            self.stats.inc_value("crawler/recrawl/verify")
            return ""
        if trust & NO_VALIDATORS:
            return ""
        sent = ""
        if history.etag and not trust & NO_ETAG:
            etag = history.etag
            if history.weak and not etag.startswith(b"W/"):
                etag = b"W/" + etag
            headers[b"If-None-Match"] = etag
            sent += "e"
        if history.lm and not trust & NO_LAST_MODIFIED:
            headers[b"If-Modified-Since"] = formatdate(history.lm, usegmt=True)
            sent += "m"
        return sent

    # --- responses ---------------------------------------------------------

    def process_response(self, request: Request, response: Response) -> Response:
        meta = request.meta
        if meta.get(RECRAWL) is False or meta.get(ROBOTS):
            return response
        state = meta.get(RECRAWL_STATE)
        sent = str(state.get("sent", "")) if isinstance(state, dict) else ""
        headers = response.headers
        etag = headers.get(b"ETag") or b""
        seen = {
            "status": response.status,
            "etag": etag,
            "weak": etag.startswith(b"W/"),
            "lm": http_seconds(headers.get(b"Last-Modified")),
            "date": http_seconds(headers.get(b"Date")),
            "length": len(response.body),
            "chg": self._change_key(response) if response.status == 200 else None,
            "sent": sent,
        }
        if response.status != 304 or not sent:
            meta[RECRAWL_SEEN] = seen
            return response
        self.stats.inc_value("crawler/recrawl/not_modified")
        if self._allowed(meta):
            meta[RECRAWL_SEEN] = seen
            meta[NOT_MODIFIED] = True
            meta[END] = END_NOT_MODIFIED
            return response
        copy = request.replace(callback=not_modified, errback=None, meta={
            **meta, RECRAWL_SEEN: seen, "handle_httpstatus_list": [304], END: END_NOT_MODIFIED,
            NOT_MODIFIED: True})
        received = raw_responses.take(request)
        if received is not None:  # the WARC record is written from the copy
            raw_responses.keep(copy, received)
        return response.replace(request=copy)

    def _allowed(self, meta: dict) -> bool:
        """Whether ``HttpErrorMiddleware`` lets a 304 reach the callback (its rule)."""
        if meta.get("handle_httpstatus_all", False):
            return True
        if "handle_httpstatus_list" in meta:
            return 304 in meta["handle_httpstatus_list"]
        if self.allow_all:
            return True
        return 304 in getattr(self.crawler.spider, "handle_httpstatus_list", self.allowed_codes)

    def _change_key(self, response: Response) -> bytes | None:
        if not self.text or not isinstance(response, TextResponse):
            return digest_key(response.body)
        if getattr(self.crawler.spider, "recrawl_signature", False):
            return None  # the spider sets it from its own tree
        return text_key(response.body)
