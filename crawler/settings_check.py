"""Every setting with a form (``crawler.settings_registry``), checked before a
crawl starts, so a bad value is one error line naming the setting, not a
traceback."""

from __future__ import annotations

from scrapy.settings import BaseSettings

from crawler.middlewares.lock import lock_ttl
from crawler.scheduler.config import FrontierSettings, SettingsError
from crawler.settings_registry import SETTINGS

# name -> (kind, minimum), from the registry
FORMS: dict[str, tuple[str, float]] = {s.name: (s.form, s.minimum) for s in SETTINGS if s.form}


def check_settings(settings: BaseSettings) -> None:
    """Raise :class:`SettingsError` for the first setting of the wrong form."""
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
    from crawler.resolver import parse_host_map

    try:
        parse_host_map(settings.getdict("CRAWLER_HOST_MAP"))
        Allowed(settings.getlist("CRAWLER_ALLOW_PRIVATE"))
    except ValueError as exc:
        raise SettingsError(str(exc)) from None

