"""The frontier as operators and the session's slow paths see it: live
policy edits and exclusions, status and counters, whether it holds work, and
clearing it. The hot path (add, take, delay, release) is
``crawler.store.frontier``; ``Frontier`` has these calls too."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import redis

from crawler.clock import Clock
from crawler.store.keys import Keys, Scripts
from crawler.store.records import bloom_error_rate


class FrontierViews:
    """The calls of a ``Frontier`` off its hot path (a base class of it)."""

    client: redis.Redis
    keys: Keys
    clock: Clock
    scripts: Scripts
    address_base: str
    script_keys: list[str]

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

