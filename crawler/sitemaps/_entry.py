"""What one sitemap line or element becomes: an :class:`Entry`, its fields normalised.

Pure functions on strings already cut to a bounded length by the readers.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Literal

EntryKind = Literal["page", "sitemap"]

CHANGEFREQS = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})

# W3C datetime (https://www.w3.org/TR/NOTE-datetime): YYYY, YYYY-MM, YYYY-MM-DD,
# then optionally Thh:mm[:ss[.s+]] and a zone. The zone is optional here (the note
# requires it with a time; many sitemaps leave it out, and the value stays useful).
_W3C = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})"
    r"(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-](\d{2}):(\d{2}))?)?)?)?",
    re.ASCII,
)
_DECIMAL = re.compile(r"\d{1,3}(?:\.\d{0,16})?|\.\d{1,16}", re.ASCII)
_FIELD_MAX = 64  # lastmod, changefreq, priority: longer is not a value


@dataclass(frozen=True, slots=True)
class Entry:
    """One URL a sitemap lists.

    ``kind`` is ``'sitemap'`` for a ``<sitemapindex>`` child, else ``'page'``.
    ``lastmod`` is the W3C datetime string as written (or, for RSS, the
    ``pubDate`` converted to one), ``changefreq`` one of :data:`CHANGEFREQS`,
    ``priority`` a float in [0, 1]; each ``None`` when absent or invalid.
    """

    url: str
    kind: EntryKind = "page"
    lastmod: str | None = None
    changefreq: str | None = None
    priority: float | None = None


def clean_url(text: str, max_length: int) -> str | None:
    """``text`` stripped if it is an absolute http(s) URL of at most ``max_length``
    characters with a host and no whitespace or control character, else ``None``."""
    url = text.strip()
    if not url or len(url) > max_length:
        return None
    head = url[:8].lower()
    if head.startswith("https://"):
        rest = 8
    elif head.startswith("http://"):
        rest = 7
    else:
        return None
    if rest >= len(url) or url[rest] in "/?#":
        return None  # no host
    if not url.isprintable() or " " in url:
        return None
    return url


def normalise_lastmod(text: str) -> str | None:
    value = text.strip()
    if not value or len(value) > _FIELD_MAX:
        return None
    m = _W3C.fullmatch(value)
    if m is None:
        return None
    year, month, day, hour, minute, second, zone, zh, zm = m.groups()
    if month is not None and not 1 <= int(month) <= 12:
        return None
    if day is not None and not 1 <= int(day) <= calendar.monthrange(int(year), int(month))[1]:
        return None
    if hour is not None and (int(hour) > 23 or int(minute) > 59):
        return None
    if second is not None and int(second) > 60:  # 60: a leap second
        return None
    if zh is not None and (int(zh) > 23 or int(zm) > 59):
        return None
    return value


def lastmod_seconds(value: str) -> int | None:
    """A ``<lastmod>`` (a W3C datetime, as :func:`normalise_lastmod` keeps
    it) as Unix seconds: a date alone is its midnight UTC, a time without a
    zone is UTC, a year or a month is its first day. None when it is not
    one (or before 1970)."""
    m = _W3C.fullmatch(value.strip()) if len(value) <= _FIELD_MAX else None
    if m is None:
        return None
    year, month, day, hour, minute, second, zone, zh, zm = m.groups()
    try:
        when = datetime(int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0),
                        min(int(second or 0), 59), tzinfo=timezone.utc)
    except ValueError:
        return None
    if zone and zone != "Z":
        offset = timedelta(hours=int(zh), minutes=int(zm))
        when -= offset if zone[0] == "+" else -offset
    seconds = int(when.timestamp())
    return seconds if seconds > 0 else None


def normalise_pubdate(text: str) -> str | None:
    """An RSS ``pubDate`` (RFC 822) as a W3C datetime, or ``None``."""
    value = text.strip()
    if not value or len(value) > _FIELD_MAX:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return when.strftime("%Y-%m-%dT%H:%M:%S")
    return when.isoformat().replace("+00:00", "Z")


def normalise_changefreq(text: str) -> str | None:
    value = text.strip().lower()
    return value if value in CHANGEFREQS else None


def normalise_priority(text: str) -> float | None:
    value = text.strip()
    if not value or len(value) > _FIELD_MAX or _DECIMAL.fullmatch(value) is None:
        return None
    number = float(value)
    return number if 0.0 <= number <= 1.0 else None
