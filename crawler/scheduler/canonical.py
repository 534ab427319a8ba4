"""Canonical URLs: one spelling per resource, the input of every fingerprint.

The WHATWG parser (ada) lowercases scheme and host, applies IDNA, drops the
default port and resolves dot segments. On top of that: the fragment is
dropped, tracking parameters are removed, the remaining query parameters are
sorted, an empty query is dropped, an empty path becomes ``/`` (the one
trailing-slash rule: other paths keep theirs), and percent-escapes are
normalised (unreserved characters decoded, hex digits upper-case).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ada_url import normalize_url

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
