"""The stats registry is the one list of the crawler's stats: every
``crawler/...`` stat name written in ``crawler/`` is listed in
``crawler/stats_registry.toml`` (with what it counts), and every name listed
there is written somewhere; the docs' stats reference is made from it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from crawler.stats_registry import STATS, Stats, matches
from tests.servers import ROOT

# a stat name: crawler/<part>/..., lower-case parts (the User-Agent "crawler/0.1 (+...)" is not one)
_NAME = re.compile(r"crawler/[a-z_][a-z0-9_]*(/([a-z0-9_]+|\{\}|<[a-z_]+>))*/?\Z")


def written(root: Path) -> dict[str, str]:
    """Every stat name written in the Python files under ``root``: string
    constants and f-strings (each ``{...}`` part as ``{}``) -> a file it is in."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
        for node in ast.walk(tree):
            if id(node) in parts:  # the text of an f-string, read with it
                continue
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            if _NAME.match(text):
                found.setdefault(text, str(path.relative_to(root.parent)))
    return found


def unlisted(names: dict[str, str], stats: tuple[Stats, ...]) -> list[str]:
    listed = [n for entry in stats for n in entry.names]
    return sorted(f"{name} ({where})" for name, where in names.items()
                  if not any(matches(n, name) for n in listed))


def unwritten(names: dict[str, str], stats: tuple[Stats, ...]) -> list[str]:
    return sorted(n for entry in stats for n in entry.names
                  if not any(matches(n, name) for name in names if not name.endswith("/")))


def test_every_stat_written_in_the_crawler_is_listed() -> None:
    names = written(ROOT / "crawler")
    assert len(names) > 100  # the scan still finds them
    assert unlisted(names, STATS) == [], "add them to crawler/stats_registry.toml, with what they count"


def test_every_stat_listed_is_written_somewhere() -> None:
    assert unwritten(written(ROOT / "crawler"), STATS) == [], "remove them from crawler/stats_registry.toml"


def test_every_entry_says_what_it_counts() -> None:
    for entry in STATS:
        assert entry.names and entry.doc.strip(), entry
        for name in entry.names:
            assert _NAME.match(name) and "{" not in name, f"{name}: crawler/part/..., <word> for a part that varies"


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A new stat not listed, and a listed one nobody writes, are both found."""
    package = tmp_path / "crawler"
    package.mkdir()
    (package / "thing.py").write_text(
        'def f(stats, reason):\n'
        '    stats.inc_value("crawler/thing/new")\n'
        '    stats.inc_value(f"crawler/dlq/{reason}")\n')
    names = written(package)
    assert set(names) == {"crawler/thing/new", "crawler/dlq/{}"}
    stats = (Stats(names=("crawler/dlq/<reason>", "crawler/gone/stat"), doc="x"),)
    assert unlisted(names, stats) == ["crawler/thing/new (crawler/thing.py)"]
    assert unwritten(names, stats) == ["crawler/gone/stat"]


@pytest.mark.parametrize(("listed", "code", "same"), [
    ("crawler/dlq/<reason>", "crawler/dlq/{}", True),
    ("crawler/dlq/unrecorded", "crawler/dlq/{}", True),
    ("crawler/dlq/<reason>", "crawler/dlq/http_404", True),
    ("crawler/frontier/ended/<end>", "crawler/frontier/ended/", True),
    ("crawler/frontier/acked", "crawler/frontier/acked_by_sweep", False),
    ("crawler/gc/pause_ms", "crawler/gc/collections/{}", False),
])
def test_names_match_part_by_part(listed: str, code: str, same: bool) -> None:
    assert matches(listed, code) is same
