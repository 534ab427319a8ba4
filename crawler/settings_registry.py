"""Every setting the crawler reads: name, default, form and what it does,
listed in ``settings_registry.toml`` beside this file; the one settings layer.

Components read their settings once, in ``__init__``/``from_crawler``, with
:func:`setting`, which takes the default from here (no default is written
anywhere else) and returns the value checked against its form, or raises
:class:`SettingsError`, one line naming the setting and what it expects.
:func:`validate` checks every setting and every cross-field rule, and warns
once of each ``CRAWLER_*`` name not listed (a misspelling, with the name
probably meant); the command layer and the addon call it before a crawl
starts. Only the command layer (``crawler/commands/``) turns a
:class:`SettingsError` into an exit status.

Forms (``form`` in the TOML): ``bool``; ``int`` and ``float`` (finite, within
``minimum``/``maximum``, exclusive with ``exclusive_minimum`` /
``exclusive_maximum``); ``enum`` (``choices``); ``str``; ``list`` (a string
starting with ``[`` is a JSON list, else split on commas as Scrapy's
``getlist``); ``dict`` (a string is a JSON object, as Scrapy's ``getdict``);
``file`` (must exist); ``dir`` (exists or can be created, and is writable);
``url`` (``choices``: the schemes allowed). ``check`` names, as
``module:function``, a function given the typed value that raises
``ValueError`` for a value of the right form but wrong content (loaded when
first used, so this module imports no component). A setting without
``default`` is unset by default (``None``; an empty string is unset too).

The docs' settings reference (``docs/reference/settings.md``) is generated
from this list as the docs build (``docs/_ext/reference.py``); a setting
without its ``doc`` fails the build.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import logging
import math
import os
import re
import tempfile
import tomllib
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module, resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

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


_INFERRED = {bool: "bool", int: "int", float: "float", list: "list", dict: "dict"}


def _load() -> tuple[Setting, ...]:
    text = resources.files("crawler").joinpath("settings_registry.toml").read_text()
    entries = []
    for entry in tomllib.loads(text)["setting"]:
        if "choices" in entry:
            entry["choices"] = tuple(entry["choices"])
        if not entry.get("form"):  # every entry should say it (a test checks); else from its default
            entry["form"] = _INFERRED.get(type(entry.get("default")), "str")
        entries.append(Setting(**entry))
    return tuple(entries)


SETTINGS: tuple[Setting, ...] = _load()

BY_NAME = {s.name: s for s in SETTINGS}


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


def _load_function(dotted: str) -> Callable[..., Any]:
    module, _, name = dotted.partition(":")
    return getattr(import_module(module), name)


def typed(entry: Setting, raw: Any) -> Any:
    """``raw`` as ``entry``'s form, checked; ``SettingsError`` if it is not."""
    if raw is None or (raw == "" and entry.form != "str"):
        return entry.default
    value = _FORMS[entry.form](entry, raw)
    if entry.check:
        try:
            _load_function(entry.check)(value)
        except SettingsError:
            raise
        except ValueError as exc:
            message = str(exc)
            raise SettingsError(message if message.startswith(entry.name) else f"{entry.name} {message}") from None
    return value


def setting(settings: BaseSettings, name: str) -> Any:
    """``name``'s value, checked against its form, defaulting to the
    registry's default (``None``: unset). Raises :class:`SettingsError`."""
    entry = BY_NAME[name]
    return typed(entry, settings.get(name))


# cross-field rules: "module:function" given the settings, raising SettingsError
RULES: tuple[str, ...] = (
    "crawler.settings_registry:lease_seconds",
    "crawler.settings_registry:lock_ttl",
    "crawler.settings_registry:check_tls",
    "crawler.settings_registry:moved_paths",
)

# component paths of earlier releases, and where they are now
MOVED = {
    "crawler.scheduler.fingerprint.Fingerprinter": "crawler.scheduler.Fingerprinter",
    "crawler.scheduler.identity.Fingerprinter": "crawler.scheduler.Fingerprinter",
    "crawler.scheduler.acks.FrontierAckDownloaderMiddleware": "crawler.middlewares.acks.FrontierAckDownloaderMiddleware",
    "crawler.scheduler.acks.FrontierAckSpiderMiddleware": "crawler.middlewares.acks.FrontierAckSpiderMiddleware",
}


