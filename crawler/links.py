"""Links of a page: ``<a href>`` found by Lexbor (selectolax), resolved and
canonicalised by ada (C++ WHATWG parser), deduplicated within the page.

This is the hot path of a crawl: a page of the open web carries hundreds of
links, and resolving them with a general URL parser costs more than parsing
the HTML. So fragments are cut first (``page#a`` and ``page#b`` are one link),
plain hrefs are joined by string work (``crawler._fastjoin``) and the rest by
ada's C++ join, once per distinct href.
"""

from __future__ import annotations

from operator import attrgetter

from ada_url import join_url
from selectolax.lexbor import LexborHTMLParser

from crawler._fastjoin import FastJoin
from crawler.robots import meta_nofollow
from crawler.scheduler.canonical import Canonicalizer, canonicalize

# fragment-only links are left out in C already; <meta name content> for
# page-level robots directives
_ANCHORS = 'base[href], a[href]:not([href^="#"])'
_FOLLOWED = 'base[href], meta[name][content], a[href]:not([href^="#"]):not([rel~="nofollow" i])'
_BASE_TAG = LexborHTMLParser("<base>").css_first("base").tag_id
_META_TAG = LexborHTMLParser("<meta>").css_first("meta").tag_id
_tag_id = attrgetter("tag_id")
_SKIP = ("javascript:", "mailto:", "tel:", "data:", "JAVASCRIPT:", "MAILTO:", "TEL:", "DATA:")


class LinkExtractor:
    """``LinkExtractor()(body, url) -> [canonical absolute URLs]``.

    ``<base href>`` is honoured; fragment-only, ``javascript:``, ``mailto:``,
    ``tel:`` and ``data:`` links are skipped, as is everything that is not
    http(s) once resolved, and URLs longer than ``max_length``. With
    ``nofollow=True`` anchors with ``rel="nofollow"`` are skipped (a URL the
    page also links without it is kept), and :meth:`page` reads the page's
    ``<meta name="robots">`` directives.
    """

    def __init__(self, canonicalizer: Canonicalizer = canonicalize, *, nofollow: bool = True,
                 max_length: int = 2000) -> None:
        self.canonical = canonicalizer.from_whatwg
        # the fast join's URLs have no query, fragment or escape: canonical as
        # they are, unless a subclass adds rules
        self.plain = type(canonicalizer).from_whatwg is Canonicalizer.from_whatwg
        self.nofollow = nofollow
        self.selector = _FOLLOWED if nofollow else _ANCHORS
        self.max_length = max_length

    def __call__(self, body: bytes, url: str) -> list[str]:
        return self.page(body, url)[0]

    def page(self, body: bytes, url: str, agent: str = "") -> tuple[list[str], bool]:
        """The page's links, and whether a ``<meta name="robots">`` (or one
        named ``agent``) says ``nofollow`` or ``none``: then no links."""
        tree = LexborHTMLParser(body)
        # one walk of the tree, in C: the base, the metas and the anchors worth reading
        nodes = tree.css(self.selector)
        if _META_TAG in map(_tag_id, nodes):
            metas = [(n.attrs.get("name"), n.attrs.get("content")) for n in nodes if n.tag_id == _META_TAG]
            if meta_nofollow(metas, agent):
                return [], True
            nodes = [node for node in nodes if node.tag_id != _META_TAG]
        base = url
        if _BASE_TAG in map(_tag_id, nodes):
            href = next(n for n in nodes if n.tag_id == _BASE_TAG).attrs.get("href", "").strip()
            nodes = [node for node in nodes if node.tag_id != _BASE_TAG]
            if href:
                try:
                    base = join_url(url, href)
                except ValueError:
                    pass
        hrefs = dict.fromkeys([node.attrs.get("href") for node in nodes])
        hrefs.pop(None, None)
        fast = FastJoin(base)
        seen: set[str] = set()
        found: dict[str, None] = {}
        for href in hrefs:
            # the fragment goes first: page.html#a and page.html#b are one link
            href = href.strip().partition("#")[0]
            if not href or href in seen or href.startswith(_SKIP):
                continue
            seen.add(href)
            link = fast.join(href)
            if link is None or not self.plain:
                try:
                    absolute = join_url(base, href)
                except ValueError:
                    continue
                if not absolute.startswith(("http://", "https://")):
                    continue
                link = self.canonical(absolute)
            if len(link) <= self.max_length:
                found[link] = None
        return list(found), False
