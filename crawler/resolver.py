"""A DNS resolver that pins host patterns to fixed addresses.

    TWISTED_DNS_RESOLVER = "crawler.resolver.HostMapResolver"
    CRAWLER_HOST_MAP = {"*.test": "127.0.0.1", "api.example.com": "10.0.0.7",
                        "multi.test": ["127.0.0.2", "127.0.0.1"]}

Patterns are shell-style (``fnmatch``), matched case-insensitively, exact
names first. A name may lead to several addresses, in order: the fetcher
tries each in turn, Scrapy's handlers take the first. Names that match
nothing are resolved as Scrapy's default resolver does.
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


def parse_host_map(value: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Validate ``CRAWLER_HOST_MAP``; raise ``ValueError`` naming the bad entry."""
    result: dict[str, tuple[str, ...]] = {}
    for pattern, addresses in value.items():
        listed = tuple(addresses) if isinstance(addresses, list | tuple) else (addresses,)
        for address in listed:
            try:
                ipaddress.ip_address(str(address))
            except ValueError:
                raise ValueError(
                    f"CRAWLER_HOST_MAP[{pattern!r}] must be an IP address or a list of them, got {addresses!r}"
                ) from None
        if not listed:
            raise ValueError(f"CRAWLER_HOST_MAP[{pattern!r}] is an empty list")
        result[str(pattern).lower().rstrip(".")] = tuple(str(address) for address in listed)
    return result


class HostMap:
    def __init__(self, mapping: Mapping[str, tuple[str, ...]]) -> None:
        self.exact = {k: v for k, v in mapping.items() if not _is_pattern(k)}
        self.patterns = [(k, v) for k, v in mapping.items() if _is_pattern(k)]

    def lookup(self, name: str) -> str | None:
        """The first address ``name`` is mapped to."""
        addresses = self.lookup_all(name)
        return addresses[0] if addresses else None

    def lookup_all(self, name: str) -> tuple[str, ...] | None:
        """Every address ``name`` is mapped to, in order."""
        name = name.lower().rstrip(".")
        if name in self.exact:
            return self.exact[name]
        for pattern, addresses in self.patterns:
            if fnmatchcase(name, pattern):
                return addresses
        return None


def _is_pattern(text: str) -> bool:
    return any(c in text for c in "*?[")


class HostMapResolver(CachingThreadedResolver):
    def __init__(
        self,
        reactor: ReactorBase,
        cache_size: int,
        timeout: float,
        host_map: Mapping[str, tuple[str, ...]],
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
