"""Every setting the crawler reads: name, default, form and what it does,
listed in ``settings_registry.toml`` beside this file.

Components read their settings with :func:`setting`, which takes the
default from here: no default is written anywhere else. The README's
settings table is generated from this list (``python -m
crawler.settings_registry``; a test fails when they differ), and
:func:`crawler.settings_check.check_settings` checks each setting of a form
before a crawl starts.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


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


_KINDS = {bool: "bool", int: "int", float: "float", list: "list", dict: "dict"}


def setting(settings: BaseSettings, name: str) -> Any:
    """``name``'s value, through the typed getter of its form (else of its
    default's type), defaulting to the registry's default."""
    entry = BY_NAME[name]
    kind = entry.form or _KINDS.get(type(entry.default), "")
    getter = getattr(settings, f"get{kind}")
    return getter(name, entry.default)


def markdown_table() -> str:
    head = "| setting | default | what it does |\n| --- | --- | --- |\n"
    return head + "\n".join(s.row() for s in SETTINGS) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
