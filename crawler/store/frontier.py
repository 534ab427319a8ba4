"""The frontier in Redis, independent of Scrapy: its hot path.

``Frontier.take`` is the one store call a worker makes to get work
(``dequeue.lua``: it acknowledges, gives expired leases back, and leases
due domains' requests); ``add``, ``delay``, ``release`` and ``answer`` are
the others of the crawl's loop. Every method is one round trip (one script
call or one pipeline). Order guarantees: within one domain, higher priority
first and FIFO within a priority; across domains, due domains in order of
their next-fetch time. Requests whose lease expires go back to the front of
their domain's queue.

The records the calls take and return are in ``records.py`` (named here
too); the operators' calls, status and ``clear`` in ``views.py``.

The fetch history (``CRAWLER_RECRAWL``, design/recrawl.md E) rides on the
acknowledgements: ``take``, ``add`` and ``delay`` send, right after the
acknowledgement list, the history writes of the acknowledgements that carry
one (``wire_writes``), which the script applies before it acknowledges, in
the same call (``lua/_recrawl.lua``); ``open()`` writes the ``Recrawl``
settings into ``:meta``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from crawler.clock import SYSTEM, Clock
from crawler.store.epoch import Epoch
from crawler.store.keys import Keys, LuaScript, Scripts
from crawler.store.records import (
    DEDUP_MODES,
    Acknowledgement,
    AddResult,
    AddressPoliteness,
    Dedup,
    Hint,
    HintResult,
    Item,
    Leased,
    Lookup,
    Politeness,
    Promotion,
    Recrawl,
    Reply,
    TakeResult,
    bloom_error_rate,
    stored_dedup,
    wire_writes,
)
from crawler.store.stores import DomainLocks, RobotsStore
from crawler.store.tiers import CompactTier
from crawler.store.views import FrontierViews

__all__ = ["DEDUP_MODES", "Acknowledgement", "AddResult", "AddressPoliteness", "Dedup", "Frontier",
           "FrontierConfigError", "Item", "Leased", "Lookup", "Politeness", "Recrawl", "Reply", "TakeResult",
           "bloom_error_rate", "stored_dedup", "wire_acks", "wire_writes"]


def _is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


class FrontierConfigError(ValueError):
    """The settings contradict the frontier already stored in Redis."""


def _ms(seconds: float) -> int:
    """Seconds as whole ms, never fewer than asked: ``int(2.01 * 1000)`` is
    2009 (the float is 2009.9999...), a delay 1 ms short of the setting."""
    return math.ceil(round(seconds * 1000, 6))


def wire_acks(acks: Iterable[str | Acknowledgement], now: float) -> list[str]:
    """The acknowledgements as the scripts take them (``read_list`` in
    ``lua/_lib.lua``): their count, then each one's wire form, made here as
    the round trip leaves (``ack.wire(now)``). The one encoder of that form."""
    ids = [a if isinstance(a, str) else a.wire(now) for a in acks]
    return [str(len(ids)), *ids]


def _by_target(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """``(target, source)`` pairs of domains, the sources by target."""
    by_target: dict[str, list[str]] = {}
    for target, source in pairs:
        by_target.setdefault(target, []).append(source)
    return by_target


class Frontier(FrontierViews):
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
        budget_max: int = 0,
        block: int = 128,
        order: str = "due",
        within: str = "fifo",
        lease_seconds: float = 180.0,
        addresses: AddressPoliteness | None = None,
        shards: int = 1,
        clock: Clock = SYSTEM,
        recrawl: Recrawl | None = None,
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
        self.domain_cap = domain_cap  # the head of a domain's queue (0: no compact tier)
        self.block = block
        self.order = order  # of due domains: "due" (their turn) or "rank" (docs/frontier.md)
        self.within = within  # of a domain's requests: "fifo" or "inlinks" (promote(): docs/frontier.md)
        self.domain_budget = domain_budget
        # a budget by rank (lua/_lib.lua's new_offer): up to this, by the domain's weight
        self.budget_max = budget_max
        self.lease_ms = int(lease_seconds * 1000)
        # written into :meta by open(); None: the stored settings are left as they are
        # (an operator's command opening a frontier a crawl is using)
        self.recrawl = recrawl
        self.scripts = Scripts(client, clock.script_key)
        self.locks = DomainLocks(client, keys, self.scripts)
        self.robots = RobotsStore(client, keys, self.scripts)
        self.tiers = CompactTier(self.scripts, keys, block)
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
        # the in-link order's positions start anew each time it is turned on (lua/_lib.lua)
        if self.within == "inlinks" and self.client.hget(meta, "within") != b"inlinks":
            pipe.hincrby(meta, "wgen", 1)
        # the compact tier (crawler/store/tiers.py): the head of a domain's queue, the records of a block
        pipe.hset(meta, mapping={"within": self.within, "head": self.domain_cap, "block": self.block, "order": self.order,
                                 "budget": self.domain_budget, "budget_max": self.budget_max})
        r = self.recrawl
        if r is not None:  # design/recrawl.md E: ms where the scripts count ms
            pipe.hset(meta, mapping={"recrawl": r.mode, "rv_min": _ms(r.min), "rv_max": _ms(r.max),
                                     "rv_share": repr(float(r.share)), "rv_cap": r.max_tracked,
                                     "rv_domain_cap": r.domain_max, "rv_distrust": _ms(r.distrust)})
        pipe.delete(self.keys.policy_settings)
        if self.overrides:
            pipe.hset(self.keys.policy_settings,
                      mapping={d: json.dumps(p) for d, p in self.overrides.items()})
        pipe.execute()

    # --- the hot path ----------------------------------------------------

    def add(self, items: Sequence[Item], acks: Iterable[str | Acknowledgement] = (),
            promotions: Sequence[Promotion] = (), links: Sequence[tuple[str, str]] = ()) -> AddResult:
        """Acknowledge ``acks`` (their history writes first), promote
        ``promotions`` (the in-link order), count ``links`` between domains
        (as ``add_links``), then admit ``items``: one ``enqueue.lua`` call.
        Items are offered in groups of one domain and priority, in the order
        each group first appears, each group's in its order: a domain's
        queue at a priority keeps the order offered, and a budget or a
        digest offered twice is decided in the groups' order."""
        acks = list(acks)
        args: list[Any] = [self.dedup.mode, self.domain_budget,
                           *wire_acks(acks, self.clock.monotonic()), *wire_writes(acks), len(promotions)]
        for p in promotions:
            args += (p.domain, p.priority, p.entry, p.position)
        by_target = _by_target(links)
        args.append(len(by_target))
        for target, sources in by_target.items():
            args += (target, len(sources), *sources)
        # sent in groups of one domain and priority, each in its order (the script's places are
        # the sent order: ``sent`` maps them back to the items' places); a group's filter is said
        # once, or per request when its requests differ ("m")
        groups: dict[tuple[str, int], list[int]] = {}
        for place, item in enumerate(items):
            groups.setdefault((item.domain, item.priority), []).append(place)
        sent: list[int] = []
        for (domain, priority), places in groups.items():
            filters = {items[place].dont_filter for place in places}
            mixed = len(filters) > 1
            args += (domain, priority, "m" if mixed else "0" if filters.pop() else "1", len(places))
            for place in places:
                item = items[place]
                args += (*self.dedup.args(item.digest), item.entry)
                if mixed:
                    args.append("0" if item.dont_filter else "1")
            sent += places
        # the reply's 8th slot (history creates refused by a cap) is counted in :stats rv_untracked
        reply = self.scripts.enqueue(keys=self.script_keys, args=args)
        added, dups, spilled, acked, over, excluded, unseen, _, seqs, promoted = reply
        return AddResult(added, dups, spilled, acked, over, excluded, tuple(sorted(sent[n - 1] + 1 for n in unseen)),
                         {sent[int(seqs[i]) - 1] + 1: int(seqs[i + 1]) for i in range(0, len(seqs), 2)},
                         tuple((promoted[i].decode(), int(promoted[i + 1])) for i in range(0, len(promoted), 2)))

    def add_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        """``(target, source)`` pairs of registered domains, ``source`` linking
        to ``target``: each target's HyperLogLog of linking domains
        (``:inl:<d>``, the rank order's weight: ``dequeue.lua``), one
        pipelined ``PFADD`` per target."""
        pipe = self.client.pipeline(transaction=False)
        for target, sources in _by_target(pairs).items():
            pipe.pfadd(self.keys.key("inl", target), *sources)
        pipe.execute()

    def load_ranks(self, weights: dict[str, float]) -> int:
        """A ranking's weights (domain -> weight, higher first) into ``:rank``,
        replacing what was there; returns how many."""
        rank, loading = self.keys.key("rank"), self.keys.key("rank", "loading")
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(loading)
        items = list(weights.items())
        for i in range(0, len(items), 10_000):
            pipe.hset(loading, mapping={d: repr(float(w)) for d, w in items[i:i + 10_000]})
        pipe.execute()
        if items:
            self.client.rename(loading, rank)  # at once: a dequeue sees the old ranking or the new
        else:
            self.client.delete(rank)
        return len(items)

    def hint(self, hints: Sequence[Hint]) -> HintResult:
        """Sitemap ``<lastmod>`` hints for tracked URLs (``recrawl_hint.lua``):
        a URL modified since its last visit is due sooner when its host has
        earned the trust, never sooner than ``CRAWLER_RECRAWL_MIN`` after
        that visit."""
        if not hints:
            return HintResult()
        args: list[str] = []
        for one in hints:
            args += one.wire()
        return HintResult(*(int(n) for n in self.scripts.recrawl_hint(keys=[self.keys.base], args=args)))

    def drain_inbox(self, n: int = 1000) -> tuple[int, AddResult]:
        """Move up to ``n`` requests forwarded by other shards into this frontier."""
        moved, added, dups, spilled, over, excluded = self.scripts.drain_inbox(
            keys=[self.keys.base], args=[self.dedup.mode, self.domain_budget, n])
        return int(moved), AddResult(added, dups, spilled, 0, over, excluded)

    def take(self, n: int, acks: Iterable[str | Acknowledgement] = (), call: str = "", previous: str = "") -> TakeResult:
        """Lease up to ``n`` requests of due domains, acknowledging ``acks``:
        the one store call for work (``dequeue.lua``, whose phases run in
        the order its main block lists), its reply read by ``Reply``'s slots.

        ``call`` names this call: sent again with the same name after an
        error, it returns the first call's leases instead of taking more.
        ``previous`` names the caller's last call whose reply arrived: the
        copy of that reply kept for a retry is dropped. The history writes
        the acknowledgements carry (``write``) are applied before them, in
        this call (so are ``add``'s and ``delay``'s).
        """
        p = self.politeness
        acks = list(acks)
        reply = self.scripts.dequeue(
            keys=self.script_keys,
            args=[n, self.lease_ms, p.rate, p.burst, _ms(p.delay), call, previous,
                  *wire_acks(acks, self.clock.monotonic()), *wire_writes(acks), *self.epoch.args(), self.fencing],
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
        return TakeResult(items, int(reply[Reply.NOW]), None if next_due < 0 else next_due, lookups, fenced,
                          int(reply[Reply.FILLS]))

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
        acks = list(acks)
        args: list[Any] = [*wire_acks(acks, self.clock.monotonic()), *wire_writes(acks)]
        for seconds, domain, prio, entry, *lease in items:
            args += (max(0, _ms(seconds)), domain, prio, entry, (lease[0] if lease else None) or "")
        return int(self.scripts.delay(keys=self.script_keys, args=args))

    def push_domain(self, domain: str, seconds: float) -> int:
        """No request of ``domain`` before now + ``seconds`` (server clock)."""
        return int(self.scripts.push_domain(keys=[self.keys.base], args=[domain, _ms(seconds)]))

    def receive(self, records: Sequence[bytes]) -> None:
        """Forwarded requests from another shard, into this frontier's inbox
        (``crawler/worker/_shards.py`` makes the records, ``drain_inbox.lua`` reads them)."""
        self.client.rpush(self.keys.inbox, *records)

    def release(self, leases: Iterable[str]) -> int:
        """Give leased requests back to the front of their queues; their
        parked domains may be fetched again ``delay`` from now."""
        leases = list(leases)
        if not leases:
            return 0
        return int(self.scripts.release(keys=self.script_keys, args=leases))
