"""Every stat the crawler keeps under ``crawler/`` in Scrapy's stats
collector, listed in ``stats_registry.toml`` beside this file with what it
counts: the one list, as ``settings_registry.toml`` is for settings.

The docs' stats reference is generated from it (``docs/_ext/reference.py``),
and ``tests/test_stats_registry.py`` fails when a ``crawler/...`` name
written in ``crawler/`` is missing here, or one listed here is written
nowhere. A ``<word>`` part of a name varies (``crawler/dlq/<reason>``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Stats:
    """One entry: stats that belong together and what they count."""

    names: tuple[str, ...]
    doc: str


def _load() -> tuple[Stats, ...]:
    text = resources.files("crawler").joinpath("stats_registry.toml").read_text()
    return tuple(Stats(names=tuple(entry["names"]), doc=entry["doc"]) for entry in tomllib.loads(text)["stat"])


STATS: tuple[Stats, ...] = _load()


def matches(listed: str, written: str) -> bool:
    """Whether a listed name and one written in the code can be the same
    stat: part by part equal, or either part a placeholder (``<reason>`` here,
    ``{reason}`` in an f-string); a written prefix (``crawler/dlq/``) matches
    the names under it."""
    if written.endswith("/"):
        return listed.startswith(written)
    a, b = listed.split("/"), written.split("/")
    return len(a) == len(b) and all(x == y or x.startswith("<") or y.startswith(("<", "{")) for x, y in zip(a, b))
