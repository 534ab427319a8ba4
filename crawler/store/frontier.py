"""The frontier in Redis, independent of Scrapy: add, take, delay, release.

Every method is one round trip (one script call or one pipeline). Order
guarantees: within one domain, higher priority first and FIFO within a
priority; across domains, due domains in order of their next-fetch time.
Requests whose lease expires go back to the front of their domain's queue.

The records that travel between the worker and the frontier (offered and
leased requests, call results, the politeness and dedup layout) are defined
first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import redis
from redis.cluster import RedisCluster

from typing import Protocol

from crawler.clock import SYSTEM, Clock
from crawler.store.epoch import Epoch
from crawler.store.keys import Keys, LuaScript, Scripts
from crawler.store.stores import DomainLocks, RobotsStore


class Acknowledgement(Protocol):
    """An acknowledgement as its sender keeps it: made into the scripts'
    form (``"<lease>[:<age ms>[:<duration ms>[:<end>]]]"``) as the round trip leaves."""

    def wire(self, now: float) -> str: ...


DEDUP_MODES = ("exact", "bloom")


@dataclass
class Item:
    """A request offered to the frontier."""

    digest: bytes  # SHA-256 of the canonical URL (raw)
    domain: str
    priority: int
    entry: bytes  # the serialized request
    dont_filter: bool = False


@dataclass
class Leased:
    lease: str
    domain: str
    priority: int
    entry: bytes
    #: per-address politeness: the address the request is charged to and
    #: must connect to; "" when not charged; "!nx" / "!refused": its host
    #: has no address to go to (it ends as a dead letter, unsent)
    address: str = ""


@dataclass
class AddResult:
    added: int = 0
    duplicates: int = 0
    capped: int = 0
    acked: int = 0
    over_budget: int = 0
    excluded: int = 0
    unseen: tuple[int, ...] = ()  # enqueue: 1-based places of items to dedup not marked seen


class Reply(IntEnum):
    """The slots of ``dequeue.lua``'s reply, 0-based: the mirror of the
    script's ``REPLY`` table (1-based), which its header documents;
    ``tests/test_lua_reply.py`` checks the two agree."""

    NOW = 0  # the server's ms, this call's clock
    NEXT_DUE = 1  # when to ask again, ms; -1: nothing queued or delayed
    EPOCH = 2  # the epoch id ("" if none)
    SEQ = 3  # the lease id counter
    QUEUED = 4  # requests queued
    LOOKUPS = 5  # [host, domain, ...]: names this worker is to look up
    FENCED = 6  # the latest failover fence, ms (0: never fenced)
    LEASES = 7  # from here on, three per lease: id, record, address


@dataclass
class TakeResult:
    items: list[Leased]
    now_ms: int
    next_due_ms: int | None  # earliest next-fetch time of a queued domain, or of a delayed request
    lookups: list[tuple[str, str]] = field(default_factory=list)  # (host, domain) this worker is to resolve
    fenced_ms: int = 0  # the frontier's latest failover fence (server ms; 0: never fenced)


@dataclass(frozen=True)
class AddressPoliteness:
    """Per-address politeness (``CRAWLER_IP_*``, ``CRAWLER_DNS_*``); ``delay`` 0: off."""

    delay: float = 0.0  # seconds from an answer's mark to the address's next request
    shared_delay: float = 0.25  # seconds between request starts at a shared front end
    shared_cap: int = 4  # requests in flight at a shared front end
    shared_min: int = 2000  # registered domains that make an address a shared front end; 0: never by count
    ttl: float = 300.0  # seconds a name's addresses are kept
    nx_retries: int = 3  # lookups of a missing name before its URLs end as dead letters
    claim: float = 65.0  # seconds a lookup may take before another worker tries


@dataclass(frozen=True)
class Lookup:
    """A lookup's answer, as ``dns_done.lua`` takes it."""

    host: str
    domain: str
    status: str  # ok, nx, retry, refused
    addresses: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()  # those of the addresses inside CRAWLER_IP_SHARED


