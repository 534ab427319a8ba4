"""Links of a page: ``<a href>`` found by Lexbor (selectolax), resolved and
canonicalised by ada (C++ WHATWG parser), deduplicated within the page.

This is the hot path of a crawl: a page of the open web carries hundreds of
links, and resolving them with a general URL parser costs more than parsing
the HTML. So fragments are cut first (``page#a`` and ``page#b`` are one link),
plain hrefs are joined by string work (``crawler._fastjoin``) and the rest by
ada's C++ join, once per distinct href.
"""

from __future__ import annotations

from hashlib import sha1
from operator import attrgetter
from typing import Literal, NamedTuple, overload

from ada_url import join_url
from selectolax.lexbor import LexborHTMLParser

from crawler._fastjoin import FastJoin
from crawler._hrefscan import risky, scan, visible_text
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
#: what the text signature leaves out of the tree, once its anchors are read
_HIDDEN = ["script", "style", "noscript", "template"]
_SKIP = ("javascript:", "mailto:", "tel:", "data:", "JAVASCRIPT:", "MAILTO:", "TEL:", "DATA:")


class Signed(NamedTuple):
    """:meth:`LinkExtractor.page` with ``signature=True``."""

    links: list[str]
    nofollow: bool
    #: 48 bits of the SHA-1 of the page's visible text (:func:`text_signature`)
    signature: int


def text_signature(text: str) -> int:
    """48 bits of the SHA-1 of ``text`` with its whitespace runs collapsed:
    the width of the history record's change key (design/recrawl.md C.1),
    so the value is stored as it is and compared as an int."""
    return int.from_bytes(sha1(" ".join(text.split()).encode("utf-8", "surrogatepass")).digest()[:6])


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

    @overload
    def page(self, body: bytes, url: str, agent: str = "", *,
             signature: Literal[False] = False) -> tuple[list[str], bool]: ...

    @overload
    def page(self, body: bytes, url: str, agent: str = "", *, signature: Literal[True]) -> Signed: ...

    def page(self, body: bytes, url: str, agent: str = "", *,
             signature: bool = False) -> tuple[list[str], bool] | Signed:
        """The page's links, and whether a ``<meta name="robots">`` (or one
        named ``agent``) says ``nofollow`` or ``none``: then no links.

        A page whose tree would cost Lexbor more than about 50 ms (deep
        nesting: ``crawler._hrefscan``) is scanned instead of parsed;
        ``scanned`` says whether the last page was.

        With ``signature=True`` the answer is a :class:`Signed`, the same
        pair with the page's text signature as a third field (a recrawl's
        change key, design/recrawl.md C.4): a NamedTuple, so ``links,
        nofollow = page(...)`` stays the shape of the default, which every
        caller unpacks, and the default path only tests the flag. The text
        is read from the tree the links came from, after them: ``<script>``,
        ``<style>``, ``<noscript>`` and ``<template>`` stripped, then the
        ``<body>``'s text; a scanned page's text is what the scan sees
        between tags (:func:`crawler._hrefscan.visible_text`)."""
        self.scanned = risky(body)
        if not signature:
            return self.resolve(self.by_scan(body) if self.scanned else self.by_tree(body), url, agent)
        if self.scanned:
            found, text = self.by_scan(body), visible_text(body)
        else:
            tree = LexborHTMLParser(body)
            found = self.read(tree)
            tree.strip_tags(_HIDDEN)
            top = tree.body or tree.root
            text = top.text(separator=" ") if top is not None else ""
        return Signed(*self.resolve(found, url, agent), text_signature(text))

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
        return self.read(LexborHTMLParser(body))

    def read(self, tree: LexborHTMLParser) -> Found:
        """:meth:`by_tree` on a tree already built."""
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
