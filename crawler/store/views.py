"""The frontier as operators and the session's slow paths see it: live
policy edits and exclusions, status and counters, whether it holds work, and
clearing it. The hot path (add, take, delay, release) is
``crawler.store.frontier``; ``Frontier`` has these calls too.

Recrawling (``CRAWLER_RECRAWL``; docs/recrawl.md) is seen through
:meth:`FrontierViews.recrawl_status` (the frontier's revisit schedule and
what the revisits found, from ``:meta``, ``:stats``, ``:rdue`` and the
``:rhost:<h>`` records) and :meth:`FrontierViews.recrawl_urls` (a domain's
tracked URLs from ``:hist:<d>`` and ``:due:<d>``). Both only read, and both
are bounded: a SCAN of at most ``scan_calls`` calls, an HSCAN of at most
``limit`` records. A frontier made with recrawl off has no history: its
URLs are not revisited, and the view says so (``tracked`` 0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import redis

from crawler import serializers
from crawler.clock import Clock
from crawler.recrawl.estimate import rate_of
from crawler.recrawl.record import unpack
from crawler.store.keys import Keys, Scripts
from crawler.store.records import bloom_error_rate

#: the ``:stats`` counters of recrawling (design/recrawl.md E), as the view names them
RECRAWL_COUNTERS = {
    "revisits": "revisits", "tracked": "rv_tracked", "created": "rv_created", "refetched": "rv_refetched",
    "deleted": "rv_deleted", "untracked": "rv_untracked", "early": "rv_early", "expired": "rv_expired",
    "visits": "rv_visits", "changed": "rv_changed", "unchanged": "rv_unchanged",
    "not_modified": "rv_not_modified", "bytes_saved": "rv_bytes_saved", "orphans": "rv_orphans",
    "ended_not_modified": "end_not_modified",
    "hints_applied": "rv_hints_applied", "hints_ignored": "rv_hints_ignored", "hints_right": "rv_hints_right",
    "hints_wrong": "rv_hints_wrong", "stale_writes": "rv_stale_writes",
}
#: ``:rhost:<h>`` fields holding the ms until which a validator is not sent to the host
DISTRUST_FIELDS = ("etag", "lm", "all")
#: ``:rhost:<h>`` fields counting the evidence against the host
EVIDENCE_FIELDS = ("lies_etag", "lies_lm", "lies_lm_now", "ignored")
#: SCAN calls (COUNT 1000 each) :meth:`FrontierViews.recrawl_status` makes at most looking for hosts
RHOST_SCAN_CALLS = 1000
HOUR_MS, DAY_MS = 3_600_000, 86_400_000


class FrontierViews:
    """The calls of a ``Frontier`` off its hot path (a base class of it)."""

    client: redis.Redis
    keys: Keys
    clock: Clock
    scripts: Scripts
    domain_budget: int
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
        pipe.zcard(k.key("front"))  # the rank order's due domains (docs/frontier.md)
        ready, due, head, leases, expired, delayed, counters, front = pipe.execute()
        stats = {key.decode(): int(value) for key, value in counters.items()}
        return {
            "queued": stats.get("queued", 0),
            "domains_queued": ready + front,
            "domains_due": due + front,
            "next_due_ms": 0 if front else int(head[0][1]) - now if head else None,
            "leases": leases,
            "leases_expired": expired,
            "delayed": delayed,
            # the compact tier (crawler/store/tiers.py): requests in blocks and their bytes, in spills
            "compact": stats.get("compact", 0),
            "compact_bytes": stats.get("compact_bytes", 0),
            "spill": stats.get("spill", 0),
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

    def due_domains(self, within: float = 0.0) -> int:
        """Domains with queued requests due within ``within`` seconds on the
        server's clock: those of ``:ready`` and, in the rank order, those
        waiting in ``:front`` (all due). Parked ones (their request is out)
        are in neither."""
        now_ms = self.clock.server_ms(self.client)
        pipe = self.client.pipeline(transaction=False)
        pipe.zcount(self.keys.ready, "-inf", now_ms + int(within * 1000))
        pipe.zcard(self.keys.key("front"))
        ready, front = pipe.execute()
        return int(ready) + int(front)

    def order_status(self, top: int = 5) -> dict[str, Any]:
        """The order of due domains (docs/frontier.md): the mode, the domains
        due and waiting in ``:front`` (the rank order's) with the ``top`` of
        them by priority (their weight and the requests they were given), and
        how many domains a ranking file weighs; the budget of a domain
        (``base`` URLs admitted at weight 0, raised by weight up to ``max``;
        base 0: none), the domains found at theirs (``spent``) and the URLs
        refused past them (``over_budget``); ``weights``: the domains weighed
        by the domains seen linking to them, by decade of that count
        (``"0"``, ``"1-9"``, ``"10-99"``, ...)."""
        mode = self.client.hget(self.keys.meta, "order")
        front = self.keys.key("front")
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(front)
        pipe.zrange(front, 0, top - 1, desc=True, withscores=True)
        pipe.hlen(self.keys.key("rank"))
        pipe.hmget(self.keys.meta, "budget", "budget_max")
        pipe.hgetall(self.keys.stats)
        waiting, best, ranked, (base, budget_max), counters = pipe.execute()
        spent, over = counters.get(b"budgets_spent"), counters.get(b"over_budget")
        # the domains weighed by the domains linking to them, by decade of that count (lua/_lib.lua's domain_weight)
        decades = sorted((int(k[3:]), int(v)) for k, v in counters.items() if k.startswith(b"wd:") and int(v))
        weights = {("0" if k == 0 else f"{10 ** (k - 1)}-{10 ** k - 1}"): n for k, n in decades}
        shown = []
        for raw, priority in best:
            domain = raw.decode()
            pipe.hget(self.keys.key("rank"), domain)
            pipe.pfcount(self.keys.key("inl", domain))
            pipe.hget(self.keys.key("dom", domain), "given")
        answers = pipe.execute() if best else []
        for i, (raw, priority) in enumerate(best):
            weight, linking, given = answers[3 * i:3 * i + 3]
            shown.append({"domain": raw.decode(), "priority": round(priority, 3),
                          "weight": float(weight) if weight is not None else float(linking),
                          "from": "ranking" if weight is not None else "links", "given": int(given or 0)})
        # as the crawl that opened the frontier set it (the settings of this process if none did)
        base = self.domain_budget if base is None else int(base)
        budget = {"base": base, "max": max(int(budget_max or 0), base),
                  "spent": int(spent or 0), "over_budget": int(over or 0)}
        return {"mode": (mode or b"due").decode(), "front": waiting, "ranked": ranked, "top": shown, "budget": budget,
                "weights": weights}

    def recrawl_status(self, top: int = 10, scan_calls: int = RHOST_SCAN_CALLS,
                       hosts: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """Recrawling as it stands on this shard (read only):

        - ``mode`` (``:meta recrawl``; ``off`` when absent: a frontier made
          before recrawling, or with it off), ``tracked`` (URLs with a
          history) of ``seen`` (URLs ever admitted new);
        - ``domains_tracked`` (in ``:rdue``), ``domains_overdue`` (first
          revisit due at or before now), ``due_within_hour`` and
          ``due_within_day`` (not yet due, due by then; the day includes
          the hour), ``lag_seconds`` (now minus the most overdue domain's
          due time, 0 when none is overdue);
        - the counters of ``:stats`` (:data:`RECRAWL_COUNTERS`: revisits
          admitted, visits written, changed, unchanged, 304s, bytes saved,
          untracked by a cap, early skips, expired revisit leases, ...),
          and ``untracked_by`` for any ``rv_untracked_<why>`` counter;
        - ``not_modified_share``: 304s of the revisits answered (changed +
          unchanged + 304), 0.0 before any;
        - ``hosts_lying``: hosts (``:rhost:<h>``) with a validator not sent
          until a time still ahead, and the ``top`` of them with the most
          evidence (``lying``: host, ``distrusted`` validator -> seconds
          left, ``evidence`` counts); ``hosts_scanned_all`` is False when
          the SCAN stopped after ``scan_calls`` calls (then it is a lower
          bound). No SCAN when recrawl is off and nothing is tracked, nor
          when ``hosts`` (what :meth:`scan_hosts` found, swept by the
          caller: the metrics exporter spreads its scan over its scrapes)
          is given.
        """
        now = self.clock.server_ms(self.client)
        k = self.keys
        rdue = k.key("rdue")
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(k.meta, "recrawl")
        pipe.hgetall(k.stats)
        pipe.zcard(rdue)
        pipe.zcount(rdue, "-inf", now)
        pipe.zcount(rdue, f"({now}", now + HOUR_MS)
        pipe.zcount(rdue, f"({now}", now + DAY_MS)
        pipe.zrange(rdue, 0, 0, withscores=True)
        mode, counters, domains, overdue, hour, day, head = pipe.execute()
        stats = {key.decode(): int(value) for key, value in counters.items()}
        mode = (mode or b"off").decode()
        out: dict[str, Any] = {"mode": mode, "seen": stats.get("enqueued", 0)}
        out.update({name: stats.get(field, 0) for name, field in RECRAWL_COUNTERS.items()})
        out["untracked_by"] = {key[len("rv_untracked_"):]: v for key, v in sorted(stats.items())
                               if key.startswith("rv_untracked_")}
        out["lies"] = {key[len("rv_lies_"):]: v for key, v in sorted(stats.items()) if key.startswith("rv_lies_")}
        answered = out["changed"] + out["unchanged"] + out["not_modified"]
        out["not_modified_share"] = round(out["not_modified"] / answered, 4) if answered else 0.0
        out.update(domains_tracked=domains, domains_overdue=overdue, due_within_hour=hour, due_within_day=day,
                   lag_seconds=round(max(0, now - int(head[0][1])) / 1000, 3) if head else 0.0)
        if mode == "off" and not out["tracked"] and not domains:
            out.update(hosts_lying=0, hosts_scanned_all=True, lying=[])
        elif hosts is not None:
            lying = self.lying(hosts, now)
            out.update(hosts_lying=len(lying), hosts_scanned_all=True, lying=lying[:max(0, top)])
        else:
            out.update(self._lying_hosts(now, top, scan_calls))
        return out

    def scan_hosts(self, cursor: int = 0, calls: int = RHOST_SCAN_CALLS) -> tuple[int, dict[str, dict[str, Any]]]:
        """A stretch of at most ``calls`` SCAN calls (COUNT 1000) over the
        hosts' trust records (``:rhost:<h>``) from ``cursor``: the cursor to
        go on from (0: the scan went round) and, for each host met, its
        ``until`` (validator -> ms it is distrusted until, the fields set)
        and ``evidence`` (the counts not 0). A SCAN may meet a key twice.
        On a Redis Cluster client the scan goes round in one stretch."""
        pattern = self.keys.pattern()[:-1] + "rhost:*"  # the base, glob-escaped
        skip = len(self.keys.key("rhost", ""))
        found: list[bytes] = []
        if isinstance(self.client, redis.Redis):
            for _ in range(max(1, calls)):
                cursor, keys = self.client.scan(cursor, match=pattern, count=1000)
                cursor = int(cursor)
                found += keys
                if not cursor:
                    break
        else:  # a Redis Cluster client walks its nodes itself
            found, cursor = list(self.client.scan_iter(match=pattern, count=1000)), 0
        hosts: dict[str, dict[str, Any]] = {}
        fields = (*DISTRUST_FIELDS, *EVIDENCE_FIELDS)
        for i in range(0, len(found), 500):
            pipe = self.client.pipeline(transaction=False)
            for key in found[i:i + 500]:
                pipe.hmget(key, *fields)
            for key, values in zip(found[i:i + 500], pipe.execute()):
                numbers = [int(float(v)) if v else 0 for v in values]
                hosts[key[skip:].decode(errors="replace")] = {
                    "until": {f: ms for f, ms in zip(DISTRUST_FIELDS, numbers) if ms},
                    "evidence": {f: n for f, n in zip(EVIDENCE_FIELDS, numbers[len(DISTRUST_FIELDS):]) if n}}
        return cursor, hosts

    @staticmethod
    def lying(hosts: dict[str, dict[str, Any]], now: int) -> list[dict[str, Any]]:
        """The hosts of :meth:`scan_hosts` with a validator distrusted after
        ``now`` (ms): ``host``, ``distrusted`` (validator -> seconds left)
        and ``evidence``, the most evidence first."""
        out = []
        for host, trust in hosts.items():
            distrusted = {f: round((ms - now) / 1000) for f, ms in trust["until"].items() if ms > now}
            if distrusted:
                out.append({"host": host, "distrusted": distrusted, "evidence": trust["evidence"]})
        out.sort(key=lambda h: (-sum(h["evidence"].values()), -max(h["distrusted"].values()), h["host"]))
        return out

    def _lying_hosts(self, now: int, top: int, scan_calls: int) -> dict[str, Any]:
        cursor, hosts = self.scan_hosts(0, scan_calls)
        lying = self.lying(hosts, now)
        return {"hosts_lying": len(lying), "hosts_scanned_all": not cursor, "lying": lying[:max(0, top)]}

    def recrawl_urls(self, domain: str, limit: int = 100) -> dict[str, Any]:
        """``domain``'s tracked URLs (``HSCAN :hist:<d>``, at most ``limit``;
        ``tracked`` is how many it has): each with its ``url`` (from the
        record's entry), ``last`` (s, server clock), ``interval`` (s),
        ``visits`` n and ``changes`` X, ``rate`` (estimated changes a day,
        ``crawler.recrawl.estimate.rate_of``; None when not finite),
        ``due_in`` (s from now, negative when overdue; None when not
        scheduled) and its ``flags``; a record that does not unpack is listed
        with its ``error``."""
        now = self.clock.server_ms(self.client)
        hist, due = self.keys.key("hist", domain), self.keys.key("due", domain)
        tracked = self.client.hlen(hist)
        # the bins were counted at base MIN (crawler/recrawl/record.py): read at the frontier's
        base = int(self.client.hget(self.keys.meta, "rv_min") or 3_600_000) / 1000
        records: list[tuple[bytes, bytes]] = []
        cursor = 0
        while len(records) < limit:
            cursor, batch = self.client.hscan(hist, cursor, count=max(10, min(limit, 1000)))
            records += list(batch.items())
            if not int(cursor):
                break
        records = records[:max(0, limit)]
        pipe = self.client.pipeline(transaction=False)
        for k, _ in records:
            pipe.zscore(due, k)
        scores = pipe.execute() if records else []
        urls = []
        for (k, value), score in zip(records, scores):
            row: dict[str, Any] = {"k": k.decode(), "due_in": None if score is None else round((score - now) / 1000, 3)}
            try:
                h = unpack(value)
                estimate = rate_of(h, base=base)
            except ValueError as exc:
                row.update(url=None, error=str(exc))
            else:
                row.update(url=entry_url(h.entry), last=h.last, interval=h.iv, visits=h.n, changes=h.changes,
                           rate=round(estimate * 86400, 4) if math.isfinite(estimate) else None,
                           flags=[name for name, on in (("pinned", h.pinned), ("hinted", h.hinted),
                                                         ("verify", h.verify), ("warc", h.refers is not None))
                                  if on] + ([f"gone {h.gone}"] if h.gone else []))
            urls.append(row)
        urls.sort(key=lambda r: (r["due_in"] is None, r["due_in"] or 0.0, r["k"]))  # the most overdue first
        return {"domain": domain, "tracked": tracked, "listed": len(urls), "now": now // 1000, "urls": urls}

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

    def pending(self, revisits_within: float = 0.0) -> int:
        """Requests queued, delayed, leased (by any worker) or in the inbox;
        with recrawling on, plus one when a revisit is due within
        ``revisits_within`` seconds (the crawl's ``SCHEDULER_IDLE_BEFORE_CLOSE``:
        a revisit due sooner than a crawl would wait idle is work waiting)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.keys.stats, "queued")
        pipe.zcard(self.keys.delayed)
        pipe.zcard(self.keys.leases)
        pipe.llen(self.keys.inbox)
        pipe.hget(self.keys.meta, "recrawl")
        pipe.zrange(self.keys.rdue, 0, 0, withscores=True)
        queued, delayed, leases, inbox, recrawl, head = pipe.execute()
        waiting = int(queued or 0) + delayed + leases + inbox
        if head and recrawl not in (None, b"off", "off"):
            if head[0][1] <= self.clock.server_ms(self.client) + revisits_within * 1000:
                waiting += 1
        return waiting

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



def entry_url(entry: bytes) -> str | None:
    """The URL of a queue entry as a history record keeps it: ``U<depth>
    <url>``, or ``R`` + msgpack whose ``url`` it reads (never pickle); None
    when it holds none."""
    if entry[:1] == b"U":
        return entry[1:].partition(b" ")[2].decode(errors="replace") or None
    if entry[:1] == b"R":
        try:
            data = serializers.loads(entry[1:])
        except Exception:  # a torn entry: the view lists it without a URL
            return None
        url = data.get("url") if isinstance(data, dict) else None
        return url if isinstance(url, str) else None
    return None
