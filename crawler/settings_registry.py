"""Every setting the crawler reads: name, default, form and what it does,
listed in ``settings_registry.toml`` beside this file.

The README's settings table is generated from this list
(``python -m crawler.settings_registry``; a test fails when they differ),
and :func:`crawler.settings_check.check_settings` checks each setting of a
form before a crawl starts.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Setting:
    name: str
    doc: str
    default: Any = None  # None: unset, or computed (see ``shown``)
    shown: str = ""  # the default as the README shows it, when not the value itself
    form: str = ""  # "int", "float" or "bool": checked before a crawl
    minimum: float = 0

    def row(self) -> str:
        shown = self.shown or f"`{_literal(self.default)}`"
        return f"| `{self.name}` | {shown} | {self.doc} |"


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict | list):
        return json.dumps(value)
    return repr(value)


def _load() -> tuple[Setting, ...]:
    text = resources.files("crawler").joinpath("settings_registry.toml").read_text()
    return tuple(Setting(**entry) for entry in tomllib.loads(text)["setting"])


SETTINGS: tuple[Setting, ...] = _load()

BY_NAME = {s.name: s for s in SETTINGS}


def markdown_table() -> str:
    head = "| setting | default | what it does |\n| --- | --- | --- |\n"
    return head + "\n".join(s.row() for s in SETTINGS) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
