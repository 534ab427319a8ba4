"""XML sitemaps, RSS 2.0 and Atom feeds, read by expat one slice at a time.

No entity is ever expanded: the first entity declaration (the start of every
billion-laughs or XXE document), reference to an undeclared entity or external
entity stops the reader with error ``'entities'``; parameter entities and external
DTDs are never read. Memory stays bounded: element texts are kept up to a cap,
nesting is capped at :data:`MAX_DEPTH`, and expat may hold at most
``max_token_bytes`` of input it has not turned into events (a giant tag, comment
or attribute stops the reader with ``'token-too-large'``).

The reader is a small state machine over expat's events: the root element fixes
the kind (:data:`ROOTS`), then a *record* element at a fixed depth
(``<url>``, ``<sitemap>``, ``<item>``, ``<entry>``) collects the texts of its
*field* children and becomes an entry when it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from xml.parsers import expat

from crawler.sitemaps._entry import (
    normalise_changefreq,
    normalise_lastmod,
    normalise_priority,
    normalise_pubdate,
)

MAX_DEPTH = 32  # a sitemap needs 4 (rss/channel/item/link)
_FIELD_TEXT_MAX = 64

SITEMAP_NAMESPACES = (
    "",
    "http://www.sitemaps.org/schemas/sitemap/0.9",
    "https://www.sitemaps.org/schemas/sitemap/0.9",
    "http://www.google.com/schemas/sitemap/0.84",
    "http://www.google.com/schemas/sitemap/0.9",
)
ATOM_NAMESPACES = ("http://www.w3.org/2005/Atom", "http://purl.org/atom/ns#")

# (namespace, local name) of the root -> kind
ROOTS: dict[tuple[str, str], str] = {
    **{(ns, "urlset"): "urlset" for ns in SITEMAP_NAMESPACES},
    **{(ns, "sitemapindex"): "sitemapindex" for ns in SITEMAP_NAMESPACES},
    ("", "rss"): "rss",
    **{(ns, "feed"): "atom" for ns in ATOM_NAMESPACES},
}

# kind -> (record depth, record local name, {field local name: field key})
_LAYOUT: dict[str, tuple[int, str, dict[str, str]]] = {
    "urlset": (
        2,
        "url",
        {"loc": "loc", "lastmod": "lastmod", "changefreq": "changefreq", "priority": "priority"},
    ),
    "sitemapindex": (2, "sitemap", {"loc": "loc", "lastmod": "lastmod"}),
    "rss": (3, "item", {"link": "loc", "pubDate": "pubdate"}),
    "atom": (2, "entry", {"link": "link", "updated": "lastmod"}),
}

Emit = Callable[[str, str, "str | None", "str | None", "float | None"], None]


class XmlStop(Exception):
    """Reading stops: ``code`` is an error code, or ``None`` for a clean stop."""

    def __init__(self, code: str | None, detail: str = "") -> None:
        super().__init__(detail or code or "stop")
        self.code = code
        self.detail = detail


def _split(name: str) -> tuple[str, str]:
    uri, sep, local = name.rpartition(" ")
    return (uri, local) if sep else ("", name)


class XmlReader:
    """Feed content bytes; entries go to ``emit(url_text, kind, lastmod, changefreq, priority)``.

    ``url_text`` is raw (the caller checks it); ``on_kind`` hears the root's kind
    (``'unknown'`` for anything else, after which :class:`XmlStop` (``None``) ends
    the read).
    """

    def __init__(
        self,
        emit: Emit,
        on_kind: Callable[[str], None],
        max_text: int,
        max_token_bytes: int,
    ) -> None:
        self._emit = emit
        self._on_kind = on_kind
        self._max_text = max_text
        self._max_token = max_token_bytes
        self._fed = 0
        self._depth = 0
        self._ns = ""  # the root's namespace: records and fields must share it
        self._kind = ""
        self._record_depth = 0
        self._record_name = ""
        self._fields: dict[str, str] = {}
        self._entry_kind = "page"
        self._record: dict[str, str] | None = None  # field key -> text, inside a record
        self._field: str | None = None  # field key being read
        self._text: list[str] = []
        self._text_len = 0
        p = expat.ParserCreate(namespace_separator=" ")
        p.buffer_text = True
        p.buffer_size = 16_384
        p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        p.StartElementHandler = self._start
        p.EndElementHandler = self._end
        p.CharacterDataHandler = self._chars
        p.EntityDeclHandler = self._refuse_entity
        p.UnparsedEntityDeclHandler = self._refuse_entity
        p.ExternalEntityRefHandler = self._refuse_entity
        p.SkippedEntityHandler = self._refuse_entity
        self._p = p

    # -- input ---------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        self._fed += len(data)
        self._parse(data, False)
        if self._fed - self._p.CurrentByteIndex > self._max_token:
            raise XmlStop("token-too-large", f"more than {self._max_token} bytes without an XML event")

    def close(self) -> None:
        self._parse(b"", True)

    def _parse(self, data: bytes, final: bool) -> None:
        try:
            self._p.Parse(data, final)
        except expat.ExpatError as exc:
            raise XmlStop("malformed", str(exc)) from None

    # -- events --------------------------------------------------------------

    def _refuse_entity(self, *args: object) -> int:
        raise XmlStop("entities", "the document declares or references entities")

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        depth = self._depth = self._depth + 1
        if depth > MAX_DEPTH:
            raise XmlStop("too-deep", f"elements nested deeper than {MAX_DEPTH}")
        if depth == 1:
            self._root(name)
            return
        if self._record is None:
            if depth == self._record_depth and _split(name) == (self._ns, self._record_name):
                self._record = {}
            return
        if depth != self._record_depth + 1 or self._field is not None:
            return
        ns, local = _split(name)
        key = self._fields.get(local) if ns == self._ns else None
        if key is None or key in self._record:
            return
        if key == "link":  # Atom: the href of the first link that is the entry itself
            rel = attrs.get("rel", "alternate").strip()
            href = attrs.get("href")
            if rel == "alternate" and href is not None:
                self._record["loc"] = href[: self._max_text + 1]
                self._record["link"] = ""
            return
        self._field = key
        self._text.clear()
        self._text_len = 0

    def _root(self, name: str) -> None:
        ns, local = _split(name)
        kind = ROOTS.get((ns, local), "unknown")
        self._on_kind(kind)
        if kind == "unknown":
            raise XmlStop(None)
        self._kind = kind
        self._ns = ns
        self._record_depth, self._record_name, self._fields = _LAYOUT[kind]
        self._entry_kind = "sitemap" if kind == "sitemapindex" else "page"

    def _chars(self, data: str) -> None:
        if self._field is None or self._depth != self._record_depth + 1:
            return
        room = (self._max_text + 1) - self._text_len
        if room > 0:
            piece = data[:room]
            self._text.append(piece)
            self._text_len += len(piece)

    def _end(self, name: str) -> None:
        depth = self._depth
        self._depth = depth - 1
        record = self._record
        if record is None:
            return
        if self._field is not None:
            if depth == self._record_depth + 1:
                record[self._field] = "".join(self._text)
                self._field = None
                self._text.clear()
            return
        if depth == self._record_depth:
            self._record = None
            self._finish(record)

    def _finish(self, record: dict[str, str]) -> None:
        loc = record.get("loc")
        if loc is None:
            return
        lastmod = record.get("lastmod")
        pubdate = record.get("pubdate")
        changefreq = record.get("changefreq")
        priority = record.get("priority")
        self._emit(
            loc,
            self._entry_kind,
            normalise_lastmod(lastmod[:_FIELD_TEXT_MAX + 1]) if lastmod is not None
            else normalise_pubdate(pubdate[:_FIELD_TEXT_MAX + 1]) if pubdate is not None
            else None,
            normalise_changefreq(changefreq[:_FIELD_TEXT_MAX + 1]) if changefreq is not None else None,
            normalise_priority(priority[:_FIELD_TEXT_MAX + 1]) if priority is not None else None,
        )