@dataclass(frozen=True)
class Politeness:
    rate: float = 0.0  # requests per second per domain; 0: no token bucket
    burst: int = 1
    delay: float = 0.0  # minimum seconds between two requests to a domain
    factor: float = 0.0  # delay >= factor x the last fetch's duration; 0: off
    max_delay: float = 0.0  # cap of the stretched delay; 0: none

    def __post_init__(self) -> None:
        if self.rate < 0 or self.delay < 0 or self.burst < 1 or self.factor < 0 or self.max_delay < 0:
            raise ValueError(f"invalid politeness {self}: rate >= 0, burst >= 1, delay, factor, max_delay >= 0")


@dataclass(frozen=True)
class Dedup:
    mode: str = "exact"
    capacity: int = 10_000_000  # expected distinct URLs of the frontier
    error_rate: float = 0.001  # Bloom mode: compound false-positive rate
    bucket_bits: int = field(default=0)

    def __post_init__(self) -> None:
        if self.mode not in DEDUP_MODES:
            raise ValueError(f"dedup mode must be one of {DEDUP_MODES}, got {self.mode!r}")
        if self.capacity < 1 or not 0 < self.error_rate < 1:
            raise ValueError("dedup capacity must be >= 1 and error rate within (0, 1)")
        if not self.bucket_bits:
            # about 256 digests per bucket at capacity: each bucket stays a
            # compact intset (Redis converts past set-max-intset-entries, 512)
            bits = math.ceil(math.log2(max(self.capacity / 256, 1)))
            object.__setattr__(self, "bucket_bits", min(max(bits, 8), 24))

    def args(self, digest: bytes) -> tuple[int, int]:
        if self.mode == "exact":
            bucket = int.from_bytes(digest[:4], "big") >> (32 - self.bucket_bits)
            return bucket, int.from_bytes(digest[4:12], "big", signed=True)
        return int.from_bytes(digest[:4], "big"), int.from_bytes(digest[4:8], "big") | 1


def stored_dedup(client: redis.Redis, keys: Keys, dedup: Dedup) -> Dedup:
    """The dedup layout the frontier at ``keys`` was created with, else ``dedup``."""
    mode, bits = client.hmget(keys.meta, "dedup", "bucket_bits")
    if mode is None or bits is None:
        return dedup
    return Dedup(mode.decode(), dedup.capacity, dedup.error_rate, int(bits))


def bloom_error_rate(meta: dict[str, str]) -> float | None:
    """The compound false-positive rate of the Bloom filters described by
    ``meta`` (the ``:bloom`` hash), at their current fill."""
    if not meta:
        return None
    log_none_false = 0.0  # log of the chance that no filter answers "seen" wrongly
    for i in range(int(meta.get("count", 0))):
        m, k, n = float(meta[f"m{i}"]), float(meta[f"k{i}"]), float(meta[f"n{i}"])
        log_none_false += math.log1p(-((-math.expm1(-k * n / m)) ** k))
    return -math.expm1(log_none_false)


__all__ = ["DEDUP_MODES", "AddResult", "AddressPoliteness", "Dedup", "Frontier", "FrontierConfigError", "Item",
           "Leased", "Lookup", "Politeness", "TakeResult", "stored_dedup"]


def _is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


class FrontierConfigError(ValueError):
    """The settings contradict the frontier already stored in Redis."""


def _ms(seconds: float) -> int:
    """Seconds as whole ms, never fewer than asked: ``int(2.01 * 1000)`` is
    2009 (the float is 2009.9999...), a delay 1 ms short of the setting."""
    return math.ceil(round(seconds * 1000, 6))


def _ids(acks: Iterable[str | Acknowledgement], now: float) -> list[str]:
    ids = [a if isinstance(a, str) else a.wire(now) for a in acks]
    return [str(len(ids)), *ids]


