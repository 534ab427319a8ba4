"""Seed lists: top-domain CSVs (Tranco ``rank,domain``, Majestic with a header
naming a ``Domain`` column, or bare domains) and/or full URLs, one a line.

Bad lines are reported with their line numbers; the good ones are used.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ada_url import normalize_url
from scrapy.settings import BaseSettings

from crawler.connection import get_redis
from crawler.identity import canonicalize


@dataclass(frozen=True)
class Seed:
    url: str
    fallback: str | None = None  # the other scheme, tried once when this one cannot connect


@dataclass(frozen=True)
class SeedError:
    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}: {self.text[:100]!r}"


def _domain_seed(domain: str) -> Seed:
    domain = domain.strip().strip(".").lower()
    if not domain or any(c in domain for c in " /\\?#@"):
        raise ValueError("not a domain name")
    https = normalize_url(f"https://{domain}/")
    return Seed(https, "http://" + https[len("https://"):])


def parse_seeds(lines: Iterable[str]) -> tuple[list[Seed], list[SeedError]]:
    seeds: list[Seed] = []
    errors: list[SeedError] = []
    for parsed in iter_seeds(lines):
        (errors if isinstance(parsed, SeedError) else seeds).append(parsed)
    return seeds, errors


def iter_seeds(lines: Iterable[str]) -> Iterator[Seed | SeedError]:
    """:func:`parse_seeds` a line at a time: each line's seed, or its error,
    as it is read (blank and comment lines, and a header, yield nothing)."""
    column: int | None = None
    for number, raw in enumerate(lines, start=1):
        text = raw.strip().lstrip("\ufeff")
        if not text or text.startswith("#"):
            continue
        try:
            if "://" in text:
                if not text.lower().startswith(("http://", "https://")):
                    raise ValueError("only http(s) URLs can be seeds")
                url = canonicalize(text)
                scheme, rest = url.split("://", 1)
                yield Seed(url, ("http://" if scheme == "https" else "https://") + rest)
                continue
            fields = [f.strip() for f in text.split(",")]
            if column is None and number == 1 and not fields[0].isdigit():
                names = [f.lower() for f in fields]
                if "domain" in names:  # a Majestic-style header
                    column = names.index("domain")
                    continue
            if column is not None:
                if len(fields) <= column:
                    raise ValueError(f"no column {column + 1}")
                seed = _domain_seed(fields[column])
            elif len(fields) == 2 and fields[0].isdigit():
                seed = _domain_seed(fields[1])
            elif len(fields) == 1:
                seed = _domain_seed(fields[0])
            else:
                raise ValueError("expected 'rank,domain', a domain or a URL")
        except ValueError as exc:
            yield SeedError(number, text, str(exc) or "invalid")
            continue
        yield seed


def redis_seed_lines(settings: BaseSettings, key: str) -> list[str]:
    """Seed lines from a Redis list or set, as a scrapy-redis spider's
    ``redis_key`` holds them; on the crawl's Redis (``REDIS_URL``)."""
    client = get_redis(settings)
    members = client.smembers(key) if client.type(key) == b"set" else client.lrange(key, 0, -1)
    return [m.decode("utf-8", "replace") for m in members]
