"""Where a host name leads, and whether the crawler may go there.

Names are looked up in ``CRAWLER_HOST_MAP`` first, then by the system's
resolver in a thread pool (``DNS_TIMEOUT``). Every address of a name is
returned, in the resolver's order. Addresses are checked *after*
resolution and are the ones connected to, so a public name that resolves to
a private address (DNS rebinding) is caught as surely as
``http://127.0.0.1:6379/``. Non-global addresses (loopback, private,
link-local such as the cloud metadata service at 169.254.169.254,
unique-local, site-local, multicast, unspecified) are dropped unless the
host matches a pattern of ``CRAWLER_ALLOW_PRIVATE`` or the address lies in
one of its networks; a host left with none is refused. IPv6 addresses that
carry an IPv4 one (mapped, IPv4-compatible, NAT64, 6to4) are judged by it.

Host names that cannot be names (an empty label, a label over 63
characters, over 253 in all, ``xn--`` labels that are not IDNA) are refused
before any lookup. Answers are cached (``DNSCACHE_ENABLED``,
``DNSCACHE_SIZE`` names, least recently used out) for ``CRAWLER_DNS_TTL`` seconds:
the system's resolver gives no TTL.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from encodings.idna import ToASCII
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, NamedTuple

from scrapy.exceptions import CannotResolveHostError, IgnoreRequest

from crawler.cdn_ranges import shared_ranges
from crawler.clock import SYSTEM, Clock
from crawler.resolver import HostMap, parse_host_map
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

REFUSED_HOSTS = 10_000  # hosts remembered as refused (logged once each)


class PrivateAddressRefused(IgnoreRequest):
    """The host leads to an address its owner did not mean to expose."""


class BadHost(IgnoreRequest):
    """The host is not a name DNS could hold."""


class NoSuchHost(IgnoreRequest):
    """The name does not exist (NXDOMAIN), after the frontier's retries."""


