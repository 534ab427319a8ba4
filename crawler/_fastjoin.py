"""Resolving the common, plain hrefs of a page without a full URL parse.

Most links on a page are plain relative paths (``../std/index.html``,
``/about``) or absolute URLs with a plain lower-case host. For those the
WHATWG algorithm reduces to string work: join to the base's directory or
origin, then remove dot segments. A port is kept when WHATWG keeps it as
written. Everything else (a query, a ``%``, a default or zero-padded port,
non-ASCII, a backslash, ``//host``, an IPv4-looking or punycode host...)
returns ``None`` and goes to the full parser. ``tests/test_fastjoin.py``
checks this module against ada on generated hrefs.
"""

from __future__ import annotations

import re

from ada_url import parse_url

# characters WHATWG leaves unchanged in a path; no ":" (a scheme), "%", "?",
# "#", "\\" or anything that would be percent-encoded
_PATH = r"[A-Za-z0-9\-._~!$&'()*+,;=@/]*"
_ROOTED = re.compile(r"/(?!/)" + _PATH)
# a relative path, its leading "../" counted apart: the common way up
_RELATIVE = re.compile(r"((?:\.\./)*)(?!/)(" + _PATH + ")")
# lower-case ASCII labels without "--" (no punycode), the last one starting
# with a letter (so never parsed as an IPv4 address); a port without leading
# zeros, checked by _origin (in range, not the scheme's default)
_ABSOLUTE = re.compile(
    r"(https?://(?:[a-z0-9]+(?:-[a-z0-9]+)*\.)*[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?::([1-9][0-9]{0,4}))?)"
    r"(/" + _PATH + ")?"
)


def _origin(origin: str, port: str | None) -> bool:
    """Whether WHATWG serialises ``origin`` as written: its port, if any, is kept."""
    return port is None or (int(port) <= 65535 and port != ("443" if origin.startswith("https") else "80"))


def _remove_dots(path: str) -> str:
    """WHATWG's path state for a path of plain segments starting with ``/``."""
    out: list[str] = []
    segments = path.split("/")[1:]
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        if segment == "..":
            if out:
                out.pop()
            if i == last:
                out.append("")
        elif segment == ".":
            if i == last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


class FastJoin:
    """``FastJoin(base).join(href) -> absolute URL | None``.

    ``href`` must be stripped and free of its fragment. The result is what
    ``ada_url.join_url(base, href)`` returns, without fragment, whenever it
    is not ``None``.
    """

    __slots__ = ("origin", "directory", "valid")

    def __init__(self, base: str) -> None:
        self.origin = ""
        self.directory = ""
        self.valid = True  # a base WHATWG refuses makes every join fail
        plain = _ABSOLUTE.fullmatch(base.split("#", 1)[0].split("?", 1)[0])
        if plain is not None and _origin(plain[1], plain[2]):  # the usual case: no parse needed
            self.origin, path = plain[1], _remove_dots(plain[3] or "/")
        else:
            try:
                parts = parse_url(base)
            except ValueError:
                self.valid = False
                return
            if parts["protocol"] not in ("http:", "https:") or parts["username"] or parts["password"]:
                return
            self.origin = parts["protocol"] + "//" + parts["host"]
            path = parts["pathname"]
        self.directory = path[: path.rfind("/") + 1]

    def join(self, href: str) -> str | None:
        if not self.valid:
            return None
        if href.startswith(("http://", "https://")):
            match = _ABSOLUTE.fullmatch(href)
            if match is None or not _origin(match[1], match[2]):
                return None
            origin, path = match[1], match[3]
            if not path:
                return origin + "/"
        elif not self.origin or not href:
            return None
        elif href[0] == "/":
            if _ROOTED.fullmatch(href) is None:
                return None
            origin, path = self.origin, href
        else:
            match = _RELATIVE.fullmatch(href)
            if match is None:
                return None
            up, path = match.groups()
            origin, directory = self.origin, self.directory
            if up:
                directory = directory.rsplit("/", len(up) // 3 + 1)[0] + "/"
            path = directory + path
        return origin + (_remove_dots(path) if "/." in path else path)
