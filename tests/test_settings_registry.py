"""The settings registry is the one list: the README's table is generated
from it, and every default written in the code agrees with it."""

from __future__ import annotations

import ast
import re

from crawler.settings_registry import BY_NAME, markdown_table
from tests.servers import ROOT

# settings.getint("CRAWLER_X", 5), _number(settings, "CRAWLER_X", 5), ...
_READ = re.compile(r'(?:get(?:int|float|bool|list|dict)?\(|_number\(\w+, )"((?:CRAWLER|SCHEDULER)_[A-Z_]+)", ([^()]+?)\)')


def test_readme_table_is_the_registry() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Settings reference\n\n", 1)[1].split("\n\n", 1)[0] + "\n"
    assert table == markdown_table(), "run: python -m crawler.settings_registry, and paste it into README.md"


def test_defaults_in_the_code_agree_with_the_registry() -> None:
    seen = 0
    for path in (ROOT / "crawler").rglob("*.py"):
        for name, literal in _READ.findall(path.read_text()):
            try:
                value = ast.literal_eval(literal)
            except (ValueError, SyntaxError):
                continue  # computed: documented by its ``shown`` text
            assert name in BY_NAME, f"{path.name}: {name} is not in crawler/settings_registry.toml"
            assert value == BY_NAME[name].default, f"{path.name}: {name} defaults to {value!r} there"
            seen += 1
    assert seen > 40  # the pattern still finds the reads


def test_every_setting_read_is_registered() -> None:
    names = set()
    for path in (ROOT / "crawler").rglob("*.py"):
        names |= set(re.findall(r'"(CRAWLER_[A-Z_]+)"', path.read_text()))
    assert names - set(BY_NAME) == set()
