"""``scrapy frontier <spider>``: the state of a spider's frontiers, per shard.

    scrapy frontier billion                 # every shard found in Redis
    scrapy frontier billion --shard 3 --json
    scrapy frontier billion --watch 5       # refresh every 5 seconds
    scrapy frontier billion --recrawl example.com --limit 50   # a domain's tracked URLs

The report's ``recrawl`` block (``CRAWLER_RECRAWL``; docs/recrawl.md) is
``Frontier.recrawl_status()``: the mode, tracked URLs of those seen, the
domains overdue and due soon, the revisit lag, what revisits found (changed,
unchanged, 304s and their share, bytes saved), URLs left untracked by a cap,
early skips (which must stay 0), expired revisit leases and the hosts caught
lying about their validators. ``--recrawl <domain>`` lists the domain's
tracked URLs (``Frontier.recrawl_urls()``), the most overdue first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.commands._frontier import add_frontier_options, open_frontiers
from crawler.store import DeadLetters
from crawler.store import Frontier
from crawler.store import Ledger, describe

#: what a distrusted validator means for the requests to the host (``:rhost:<h>`` fields)
DISTRUSTED = {"etag": "no If-None-Match", "lm": "no If-Modified-Since", "all": "no validators"}
#: the evidence against a host (``:rhost:<h>`` fields)
EVIDENCE = {"lies_etag": "frozen ETag", "lies_lm": "frozen Last-Modified", "lies_lm_now": "Last-Modified always now",
            "ignored": "conditionals ignored"}


def report(frontier: Frontier) -> dict[str, Any]:
    keys = frontier.keys
    status = frontier.status()
    counters = status.pop("counters")
    # how long the most overdue domain has been due: its next-due time is in the past
    next_due = status["next_due_ms"]
    lag = max(0.0, -next_due / 1000) if next_due is not None else 0.0
    mode = frontier.dedup_mode()
    memory = frontier.client.info("memory")
    attempts = counters.get("attempts", 0)
    return {
        "spider": keys.spider,
        "shard": keys.shard,
        "queued": status["queued"],
        "lag_seconds": round(lag, 3),
        "domains_due": status["domains_due"],
        "domains_waiting": status["domains_queued"] - status["domains_due"],
        "next_due_seconds": None if status["next_due_ms"] is None else round(status["next_due_ms"] / 1000, 3),
        "leases": status["leases"],
        "leases_expired": status["leases_expired"],
        # Redis Cluster failovers fenced (lua/_lib.lua's fence(): each held every domain one full delay)
        "failover_fences": counters.get("failover_fences", 0),
        "delayed": status["delayed"],
        "inbox": frontier.inbox_length(),
        "dead_letters": dict(DeadLetters(frontier.client, keys).counts()),
        "denials_share": round(counters.get("denials", 0) / attempts, 4) if attempts else 0.0,
        "stale_locks": counters.get("stale_locks", 0),
        "robots_disallowed": counters.get("end_disallowed", 0),
        "robots_postponed": counters.get("robots_postponed", 0),
        "dedup": mode,
        "seen": counters.get("enqueued", 0),
        "bloom_error_rate": frontier.bloom_error_rate() if mode == "bloom" else None,
        # the order of due domains (docs/frontier.md): rank order's front and its best
        "order": frontier.order_status(),
        # the compact tier: queued = head + spill + compact (docs/frontier.md)
        "tiers": {"head": status["queued"] - status["compact"] - status["spill"], "spill": status["spill"],
                  "compact": status["compact"], "compact_bytes": status["compact_bytes"],
                  "packed": counters.get("tier_packed", 0), "unpacked": counters.get("tier_unpacked", 0),
                  "moved": counters.get("tier_moved", 0), "waits": counters.get("tier_waits", 0),
                  "refused": counters.get("tier_refused", 0),
                  "bytes_per_queued": round(memory["used_memory"] / status["queued"], 1) if status["queued"] else None},
        "redis_used_memory": memory["used_memory"],
        "redis_maxmemory": memory.get("maxmemory", 0),
        "redis_out_of_memory": bool(memory.get("maxmemory")) and memory["used_memory"] >= memory["maxmemory"],
        "oom_dropped": counters.get("oom_dropped", 0),
        "ledger": Ledger.from_status({**status, "counters": counters}).as_dict(),
        # revisits admitted again (CRAWLER_RECRAWL): admitted = seen + revisits
        "revisits": counters.get("revisits", 0),
        # recrawling (CRAWLER_RECRAWL): the schedule and what revisits found; mode "off", tracked 0 when off
        "recrawl": frontier.recrawl_status(),
        # per-address politeness (CRAWLER_IP_DELAY); None when off
        "addresses": frontier.addresses_status(),
        # what CRAWLER_SITEMAPS found and dropped, and why (crawler/middlewares/sitemaps.py)
        "sitemaps": {k[len("sitemaps_"):]: v for k, v in sorted(counters.items()) if k.startswith("sitemaps_")},
        "counters": counters,
    }


def _order_line(o: dict[str, Any]) -> str:
    if o["mode"] != "rank":
        return "  order         due (the domain due longest first)"
    best = ", ".join(f"{d['domain']} ({d['priority']:g}: weight {d['weight']:g} from its {d['from']}, "
                     f"{d['given']} given)" for d in o["top"]) or "none"
    return (f"  order         rank: {o['front']} due domains waiting in the front, {o['ranked']} weighed by a "
            f"ranking file; first: {best}")


def _weights_line(w: dict[str, int]) -> str:
    if not w:
        return "  weights       none yet (no domain weighed by the domains linking to it)"
    shown = ", ".join(f"{span}: {n:,}" for span, n in w.items())
    return f"  weights       {sum(w.values()):,} domains weighed by the domains seen linking to them: {shown}"


def _budget_line(b: dict[str, Any]) -> str:
    if not b["base"]:
        return "  budget        none (CRAWLER_DOMAIN_BUDGET = 0)"
    grows = (f", up to {b['max']:,} by its weight (x (1 + weight))" if b["max"] > b["base"] else
             ", whatever its weight")
    return (f"  budget        {b['base']:,} URLs a domain{grows}; {b['spent']:,} domains reached theirs, "
            f"{b['over_budget']:,} URLs refused past them (not marked seen)")


def _tiers_line(t: dict[str, Any]) -> str:
    per = "" if t["bytes_per_queued"] is None else f"; Redis {t['bytes_per_queued']:.0f} B per queued request"
    return (f"  tiers         head {t['head']}, spill {t['spill']}, compact {t['compact']} in "
            f"{t['compact_bytes'] / 2**20:.1f} MiB; {t['packed']} packed, {t['unpacked']} unpacked, "
            f"{t['moved']} moved up, {t['waits']} heads waited for a block{per}"
            + (f"; {t['refused']} fills REFUSED (a block that does not read)" if t["refused"] else ""))


def text(r: dict[str, Any]) -> str:
    dead = ", ".join(f"{k} {v}" for k, v in sorted(r["dead_letters"].items())) or "none"
    nxt = "-" if r["next_due_seconds"] is None else f"{r['next_due_seconds']:+.1f}s"
    bloom = f", est. false-positive rate {r['bloom_error_rate']:.2e}" if r["bloom_error_rate"] is not None else ""
    sitemaps = r.get("sitemaps") or {}
    lines = [
        f"{r['spider']} shard {r['shard']}",
        f"  queued        {r['queued']} (lag {r['lag_seconds']:.1f}s), inbox {r['inbox']}, delayed {r['delayed']}",
        f"  domains       {r['domains_due']} due now, {r['domains_waiting']} waiting, next due {nxt}",
        f"  leases        {r['leases']} held, {r['leases_expired']} expired"
        + (f"; {r['failover_fences']} failovers fenced (every domain held one full delay)"
           if r.get("failover_fences") else ""),
        f"  ledger        {_ledger_line(r)}",
        f"  dead letters  {dead}",
        f"  robots.txt    {r['robots_disallowed']} requests refused by a Disallow, {r['robots_postponed']} "
        f"postponed while their robots.txt was unreachable (they wait in 'delayed')",
        f"  politeness    rate-limiter denials {r['denials_share']:.1%} of dequeue attempts, "
        f"{r['stale_locks']} stale locks",
        f"  dedup         {r['dedup']}, {r['seen']} URLs seen{bloom}",
        _tiers_line(r["tiers"]),
        _order_line(r["order"]),
        _weights_line(r["order"]["weights"]),
        _budget_line(r["order"]["budget"]),
        f"  redis memory  {r['redis_used_memory'] / 2**20:.1f} MiB"
        + (f" of {r['redis_maxmemory'] / 2**20:.1f} MiB" if r["redis_maxmemory"] else "")
        + (f" -- OUT OF MEMORY: new URLs are dropped ({r['oom_dropped']} so far)"
           if r["redis_out_of_memory"] or r["oom_dropped"] else ""),
    ]
    if r.get("recrawl"):
        lines += _recrawl_lines(r["recrawl"])
    if sitemaps:
        lines.append(_sitemaps_line(sitemaps))
    if r.get("addresses"):
        lines += _addresses_lines(r["addresses"])
    return "\n".join(lines)


def _ledger_line(r: dict[str, Any]) -> str:
    """The ledger, with the admissions split into new URLs and revisits when there are revisits."""
    line = describe(r["ledger"])
    revisits = r.get("revisits", 0)
    if revisits:
        admitted = f"{r['ledger']['admitted']} admitted"
        line = line.replace(admitted, f"{admitted} ({r['ledger']['admitted'] - revisits} new + {revisits} revisits)", 1)
    return line


def span(seconds: float) -> str:
    """A duration, short: 42s, 3.5m, 1.2h, 2.0d."""
    size = abs(seconds)
    sign = "-" if seconds < 0 else ""
    if size < 60:
        return f"{sign}{size:.0f}s"
    if size < 3600:
        return f"{sign}{size / 60:.1f}m"
    if size < 86400:
        return f"{sign}{size / 3600:.1f}h"
    return f"{sign}{size / 86400:.1f}d"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _recrawl_lines(rc: dict[str, Any]) -> list[str]:
    """The recrawl block: schedule, what the revisits found, tracking, lying hosts."""
    tracked = f"tracked {rc['tracked']} of {rc['seen']} seen"
    if rc["mode"] == "off":
        if not rc["tracked"]:
            return [f"  recrawl       off: {tracked}; these URLs are not revisited (a frontier crawled with "
                    "CRAWLER_RECRAWL off keeps no fetch history)"]
        return [f"  recrawl       off: {tracked}; their history is kept but not served (run with "
                "CRAWLER_RECRAWL=fixed or adaptive to resume)"]
    lines = [f"  recrawl       {rc['mode']}: {tracked} in {rc['domains_tracked']} domains; "
             f"{rc['domains_overdue']} domains overdue (lag {rc['lag_seconds']:.1f}s), "
             f"{rc['due_within_hour']} due within 1 h, {rc['due_within_day']} within 1 d"]
    answered = rc["changed"] + rc["unchanged"] + rc["not_modified"]
    lines.append(f"  revisits      {rc['revisits']} admitted, {rc['visits']} visits written: {rc['changed']} changed, "
                 f"{rc['unchanged']} unchanged, {rc['not_modified']} not modified (304: "
                 f"{rc['not_modified_share']:.1%} of {answered} answered); {_size(rc['bytes_saved'])} of bodies saved; "
                 f"{rc['expired']} revisit leases expired")
    by = ", ".join(f"{n} {why}" for why, n in rc["untracked_by"].items())
    early = f"{rc['early']} early skips" + (" (should stay 0: a revisit came due before CRAWLER_RECRAWL_MIN)"
                                            if rc["early"] else "")
    lines.append(f"  tracking      {rc['created']} created, {rc['deleted']} deleted, {rc['refetched']} refetched; "
                 f"{rc['untracked']} untracked at a cap{f' ({by})' if by else ''}; {early}"
                 + (f"; {rc['orphans']} orphan writes" if rc["orphans"] else "")
                 + (f"; {rc['stale_writes']} writes applied already (a retried call)" if rc["stale_writes"] else ""))
    if rc["hints_applied"] or rc["hints_ignored"]:
        lines.append(f"  sitemap hints {rc['hints_applied']} applied, {rc['hints_ignored']} ignored (host not trusted); "
                     f"hinted visits found {rc['hints_right']} changed, {rc['hints_wrong']} unchanged")
    some = "" if rc["hosts_scanned_all"] else "at least "
    lines.append(f"  lying hosts   {some}{rc['hosts_lying']}"
                 + (f" (lies: {', '.join(f'{n} {kind}' for kind, n in rc['lies'].items())})" if rc["lies"] else ""))
    for host in rc["lying"]:
        distrusted = ", ".join(f"{DISTRUSTED.get(f, f)} for {span(s)}" for f, s in sorted(host["distrusted"].items()))
        evidence = ", ".join(f"{n} {EVIDENCE.get(f, f)}" for f, n in host["evidence"].items()) or "none counted"
        lines.append(f"  lying host    {host['host']}: {distrusted}; evidence: {evidence}")
    return lines


def recrawl_text(listing: dict[str, Any], shard: int) -> str:
    """``--recrawl <domain>``: its tracked URLs, one a line."""
    lines = [f"{listing['domain']} (shard {shard}): {listing['tracked']} tracked URLs, {listing['listed']} listed"]
    if listing["urls"]:
        lines.append(f"  {'due':>8}  {'last visit (UTC)':19}  {'interval':>8}  {'n/X':>7}  {'rate/day':>8}  url")
    for u in listing["urls"]:
        due = "-" if u["due_in"] is None else span(u["due_in"])
        if u.get("error"):
            lines.append(f"  {due:>8}  (record {u['k']} unreadable: {u['error']})")
            continue
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(u["last"])) if u["last"] else "-"
        rate = "-" if u["rate"] is None else f"{u['rate']:.3g}"
        flags = f" [{', '.join(u['flags'])}]" if u["flags"] else ""
        lines.append(f"  {due:>8}  {last:19}  {span(u['interval']):>8}  {u['visits']:>3}/{u['changes']:<3}  "
                     f"{rate:>8}  {u['url']}{flags}")
    return "\n".join(lines)


def _addresses_lines(a: dict[str, Any]) -> list[str]:
    """Per-address politeness: what waits on an address, the shared front ends, the busiest."""
    spread = ", ".join(f"{n} with {k}" for k, n in a["domains_per_address"].items() if n)
    lookups = ", ".join(f"{v} {k}" for k, v in sorted(a["lookups"].items())) or "none yet"
    lines = [f"  addresses     {a['addresses_known']} known ({a['scope']}; domains per address: {spread or '-'}), "
             f"{a['requests_waiting_on_address']} domains waiting on an address, "
             f"{a['domains_resolving']} names being looked up; lookups {lookups}; {a['moves']} names moved"]
    for address, why in sorted(a["shared"].items()):
        because = "in CRAWLER_IP_SHARED" if why.get("reason") == "range" else f"{why.get('domains')} domains"
        lines.append(f"  shared        {address}: a shared front end ({because})")
    for b in a["busiest"][:5]:
        lines.append(f"  busiest       {b['address']}: {b['domains']} domains, {b['in_flight']} in flight, "
                     f"{b['waiting']} waiting, {b['served']} served" + (" (shared)" if b["shared"] else ""))
    return lines


def _sitemaps_line(s: dict[str, int]) -> str:
    """What the sitemaps gave: files, URLs, and where the URLs not kept went."""
    dropped = ", ".join(f"{s[k]} {k.replace('_', ' ')}" for k in ("offsite", "too_deep", "loops", "disallowed")
                        if s.get(k))
    files = ", ".join(f"{s[k]} {k}" for k in ("truncated", "invalid", "failed") if s.get(k))
    return (f"  sitemaps      {s.get('discovered', 0)} named in robots.txt"
            + (f" ({s['guessed']} guessed)" if s.get("guessed") else "")
            + f", {s.get('fetched', 0)} read{f' ({files})' if files else ''}; {s.get('urls', 0)} URLs listed, "
            f"{s.get('kept', 0)} kept{f', dropped: {dropped}' if dropped else ''}")


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "<spider> [--shard N] [--json] [--watch SECONDS] [--recrawl DOMAIN [--limit N]]"

    def short_desc(self) -> str:
        return "Show the state of a spider's frontier(s)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_frontier_options(parser)
        parser.add_argument("--json", action="store_true", help="one JSON document per refresh")
        parser.add_argument("--watch", type=float, default=0, metavar="SECONDS", help="refresh every SECONDS")
        parser.add_argument("--recrawl", metavar="DOMAIN", default=None,
                            help="list DOMAIN's tracked URLs (CRAWLER_RECRAWL): due, last visit, interval, "
                                 "visits/changes, estimated changes a day")
        parser.add_argument("--limit", type=int, default=100, metavar="N",
                            help="with --recrawl: list at most N URLs (default 100)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give exactly one spider name")
        if opts.watch < 0:
            raise UsageError(f"--watch must be > 0, got {opts.watch:g}", print_help=False)
        if opts.limit < 0:
            raise UsageError(f"--limit must be >= 0, got {opts.limit}", print_help=False)
        assert self.settings is not None
        frontiers = open_frontiers(self.settings, args[0], opts.shard, every_shard=True)
        while True:
            if opts.recrawl is not None:
                self.list_recrawl(frontiers, opts)
            else:
                self.show(frontiers, opts)
            if not opts.watch:
                return
            try:
                time.sleep(opts.watch)
            except KeyboardInterrupt:
                sys.exit(0)

    @staticmethod
    def list_recrawl(frontiers: list[Frontier], opts: argparse.Namespace) -> None:
        domain = opts.recrawl.strip().lower()
        listings = [(f.keys.shard, f.recrawl_urls(domain, opts.limit)) for f in frontiers]
        found = [(shard, listing) for shard, listing in listings if listing["tracked"]] or listings[:1]
        if opts.json:
            docs = [{"shard": shard, **listing} for shard, listing in found]
            print(json.dumps(docs if opts.shard is None else docs[0]), flush=True)
            return
        if opts.watch:
            print(f"\n{time.strftime('%H:%M:%S')}", flush=True)
        for shard, listing in found:
            print(recrawl_text(listing, shard), flush=True)
            if not listing["tracked"]:
                mode = frontiers[0].client.hget(frontiers[0].keys.meta, "recrawl") or b"off"
                print(f"  no tracked URL of {domain} (recrawl {mode.decode()}"
                      + (": a frontier crawled with CRAWLER_RECRAWL off keeps no fetch history; its URLs are "
                         "not revisited)" if mode == b"off" else ")"), flush=True)

    @staticmethod
    def show(frontiers: list[Frontier], opts: argparse.Namespace) -> None:
        reports = [report(f) for f in frontiers]
        if opts.json:
            print(json.dumps(reports if opts.shard is None else reports[0]), flush=True)
            return
        if opts.watch:
            print(f"\n{time.strftime('%H:%M:%S')}", flush=True)
        print("\n".join(text(r) for r in reports), flush=True)
