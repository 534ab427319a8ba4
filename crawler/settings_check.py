"""Every CRAWLER_* setting with a form, checked before a crawl starts, so a
bad value is one error line naming the setting, not a traceback."""

from __future__ import annotations

from scrapy.settings import BaseSettings

from crawler.middlewares.lock import lock_ttl
from crawler.scheduler.config import FrontierSettings, SettingsError

# name -> (kind, minimum); kinds: "int", "float", "bool"
FORMS: dict[str, tuple[str, float]] = {
    "CRAWLER_MAX_PAGE_BYTES": ("int", 1),
    "CRAWLER_MAX_ATTEMPTS": ("int", 1),
    "CRAWLER_BACKOFF_BASE": ("float", 0),
    "CRAWLER_BACKOFF_MAX": ("float", 0),
    "CRAWLER_BACKOFF_JITTER": ("float", 0),
    "CRAWLER_RETRY_AFTER_MAX": ("float", 0),
    "CRAWLER_DLQ_MAX": ("int", 1),
    "CRAWLER_ROBOTS_TTL": ("float", 1),
    "CRAWLER_ROBOTS_ERROR_TTL": ("float", 1),
    "CRAWLER_ROBOTS_MAX_DELAY": ("float", 0),
    "CRAWLER_LOCK_WAIT": ("float", 0),
    "CRAWLER_MAX_DEPTH": ("int", 0),
    "CRAWLER_MAX_URL_LENGTH": ("int", 1),
    "CRAWLER_WARC_MAX_BYTES": ("int", 1),
    "CRAWLER_WARC_LEVEL": ("int", 0),
    "CRAWLER_WARC_QUEUE": ("int", 0),
    "CRAWLER_TLS_SESSIONS": ("int", 1),
    "CRAWLER_MAX_HEADER_BYTES": ("int", 256),
    "CRAWLER_KEEPALIVE_TIMEOUT": ("float", 0),
    "CRAWLER_BLOCK_PRIVATE": ("bool", 0),
    "CRAWLER_PROGRESS_INTERVAL": ("float", 0),
    "CRAWLER_METRICS_PORT": ("int", 0),
    "CRAWLER_EMBEDDED_REDIS": ("bool", 0),
    "CRAWLER_HTML_ONLY": ("bool", 0),
    "CRAWLER_KEEPALIVE": ("bool", 0),
    "CRAWLER_FOLLOW_NOFOLLOW": ("bool", 0),
    "CRAWLER_FORWARD_LINKS": ("bool", 0),
    "CRAWLER_METRICS_ENABLED": ("bool", 0),
    "CRAWLER_DEDUP_START_REQUESTS": ("bool", 0),
    "CRAWLER_REDIS_CLUSTER": ("bool", 0),
}


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
    from crawler.resolver import parse_host_map

    from crawler.fetch._address import Allowed

    try:
        parse_host_map(settings.getdict("CRAWLER_HOST_MAP"))
        Allowed(settings.getlist("CRAWLER_ALLOW_PRIVATE"))
    except ValueError as exc:
        raise SettingsError(str(exc)) from None