class Frontier:
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        dedup: Dedup | None = None,
        politeness: Politeness | None = None,
        overrides: dict[str, dict[str, float]] | None = None,
        domain_cap: int = 0,
        domain_budget: int = 0,
        lease_seconds: float = 180.0,
        addresses: AddressPoliteness | None = None,
        shards: int = 1,
        clock: Clock = SYSTEM,
    ) -> None:
        self.client = client
        self.addresses = addresses or AddressPoliteness()
        # the address space: one per spider on a standalone Redis (exact across
        # its shards); a Cluster's scripts reach one slot only: per shard there
        self.address_base = keys.base if _is_cluster(client) else keys.addresses
        # ... where each of the spider's shards gives an address its turn: the delay
        # is that many times longer, so the address's rate stays within one a delay
        self.address_spread = shards if self.address_base == keys.base else 1
        self.script_keys = [keys.base, self.address_base]
        # a Cluster's frontier is fenced after a failover (lua/_lib.lua's fence()): "1" to the scripts
        self.fencing = "1" if _is_cluster(client) else ""
        self.clock = clock  # the scripts' now_ms() and the acknowledgements' ages (crawler/clock.py)
        self.keys = keys
        self.dedup = dedup or Dedup()
        self.politeness = politeness or Politeness()
        self.overrides = overrides or {}
        self.domain_cap = domain_cap
        self.domain_budget = domain_budget
        self.lease_ms = int(lease_seconds * 1000)
        self.scripts = Scripts(client, clock.script_key)
        self.locks = DomainLocks(client, keys, self.scripts)
        self.robots = RobotsStore(client, keys, self.scripts)
        self.epoch = Epoch(clock=clock)  # set by open(); checked by take() (``epoch.py``)
        self._epoch_script = LuaScript(client, "epoch", False, clock.script_key)  # no flags: any Redis version

    def open(self) -> None:
        """Record (or check) the dedup layout, load per-domain overrides and
        open the epoch (made if the frontier has none)."""
        self._layout()
        self.epoch.adopt(self._epoch_script(keys=[self.keys.base], args=[Epoch.new_id(), "", 0, self.fencing]))

    def renew(self, lost: str, seq_floor: int) -> None:
        """Go on after a loss: a new epoch (or the one another worker made
        meanwhile) whose lease ids start above ``seq_floor``, with this
        worker's dedup layout and politeness written again."""
        self._layout()
        self.epoch.adopt(self._epoch_script(keys=[self.keys.base],
                                            args=[Epoch.new_id(), lost, seq_floor, self.fencing]))

    def check_epoch(self) -> None:
        """Look at the epoch (one round trip); ``FrontierLost`` if it is not this worker's.
        On a Cluster the look is a script that fences the frontier first if it failed over."""
        if self.fencing:
            found, _, _, seq, queued, fenced = self._epoch_script(keys=[self.keys.base],
                                                                  args=["", "", 0, self.fencing])
            self.epoch.observe(found.decode() if isinstance(found, bytes) else str(found), int(seq), int(queued),
                               int(fenced))
            return
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.keys.key("epoch"), "id")
        pipe.get(self.keys.key("seq"))
        pipe.hget(self.keys.stats, "queued")
        found, seq, queued = pipe.execute()
        self.epoch.observe((found or b"").decode(), int(seq or 0), int(queued or 0))

    def _layout(self) -> None:
        meta = self.keys.meta
        self.client.hsetnx(meta, "dedup", self.dedup.mode)
        self.client.hsetnx(meta, "bucket_bits", self.dedup.bucket_bits)
        stored = self.client.hmget(meta, "dedup", "bucket_bits")
        mode, bits = stored[0].decode(), int(stored[1])
        if mode != self.dedup.mode:
            raise FrontierConfigError(
                f"frontier {self.keys.base} was created with CRAWLER_DEDUP={mode!r}, "
                f"not {self.dedup.mode!r}: clear it (SCHEDULER_FLUSH_ON_START) or keep the mode"
            )
        if bits != self.dedup.bucket_bits:
            self.dedup = Dedup(self.dedup.mode, self.dedup.capacity, self.dedup.error_rate, bits)
        if self.dedup.mode == "bloom":
            # 0.9 of the rate for the first filter; each filter added as it fills
            # is twice as large at a tenth of the rate: the sum stays below it
            self.scripts.bloom_init(keys=[self.keys.base],
                                    args=[self.dedup.capacity, repr(self.dedup.error_rate * 0.9)])
        p = self.politeness
        pipe = self.client.pipeline(transaction=False)
        # the defaults the scripts apply when a parked domain's request is done
        pipe.hset(meta, mapping={"rate": repr(p.rate), "burst": p.burst, "delay": _ms(p.delay),
                                 "delay_factor": repr(p.factor), "delay_max": _ms(p.max_delay)})
        a = self.addresses
        spread = self.address_spread
        pipe.hset(meta, mapping={"ip_delay": _ms(a.delay * spread), "ip_shared_delay": _ms(a.shared_delay * spread),
                                 "ip_shared_cap": a.shared_cap, "ip_shared_min": a.shared_min,
                                 "dns_ttl": _ms(a.ttl), "dns_nx": a.nx_retries, "dns_claim": _ms(a.claim)})
        pipe.delete(self.keys.policy_settings)
        if self.overrides:
            pipe.hset(self.keys.policy_settings,
                      mapping={d: json.dumps(p) for d, p in self.overrides.items()})
        pipe.execute()

    # --- the hot path ----------------------------------------------------

    def add(self, items: Sequence[Item], acks: Iterable[str | Acknowledgement] = ()) -> AddResult:
        args: list[Any] = [self.dedup.mode, self.domain_cap, self.domain_budget,
                           *_ids(acks, self.clock.monotonic())]
        for item in items:
            a, b = self.dedup.args(item.digest)
            args += (a, b, item.domain, item.priority, item.entry, "0" if item.dont_filter else "1")
        added, dups, capped, acked, over, excluded, unseen = self.scripts.enqueue(keys=self.script_keys, args=args)
        return AddResult(added, dups, capped, acked, over, excluded, tuple(unseen))

    def drain_inbox(self, n: int = 1000) -> tuple[int, AddResult]:
        """Move up to ``n`` requests forwarded by other shards into this frontier."""
        moved, added, dups, capped, over, excluded = self.scripts.drain_inbox(
            keys=[self.keys.base], args=[self.dedup.mode, self.domain_cap, self.domain_budget, n])
        return int(moved), AddResult(added, dups, capped, 0, over, excluded)

    def take(self, n: int, acks: Iterable[str | Acknowledgement] = (), call: str = "", previous: str = "") -> TakeResult:
        """Lease up to ``n`` requests of due domains, acknowledging ``acks``.

        ``call`` names this call: sent again with the same name after an
        error, it returns the first call's leases instead of taking more.
        ``previous`` names the caller's last call whose reply arrived: the
        copy of that reply kept for a retry is dropped.
        """
        p = self.politeness
        reply = self.scripts.dequeue(
            keys=self.script_keys,
            args=[n, self.lease_ms, p.rate, p.burst, _ms(p.delay), call, previous,
                  *_ids(acks, self.clock.monotonic()), *self.epoch.args(), self.fencing],
        )
        fenced = int(reply[Reply.FENCED])
        self.epoch.observe(reply[Reply.EPOCH].decode(), int(reply[Reply.SEQ]), int(reply[Reply.QUEUED]),
                           fenced)  # FrontierLost: nothing done
        items = []
        for i in range(Reply.LEASES, len(reply), 3):
            domain, prio, entry = reply[i + 1].split(b"\n", 2)
            items.append(Leased(reply[i].decode(), domain.decode(), int(prio), entry, reply[i + 2].decode()))
        names = reply[Reply.LOOKUPS]
        lookups = [(names[i].decode(), names[i + 1].decode()) for i in range(0, len(names), 2)]
        next_due = int(reply[Reply.NEXT_DUE])
        return TakeResult(items, int(reply[Reply.NOW]), None if next_due < 0 else next_due, lookups, fenced)

    def answer(self, lookups: Sequence[Lookup]) -> list[tuple[str, str, int]]:
        """Record lookups' answers (``dns_done.lua``); the addresses this made
        shared front ends, with why (``range``, ``domains``) and how many domains."""
        if not lookups:
            return []
        args: list[Any] = [len(lookups)]
        for found in lookups:
            args += (found.host, found.domain, found.status, " ".join(found.shared), " ".join(found.addresses))
        flips = self.scripts.dns_done(keys=self.script_keys, args=args)
        return [(flips[i].decode(), flips[i + 1].decode(), int(flips[i + 2])) for i in range(0, len(flips), 3)]

    def delay(self, items: Iterable[tuple[float, str, int, bytes] | tuple[float, str, int, bytes, str | None]],
              acks: Iterable[str | Acknowledgement] = ()) -> int:
        """Park ``(seconds, domain, priority, entry[, lease])`` requests until
        due; one that names the lease it retries is parked only while that
        lease is still held (else it is void, as a late acknowledgement is:
        its URL went back to its queue when the lease expired). Returns the
        number parked."""
        args: list[Any] = _ids(acks, self.clock.monotonic())
        for seconds, domain, prio, entry, *lease in items:
            args += (max(0, _ms(seconds)), domain, prio, entry, (lease[0] if lease else None) or "")
        return int(self.scripts.delay(keys=self.script_keys, args=args))

    def push_domain(self, domain: str, seconds: float) -> int:
        """No request of ``domain`` before now + ``seconds`` (server clock)."""
        return int(self.scripts.push_domain(keys=[self.keys.base], args=[domain, _ms(seconds)]))

    def receive(self, records: Sequence[bytes]) -> None:
        """Forwarded requests from another shard, into this frontier's inbox
        (``crawler/worker/_writes.py`` makes the records, ``drain_inbox.lua`` reads them)."""
        self.client.rpush(self.keys.inbox, *records)

    def release(self, leases: Iterable[str]) -> int:
        """Give leased requests back to the front of their queues; their
        parked domains may be fetched again ``delay`` from now."""
        leases = list(leases)
        if not leases:
            return 0
        return int(self.scripts.release(keys=self.script_keys, args=leases))

    # --- operators -------------------------------------------------------

    def set_policy(self, domain: str, **policy: float) -> None:
        """Live override, e.g. ``set_policy("example.com", delay=5, rate=0.5)``."""
        self.client.hset(self.keys.policy, domain, json.dumps(policy))

    def exclude(self, domains: Iterable[str]) -> int:
        """Never fetch these domains again; their queued requests are dropped."""
        domains = [d.strip().lower() for d in domains if d.strip()]
        return int(self.client.sadd(self.keys.excluded, *domains)) if domains else 0

    def set_robots_delay(self, domain: str, seconds: float) -> None:
        self.client.hset(self.keys.policy_robots, domain, repr(float(seconds)))

    def status(self) -> dict[str, Any]:
        now = self.clock.server_ms(self.client)
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(k.ready)
        pipe.zcount(k.ready, "-inf", now)
        pipe.zrange(k.ready, 0, 0, withscores=True)
        pipe.zcard(k.leases)
        pipe.zcount(k.leases, "-inf", now)
        pipe.zcard(k.delayed)
        pipe.hgetall(k.stats)
        ready, due, head, leases, expired, delayed, counters = pipe.execute()
        stats = {key.decode(): int(value) for key, value in counters.items()}
        return {
            "queued": stats.get("queued", 0),
            "domains_queued": ready,
            "domains_due": due,
            "next_due_ms": int(head[0][1]) - now if head else None,
            "leases": leases,
            "leases_expired": expired,
            "delayed": delayed,
            "counters": stats,
        }

    def addresses_status(self, top: int = 10) -> dict[str, Any] | None:
        """Per-address politeness as it stands (None when it is off): the
        addresses known, the requests waiting on an address rather than on
        their domain, the names being looked up, the shared front ends, the
        ``top`` busiest addresses and how many domains addresses serve. On a
        standalone Redis the addresses are every shard's."""
        ip_delay = self.client.hget(self.keys.meta, "ip_delay")
        if not int(ip_delay or 0):
            return None
        b = self.address_base
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(f"{b}:ipbusy")
        pipe.hgetall(f"{b}:stats")
        pipe.hgetall(f"{b}:ipshared")
        pipe.zrevrange(f"{b}:ipbusy", 0, top - 1, withscores=True)
        pipe.zcard(self.keys.key("dnsq"))
        buckets = (("1", 1, 1), ("2-9", 2, 9), ("10-99", 10, 99), ("100-999", 100, 999), ("1000+", 1000, "+inf"))
        for _, low, high in buckets:
            pipe.zcount(f"{b}:ipbusy", low, high)
        known, counters, shared, busiest, resolving, *spread = pipe.execute()
        counters = {k.decode(): int(v) for k, v in counters.items()}
        pipe = self.client.pipeline(transaction=False)
        for address, _ in busiest:
            pipe.hmget(f"{b}:ip:{address.decode()}", "out", "served")
            pipe.zcard(f"{b}:ipwait:{address.decode()}")
        found = pipe.execute()
        return {
            "scope": "every shard of this Redis" if b != self.keys.base else "this shard (Redis Cluster)",
            "addresses_known": known,
            "requests_waiting_on_address": max(0, counters.get("ip_waiting", 0)),
            "domains_resolving": resolving,
            "moves": counters.get("ip_moves", 0),
            "lookups": {k[len("dns_"):]: v for k, v in counters.items() if k.startswith("dns_")},
            "shared": {a.decode(): json.loads(why) for a, why in shared.items()},
            "busiest": [{"address": a.decode(), "domains": int(domains), "in_flight": int(found[2 * i][0] or 0),
                         "served": int(found[2 * i][1] or 0), "waiting": found[2 * i + 1],
                         "shared": a in shared}
                        for i, (a, domains) in enumerate(busiest)],
            "domains_per_address": {name: n for (name, _, _), n in zip(buckets, spread)},
        }

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the frontier's shared counter ``name`` (``scrapy frontier``)."""
        self.client.hincrby(self.keys.stats, name, n)

    def count_dropped(self, n: int) -> None:
        """Count requests dropped because Redis is out of memory."""
        if n:
            self.client.hincrby(self.keys.stats, "oom_dropped", n)

    def queued(self) -> int:
        return int(self.client.hget(self.keys.stats, "queued") or 0)

    def dedup_mode(self) -> str:
        """The dedup mode this frontier was created with (``exact`` if new)."""
        return (self.client.hget(self.keys.meta, "dedup") or b"exact").decode()

    def inbox_length(self) -> int:
        return int(self.client.llen(self.keys.inbox))

    def bloom_error_rate(self) -> float | None:
        """The Bloom filters' estimated false-positive rate now (None: exact dedup)."""
        meta = {k.decode(): v.decode() for k, v in self.client.hgetall(self.keys.bloom).items()}
        return bloom_error_rate(meta)

    def exists(self) -> bool:
        return bool(self.client.exists(self.keys.meta))

    def shards(self) -> list[int]:
        """The shards of this spider that have a frontier in this Redis."""
        found = {Keys.shard_in(k) for k in self.client.scan_iter(match=self.keys.shards_pattern(), count=1000)}
        return sorted(s for s in found if s is not None)

    def pending(self) -> int:
        """Requests queued, delayed, leased (by any worker) or in the inbox."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.keys.stats, "queued")
        pipe.zcard(self.keys.delayed)
        pipe.zcard(self.keys.leases)
        pipe.llen(self.keys.inbox)
        queued, delayed, leases, inbox = pipe.execute()
        return int(queued or 0) + delayed + leases + inbox

    def clear(self) -> int:
        """Delete every key of this frontier; returns how many. On a
        standalone Redis the address space is every shard's: this frontier's
        charges and waiting domains leave it first (``clear.lua``), the other
        shards' keep their turns, and the last shard cleared deletes it."""
        shared = self.address_base != self.keys.base
        if shared:
            waits = len(self.address_base + ":ipwait:")
            addresses = [k[waits:].decode() for k in self.client.scan_iter(match=self.keys.waiting_pattern(),
                                                                           count=1000)]
            for i in range(0, max(len(addresses), 1), 500):
                self.scripts.clear(keys=self.script_keys, args=addresses[i:i + 500])
        removed = self._unlink(self.keys.pattern())
        if shared and not self.shards():  # the last one: nobody's turn is left in it
            removed += self._unlink(self.keys.addresses_pattern())
        return removed

    def _unlink(self, pattern: str) -> int:
        removed = 0
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                removed += self.client.unlink(*batch)
                batch = []
        if batch:
            removed += self.client.unlink(*batch)
        return removed
