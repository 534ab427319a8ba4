"""Page-level robots directives that stop link extraction: ``nofollow`` and
``none``, from ``<meta name="robots">`` (or a meta named for the crawler's
product token) and from ``X-Robots-Tag`` headers.

An ``X-Robots-Tag`` value may start with a user agent (``googlebot:
nofollow``): it then applies to that agent only. ``unavailable_after: <date>``
and the ``max-*: <n>`` rules also carry a colon; they are rules, not agents.
"""

from __future__ import annotations

from collections.abc import Iterable

_STOP = frozenset({"nofollow", "none"})
_RULES_WITH_COLON = ("unavailable_after", "max-snippet", "max-image-preview", "max-video-preview")


def _stops(directives: str) -> bool:
    return any(d.strip().lower() in _STOP for d in directives.split(","))


def header_nofollow(values: Iterable[bytes], agent: str) -> bool:
    """Whether ``X-Robots-Tag`` header ``values`` forbid following links for ``agent``."""
    agent = agent.lower()
    for raw in values:
        value = raw.decode("latin-1")
        head, colon, rest = value.partition(":")
        name = head.strip().lower()
        if colon and name and name not in _RULES_WITH_COLON and " " not in name and "," not in name:
            if name in (agent, "*") and _stops(rest):
                return True
            continue
        if _stops(value):
            return True
    return False


def meta_nofollow(metas: Iterable[tuple[str | None, str | None]], agent: str) -> bool:
    """Whether ``(name, content)`` pairs of ``<meta>`` tags forbid following
    links: ``name`` is ``robots`` or ``agent``."""
    agent = agent.lower()
    for name, content in metas:
        if name and content and name.strip().lower() in ("robots", agent) and _stops(content):
            return True
    return False
