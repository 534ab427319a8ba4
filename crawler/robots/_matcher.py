"""A precedence-preserving index over a robots.txt group's rules.

Protego tries the rules of a group one after another in Python: fine for
the few rules most sites have, milliseconds per URL for a file of tens of
thousands of wildcard rules (docs/benchmarks.md, bench_robots). Here every rule keeps its rank in Protego's order (longest pattern
first, allow before disallow on a tie), and a URL is only tried against the
rules that can match it:

- plain rules (a prefix): looked up by the URL's own prefixes, one dict
  lookup per distinct rule length;
- ``$`` rules without a wildcard: one exact lookup;
- wildcard rules: indexed by the rarest three-character piece of their
  longest literal part, which a URL they match must contain; a rule with no
  such piece is always tried.

The candidates are tried in rank order, so the first match is the rule
Protego would have chosen. The index is plain data (:func:`index`), so a
worker process can build it and hand it over as JSON.
``tests/test_robots_rules.py`` checks the verdicts against Protego's.
"""

from __future__ import annotations

import re
from typing import Any

_GRAM = 3
_STARS = re.compile(r"\*+")


def index(rules: list[tuple[bool, str]]) -> dict[str, Any]:
    """The index of ``(allow, quoted pattern)`` rules, in precedence order."""
    plain: dict[str, int] = {}
    exact: dict[str, int] = {}
    grams: dict[str, list[int]] = {}
    always: list[int] = []
    wild: list[tuple[int, set[str]]] = []
    counts: dict[str, int] = {}
    for rank, (_, text) in enumerate(rules):
        if "*" not in text:
            if text.endswith("$"):
                exact.setdefault(text[:-1], rank)
            else:
                plain.setdefault(text, rank)
            continue
        literal = max(text.removesuffix("$").split("*"), key=len)
        pieces = {literal[i:i + _GRAM] for i in range(len(literal) - _GRAM + 1)}
        wild.append((rank, pieces))
        for piece in pieces:
            counts[piece] = counts.get(piece, 0) + 1
    for rank, pieces in wild:
        # every piece of a rule is in a URL it matches: the rarest one lets
        # the fewest URLs through to the full match
        if pieces:
            grams.setdefault(min(pieces, key=counts.__getitem__), []).append(rank)
        else:
            always.append(rank)
    return {"allow": [allow for allow, _ in rules], "patterns": [text for _, text in rules],
            "plain": plain, "exact": exact, "grams": grams, "always": always,
            "lengths": sorted({len(p) for p in plain})}


def matches(pattern: str, path: str) -> bool:
    """Protego's match of one quoted pattern against a quoted path: ``*`` is
    any run of characters, a final ``$`` anchors the end, else a prefix."""
    if "*" not in pattern:
        return path == pattern[:-1] if pattern.endswith("$") else path.startswith(pattern)
    anchored = pattern.endswith("$")
    parts = _STARS.split(pattern[:-1] if anchored else pattern)
    if not path.startswith(parts[0]):
        return False
    pos = len(parts[0])
    for part in parts[1:-1]:
        found = path.find(part, pos)
        if found == -1:
            return False
        pos = found + len(part)
    last = parts[-1]
    if anchored:
        end = len(path) - len(last)
        return end >= pos and path[end:] == last
    return not last or path.find(last, pos) != -1


class Matcher:
    """The index of :func:`index`, held in tuples and in dicts of strings to
    ints or tuples: the garbage collector stops tracking them (a list it
    would track for good), so a process's tens of thousands of kept
    robots.txt cost a full collection two objects each, not six or more."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.allow: tuple[bool, ...] = tuple(data["allow"])
        self.patterns: tuple[str, ...] = tuple(data["patterns"])
        self.plain: dict[str, int] = data["plain"]
        self.exact: dict[str, int] = data["exact"]
        self.grams: dict[str, tuple[int, ...]] = {piece: tuple(ranks) for piece, ranks in data["grams"].items()}
        self.always: tuple[int, ...] = tuple(data["always"])
        self.lengths: tuple[int, ...] = tuple(data["lengths"])
        #: about the bytes this index holds, besides the patterns' characters
        #: (tracemalloc: about 120 per plain pattern and 120-130 per wildcard
        #: one, counted 200; a wildcard rule ending in ``$`` is two patterns)
        self.weight = 600 + sum(len(p) + (200 if "*" in p else 120) for p in self.patterns)

    def allowed(self, path: str) -> bool:
        """Whether ``path`` (Protego's quoted path and query) may be fetched."""
        best = len(self.allow)
        plain = self.plain
        for length in self.lengths:
            if length > len(path):
                break
            rank = plain.get(path[:length])
            if rank is not None and rank < best:
                best = rank
        rank = self.exact.get(path)
        if rank is not None and rank < best:
            best = rank
        candidates = [r for r in self.always if r < best]
        grams = self.grams
        if grams:
            for i in range(len(path) - _GRAM + 1):
                found = grams.get(path[i:i + _GRAM])
                if found:
                    candidates += found
        if candidates:
            patterns = self.patterns
            for rank in sorted(set(candidates)):
                if rank >= best:
                    break
                if matches(patterns[rank], path):
                    best = rank
                    break
        return best == len(self.allow) or self.allow[best]
