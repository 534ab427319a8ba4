"""A setting's entry and its form: how a raw value (from settings.py, the
command line or the environment) becomes the typed, checked value a
component reads. The registry (``crawler/settings_registry.py``) lists the
entries; this module knows no setting by name.

Forms: ``bool``; ``int`` and ``float`` (finite, within ``minimum``/``maximum``,
exclusive with ``exclusive_minimum`` / ``exclusive_maximum``); ``enum``
(``choices``); ``str``; ``list`` (a string starting with ``[`` is a JSON
list, else split on commas as Scrapy's ``getlist``); ``dict`` (a string is a
JSON object, as Scrapy's ``getdict``); ``file`` (must exist); ``dir``
(exists or can be created, and is writable); ``url`` (``choices``: the
schemes allowed). ``check`` names, as ``module:function``, a function given
the typed value that raises ``ValueError`` for a value of the right form but
wrong content (``crawler/settings_checks.py``; loaded when first used, so no
component is imported here).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

FORMS = ("bool", "int", "float", "enum", "str", "list", "dict", "file", "dir", "url")


class SettingsError(ValueError):
    """A setting has a bad value; the message is one line naming it."""


@dataclass(frozen=True)
class Setting:
    name: str
    doc: str
    default: Any = None  # None: unset, or computed (see ``shown``)
    shown: str = ""  # the default as the docs show it, when not the value itself
    form: str = ""  # one of FORMS
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    choices: tuple[str, ...] = ()  # enum: the values; url: the schemes
    check: str = ""  # "module:function" checking the typed value (ValueError)
    page: str = ""  # the docs page whose settings table lists it ("": the README's)

    def row(self) -> str:
        shown = self.shown or f"`{_literal(self.default)}`"
        return f"| `{self.name}` | {shown} | {self.expects()} | {self.doc} |"

    def expects(self) -> str:
        """What a value must be, in words."""
        if self.form == "bool":
            return "True or False"
        if self.form in ("int", "float"):
            kind = "an integer" if self.form == "int" else "a finite number"
            bounds = []
            if self.minimum is not None:
                bounds.append(f"{'>' if self.exclusive_minimum else '>='} {self.minimum:g}")
            if self.maximum is not None:
                bounds.append(f"{'<' if self.exclusive_maximum else '<='} {self.maximum:g}")
            return f"{kind} {' and '.join(bounds)}".rstrip()
        if self.form == "enum":
            return "one of " + ", ".join(self.choices)
        if self.form == "url":
            return f"a URL ({', '.join(f'{s}://' for s in self.choices)})" if self.choices else "a URL"
        return {"str": "a string", "list": "a list (comma-separated, or a JSON list)",
                "dict": "a dict (a JSON object on the command line)", "file": "an existing file",
                "dir": "a writable folder (created if missing)"}.get(self.form, "")


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict | list):
        return json.dumps(value)
    return repr(value)


def _fail(entry: Setting, raw: Any, expects: str = "") -> SettingsError:
    return SettingsError(f"{entry.name} must be {expects or entry.expects()}, got {raw!r}")


def _bool(entry: Setting, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in ("1", "true"):
            return True
        if word in ("0", "false"):
            return False
    raise _fail(entry, raw)


def _number(entry: Setting, raw: Any) -> int | float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise _fail(entry, raw)
    try:
        value: int | float = float(raw)
    except ValueError:
        raise _fail(entry, raw) from None
    if not math.isfinite(value):
        raise _fail(entry, raw)
    if entry.form == "int":
        if isinstance(raw, str):
            try:
                value = int(raw.strip())
            except ValueError:
                raise _fail(entry, raw) from None
        elif value != int(value):
            raise _fail(entry, raw)
        else:
            value = int(value)
    low, high = entry.minimum, entry.maximum
    if low is not None and (value <= low if entry.exclusive_minimum else value < low):
        raise _fail(entry, raw)
    if high is not None and (value >= high if entry.exclusive_maximum else value > high):
        raise _fail(entry, raw)
    return value


def _enum(entry: Setting, raw: Any) -> str:
    word = str(raw).strip().lower() if isinstance(raw, str | int) else None
    if word not in entry.choices:
        raise _fail(entry, raw)
    return word


def _str(entry: Setting, raw: Any) -> str:
    if not isinstance(raw, str):
        raise _fail(entry, raw)
    return raw


def _list(entry: Setting, raw: Any) -> list[Any]:
    if isinstance(raw, str):
        if raw.lstrip().startswith("{"):  # a JSON object where a list is expected
            raise _fail(entry, raw)
        if raw.lstrip().startswith("["):
            try:
                raw = json.loads(raw)
            except ValueError as exc:
                raise _fail(entry, raw, f"a JSON list ({exc})") from None
        else:
            raw = raw.split(",")
    if not isinstance(raw, list | tuple):
        raise _fail(entry, raw)
    values = []
    for element in raw:
        if not isinstance(element, str):
            raise SettingsError(f"{entry.name} must be a list of strings, got {element!r} in it")
        if element.strip():
            values.append(element.strip())
    return values


def _dict(entry: Setting, raw: Any) -> dict[Any, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise _fail(entry, raw, f"a JSON object ({exc})") from None
    if hasattr(raw, "copy_to_dict"):  # a BaseSettings
        raw = raw.copy_to_dict()
    if not isinstance(raw, dict):
        raise _fail(entry, raw)
    return dict(raw)


def _file(entry: Setting, raw: Any) -> str:
    path = Path(_str(entry, raw)).expanduser()
    if not path.is_file() or not os.access(path, os.R_OK):
        raise _fail(entry, raw, "a readable file that exists")
    return raw


def _dir(entry: Setting, raw: Any) -> str:
    path = Path(_str(entry, raw)).expanduser()
    if path.exists() and not path.is_dir():
        raise _fail(entry, raw, "a folder, not a file")
    existing = path
    while not existing.exists():  # the folder that would hold the ones to create
        existing = existing.parent
    if not existing.is_dir():
        raise _fail(entry, raw, f"a folder that can be created ({existing} is a file)")
    try:
        handle, name = tempfile.mkstemp(dir=existing, prefix=".write-test-")
        os.close(handle)
        os.unlink(name)
    except OSError as exc:
        raise _fail(entry, raw, f"a writable folder ({exc.strerror or exc} in {existing})") from None
    return raw


def _url(entry: Setting, raw: Any) -> str:
    parts = urlsplit(_str(entry, raw).strip())
    if entry.choices and parts.scheme not in entry.choices or not (parts.netloc or parts.path):
        shown = raw
        if parts.password:  # never printed
            shown = raw.replace(f":{parts.password}@", ":***@", 1)
        raise _fail(entry, shown)
    return raw


_FORMS: dict[str, Callable[[Setting, Any], Any]] = {
    "bool": _bool, "int": _number, "float": _number, "enum": _enum, "str": _str, "list": _list,
    "dict": _dict, "file": _file, "dir": _dir, "url": _url,
}


def load_function(dotted: str) -> Callable[..., Any]:
    module, _, name = dotted.partition(":")
    return getattr(import_module(module), name)


def typed(entry: Setting, raw: Any) -> Any:
    """``raw`` as ``entry``'s form, checked; ``SettingsError`` if it is not."""
    if raw is None or (raw == "" and entry.form != "str"):
        return entry.default
    value = _FORMS[entry.form](entry, raw)
    if entry.check:
        try:
            load_function(entry.check)(value)
        except SettingsError:
            raise
        except ValueError as exc:
            message = str(exc)
            raise SettingsError(message if message.startswith(entry.name) else f"{entry.name} {message}") from None
    return value
