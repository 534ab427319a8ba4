"""Redis key names of one frontier: the one key layout table.

Every key of a frontier starts with its base, ``<prefix>:{<spider>:<shard>}``
(``CRAWLER_KEY_PREFIX``, the spider's name, its shard). The braces are a
Redis Cluster hash tag: every key of a frontier lives on one node, so each
script can touch all of them. The Lua scripts (``lua/``) receive the base
as ``KEYS[1]`` and build the same names; ``lua/_lib.lua`` and the README
point here.

========================  ======  =============================================
key (after the base)      type    holds
========================  ======  =============================================
``:ready``                zset    domain -> ms it may next be fetched; only
                                  domains with queued requests
``:dom:<d>``              hash    ``n`` queued, ``next`` ms, ``tokens``/``ts``
                                  (token bucket), ``busy`` (lease out while a
                                  delay applies: the domain is parked)
``:qp:<d>``               zset    priorities queued for ``<d>``, score -priority
``:q:<d>:<p>``            list    records of ``<d>`` at priority ``<p>``, FIFO
``:leases``               zset    lease id -> deadline ms
``:lease``                hash    lease id -> record
``:call:<id>``            string  a dequeue reply kept for a retry of that call
``:delayed``              zset    ``"<id>\\n<record>"`` -> not-before ms
``:seen:<bucket>``        set     exact dedup: 64-bit digest slices (intsets)
``:bloom``, ``:bloom:<i>`` hash,   Bloom dedup: per-filter ``m<i>``/``k<i>``/
                          string  ``n<i>`` and ``count``; the bit arrays
``:policy``               hash    domain -> JSON politeness, edited live
``:policy:settings``      hash    domain -> JSON from ``CRAWLER_DOMAIN_OVERRIDES``
``:policy:robots``        hash    domain -> robots.txt Crawl-delay, seconds
``:excluded``             set     domains never to fetch (live)
``:inbox``                list    records forwarded by other shards,
                                  ``"<a>\\n<b>\\n<record>"``
``:lockdomains``          set     domains fetched under the lock (live)
``:lock:<d>``             string  owner token of ``<d>``'s lock (``PX`` ttl)
``:locks``                zset    domain -> expiry ms of locks not released
``:robots:<origin>``      string  JSON robots.txt record (``PX`` ttl)
``:robots:<origin>:fetching``  string  token of the worker fetching it
``:dlq``                  list    JSON dead letters, newest first
``:stats``                hash    counters (``queued``, ``enqueued``, ...)
``:seq``                  string  id counter of leases and delayed entries
                                  (only grows: the epoch check reads it)
``:epoch``                hash    ``id`` and ``created`` ms of this frontier's
                                  epoch (``epoch.lua``, ``epoch.py``)
``:meta``                 hash    dedup layout; politeness defaults (rate,
                                  burst, delay ms, delay_factor, delay_max ms)
========================  ======  =============================================

A record is ``"<domain>\\n<priority>\\n<serialized request>"``.

Outside the base, on purpose: ``<prefix>:metrics:{<spider>:<shard>}``
(string, ``PX`` ttl), the token of the one process exporting the frontier's
gauges (``crawler/extensions/metrics.py``); clearing the frontier leaves it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GLOB = re.compile(r"([*?\[\]\\])")
_SHARD = re.compile(rb":(\d+)\}:meta$")


@dataclass(frozen=True)
class Keys:
    prefix: str
    spider: str
    shard: int = 0

    def __post_init__(self) -> None:
        for part in (self.prefix, self.spider):
            if not part or any(c in part for c in "{}\n "):
                raise ValueError(f"invalid frontier name part {part!r}")

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.spider}:{self.shard}}}"

    def key(self, *parts: str) -> str:
        return ":".join((self.base, *parts))

    @property
    def ready(self) -> str:
        return self.key("ready")

    @property
    def leases(self) -> str:
        return self.key("leases")

    @property
    def lease(self) -> str:
        return self.key("lease")

    @property
    def delayed(self) -> str:
        return self.key("delayed")

    @property
    def stats(self) -> str:
        return self.key("stats")

    @property
    def meta(self) -> str:
        return self.key("meta")

    @property
    def bloom(self) -> str:
        return self.key("bloom")

    @property
    def policy(self) -> str:
        return self.key("policy")

    @property
    def policy_settings(self) -> str:
        return self.key("policy", "settings")

    @property
    def policy_robots(self) -> str:
        return self.key("policy", "robots")

    @property
    def excluded(self) -> str:
        return self.key("excluded")

    @property
    def inbox(self) -> str:
        return self.key("inbox")

    @property
    def lock_domains(self) -> str:
        return self.key("lockdomains")

    @property
    def dead_letters(self) -> str:
        return self.key("dlq")

    def dom(self, domain: str) -> str:
        return self.key("dom", domain)

    def robots(self, origin: str) -> str:
        return self.key("robots", origin)

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this frontier."""
        return _GLOB.sub(r"\\\1", self.base) + ":*"

    def shards_pattern(self) -> str:
        """A SCAN pattern matching the meta key of every shard of this spider."""
        prefix, spider = _GLOB.sub(r"\\\1", self.prefix), _GLOB.sub(r"\\\1", self.spider)
        return f"{prefix}:{{{spider}:*}}:meta"

    @staticmethod
    def shard_in(meta_key: bytes) -> int | None:
        """The shard number of a key that :meth:`shards_pattern` matched."""
        found = _SHARD.search(meta_key)
        return int(found.group(1)) if found else None
