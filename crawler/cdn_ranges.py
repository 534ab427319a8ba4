"""The address ranges the large CDNs publish for their edge servers.

An address inside one is a shared front end from its first lookup
(``CRAWLER_IP_SHARED_RANGES``, docs/politeness.md) instead of after
``CRAWLER_IP_SHARED_MIN_DOMAINS`` of the crawl's domains have been seen on it.
The copy shipped with the crawler, ``crawler/data/cdn_ranges.json``, is dated
and says, per vendor, where the vendor publishes its list and what the copy
was taken from; ``scrapy cdn-ranges`` fetches the vendors' lists again
(:data:`SOURCES`) and writes a new dated file.

Lookups are one binary search over sorted integer intervals per address
family (:class:`Ranges`): an address is checked once, when its name is first
looked up.
"""

from __future__ import annotations

import ipaddress
import json
from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

#: the copy shipped with the crawler (``CRAWLER_IP_SHARED_RANGES = "builtin"``)
BUILTIN = Path(__file__).parent / "data" / "cdn_ranges.json"
BUILTIN_NAME = "builtin"
FORMAT = 1


class Source(NamedTuple):
    """One list a vendor publishes: where, and how it is laid out
    (``lines``: one CIDR a line; ``fastly``: JSON ``addresses`` and
    ``ipv6_addresses``; ``cloudfront``: JSON ``CLOUDFRONT_GLOBAL_IP_LIST``, the
    edge servers, not the regional caches that talk to origins)."""

    vendor: str
    url: str
    layout: str


#: the vendors' own published lists, fetched by ``scrapy cdn-ranges``
SOURCES: tuple[Source, ...] = (
    Source("cloudflare", "https://www.cloudflare.com/ips-v4", "lines"),
    Source("cloudflare", "https://www.cloudflare.com/ips-v6", "lines"),
    Source("fastly", "https://api.fastly.com/public-ip-list", "fastly"),
    Source("cloudfront", "https://d7uri8nf7uskq.cloudfront.net/tools/list-cloudfront-ips", "cloudfront"),
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class RangesError(ValueError):
    """A ranges file or a vendor's list that cannot be read."""


def parse(layout: str, body: bytes) -> list[str]:
    """The networks (CIDR, as written) of one vendor list in ``layout``;
    :class:`RangesError` if it is not one."""
    text = body.decode("utf-8", "replace")
    if layout == "lines":
        found = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        found = [n for n in found if n]
    else:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise RangesError(f"not JSON ({e})") from None
        if not isinstance(data, dict):
            raise RangesError("not a JSON object")
        if layout == "fastly":
            found = list(data.get("addresses") or []) + list(data.get("ipv6_addresses") or [])
        elif layout == "cloudfront":
            found = list(data.get("CLOUDFRONT_GLOBAL_IP_LIST") or [])
        else:
            raise RangesError(f"unknown layout {layout!r}")
    if not found:
        raise RangesError("no networks in it")
    for entry in found:
        network(entry)
    return [str(n) for n in found]


def network(entry: Any) -> Network:
    try:
        return ipaddress.ip_network(str(entry).strip(), strict=False)
    except ValueError:
        raise RangesError(f"{entry!r} is not a network (CIDR)") from None


def path_of(value: str) -> Path | None:
    """The file ``CRAWLER_IP_SHARED_RANGES`` names: none (``""``), the
    shipped copy (``builtin``) or a path."""
    value = str(value or "").strip()
    if not value:
        return None
    return BUILTIN if value == BUILTIN_NAME else Path(value).expanduser()


def load(path: Path) -> dict[str, Any]:
    """A ranges file, checked: :class:`RangesError` if it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise RangesError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise RangesError(f"{path} is not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("vendors"), dict):
        raise RangesError(f"{path} is not a ranges file (format {FORMAT}, with vendors)")
    for vendor, entry in data["vendors"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("ranges"), list):
            raise RangesError(f"{path}: vendor {vendor!r} has no list of ranges")
        for item in entry["ranges"]:
            network(item)
    return data


def networks_of(data: dict[str, Any]) -> list[str]:
    return [str(n) for entry in data["vendors"].values() for n in entry["ranges"]]


class Ranges:
    """Networks, merged and kept as sorted integer intervals per address
    family: ``address in ranges`` is one binary search."""

    def __init__(self, networks: Iterable[Network | str]) -> None:
        nets = [n if isinstance(n, ipaddress.IPv4Network | ipaddress.IPv6Network) else network(n)
                for n in networks]
        self._starts: dict[int, list[int]] = {}
        self._ends: dict[int, list[int]] = {}
        self.count = 0
        for version in (4, 6):
            merged = list(ipaddress.collapse_addresses(n for n in nets if n.version == version))
            self._starts[version] = [int(n.network_address) for n in merged]
            self._ends[version] = [int(n.broadcast_address) for n in merged]
            self.count += len(merged)

    def __len__(self) -> int:
        return self.count

    def __contains__(self, address: object) -> bool:
        if isinstance(address, str):
            address = ipaddress.ip_address(address)
        if not isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address):
            return False
        value = int(address)
        starts = self._starts[address.version]
        i = bisect_right(starts, value) - 1
        return i >= 0 and value <= self._ends[address.version][i]


def shared_ranges(networks: Iterable[str], ranges_setting: str) -> Ranges:
    """``CRAWLER_IP_SHARED`` and the file ``CRAWLER_IP_SHARED_RANGES`` names, as one lookup."""
    found: list[Network | str] = [network(n) for n in networks if str(n).strip()]
    path = path_of(ranges_setting)
    if path is not None:
        found += networks_of(load(path))
    return Ranges(found)
