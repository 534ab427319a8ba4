"""Sitemaps, read without I/O: raw body chunks in, URLs out.

:class:`SitemapParser` reads one sitemap body as downloaded: gzip or not, and an
XML ``<urlset>`` or ``<sitemapindex>``, an RSS 2.0 or Atom feed, or a text file
of URLs, whatever the file's name or Content-Type say (the first bytes decide,
``_sniff.py``). It is push-style and bounded: each :meth:`~SitemapParser.feed`
does a fixed amount of work and memory stays bounded whatever the body holds
(gzip bombs, billion laughs, giant tags); see the class for the contract.

Each URL comes out as an :class:`Entry`; ``kind`` ``'sitemap'`` marks the
children of a sitemap index, to be fetched and parsed in turn.

Private modules: ``_sniff`` (format), ``_transport`` (gzip), ``_xml`` and
``_text`` (one reader per format), ``_entry`` (fields), ``_parser`` (the
state machine tying them together).
"""

from crawler.sitemaps._entry import CHANGEFREQS, Entry, clean_url, lastmod_seconds
from crawler.sitemaps._parser import (
    MAX_BYTES,
    MAX_URL_LENGTH,
    MAX_URLS,
    WORK_BYTES,
    SitemapParser,
    State,
)

ERRORS = frozenset({"gzip", "gzip-truncated", "malformed", "entities", "token-too-large", "too-deep"})
KINDS = frozenset({"urlset", "sitemapindex", "rss", "atom", "text", "unknown"})


def parse(body: bytes, **limits: int) -> tuple[list[Entry], SitemapParser]:
    """Parse a whole body at once (for tests and tools; it does unbounded work in one call)."""
    parser = SitemapParser(**limits)
    entries = parser.feed(body)
    while parser.pending:
        entries += parser.feed()
    while not parser.done:
        entries += parser.close()
    return entries, parser


__all__ = [
    "CHANGEFREQS",
    "ERRORS",
    "Entry",
    "KINDS",
    "MAX_BYTES",
    "MAX_URLS",
    "MAX_URL_LENGTH",
    "SitemapParser",
    "State",
    "WORK_BYTES",
    "clean_url",
    "lastmod_seconds",
    "parse",
]
