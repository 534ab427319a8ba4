"""A DNS resolver that pins host patterns to fixed addresses.

    TWISTED_DNS_RESOLVER = "crawler.resolver.HostMapResolver"
    CRAWLER_HOST_MAP = {"*.test": "127.0.0.1", "api.example.com": "10.0.0.7"}

Patterns are shell-style (``fnmatch``), matched case-insensitively, exact
names first. Names that match nothing are resolved as Scrapy's default
resolver does.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer

from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from twisted.internet.base import ReactorBase


def parse_host_map(value: Mapping[str, Any]) -> dict[str, str]:
    """Validate ``CRAWLER_HOST_MAP``; raise ``ValueError`` naming the bad entry."""
    result: dict[str, str] = {}
    for pattern, address in value.items():
        try:
            ipaddress.ip_address(str(address))
        except ValueError:
            raise ValueError(
                f"CRAWLER_HOST_MAP[{pattern!r}] must be an IP address, got {address!r}"
            ) from None
        result[str(pattern).lower().rstrip(".")] = str(address)
    return result


class HostMap:
    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.exact = {k: v for k, v in mapping.items() if not _is_pattern(k)}
        self.patterns = [(k, v) for k, v in mapping.items() if _is_pattern(k)]

    def lookup(self, name: str) -> str | None:
        name = name.lower().rstrip(".")
        if name in self.exact:
            return self.exact[name]
        for pattern, address in self.patterns:
            if fnmatchcase(name, pattern):
                return address
        return None


def _is_pattern(text: str) -> bool:
    return any(c in text for c in "*?[")


class HostMapResolver(CachingThreadedResolver):
    def __init__(
        self,
        reactor: ReactorBase,
        cache_size: int,
        timeout: float,
        host_map: Mapping[str, str],
    ) -> None:
        super().__init__(reactor, cache_size, timeout)
        self.host_map = HostMap(host_map)

    @classmethod
    def from_crawler(cls, crawler: Crawler, reactor: ReactorBase) -> HostMapResolver:
        settings = crawler.settings
        cache_size = settings.getint("DNSCACHE_SIZE") if settings.getbool("DNSCACHE_ENABLED") else 0
        host_map = parse_host_map(setting(settings, "CRAWLER_HOST_MAP"))
        return cls(reactor, cache_size, settings.getfloat("DNS_TIMEOUT"), host_map)

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> defer.Deferred[str]:
        address = self.host_map.lookup(name)
        if address is not None:
            return defer.succeed(address)
        return super().getHostByName(name, timeout)
