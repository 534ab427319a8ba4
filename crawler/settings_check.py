"""Every setting with a form (``crawler.settings_registry``), checked before a
crawl starts, so a bad value is one error line naming the setting, not a
traceback.

Each way the components come in checks: the addon, ``scrapy crawl``, the
scheduler and the download handler (a project may use either alone). Final
(frozen) settings are checked once, whoever asks first.
"""

from __future__ import annotations

import weakref

from scrapy.settings import BaseSettings

from crawler.middlewares.lock import lock_ttl
from crawler.scheduler.config import FrontierSettings, SettingsError
from crawler.settings_registry import SETTINGS, setting

# name -> (kind, minimum), from the registry
FORMS: dict[str, tuple[str, float]] = {s.name: (s.form, s.minimum) for s in SETTINGS if s.form}


_checked: dict[int, weakref.finalize] = {}  # id of frozen settings already checked


def check_settings(settings: BaseSettings) -> None:
    """Raise :class:`SettingsError` for the first setting of the wrong form."""
    if id(settings) in _checked:
        return
    _check(settings)
    if settings.frozen:
        _checked[id(settings)] = weakref.finalize(settings, _checked.pop, id(settings), None)


def _check(settings: BaseSettings) -> None:
    for name, (kind, minimum) in FORMS.items():
        raw = settings.get(name)
        if raw is None or raw == "":
            continue
        try:
            if kind == "bool":
                settings.getbool(name)
                continue
            value = settings.getint(name) if kind == "int" else settings.getfloat(name)
        except (TypeError, ValueError):
            expected = {"int": "an integer", "float": "a number", "bool": "True or False"}[kind]
            raise SettingsError(f"{name} must be {expected}, got {raw!r}") from None
        if value < minimum:
            raise SettingsError(f"{name} must be >= {minimum:g}, got {raw!r}")
    if settings.get("CRAWLER_WARC_LEVEL") not in (None, "") and settings.getint("CRAWLER_WARC_LEVEL") > 3:
        raise SettingsError(f"CRAWLER_WARC_LEVEL must be 0..3 (ISA-L levels), got {settings.get('CRAWLER_WARC_LEVEL')!r}")
    FrontierSettings.from_settings(settings)
    lock_ttl(settings)
    from crawler.fetch._address import Allowed
    from crawler.fetch._tls import check_lists, check_tls
    from crawler.resolver import parse_host_map

    try:
        parse_host_map(settings.getdict("CRAWLER_HOST_MAP"))
        Allowed(settings.getlist("CRAWLER_ALLOW_PRIVATE"))
        check_lists(setting(settings, "CRAWLER_TLS_GROUPS"), setting(settings, "CRAWLER_TLS13_CIPHERSUITES"))
        check_tls(settings)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None

