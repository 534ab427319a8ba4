"""The pure core of recrawling (issue 49, design/recrawl.md): a tracked URL's
packed fetch history (:mod:`crawler.recrawl.record`) and the arithmetic of
its revisits, the change-rate estimate, expected freshness, a domain's
optimum under a fetch budget and the interval rule
(:mod:`crawler.recrawl.estimate`).

No I/O: nothing here reads Redis, settings or Scrapy objects. The history
write of one visit is built from these by :mod:`crawler.worker.visit` (in
the worker's layer: it speaks the ledger's ends and the store's write
records); the worker (``crawler/worker/_history.py``) attaches it to the
lease's acknowledgement, and the frontier's scripts apply it.

The host trust bits a revisit carries (``meta[RECRAWL_STATE]["trust"]``,
read by ``dequeue.lua`` from ``rhost:<host>``; design/recrawl.md E) are
:data:`TRUST_NO_ETAG`, :data:`TRUST_NO_LM` and :data:`TRUST_NONE`.
"""

#: the host is not sent If-None-Match (its ETags lied)
TRUST_NO_ETAG = 1
#: the host is not sent If-Modified-Since (its Last-Modified lied, or is always now)
TRUST_NO_LM = 2
#: the host is sent no validators (it ignores them)
TRUST_NONE = 4

__all__ = ["TRUST_NONE", "TRUST_NO_ETAG", "TRUST_NO_LM"]
