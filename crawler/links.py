"""Links of a page: ``<a href>`` found by Lexbor (selectolax), resolved and
canonicalised by ada (C++ WHATWG parser), deduplicated within the page.

This is the hot path of a crawl: a page of the open web carries hundreds of
links, and resolving them costs more than parsing the HTML, so the URL work
is a C++ join plus string operations, once per distinct href.
"""

from __future__ import annotations

from ada_url import join_url
from selectolax.lexbor import LexborHTMLParser

from crawler.scheduler.canonical import Canonicalizer, canonicalize

_SKIP = ("#", "javascript:", "mailto:", "tel:", "data:", "JAVASCRIPT:", "MAILTO:", "TEL:", "DATA:")


class LinkExtractor:
    """``LinkExtractor()(body, url) -> [canonical absolute URLs]``.

    ``<base href>`` is honoured; fragment-only, ``javascript:``, ``mailto:``,
    ``tel:`` and ``data:`` links are skipped, as is everything that is not
    http(s) once resolved, and URLs longer than ``max_length``. With
    ``nofollow=True`` links with ``rel="nofollow"`` are skipped.
    """

    def __init__(self, canonicalizer: Canonicalizer = canonicalize, *, nofollow: bool = True,
                 max_length: int = 2000) -> None:
        self.canonical = canonicalizer.from_whatwg
        self.nofollow = nofollow
        self.max_length = max_length

    def __call__(self, body: bytes, url: str) -> list[str]:
        tree = LexborHTMLParser(body)
        base = url
        for node in tree.tags("base"):
            href = node.attrs.get("href")
            if href:
                try:
                    base = join_url(url, href.strip())
                except ValueError:
                    pass
            break
        # one attribute lookup per link; the rare nofollow links come from a
        # second, selective query (cheaper than reading rel on every link)
        hrefs = dict.fromkeys(
            href.strip() for href in (node.attrs.get("href") for node in tree.tags("a")) if href
        )
        if self.nofollow and (b"nofollow" in body or b"NOFOLLOW" in body or b"Nofollow" in body):
            for node in tree.css('a[rel~="nofollow" i]'):
                href = node.attrs.get("href")
                if href:
                    hrefs.pop(href.strip(), None)
        found: dict[str, None] = {}
        for href in hrefs:
            if not href or href.startswith(_SKIP):
                continue
            try:
                absolute = join_url(base, href)
            except ValueError:
                continue
            if not absolute.startswith(("http://", "https://")):
                continue
            link = self.canonical(absolute)
            if len(link) <= self.max_length:
                found[link] = None
        return list(found)