class Answer(NamedTuple):
    """A lookup for the frontier (per-address politeness): ``status`` ok,
    nx (no such name), retry (the lookup failed or timed out) or refused
    (every address is one the crawler may not go to)."""

    status: str
    addresses: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()  # those inside CRAWLER_IP_SHARED or CRAWLER_IP_SHARED_RANGES


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


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: local use
_COMPATIBLE = ipaddress.ip_network("::/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT


def is_public(address: Address) -> bool:
    if address.version == 6:
        embedded = _embedded(address)  # type: ignore[arg-type]
        if embedded is not None:
            return is_public(embedded)
        if address.is_site_local or address in _NAT64_LOCAL:
            return False
    return address.is_global and not address.is_multicast


def _embedded(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for, if it stands for one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or address in _COMPATIBLE or address in _TRANSLATED:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


#: getaddrinfo's "no such name" (the others come and go: EAI_AGAIN, EAI_FAIL...)
_NXDOMAIN = {getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, n)}

_LABEL = re.compile(r"[a-z0-9_-]{1,63}\Z", re.IGNORECASE)


def host_problem(host: str) -> str | None:
    """Why ``host`` cannot be a host name, or None if it can."""
    name = host[:-1] if host.endswith(".") else host
    if not name:
        return "it is empty"
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError as e:
            return f"it is not IDNA ({e})"
    if len(name) > 253:
        return f"it is {len(name)} characters long, over 253"
    for label in name.split("."):
        if not _LABEL.match(label):
            if not label:
                return "it has an empty label"
            if len(label) > 63:
                return f"a label is {len(label)} characters long, over 63"
            return f"label {label!r} has a character no host name has"
        if label[2:4] == "--" and label[:2].lower() == "xn" and not _is_idna(label):
            return f"label {label!r} is not IDNA"
    return None


def _is_idna(label: str) -> bool:
    try:
        decoded = label[4:].encode("ascii").decode("punycode")
        return not decoded.isascii() and ToASCII(decoded).decode("ascii").lower() == label.lower()
    except UnicodeError:
        return False


class _Entry(NamedTuple):
    expires: float
    permitted: tuple[Address, ...]
    refused: tuple[Address, ...]


class Addresses:
    def __init__(self, settings: BaseSettings, stats: StatsCollector, clock: Clock = SYSTEM) -> None:
        self.clock = clock  # the cache's lifetimes are measured on it (crawler/clock.py)
        self.host_map = HostMap(parse_host_map(setting(settings, "CRAWLER_HOST_MAP")))
        self.block = setting(settings, "CRAWLER_BLOCK_PRIVATE")
        self.allowed = Allowed(setting(settings, "CRAWLER_ALLOW_PRIVATE"))
        self.cache_size = settings.getint("DNSCACHE_SIZE") if settings.getbool("DNSCACHE_ENABLED") else 0
        self.timeout = settings.getfloat("DNS_TIMEOUT") or None
        self.ttl = setting(settings, "CRAWLER_DNS_TTL")
        self.cache: OrderedDict[str, _Entry] = OrderedDict()
        self.refused_hosts: OrderedDict[str, None] = OrderedDict()  # logged once each, LRU
        self.max_refused_hosts = REFUSED_HOSTS
        self.stats = stats
        self.executor = ThreadPoolExecutor(max(1, settings.getint("REACTOR_THREADPOOL_MAXSIZE")),
                                           thread_name_prefix="crawler-dns")
        self.max_addresses = setting(settings, "CRAWLER_DNS_MAX_ADDRESSES")
        # CRAWLER_IP_SHARED and the vendors' published ranges: one binary search an address
        self.shared_ranges = shared_ranges(setting(settings, "CRAWLER_IP_SHARED"),
                                           setting(settings, "CRAWLER_IP_SHARED_RANGES"))

    async def resolve(self, host: str) -> Address:
        """The first address to connect to for ``host``; refused if none is allowed."""
        return (await self.resolve_all(host))[0]

    async def resolve_all(self, host: str) -> list[Address]:
        """Every address of ``host`` the crawler may go to, in the resolver's
        order; refused if none is allowed."""
        entry = self.cache.get(host)
        if entry is None or entry.expires <= self.clock.monotonic():
            if entry is not None:
                self.stats.inc_value("crawler/dns/expired")
            entry = await self._entry(host)
            if self.cache_size:
                self.cache[host] = entry
                self.cache.move_to_end(host)
                if len(self.cache) > self.cache_size:
                    self.cache.popitem(last=False)
                self.stats.set_value("crawler/dns/cache_size", len(self.cache))
        elif self.cache_size:
            self.cache.move_to_end(host)
        if not entry.permitted:
            raise self._refused(host, entry.refused[0])
        return list(entry.permitted)

    async def _entry(self, host: str) -> _Entry:
        expires = self.clock.monotonic() + self.ttl
        addresses = await self._lookup(host)
        if not self.block:
            return _Entry(expires, addresses, ())
        permitted = tuple(a for a in addresses if self._permitted(host, a))
        refused = tuple(a for a in addresses if a not in permitted)
        if refused and permitted:
            self.stats.inc_value("crawler/dns/dropped", len(refused))
            logger.debug("Dropped %s of %s: non-global", ", ".join(map(str, refused)), host)
        return _Entry(expires, permitted, refused)

    async def answer(self, host: str) -> Answer:
        """Look ``host`` up for the frontier, once for the whole crawl: every
        address it may go to (at most ``CRAWLER_DNS_MAX_ADDRESSES``), or why
        none. Never raises for the name's sake."""
        try:
            entry = await self._entry(host)
        except BadHost:
            return Answer("nx")  # no lookup could ever find it
        except CannotResolveHostError as e:
            cause = e.__cause__
            if isinstance(cause, socket.gaierror) and cause.errno in _NXDOMAIN or "no IP address" in str(e):
                return Answer("nx")
            return Answer("retry")
        if not entry.permitted:
            # logged here; each of its requests is counted as the handler refuses it
            self._refused(host, entry.refused[0], request=False)
            return Answer("refused")
        kept = entry.permitted[:self.max_addresses]
        return Answer("ok", tuple(map(str, kept)),
                      tuple(str(a) for a in kept if a in self.shared_ranges))

    def permit(self, host: str, address: str) -> Address:
        """The address the frontier charged a request of ``host`` to, checked
        again here (a record written by a worker with other settings is no
        reason to go somewhere this one refuses)."""
        found = ipaddress.ip_address(address)
        if not self._permitted(host, found):
            raise self._refused(host, found)
        return found

    def _permitted(self, host: str, address: Address) -> bool:
        return not self.block or is_public(address) or self.allowed(host, address)

    def known_here(self, host: str) -> bool:
        """Whether ``host``'s addresses come from the URL (an IP address) or
        ``CRAWLER_HOST_MAP``: found without asking any DNS server."""
        try:
            ipaddress.ip_address(host.strip("[]"))
            return True
        except ValueError:
            return self.host_map.lookup_all(host) is not None

    def check_name(self, host: str) -> None:
        """:class:`BadHost` if ``host`` cannot be a host name."""
        if problem := host_problem(host):
            self.stats.inc_value("crawler/refused/bad_host")
            raise BadHost(f"{host[:100]!r} is not a host name: {problem}")

    async def _lookup(self, host: str) -> tuple[Address, ...]:
        try:
            return (ipaddress.ip_address(host.strip("[]")),)
        except ValueError:
            pass
        self.check_name(host)
        mapped = self.host_map.lookup_all(host)
        if mapped is not None:
            return tuple(ipaddress.ip_address(a) for a in mapped)
        loop = asyncio.get_running_loop()
        try:
            answers = await asyncio.wait_for(
                loop.run_in_executor(self.executor, socket.getaddrinfo, host, None, 0, socket.SOCK_STREAM),
                self.timeout)
        except (OSError, UnicodeError, asyncio.TimeoutError) as e:
            raise CannotResolveHostError(f"DNS lookup failed for {host}: {e}") from e
        addresses = dict.fromkeys(ipaddress.ip_address(sockaddr[0].split("%")[0])
                                  for family, *_, sockaddr in answers
                                  if family in (socket.AF_INET, socket.AF_INET6))
        if not addresses:
            raise CannotResolveHostError(f"DNS lookup failed for {host}: no IP address")
        return tuple(addresses)

    def _refused(self, host: str, address: Address, *, request: bool = True) -> PrivateAddressRefused:
        """Log the refusal once per host, count it when a ``request`` is
        refused; the exception to raise."""
        if request:
            self.stats.inc_value("crawler/refused/private_address")
        if host in self.refused_hosts:
            self.refused_hosts.move_to_end(host)
        else:
            self.refused_hosts[host] = None
            if len(self.refused_hosts) > self.max_refused_hosts:
                self.refused_hosts.popitem(last=False)
            self.stats.set_value("crawler/dns/refused_hosts", len(self.refused_hosts))
            logger.warning("Refused %s: it leads to %s, a non-global address "
                           "(allow it with CRAWLER_ALLOW_PRIVATE)", host, address)
        return PrivateAddressRefused(f"{host} leads to the non-global address {address}")

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
