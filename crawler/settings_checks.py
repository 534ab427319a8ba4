"""Checks of a setting's content, named by ``check`` in
``settings_registry.toml`` (``crawler.settings_checks:<function>``): each is
given the value its form already typed (``crawler/settings_forms.py``) and
raises ``ValueError`` for a value of the right form but wrong content.
"""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crawler.settings_forms import Setting, SettingsError, load_function, typed

def key_prefix(value: str) -> None:
    if not value or any(c in value for c in "{}\n ") or value != value.strip():
        raise ValueError(f"must be a non-empty name without braces or spaces, got {value!r}")


def domain_overrides(value: dict[Any, Any]) -> None:
    for domain, policy in value.items():
        if not isinstance(policy, dict) or not set(policy) <= {"rate", "burst", "delay"}:
            raise ValueError(f"[{domain!r}] must be a dict with keys rate, burst, delay, got {policy!r}")
        for key, number in policy.items():
            if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number) \
                    or number < (1 if key == "burst" else 0):
                raise ValueError(f"[{domain!r}][{key!r}] must be a finite number >= "
                                 f"{1 if key == 'burst' else 0}, got {number!r}")


def shard_urls(value: dict[Any, Any]) -> None:
    for shard, url in value.items():
        try:
            number = int(shard)
        except (TypeError, ValueError):
            number = -1
        if number < 0 or not isinstance(url, str) or urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"must be a dict of shard number -> REDIS_URL (redis://, rediss://, unix://), "
                             f"got {shard!r}: {url!r}")


# a host pattern (fnmatch): host-name characters and wildcards, no empty label
_HOST_PATTERN = re.compile(r"[a-z0-9_*?!\[\]-]+(\.[a-z0-9_*?!\[\]-]+)*\Z")


def networks(value: list[str]) -> None:
    """A list of networks (CIDR, or one address)."""
    for entry in value:
        try:
            ipaddress.ip_network(str(entry).strip(), strict=False)
        except ValueError:
            raise ValueError(f"{entry!r} is not a network (CIDR)") from None


def ranges_file(value: str) -> None:
    """``CRAWLER_IP_SHARED_RANGES``: empty, ``builtin`` or a ranges file
    that reads (the layout ``scrapy cdn-ranges`` writes)."""
    from crawler.cdn_ranges import RangesError, load, path_of

    path = path_of(value)
    if path is None:
        return
    try:
        load(path)
    except RangesError as e:
        raise ValueError(str(e)) from None


def allow_private(value: list[str]) -> None:
    """``CRAWLER_ALLOW_PRIVATE``: each entry a network (CIDR, or one
    address) or a host pattern that could match a host name; a top label of
    digits alone (``5``, ``10.0.0``) is neither: no host has one."""
    load_function("crawler.fetch._address:Allowed")(value)  # the networks, as the download handler reads them
    for entry in value:
        word = str(entry).strip().lower()
        try:
            ipaddress.ip_network(word, strict=False)
            continue
        except ValueError:
            pass
        pattern = word.rstrip(".")
        if not _HOST_PATTERN.match(pattern) or pattern.rsplit(".", 1)[-1].isdigit():
            raise ValueError(f"CRAWLER_ALLOW_PRIVATE: {entry!r} is neither a network (CIDR) nor a host pattern")


def listen_address(value: str) -> None:
    """An address a server of this machine listens on: an IP address, or
    ``localhost`` (no other name is looked up before the crawl starts)."""
    if value.lower() != "localhost":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"must be an IP address to listen on (127.0.0.1, 0.0.0.0, ::) or localhost, "
                             f"got {value!r}") from None


def writable_file(value: str) -> None:
    """An output file: its folder exists or can be created, and is writable."""
    try:
        typed(Setting(name="", doc="", form="dir"), str(Path(value).expanduser().parent))
    except SettingsError:
        raise ValueError(f"must be a file in a writable folder, got {value!r}") from None
