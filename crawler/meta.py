"""Every ``request.meta`` key the crawler sets or reads.

Set by the crawler:

- ``LEASE``: the frontier lease a request covers; acknowledged when the
  request is done, or it goes back to its queue when the lease expires.
- ``ADDRESS``: per-address politeness (``CRAWLER_IP_DELAY``):
  ``{"host": <host>, "address": <IP address>}``, the address the frontier
  charged the request to; the download handler connects there and nowhere
  else while the request's host is that host (``"!nx"``: the name does not
  exist, ``"!refused"``: it leads only to refused addresses). Never stored
  with the request: a retry is charged again.
- ``DELAY``: seconds the request waits in the frontier's delayed set before
  its next attempt (backoff, domain lock, robots.txt hand-back).
- ``ATTEMPTS``: attempts made so far (backoff middleware).
- ``DEAD``: already recorded in the dead-letter queue.
- ``LOCK``: the domain lock token this request holds.
- ``ROBOTS``: a robots.txt request of the shared robots middleware.
- ``TRUNCATED``: the body was cut at the size cap (also on ``response.meta``).
- ``NON_HTML``: stopped at its headers; the content type it announced.
- ``END``: how the request ended, when a middleware decided it (robots.txt
  disallowed it, a filter skipped it); the frontier counts each end.
- ``WARC``: the page's place in the WARC writer's queue (-1: not stored).
- ``SITEMAP``: a sitemap request (``crawler/middlewares/sitemaps.py``):
  ``{"site": <registered domain of the robots.txt that named it>, "level":
  <1 for a sitemap robots.txt names>, "up": [<the sitemap indexes above it>]}``.
- ``LASTMOD``: on a request for a URL a sitemap listed, its ``<lastmod>``
  (W3C datetime, as written), when the sitemap gave it. With recrawl on, a
  hint for the URL's next visit, whoever set it (docs/recrawl.md).
- ``CHANGEFREQ``: likewise its ``<changefreq>``.
- ``PRIORITY``: likewise its ``<priority>`` (a float).
- ``RECRAWL_STATE``: on a revisit (a tracked URL served again,
  ``crawler/store/codec.py``'s ``V`` entry): ``{"k": <history key>,
  "record": <the packed history, crawler/recrawl/record.py>, "trust":
  <host trust bits, crawler.recrawl.TRUST_*>, "mu": <the domain's μ, or
  None>}``. Kept by a retry of the revisit.
- ``RECRAWL_SEEN``: what the answer to a tracked request showed
  (``crawler/middlewares/recrawl.py``): ``{"status", "etag", "weak", "lm",
  "date", "length", "chg"}``; the history write is made from it when the
  lease ends.
- ``NOT_MODIFIED``: on a 304's ``response.meta``: the server says the page
  did not change since the copy the request's validators name.

Set by users, per request (``RECRAWL`` also by spiders):

- ``RECRAWL``: ``False``: never tracked (a tracked URL fetched with it loses
  its history); a number: revisited every that many seconds (clamped to
  ``CRAWLER_RECRAWL_MIN``/``_MAX``, left alone by ``adaptive``); ``True`` or
  absent: the spider's ``CRAWLER_RECRAWL``. Ignored when that is ``off``.

- ``MAX_PAGE_BYTES``: this request's size cap instead of ``CRAWLER_MAX_PAGE_BYTES``.
- ``ANY_TYPE``: download whatever the content type (``CRAWLER_HTML_ONLY``).
- ``FALLBACK``: a URL tried once instead when this one's server cannot be
  connected to (``crawler/fallback.py``; billion's seeds: the other scheme).
"""

LEASE = "_frontier_lease"
ADDRESS = "crawler_address"
DELAY = "crawler_delay"
ATTEMPTS = "crawler_attempts"
DEAD = "crawler_dead_lettered"
LOCK = "crawler_lock"
ROBOTS = "crawler_robots"
TRUNCATED = "crawler_truncated"
NON_HTML = "crawler_non_html"
END = "crawler_end"
WARC = "_crawler_warc"
MAX_PAGE_BYTES = "crawler_max_page_bytes"
ANY_TYPE = "crawler_any_type"
FALLBACK = "crawler_fallback_url"
SITEMAP = "crawler_sitemap"
LASTMOD = "sitemap_lastmod"
CHANGEFREQ = "sitemap_changefreq"
PRIORITY = "sitemap_priority"
RECRAWL = "crawler_recrawl"
RECRAWL_STATE = "_crawler_recrawl"
RECRAWL_SEEN = "_crawler_recrawl_seen"
NOT_MODIFIED = "crawler_not_modified"


def page_limit(meta: dict, default: int) -> int:
    """The bytes of body kept for a request with ``meta``: its own
    ``MAX_PAGE_BYTES`` (robots.txt requests carry ``CRAWLER_ROBOTS_MAX_BYTES``),
    else ``default``; 0 is no cap."""
    return int(meta.get(MAX_PAGE_BYTES, default))
