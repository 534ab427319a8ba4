"""The frontier in Redis, independent of Scrapy: add, take, delay, release.

Every method is one round trip (one script call or one pipeline). Order
guarantees: within one domain, higher priority first and FIFO within a
priority; across domains, due domains in order of their next-fetch time.
Requests whose lease expires go back to the front of their domain's queue.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from crawler.scheduler.epoch import Epoch
from crawler.scheduler.keys import Keys
from crawler.scheduler.marks import Ack, wire
from crawler.scheduler.records import (
    DEDUP_MODES, AddResult, Dedup, Item, Leased, Politeness, TakeResult, bloom_error_rate, stored_dedup,
)
from crawler.scheduler.scripts import LuaScript, Scripts
from crawler.scheduler.stores import DomainLocks, RobotsStore

__all__ = ["DEDUP_MODES", "AddResult", "Dedup", "Frontier", "FrontierConfigError", "Item", "Leased",
           "Politeness", "TakeResult", "stored_dedup"]


class FrontierConfigError(ValueError):
    """The settings contradict the frontier already stored in Redis."""


def _ids(ids: Iterable[str | Ack]) -> list[str]:
    ids = wire(ids)
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
    ) -> None:
        self.client = client
        self.keys = keys
        self.dedup = dedup or Dedup()
        self.politeness = politeness or Politeness()
        self.overrides = overrides or {}
        self.domain_cap = domain_cap
        self.domain_budget = domain_budget
        self.lease_ms = int(lease_seconds * 1000)
        self.scripts = Scripts(client)
        self.locks = DomainLocks(client, keys, self.scripts)
        self.robots = RobotsStore(client, keys, self.scripts)
        self.epoch = Epoch()  # set by open(); checked by take() (epoch.py)
        self._epoch_script = LuaScript(client, "epoch", False)  # no flags: any Redis version

    def open(self) -> None:
        """Record (or check) the dedup layout, load per-domain overrides and
        open the epoch (made if the frontier has none)."""
        self._layout()
        self.epoch.adopt(self._epoch_script(keys=[self.keys.base], args=[Epoch.new_id(), "", 0]))

    def renew(self, lost: str, seq_floor: int) -> None:
        """Go on after a loss: a new epoch (or the one another worker made
        meanwhile) whose lease ids start above ``seq_floor``, with this
        worker's dedup layout and politeness written again."""
        self._layout()
        self.epoch.adopt(self._epoch_script(keys=[self.keys.base], args=[Epoch.new_id(), lost, seq_floor]))

    def check_epoch(self) -> None:
        """Look at the epoch (one round trip); ``FrontierLost`` if it is not this worker's."""
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
        pipe.hset(meta, mapping={"rate": repr(p.rate), "burst": p.burst, "delay": int(p.delay * 1000),
                                 "delay_factor": repr(p.factor), "delay_max": int(p.max_delay * 1000)})
        pipe.delete(self.keys.policy_settings)
        if self.overrides:
            pipe.hset(self.keys.policy_settings,
                      mapping={d: json.dumps(p) for d, p in self.overrides.items()})
        pipe.execute()

    # --- the hot path ----------------------------------------------------

    def add(self, items: Sequence[Item], acks: Iterable[str | Ack] = ()) -> AddResult:
        args: list[Any] = [self.dedup.mode, self.domain_cap, self.domain_budget, *_ids(acks)]
        for item in items:
            a, b = self.dedup.args(item.digest)
            args += (a, b, item.domain, item.priority, item.entry, "0" if item.dont_filter else "1")
        added, dups, capped, acked, over, excluded = self.scripts.enqueue(keys=[self.keys.base], args=args)
        return AddResult(added, dups, capped, acked, over, excluded)

    def drain_inbox(self, n: int = 1000) -> tuple[int, AddResult]:
        """Move up to ``n`` requests forwarded by other shards into this frontier."""
        moved, added, dups, capped, over, excluded = self.scripts.drain_inbox(
            keys=[self.keys.base], args=[self.dedup.mode, self.domain_cap, self.domain_budget, n])
        return int(moved), AddResult(added, dups, capped, 0, over, excluded)

    def take(self, n: int, acks: Iterable[str | Ack] = (), call: str = "", previous: str = "") -> TakeResult:
        """Lease up to ``n`` requests of due domains, acknowledging ``acks``.

        ``call`` names this call: sent again with the same name after an
        error, it returns the first call's leases instead of taking more.
        ``previous`` names the caller's last call whose reply arrived: the
        copy of that reply kept for a retry is dropped.
        """
        p = self.politeness
        reply = self.scripts.dequeue(
            keys=[self.keys.base],
            args=[n, self.lease_ms, p.rate, p.burst, int(p.delay * 1000), call, previous, *_ids(acks),
                  *self.epoch.args()],
        )
        self.epoch.observe(reply[2].decode(), int(reply[3]), int(reply[4]))  # FrontierLost: nothing done
        items = []
        for i in range(5, len(reply), 2):
            domain, prio, entry = reply[i + 1].split(b"\n", 2)
            items.append(Leased(reply[i].decode(), domain.decode(), int(prio), entry))
        next_due = int(reply[1])
        return TakeResult(items, int(reply[0]), None if next_due < 0 else next_due)

    def delay(self, items: Iterable[tuple[float, str, int, bytes]], acks: Iterable[str | Ack] = ()) -> int:
        """Park ``(seconds, domain, priority, entry)`` requests until due."""
        args: list[Any] = _ids(acks)
        for seconds, domain, prio, entry in items:
            args += (max(0, int(seconds * 1000)), domain, prio, entry)
        return int(self.scripts.delay(keys=[self.keys.base], args=args))

    def push_domain(self, domain: str, seconds: float) -> int:
        """No request of ``domain`` before now + ``seconds`` (server clock)."""
        return int(self.scripts.push_domain(keys=[self.keys.base], args=[domain, int(seconds * 1000)]))

    def receive(self, records: Sequence[bytes]) -> None:
        """Forwarded requests from another shard, into this frontier's inbox
        (``forwarding.py`` makes the records, ``drain_inbox.lua`` reads them)."""
        self.client.rpush(self.keys.inbox, *records)

    def release(self, leases: Iterable[str]) -> int:
        """Give leased requests back to the front of their queues; their
        parked domains may be fetched again ``delay`` from now."""
        leases = list(leases)
        if not leases:
            return 0
        return int(self.scripts.release(keys=[self.keys.base], args=leases))

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
        now_s, now_us = self.client.time()
        now = now_s * 1000 + now_us // 1000
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
        """Delete every key of this frontier; returns how many."""
        removed = 0
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=self.keys.pattern(), count=1000):
            batch.append(key)
            if len(batch) >= 500:
                removed += self.client.unlink(*batch)
                batch = []
        if batch:
            removed += self.client.unlink(*batch)
        return removed
