"""The soak's summary (``bench_soak.py``): the site-side audits of the whole
run, the ledger, the WARC files read back, duplicate fetches and why, the
memory slopes, the figures of each third after the warm-up, the cost of
each fault, the promises, the table and the plot."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.bench_openweb import address_audit
from devkit.testweb.control import LogEntry, consecutive

if TYPE_CHECKING:
    from bench.bench_soak import Fault, Soak

ROOT = Path(__file__).resolve().parent.parent


def slope(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3 or len(set(xs)) < 2:
        return None
    return statistics.linear_regression(xs, ys).slope


def summarize(soak: Soak) -> dict[str, Any]:
    a = soak.args
    log, t0 = soak.log, soak.t0
    warm = t0 + a.warmup * 60
    pages = [e for e in log if e.status == 200 and e.path != "/robots.txt"]
    # per-domain politeness, whole run, from the end of each answer (billion's CRAWLER_DELAY_FROM=finish)
    limit = a.delay * 1000
    under = [(x, y) for x, y in consecutive(log)
             if y.ms - x.ms < limit or (x.done and y.ms - x.done < limit) or (x.hung and y.ms - x.hung < limit)]
    answers = [(e.done - e.ms) / 1000 for e in log if e.done and e.ms >= warm * 1000]
    ns = argparse.Namespace(delay=a.delay, ip_delay=a.ip_delay, shared_min=None)
    per_address = address_audit(log, soak.config, ns, statistics.fmean(answers) if answers else 0.0,
                                (warm, soak.end))
    # under the ip delay from the end of an answer, or after one never answered (nor hung up on)
    offenders = [(x, y) for x, y in consecutive(log, by="address")
                 if (x.done and y.ms - x.done < a.ip_delay * 1000) or not (x.done or x.hung)]
    # a request the site held with no answer (an outage) that the crawler gave up on while the network
    # was cut: its reset never reached the site, which logged it open until the outage ended
    cuts = [(f.started * 1000, f.ended * 1000) for f in soak.faults if f.kind == "network"]
    unseen = [(x, y) for x, y in offenders if partitioned(x, y, cuts)]
    under_all = under
    under = [(x, y) for x, y in under if not partitioned(x, y, cuts)]
    with open(soak.out / "offenders.tsv", "w") as out:  # every interval under a delay, for a closer look
        for kind, pairs in (("domain", under_all), ("address", offenders)):
            for x, y in pairs:
                out.write(f"{kind}\t{x.address}\t{x.domain}{x.target}\t{x.status}\t{x.ms:.1f}\t{x.done:.1f}\t"
                          f"{x.hung:.1f}\t{y.domain}{y.target}\t{y.status}\t{y.ms:.1f}\t{y.done:.1f}\n")
    duplicates, explained = duplicate_fetches(pages, soak.faults)
    ledger = read_ledger(soak)
    warc = read_back(soak.warc_done)
    stored = int(ledger.get("stored", 0)) if ledger else 0
    # per process, after its warm-up (a restarted worker has one of its own): resident MB against
    # its pages and against time
    series: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    full_tls: dict[str, list[float]] = defaultdict(list)  # full TLS handshakes: hosts still being met
    for row in soak.samples:
        for name, s in row["workers"].items():
            if row["t"] >= soak.born.get(name, 0.0) + a.warmup * 60:
                if "pages" in s and s.get("rss_mb"):
                    series[name].append((row["t"], s["pages"], s["rss_mb"]))
                if "tls_full" in s:
                    full_tls[name].append(s["tls_full"])
    slopes = {}
    for name, points in series.items():
        per_page = slope([p for _, p, _ in points], [m for _, _, m in points])
        per_hour = slope([t / 3600 for t, _, _ in points], [m for _, _, m in points])
        if per_page is not None:
            slopes[name] = {"mb_per_100k_pages": round(per_page * 100_000, 2),
                            "mb_per_hour": round(per_hour or 0.0, 1), "samples": len(points),
                            "full_tls_handshakes": int(full_tls[name][-1] - full_tls[name][0])
                            if full_tls.get(name) else None}
    fault_windows = [(f.started - 5, f.ended + 60) for f in soak.faults]
    lags = [s["lag_minute_ms"] for row in soak.samples if row["t"] >= a.warmup * 60 + 60
            and not any(lo <= t0 + row["t"] <= hi + 60 for lo, hi in fault_windows)
            for s in row["workers"].values() if "lag_minute_ms" in s]
    thirds = third_figures(soak)
    for f in soak.faults:
        f.cost.update(fault_cost(f, pages, soak))
    return {
        "minutes": a.minutes, "workers": a.workers, "cluster": a.cluster, "chaos": bool(soak.faults),
        "domains": a.domains, "delay": a.delay, "ip_delay": a.ip_delay,
        "pages": len({(e.domain, e.target) for e in pages}), "fetches": len(pages),
        "pages_per_s": len(pages) / max(1.0, soak.end - t0),
        "ledger": ledger, "unaccounted": (int(ledger["admitted"]) - int(ledger["accounted"])) if ledger else None,
        "warc": warc, "acked_not_stored": max(0, stored - warc["distinct_pages"]),
        "site_intervals_under_delay": len(under),
        "site_intervals_under_delay_examples": [f"{x.domain}{x.target} -> {y.target}: {(y.ms - (x.done or x.ms)) / 1000:.3f} s"
                                                for x, y in under[:10]],
        "address_intervals_under_ip_delay": len(offenders) - len(unseen),
        "intervals_hang_up_unseen_in_a_cut": {"domain": len(under_all) - len(under), "address": len(unseen)},
        "address_most_in_flight": max(per_address["in_flight"].values(), default=0),
        # requests/s after the warm-up against the combined bound (bench_openweb.py's: per domain and per address)
        "requests_per_s": sum(1 for e in log if e.ms >= warm * 1000) / max(1.0, soak.end - warm),
        "bound_requests_per_s": per_address["bound"],
        "duplicates": duplicates, "duplicates_explained": explained,
        "rss_slope_mb_per_100k_pages": slopes,
        "redis_bytes_per_queued_url": thirds["redis_bytes_per_queued_url"],
        "thirds": thirds,
        "worst_loop_lag_ms": max(lags, default=0.0),
        "faults": [asdict(f) for f in soak.faults],
        "exits": [e for w in soak.workers for e in w.exits],
        "findings": soak.findings,
    }


def partitioned(x: LogEntry, y: LogEntry, cuts: list[tuple[float, float]]) -> bool:
    """``x`` was held unanswered by the site (status 0: an outage) and a
    network cut began after it arrived and before ``y`` did: the crawler's
    hang-up could not reach the site, which logged ``x`` open until later."""
    return x.status == 0 and not x.hung and any(x.ms < lo < y.ms for lo, _ in cuts)


def third_figures(soak: Soak) -> dict[str, Any]:
    """Pages/s, Redis CPU per page, Redis commands per page and bytes per queued URL in each third after the warm-up."""
    a = soak.args
    rows = [r for r in soak.samples if r["t"] >= a.warmup * 60]
    out: dict[str, Any] = {"pages_per_s": [], "redis_cpu_ms_per_page": [], "redis_calls_per_page": [],
                           "redis_bytes_per_queued_url": []}
    if len(rows) < 4:
        return out
    n = len(rows) // 3
    for part in (rows[:n + 1], rows[n:2 * n + 1], rows[2 * n:]):
        first, last = part[0], part[-1]
        pages = max(1, last["site_pages"] - first["site_pages"])
        out["pages_per_s"].append(round(pages / max(1e-9, last["t"] - first["t"]), 1))
        cpu = sum(max(0.0, y["redis"]["cpu_s"] - x["redis"]["cpu_s"]) for x, y in zip(part, part[1:]))
        out["redis_cpu_ms_per_page"].append(round(cpu / pages * 1000, 3))
        calls = 0
        for x, y in zip(part, part[1:]):
            calls += sum(max(0, v - x["redis"]["calls"].get(k, 0)) for k, v in y["redis"]["calls"].items())
        out["redis_calls_per_page"].append(round(calls / pages, 2))
        per = [r["redis"]["used_memory"] / r["queued"] for r in part if r.get("queued") and r["redis"]["used_memory"]]
        out["redis_bytes_per_queued_url"].append(round(statistics.median(per)) if per else None)
    # by command, first and last third: a cost that grows with the crawl's age shows
    by: list[dict[str, float]] = []
    for part in (rows[:n + 1], rows[2 * n:]):
        first, last = part[0], part[-1]
        pages = max(1, last["site_pages"] - first["site_pages"])
        delta: Counter[str] = Counter()
        for x, y in zip(part, part[1:]):
            for k, v in y["redis"]["calls"].items():
                delta[k] += max(0, v - x["redis"]["calls"].get(k, 0))
        by.append({k: round(v / pages, 3) for k, v in delta.most_common(8)})
    out["calls_per_page_by_command"] = {"first_third": by[0], "last_third": by[1]}
    return out


def duplicate_fetches(pages: list[LogEntry], faults: list[Fault]) -> tuple[int, int]:
    """Pages the site served more than once, and how many of those repeats are explained."""
    by: dict[tuple[str, str], list[LogEntry]] = defaultdict(list)
    for e in pages:
        by[(e.domain, e.target)].append(e)
    lease_faults = [f for f in faults if f.kind in ("kill", "stop", "together", "failover")]
    repeats = explained = 0
    for entries in by.values():
        for first, again in zip(entries, entries[1:]):
            repeats += 1
            if first.hung or not first.done:  # the first answer never reached the crawler
                explained += 1
            elif any(first.ms <= f.started * 1000 + 1000 and again.ms >= f.started * 1000 for f in lease_faults):
                explained += 1
            elif any(f.kind == "network" and f.started * 1000 - 60_000 <= first.ms <= f.ended * 1000 for f in faults):
                explained += 1  # answered as the network went: it may never have arrived
    return repeats, explained


def fault_cost(f: Fault, pages: list[LogEntry], soak: Soak) -> dict[str, Any]:
    """Pages/s in the 3 minutes before, during, and in the 3 minutes after a fault."""
    def rate(lo: float, hi: float) -> float:
        return sum(1 for e in pages if lo * 1000 <= e.ms < hi * 1000) / max(1e-9, hi - lo)
    before = rate(f.started - 180, f.started)
    during = rate(f.started, max(f.ended, f.started + 1))
    after = rate(f.ended, f.ended + 180)
    recovered = None  # the first 10 s step after the end at 90% of the rate before
    for step in range(0, 600, 10):
        if rate(f.ended + step, f.ended + step + 10) >= 0.9 * before:
            recovered = step
            break
    lost = max(0.0, before * (f.ended - f.started + 180) - rate(f.started, f.ended + 180) * (f.ended - f.started + 180))
    return {"pages_s_before": round(before, 1), "pages_s_during": round(during, 1), "pages_s_after": round(after, 1),
            "recovered_after_s": recovered, "pages_lost": round(lost)}


def read_ledger(soak: Soak) -> dict[str, Any] | None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), REDIS_URL=soak.redis_url, SCRAPY_SETTINGS_MODULE="devkit.settings")
    cluster = ["-s", "CRAWLER_REDIS_CLUSTER=True"] if soak.args.cluster else []
    done = subprocess.run([sys.executable, "-m", "scrapy", "frontier", "billion", "--json", *cluster], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        soak.findings.append(f"scrapy frontier failed: {done.stderr.strip()[-500:]}")
        return None
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report = report[0] if isinstance(report, list) else report  # one shard: shard 0
    counters = report["counters"]
    # how the frontier met the faults: leases that expired (a worker killed or frozen), retries of those
    # leases made void, failovers fenced
    return {**report["ledger"], **{k: counters.get(k, 0) for k in ("leases_expired", "delay_void", "failover_fences")}}


def read_back(folder: Path) -> dict[str, Any]:
    """Every WARC file read to its end: response records, distinct pages (not robots.txt), unreadable files."""
    from warcio.archiveiterator import ArchiveIterator

    records = 0
    uris: set[str] = set()
    bad: list[str] = []
    for path in sorted(folder.glob("*.warc.gz")):
        try:
            with open(path, "rb") as f:
                for record in ArchiveIterator(f):
                    if record.rec_type == "response":
                        record.content_stream().read()
                        records += 1
                        uri = record.rec_headers.get_header("WARC-Target-URI")
                        if not uri.endswith("/robots.txt"):
                            uris.add(uri)
        except Exception as exc:
            bad.append(f"{path.name}: {type(exc).__name__}: {exc}")
    return {"files": len(list(folder.glob("*.warc.gz"))), "responses": records, "distinct_pages": len(uris),
            "unreadable": bad}


def promises(s: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, bool, str]]:
    out: list[tuple[str, bool, str]] = []
    ledger = s["ledger"]
    out.append(("the ledger adds up", bool(ledger and ledger["adds_up"]), f"unaccounted {s['unaccounted']}"))
    out.append(("0 pages acknowledged and not stored", s["acked_not_stored"] == 0 and not s["warc"]["unreadable"],
                f"{s['acked_not_stored']} (stored {ledger and ledger['stored']}, distinct pages in WARC "
                f"{s['warc']['distinct_pages']}, unreadable files {len(s['warc']['unreadable'])})"))
    out.append(("0 site-side intervals under the delay", s["site_intervals_under_delay"] == 0,
                f"{s['site_intervals_under_delay']}"))
    out.append(("0 intervals at an address under the ip delay", s["address_intervals_under_ip_delay"] == 0,
                f"{s['address_intervals_under_ip_delay']}"))
    out.append(("every duplicate fetch explained", s["duplicates"] == s["duplicates_explained"],
                f"{s['duplicates']} fetched twice, {s['duplicates_explained']} explained"))
    out.append(("no worker exit the schedule did not cause", not s["findings"], f"{len(s['findings'])} findings"))
    for name, sl in s["rss_slope_mb_per_100k_pages"].items():
        if sl["samples"] >= 5:
            out.append((f"{name}: resident memory flat after the warm-up (< 5 MB per 100k pages)",
                        sl["mb_per_100k_pages"] < 5, f"{sl['mb_per_100k_pages']} MB per 100k pages"))
    if not s["chaos"]:
        t = s["thirds"]
        if t["redis_cpu_ms_per_page"]:
            first, last = t["redis_cpu_ms_per_page"][0], t["redis_cpu_ms_per_page"][-1]
            out.append(("Redis CPU per page in the last third no higher than in the first (10% noise)",
                        last <= first * 1.10, f"{first} -> {last} ms"))
            a, b = t["pages_per_s"][0], t["pages_per_s"][-1]
            out.append(("throughput of the last third within 5% of the first", b >= 0.95 * a, f"{a} -> {b} pages/s"))
            q = [x for x in t["redis_bytes_per_queued_url"] if x]
            if len(q) >= 2:
                out.append(("Redis memory per queued URL flat (10%)", q[-1] <= q[0] * 1.10, f"{q[0]} -> {q[-1]} bytes"))
        out.append(("no event-loop stall over 100 ms after the warm-up", s["worst_loop_lag_ms"] <= 100,
                    f"{s['worst_loop_lag_ms']:.0f} ms"))
    else:
        out.append(("no event-loop stall over 100 ms after the warm-up, outside faults", s["worst_loop_lag_ms"] <= 100,
                    f"{s['worst_loop_lag_ms']:.0f} ms"))
    return out


def report(s: dict[str, Any], soak: Soak) -> None:
    print(f"\n=== soak: {s['minutes']} min, {s['workers']} workers, "
          f"{'Redis Cluster 3+3' if s['cluster'] else 'one Redis (AOF)'}, "
          f"{len(s['faults'])} faults ===")
    print(f"{'min':>5} {'pages/s':>8} " + " ".join(f"{n + ' RSS':>10} {'CPU ms/p':>8} {'lag ms':>6} {'fds':>5}"
                                                 for n in sorted({n for r in soak.samples for n in r['workers']})[:4])
          + f" {'Redis MB':>9} {'keys':>9} {'B/queued':>9} {'calls/p':>8}")
    prev: dict[str, Any] | None = None
    names = sorted({n for r in soak.samples for n in r["workers"]})[:4]
    for row in soak.samples:
        if prev is not None:
            dt = row["t"] - prev["t"]
            pages = row["site_pages"] - prev["site_pages"]
            cols = []
            for n in names:
                w, p = row["workers"].get(n), prev["workers"].get(n)
                if w and p and "pages" in w and "pages" in p and w["pages"] > p["pages"]:
                    cpu_ms = (w["cpu_s"] - p["cpu_s"]) / (w["pages"] - p["pages"]) * 1000
                    cols.append(f"{w['rss_mb']:10.0f} {cpu_ms:8.2f} {w.get('lag_minute_ms', 0):6.0f} {w.get('fds', 0):5d}")
                else:
                    cols.append(f"{'-':>10} {'-':>8} {'-':>6} {'-':>5}")
            r = row["redis"]
            calls = sum(max(0, v - prev["redis"]["calls"].get(k, 0)) for k, v in r["calls"].items())
            bpq = f"{r['used_memory'] / row['queued']:.0f}" if row.get("queued") else "-"
            print(f"{row['t'] / 60:5.1f} {pages / dt:8.1f} " + " ".join(cols)
                  + f" {r['used_memory'] / 2**20:9.0f} {r['keys']:9,} {bpq:>9} {calls / max(1, pages):8.1f}")
        prev = row
    share = s["requests_per_s"] / s["bound_requests_per_s"] if s["bound_requests_per_s"] else 0.0
    print(f"\nafter the warm-up: {s['requests_per_s']:.1f} requests/s (robots.txt included) = {share:.0%} of the "
          f"combined bound, {s['bound_requests_per_s']:.1f}/s (bench_openweb.py's: per domain and per address)")
    print(f"pages {s['pages']:,} ({s['fetches']:,} fetches, {s['pages_per_s']:.1f}/s over the run); thirds after the "
          f"warm-up: pages/s {s['thirds']['pages_per_s']}, Redis CPU ms/page {s['thirds']['redis_cpu_ms_per_page']}, "
          f"Redis calls/page {s['thirds']['redis_calls_per_page']}, bytes per queued URL "
          f"{s['thirds']['redis_bytes_per_queued_url']}")
    if "calls_per_page_by_command" in s["thirds"]:
        print(f"Redis calls per page by command, first third {s['thirds']['calls_per_page_by_command']['first_third']}; "
              f"last third {s['thirds']['calls_per_page_by_command']['last_third']}")
    print("resident memory slopes after the warm-up: " + "; ".join(
        f"{n} {v['mb_per_100k_pages']} MB per 100k pages, {v['mb_per_hour']} MB per hour ({v['samples']} samples, "
        f"{v.get('full_tls_handshakes')} full TLS handshakes: hosts met anew)"
        for n, v in s["rss_slope_mb_per_100k_pages"].items()))
    if s["ledger"]:
        from crawler.store.ledger import describe

        ledger = s["ledger"]
        print(f"ledger: {describe(ledger)}; leases expired {ledger['leases_expired']}, retries of expired leases "
              f"made void {ledger['delay_void']}, failovers fenced {ledger['failover_fences']}")
    print(f"WARC: {s['warc']['files']} files, {s['warc']['responses']:,} response records, "
          f"{s['warc']['distinct_pages']:,} distinct pages, {len(s['warc']['unreadable'])} unreadable")
    unseen = s["intervals_hang_up_unseen_in_a_cut"]
    if unseen["domain"] or unseen["address"]:
        print(f"site: {unseen['domain']} per domain and {unseen['address']} per address after a request the site "
              "held (an outage) and the crawler gave up on while the network was cut: its reset never arrived; "
              "counted apart")
    print(f"site: {s['site_intervals_under_delay']} intervals under the {s['delay']:g} s delay "
          f"{s['site_intervals_under_delay_examples'][:3]}; {s['address_intervals_under_ip_delay']} under the "
          f"{s['ip_delay']:g} s ip delay, at most {s['address_most_in_flight']} in flight at one address; "
          f"{s['duplicates']} pages fetched twice, {s['duplicates_explained']} explained; worst loop lag after the "
          f"warm-up outside faults {s['worst_loop_lag_ms']:.0f} ms")
    for f in s["faults"]:
        c = f["cost"]
        print(f"fault {f['kind']:15} at {(f['started'] - soak.t0) / 60:5.1f} min for {f['ended'] - f['started']:5.1f} s"
              f" {('(' + f['target'] + ')') if f['target'] else ''}: pages/s {c.get('pages_s_before')} before, "
              f"{c.get('pages_s_during')} during, {c.get('pages_s_after')} after; back to 90% after "
              f"{c.get('recovered_after_s')} s; ~{c.get('pages_lost')} pages of throughput lost"
              + "".join(f"; {k} {v}" for k, v in c.items() if k not in (
                  "pages_s_before", "pages_s_during", "pages_s_after", "recovered_after_s", "pages_lost"))
              + (f"; {'; '.join(f['notes'])}" if f["notes"] else ""))
    for e in s["exits"]:
        print(f"exit: {e}")
    for finding in s["findings"]:
        print(f"FINDING: {finding}")


def plot(soak: Soak, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plot: matplotlib is not installed (pip install -r requirements-bench.txt)")
        return
    rows = soak.samples
    t = [r["t"] / 60 for r in rows]
    fig, axes = plt.subplots(3, 2, figsize=(14, 11), sharex=True)
    ax = axes[0][0]
    ax.plot(t[1:], [(b["site_pages"] - a["site_pages"]) / (b["t"] - a["t"]) for a, b in zip(rows, rows[1:])])
    ax.set_title("pages/s at the site")
    names = sorted({n.split(".")[0] for r in rows for n in r["workers"]})
    for panel, key, title in ((axes[0][1], "rss_mb", "resident MB per worker"),
                              (axes[1][0], "lag_minute_ms", "worst loop lag of the minute, ms"),
                              (axes[1][1], "fds", "open file descriptors (sockets dashed)")):
        for n in names:
            pts = [(r["t"] / 60, s[key]) for r in rows for k, s in r["workers"].items()
                   if k.split(".")[0] == n and key in s]
            line, = panel.plot([p[0] for p in pts], [p[1] for p in pts], ".-", label=n)
            if key == "fds":
                pts = [(r["t"] / 60, s["sockets"]) for r in rows for k, s in r["workers"].items()
                       if k.split(".")[0] == n and "sockets" in s]
                panel.plot([p[0] for p in pts], [p[1] for p in pts], "--", color=line.get_color())
        panel.set_title(title)
        panel.legend()
    ax = axes[2][0]
    ax.plot(t, [r["redis"]["used_memory"] / 2**20 for r in rows], label="used MB")
    ax2 = ax.twinx()
    ax2.plot(t, [r["redis"]["used_memory"] / r["queued"] if r.get("queued") else None for r in rows], "g.",
             label="bytes per queued URL")
    ax.set_title("Redis memory (MB) and bytes per queued URL (green)")
    ax = axes[2][1]
    ax.plot(t[1:], [sum(max(0, v - a["redis"]["calls"].get(k, 0)) for k, v in b["redis"]["calls"].items())
                    / max(1, b["site_pages"] - a["site_pages"]) for a, b in zip(rows, rows[1:])])
    ax.set_title("Redis commands per page")
    for row in axes:
        for panel in row:
            panel.set_xlabel("minutes")
            for f in soak.faults:
                panel.axvspan((f.started - soak.t0) / 60, (max(f.ended, f.started + 10) - soak.t0) / 60,
                              color="red", alpha=0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")
