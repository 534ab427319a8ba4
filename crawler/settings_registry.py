"""Every setting the crawler reads: name, default, form and what it does,
listed in ``settings_registry.toml`` beside this file; the one settings layer.

Components read their settings once, in ``__init__``/``from_crawler``, with
:func:`setting`, which takes the default from here (no default is written
anywhere else) and returns the value checked against its form, or raises
:class:`SettingsError`, one line naming the setting and what it expects.
:func:`validate` checks every setting and every cross-field rule (:data:`RULES`,
below), and warns once of each ``CRAWLER_*`` name not listed (a misspelling,
with the name probably meant); the command layer and the addon call it
before a crawl starts. Only the command layer (``crawler/commands/``) turns a
:class:`SettingsError` into an exit status.

What a form accepts and how a raw value is typed is ``crawler/settings_forms.py``
(:class:`Setting`, :func:`typed`); the checks of content a setting's ``check``
names are ``crawler/settings_checks.py``. A setting without ``default`` is
unset by default (``None``; an empty string is unset too).

The docs' settings reference (``docs/reference/settings.md``) is generated
from this list as the docs build (``docs/_ext/reference.py``); a setting
without its ``doc`` fails the build. ``python -m crawler.settings_registry
docs/<page>.md`` prints the settings table of a docs page.
"""

from __future__ import annotations

import difflib
import logging
import math
import tomllib
import weakref
from importlib import resources
from typing import TYPE_CHECKING, Any

from crawler.settings_forms import FORMS, Setting, SettingsError, load_function, typed
from crawler.settings_forms import _literal  # noqa: F401 (docs/_ext/reference.py reads it here)

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)


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
    load_function("crawler.fetch.handler:check_tls")(settings)


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
        load_function(rule)(settings)
    if settings.frozen:
        _validated[id(settings)] = weakref.finalize(settings, _validated.pop, id(settings), None)


def markdown_table(page: str = "") -> str:
    """The settings table of ``page`` (``""``: the README's)."""
    head = "| setting | default | value | what it does |\n| --- | --- | --- | --- |\n"
    return head + "\n".join(s.row() for s in SETTINGS if s.page == page) + "\n"


if __name__ == "__main__":
    import sys

    print(markdown_table(*sys.argv[1:2]), end="")


__all__ = ["BY_NAME", "FORMS", "MOVED", "PREFIX", "RULES", "SETTINGS", "Setting", "SettingsError", "check_tls",
           "lease_seconds", "lock_ttl", "markdown_table", "moved_paths", "setting", "typed", "unknown_names",
           "validate", "warn_unknown"]
