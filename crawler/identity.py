"""URL identity: the canonical spelling of a URL, its SHA-256 fingerprint, and
its registered domain (the unit of politeness).

The WHATWG parser (ada) lowercases scheme and host, applies IDNA, drops the
default port and resolves dot segments. On top of that: the fragment is
dropped, tracking parameters are removed, the remaining query parameters are
sorted, an empty query is dropped, an empty path becomes ``/`` (the one
trailing-slash rule: other paths keep theirs), and percent-escapes are
normalised (unreserved characters decoded, hex digits upper-case).

Fingerprints are raw 32-byte digests::

    REQUEST_FINGERPRINTER_CLASS = "crawler.scheduler.Fingerprinter"

A GET (or HEAD) without a body is identified by its canonical URL alone, so a
link found in a page and the request later made for it share a fingerprint.
Other methods, or a body, are folded in.

Registered domains are public-suffix aware and computed offline, with the
Public Suffix List's private section: ``alice.blogspot.com`` and
``bob.github.io`` are sites of their own, as their platforms asked the list
to say (docs/politeness.md, "Which name is a site").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from hashlib import sha256
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import tldextract
from ada_url import normalize_url

from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request


DEFAULT_TRACKING = ("utm_*", "gclid", "fbclid", "mc_cid", "mc_eid")

# only the escapes that change: lower-case hex digits, or an unreserved
# character (A-Z a-z 0-9 - _ ~) escaped; most escapes (%20, %2F, %E2...) match
# none and cost no Python call
_ESCAPE = re.compile(
    r"%([0-9A-Fa-f][a-f]|[a-f][0-9A-Fa-f]|3[0-9]|4[1-9A-F]|5[0-9A]|6[1-9A-F]|7[0-9A]|2D|5F|7E)"
)
# unreserved characters, decoded where escaped; not ".", which could form a
# dot segment that a second parse would resolve
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_~")


def _escape(match: re.Match[str]) -> str:
    byte = int(match.group(1), 16)
    return chr(byte) if byte in _UNRESERVED else "%" + match.group(1).upper()


def _normalise_escapes(text: str) -> str:
    return _ESCAPE.sub(_escape, text) if "%" in text else text


class Canonicalizer:
    """``Canonicalizer(extra_tracking)(url) -> str``; raises ``ValueError`` on bad URLs.

    Tracking names are matched case-insensitively; a trailing ``*`` makes a
    prefix (``utm_*``).
    """

    def __init__(self, tracking: Iterable[str] = ()) -> None:
        names = [t.strip().lower() for t in (*DEFAULT_TRACKING, *tracking) if t.strip()]
        self.exact = frozenset(n for n in names if not n.endswith("*"))
        self.prefixes = tuple(n[:-1] for n in names if n.endswith("*"))

    def is_tracking(self, name: str) -> bool:
        name = name.lower()
        return name in self.exact or name.startswith(self.prefixes)

    def __call__(self, url: str) -> str:
        return self.from_whatwg(normalize_url(url))

    def from_whatwg(self, href: str) -> str:
        """The canonical form of a URL already serialised by a WHATWG parser
        (``ada_url.normalize_url`` or ``join_url``): string work only."""
        cut = href.find("#")
        if cut >= 0:
            href = href[:cut]
        if not href.startswith(("http://", "https://")):
            return href
        cut = href.find("?")
        query = ""
        if cut >= 0:
            href, query = href[:cut], href[cut + 1 :]
        if "%" in href:
            href = _normalise_escapes(href)
        if query:
            params = [
                _normalise_escapes(p)
                for p in query.split("&")
                if p and not self.is_tracking(p.split("=", 1)[0])
            ]
            if params:
                params.sort()
                return href + "?" + "&".join(params)
        return href


canonicalize = Canonicalizer()


def url_fingerprint(canonical_url: str) -> bytes:
    return sha256(canonical_url.encode()).digest()


class Fingerprinter:
    def __init__(self, crawler: Crawler | None = None) -> None:
        tracking = setting(crawler.settings, "CRAWLER_TRACKING_PARAMS") if crawler else []
        self.canonicalize = Canonicalizer(tracking)
        self._cache: WeakKeyDictionary[Request, bytes] = WeakKeyDictionary()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Fingerprinter:
        return cls(crawler)

    def fingerprint(self, request: Request) -> bytes:
        cached = self._cache.get(request)
        if cached is not None:
            return cached
        try:
            url = self.canonicalize(request.url)
        except ValueError:
            url = request.url  # unparsable: identify it by its spelling
        if request.method in ("GET", "HEAD") and not request.body:
            digest = url_fingerprint(url)
        else:
            digest = sha256(b"%s %s\n%s" % (request.method.encode(), url.encode(), request.body)).digest()
        self._cache[request] = digest
        return digest


# The snapshot of the Public Suffix List bundled with tldextract (no network),
# both its sections: the ICANN one (co.uk) and the private one (blogspot.com,
# github.io), whose platforms give each customer a name of its own.
_extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)


def registered_domain(host: str) -> str:
    """``www.bbc.co.uk`` -> ``bbc.co.uk``, ``alice.blogspot.com`` ->
    ``alice.blogspot.com``: the politeness key and the shard key, by the
    Public Suffix List's algorithm over both its sections (ICANN and private)
    with its default rule ``*``: under a suffix the list does not know
    (``.test``, an intranet name) the last label is the suffix, so
    ``www.d0.test`` -> ``d0.test``. Names that are a suffix themselves
    (``co.uk``, ``github.io``, ``localhost``) and IP addresses stand for
    themselves."""
    host = host.lower().rstrip(".")
    if not host or ":" in host or host.startswith("[") or _IPV4.match(host):
        return host
    result = _extract(host)
    if result.suffix:
        return f"{result.domain}.{result.suffix}" if result.domain else host
    labels = host.rsplit(".", 2)  # the default rule: the last label is the public suffix
    return ".".join(labels[-2:]) if len(labels) > 1 and all(labels[-2:]) else host


_IPV4 = re.compile(r"\d+\.\d+\.\d+\.\d+$")


def host_of(url: str) -> str:
    """The host of an absolute http(s) URL, without port or userinfo."""
    rest = url.split("//", 1)[1] if "//" in url else url
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    netloc = netloc.rsplit("@", 1)[-1]
    if netloc.startswith("["):
        return netloc[: netloc.find("]") + 1]
    return netloc.split(":", 1)[0]


def domain_of(url: str) -> str:
    start = url.find("//")
    if start < 0:
        return registered_domain(host_of(url))
    end = url.find("/", start + 2)  # a page's links share a few origins: cached by origin
    return _origin_domain(url if end < 0 else url[:end])


@lru_cache(maxsize=200_000)  # the one cache: registered_domain is called through it
def _origin_domain(origin: str) -> str:
    return registered_domain(host_of(origin))
