"""Where a host name leads, and whether the crawler may go there.

Names are looked up in ``CRAWLER_HOST_MAP`` first, then by the system's
resolver in a thread pool, answers cached (``DNSCACHE_SIZE`` names). The
address is checked *after* resolution and is the one connected to, so a
public name that resolves to a private address (DNS rebinding) is caught as
surely as ``http://127.0.0.1:6379/``. Non-global addresses (loopback,
private, link-local such as the cloud metadata service at 169.254.169.254,
unique-local, multicast, unspecified) are refused unless the host matches a
pattern of ``CRAWLER_ALLOW_PRIVATE`` or the address lies in one of its
networks.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from scrapy.exceptions import CannotResolveHostError, IgnoreRequest

from crawler.resolver import HostMap, parse_host_map
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class PrivateAddressRefused(IgnoreRequest):
    """The host leads to an address its owner did not mean to expose."""


class Allowed:
    """``CRAWLER_ALLOW_PRIVATE``: host patterns and networks (CIDR)."""

    def __init__(self, entries: list[str]) -> None:
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        self.patterns: list[str] = []
        for entry in entries:
            entry = str(entry).strip().lower()
            if not entry:
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                if "/" in entry:
                    raise ValueError(f"CRAWLER_ALLOW_PRIVATE: {entry!r} is not a network") from None
                self.patterns.append(entry.rstrip("."))

    def __call__(self, host: str, address: Address) -> bool:
        if any(address in network for network in self.networks):
            return True
        return any(fnmatchcase(host, pattern) for pattern in self.patterns)


def is_public(address: Address) -> bool:
    return address.is_global and not address.is_multicast


class Addresses:
    def __init__(self, settings: BaseSettings, stats: StatsCollector) -> None:
        self.host_map = HostMap(parse_host_map(setting(settings, "CRAWLER_HOST_MAP")))
        self.block = setting(settings, "CRAWLER_BLOCK_PRIVATE")
        self.allowed = Allowed(setting(settings, "CRAWLER_ALLOW_PRIVATE"))
        self.cache_size = settings.getint("DNSCACHE_SIZE") if settings.getbool("DNSCACHE_ENABLED") else 0
        self.timeout = settings.getfloat("DNS_TIMEOUT") or None
        self.cache: OrderedDict[str, Address] = OrderedDict()
        self.refused_hosts: set[str] = set()
        self.stats = stats
        self.executor = ThreadPoolExecutor(max(1, settings.getint("REACTOR_THREADPOOL_MAXSIZE")),
                                           thread_name_prefix="crawler-dns")

    async def resolve(self, host: str) -> Address:
        """The address to connect to for ``host``; refused if not allowed."""
        address = self.cache.get(host)
        if address is None:
            address = await self._lookup(host)
            if self.cache_size:
                self.cache[host] = address
                if len(self.cache) > self.cache_size:
                    self.cache.popitem(last=False)
        if self.block and not is_public(address) and not self.allowed(host, address):
            self._refuse(host, address)
        return address

    async def _lookup(self, host: str) -> Address:
        mapped = self.host_map.lookup(host)
        if mapped is not None:
            return ipaddress.ip_address(mapped)
        try:
            return ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            pass
        loop = asyncio.get_running_loop()
        try:
            answers = await asyncio.wait_for(
                loop.run_in_executor(self.executor, socket.getaddrinfo, host, None, 0, socket.SOCK_STREAM),
                self.timeout)
        except (OSError, UnicodeError, asyncio.TimeoutError) as e:
            raise CannotResolveHostError(f"DNS lookup failed for {host}: {e}") from e
        for family, *_, sockaddr in answers:
            if family in (socket.AF_INET, socket.AF_INET6):
                return ipaddress.ip_address(sockaddr[0].split("%")[0])
        raise CannotResolveHostError(f"DNS lookup failed for {host}: no IP address")

    def _refuse(self, host: str, address: Address) -> None:
        self.stats.inc_value("crawler/refused/private_address")
        if host not in self.refused_hosts:
            self.refused_hosts.add(host)
            logger.warning("Refused %s: it leads to %s, a non-global address "
                           "(allow it with CRAWLER_ALLOW_PRIVATE)", host, address)
        raise PrivateAddressRefused(f"{host} leads to the non-global address {address}")

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
