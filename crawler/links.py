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
from crawler._hrefscan import risky, scan
from crawler.robots import meta_nofollow
from crawler.identity import Canonicalizer, canonicalize

# fragment-only links are left out in C already; <meta name content> for
# page-level robots directives
_ANCHORS = 'base[href], a[href]:not([href^="#"])'
_FOLLOWED = 'base[href], meta[name][content], a[href]:not([href^="#"]):not([rel~="nofollow" i])'
_BASE_TAG = LexborHTMLParser("<base>").css_first("base").tag_id
_META_TAG = LexborHTMLParser("<meta>").css_first("meta").tag_id
_tag_id = attrgetter("tag_id")
#: (<base href>, <meta> (name, content) pairs, <a href> values) of a page
Found = tuple[str | None, list[tuple[str | None, str | None]], list[str | None]]
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
        self.scanned = False

    def __call__(self, body: bytes, url: str) -> list[str]:
        return self.page(body, url)[0]

    def page(self, body: bytes, url: str, agent: str = "") -> tuple[list[str], bool]:
        """The page's links, and whether a ``<meta name="robots">`` (or one
        named ``agent``) says ``nofollow`` or ``none``: then no links.

        A page whose tree would cost Lexbor more than about 50 ms (deep
        nesting: ``crawler._hrefscan``) is scanned instead of parsed;
        ``scanned`` says whether the last page was."""
        self.scanned = risky(body)
        return self.resolve(self.by_scan(body) if self.scanned else self.by_tree(body), url, agent)

    def resolve(self, found: Found, url: str, agent: str = "") -> tuple[list[str], bool]:
        """:meth:`page` from what :meth:`by_tree` or :meth:`by_scan` found."""
        base_href, metas, anchors = found
        if metas and meta_nofollow(metas, agent):
            return [], True
        base = url
        if base_href:
            base_href = base_href.strip()
            if base_href:
                try:
                    base = join_url(url, base_href)
                except ValueError:
                    pass
        hrefs = dict.fromkeys(anchors)
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

    def by_tree(self, body: bytes) -> Found:
        """(``<base href>``, ``<meta>`` (name, content) pairs, hrefs) by Lexbor."""
        tree = LexborHTMLParser(body)
        # one walk of the tree, in C: the base, the metas and the anchors worth reading
        nodes = tree.css(self.selector)
        metas: list[tuple[str | None, str | None]] = []
        if _META_TAG in map(_tag_id, nodes):
            metas = [(n.attrs.get("name"), n.attrs.get("content")) for n in nodes if n.tag_id == _META_TAG]
            nodes = [node for node in nodes if node.tag_id != _META_TAG]
        base_href = None
        if _BASE_TAG in map(_tag_id, nodes):
            base_href = next(n for n in nodes if n.tag_id == _BASE_TAG).attrs.get("href", "")
            nodes = [node for node in nodes if node.tag_id != _BASE_TAG]
        return base_href, metas, [node.attrs.get("href") for node in nodes]

    def by_scan(self, body: bytes) -> Found:
        """What :meth:`by_tree` returns, by the linear scan: the same choice
        of elements as the selector."""
        base_href = None
        metas: list[tuple[str | None, str | None]] = []
        hrefs: list[str | None] = []
        for tag, attrs in scan(body):
            if tag == "a":
                href = attrs.get("href")
                if href is None or href.startswith("#"):
                    continue
                if self.nofollow and "nofollow" in attrs.get("rel", "").lower().split():
                    continue
                hrefs.append(href)
            elif tag == "base":
                if base_href is None and "href" in attrs:
                    base_href = attrs["href"]
            elif self.nofollow and "name" in attrs and "content" in attrs:  # <meta>
                metas.append((attrs["name"], attrs["content"]))
        return base_href, metas, hrefs