def _timeout(settings: BaseSettings) -> float:
    raw = settings.get("DOWNLOAD_TIMEOUT", 180)
    try:
        timeout = float(raw)
    except (TypeError, ValueError):
        timeout = math.nan
    if isinstance(raw, bool) or not math.isfinite(timeout) or timeout <= 0:
        raise SettingsError(f"DOWNLOAD_TIMEOUT must be a finite number > 0, got {raw!r}")
    return timeout


def lease_seconds(settings: BaseSettings) -> float:
    """``CRAWLER_LEASE_SECONDS`` (``DOWNLOAD_TIMEOUT`` + 120 when unset),
    which must exceed ``DOWNLOAD_TIMEOUT``: a lease outlives the download it covers."""
    timeout = _timeout(settings)
    lease = setting(settings, "CRAWLER_LEASE_SECONDS")
    if lease is None:
        return timeout + 120
    if lease <= timeout:
        raise SettingsError(f"CRAWLER_LEASE_SECONDS ({lease:g}) must exceed DOWNLOAD_TIMEOUT ({timeout:g}): "
                            "a lease must outlive the download it covers")
    return float(lease)


def lock_ttl(settings: BaseSettings) -> float:
    """``CRAWLER_LOCK_TTL`` (``DOWNLOAD_TIMEOUT`` + 30 when 0), which must
    exceed ``DOWNLOAD_TIMEOUT``: a lock outlives the download it guards."""
    timeout = _timeout(settings)
    ttl = setting(settings, "CRAWLER_LOCK_TTL") or timeout + 30
    if ttl <= timeout:
        raise SettingsError(f"CRAWLER_LOCK_TTL ({ttl:g}) must exceed DOWNLOAD_TIMEOUT ({timeout:g}): "
                            "a lock must outlive the download it guards")
    return float(ttl)


def check_tls(settings: BaseSettings) -> None:
    """Scrapy's TLS settings (versions, ciphers, context factory) when the
    crawler's download handler is the one that reads them."""
    _load_function("crawler.fetch.handler:check_tls")(settings)


def moved_paths(settings: BaseSettings) -> None:
    """A component named by a path it had in an earlier release: one line
    naming the path it has now, instead of Scrapy's import traceback."""
    for name in ("REQUEST_FINGERPRINTER_CLASS", "SCHEDULER"):
        value = settings.get(name)
        if isinstance(value, str) and value in MOVED:
            raise SettingsError(f"{name}: {value} moved, use {MOVED[value]}")
    for name in ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "EXTENSIONS"):
        for path in settings.getwithbase(name):
            if isinstance(path, str) and path in MOVED:
                raise SettingsError(f"{name}: {path} moved, use {MOVED[path]}")


PREFIX = "CRAWLER_"  # the names of this project's settings; a name of it not listed is a mistake


def unknown_names(settings: BaseSettings) -> list[tuple[str, str | None]]:
    """Each ``CRAWLER_*`` name of ``settings`` the registry does not know,
    with the known name closest to it (None if none is close)."""
    known = [name[len(PREFIX):] for name in BY_NAME if name.startswith(PREFIX)]
    found = []
    for name in sorted(str(n) for n in settings):
        if name.startswith(PREFIX) and name not in BY_NAME:
            # compared without the prefix, which every name shares
            close = difflib.get_close_matches(name[len(PREFIX):], known, n=1)
            found.append((name, PREFIX + close[0] if close else None))
    return found


_warned: set[str] = set()  # unknown names already said in this process


def warn_unknown(settings: BaseSettings) -> None:
    """One warning per unknown ``CRAWLER_*`` name (per process), naming the
    setting probably meant: a misspelt setting is otherwise ignored in silence."""
    for name, close in unknown_names(settings):
        if name in _warned:
            continue
        _warned.add(name)
        if close:
            logger.warning("unknown setting %s (did you mean %s?)", name, close)
        else:
            logger.warning("unknown setting %s", name)


_validated: dict[int, weakref.finalize] = {}  # ids of frozen settings already validated


def validate(settings: BaseSettings, *, unknown: bool = True) -> None:
    """Check every setting of the registry and every cross-field rule; raise
    :class:`SettingsError` for the first bad one; with ``unknown``, warn of
    the ``CRAWLER_*`` names it does not know (:func:`warn_unknown`). Frozen
    (final) settings are checked once, whoever asks first."""
    if id(settings) in _validated:
        return
    if unknown:
        warn_unknown(settings)
    for entry in SETTINGS:
        setting(settings, entry.name)
    for rule in RULES:
        _load_function(rule)(settings)
    if settings.frozen:
        _validated[id(settings)] = weakref.finalize(settings, _validated.pop, id(settings), None)


# checks of content, named by ``check`` in the TOML


def key_prefix(value: str) -> None:
    if not value or any(c in value for c in "{}\n ") or value != value.strip():
        raise ValueError(f"must be a non-empty name without braces or spaces, got {value!r}")


def domain_overrides(value: dict[Any, Any]) -> None:
    for domain, policy in value.items():
        if not isinstance(policy, dict) or not set(policy) <= {"rate", "burst", "delay"}:
            raise ValueError(f"[{domain!r}] must be a dict with keys rate, burst, delay, got {policy!r}")
        for key, number in policy.items():
            if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number) \
                    or number < (1 if key == "burst" else 0):
                raise ValueError(f"[{domain!r}][{key!r}] must be a finite number >= "
                                 f"{1 if key == 'burst' else 0}, got {number!r}")


def shard_urls(value: dict[Any, Any]) -> None:
    for shard, url in value.items():
        try:
            number = int(shard)
        except (TypeError, ValueError):
            number = -1
        if number < 0 or not isinstance(url, str) or urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"must be a dict of shard number -> REDIS_URL (redis://, rediss://, unix://), "
                             f"got {shard!r}: {url!r}")


# a host pattern (fnmatch): host-name characters and wildcards, no empty label
_HOST_PATTERN = re.compile(r"[a-z0-9_*?!\[\]-]+(\.[a-z0-9_*?!\[\]-]+)*\Z")


def networks(value: list[str]) -> None:
    """A list of networks (CIDR, or one address)."""
    for entry in value:
        try:
            ipaddress.ip_network(str(entry).strip(), strict=False)
        except ValueError:
            raise ValueError(f"{entry!r} is not a network (CIDR)") from None


def allow_private(value: list[str]) -> None:
    """``CRAWLER_ALLOW_PRIVATE``: each entry a network (CIDR, or one
    address) or a host pattern that could match a host name; a top label of
    digits alone (``5``, ``10.0.0``) is neither: no host has one."""
    _load_function("crawler.fetch._address:Allowed")(value)  # the networks, as the download handler reads them
    for entry in value:
        word = str(entry).strip().lower()
        try:
            ipaddress.ip_network(word, strict=False)
            continue
        except ValueError:
            pass
        pattern = word.rstrip(".")
        if not _HOST_PATTERN.match(pattern) or pattern.rsplit(".", 1)[-1].isdigit():
            raise ValueError(f"CRAWLER_ALLOW_PRIVATE: {entry!r} is neither a network (CIDR) nor a host pattern")


def listen_address(value: str) -> None:
    """An address a server of this machine listens on: an IP address, or
    ``localhost`` (no other name is looked up before the crawl starts)."""
    if value.lower() != "localhost":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"must be an IP address to listen on (127.0.0.1, 0.0.0.0, ::) or localhost, "
                             f"got {value!r}") from None


def writable_file(value: str) -> None:
    """An output file: its folder exists or can be created, and is writable."""
    try:
        _dir(Setting(name="", doc="", form="dir"), str(Path(value).expanduser().parent))
    except SettingsError:
        raise ValueError(f"must be a file in a writable folder, got {value!r}") from None


def markdown_table(page: str = "") -> str:
    """The settings table of ``page`` (``""``: the README's)."""
    head = "| setting | default | value | what it does |\n| --- | --- | --- | --- |\n"
    return head + "\n".join(s.row() for s in SETTINGS if s.page == page) + "\n"


if __name__ == "__main__":
    import sys

    print(markdown_table(*sys.argv[1:2]), end="")
