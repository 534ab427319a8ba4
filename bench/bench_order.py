"""The order measured (issue #50, item 3; docs/crawl-order.md): a polite
crawl with a fixed number of fetch slots, simulated on a generated web graph
whose PageRank is the ground truth, under each order a frontier could take.

    python -m bench order [--pages 2000000] [--seed 1] [--seed 2 ...] [--hosts N]
        [--delay 10] [--capacity 0.02 | --slots N] [--seed-share 0.1] [--until 0.2]
        [--copy 0.5] [--order NAME=HOST/WITHIN ...] [--png FILE] [--json FILE]

**The graph** (``bench/_order_model.py``: ``generate``): ``--pages`` pages
over ``--hosts`` hosts (default pages / 20) of Zipf-like sizes, ~10 links a
page, 85% of them within the host (half of those copied from the host's
template of 20 links, its menus: ``--copy``), the rest to other hosts (half
to their home page); in-degree a power law by page fitness (Pareto).
PageRank by power iteration, damping 0.85.

**The crawl**: seeds the home pages of ``--seed-share`` of the hosts (a
uniform sample); a host is fetched at most once per ``--delay`` ticks;
``--slots`` fetches per tick (default: ``--capacity`` of what politeness
would allow were every host due, ``capacity × hosts / delay``); a page is
known once a fetched page links to it. It runs until ``--until`` of the
pages are fetched.

**The orders** (``Order``): across hosts ``due`` (today), ``rank`` (distinct
other hosts seen linking), ``decay`` (that rank / (1 + pages fetched from
the host)), ``budget`` (rank shares of the crawl as budgets), ``file`` and
``file-decay`` (a ranking given up front: the hosts' true PageRank sums,
a stand-in for a published list), ``omniscient`` (the true PageRank of a
host's best queued page); within a host ``fifo``, ``inlinks`` (links seen
so far), ``opic`` (OPIC cash), ``external``, ``share``, ``weighted`` (see
the model), ``pagerank`` (the truth). What the production frontier can
carry (per-domain state only, bounded; ``model.Frontier``): ``decay<alpha>``
across hosts (rank / (1 + fetched)^alpha), and within a host a Space-Saving
sketch of in-links ``sketch<K>t<T>`` (``+g`` guaranteed counts, ``+r<R>`` a
memory of the host's last R fetches, ``+p<N>`` the skip set, ``m``
tombstones, ``+q`` the frontier's exact guard: a promotion of a URL fetched
refused, never a double fetch, ``+i`` links from the host's own pages
only, ``+c<N>`` at most 1 + fetched / N promotions per host) or lanes
at discovery (``x``, ``e<N>``, ``xe<N>``, ``x+e<N>``);
their double fetches (a page the dedup cannot tell was fetched) are
modelled: a slot spent for nothing, reported as ``double@10%``; the
pages the sketch served (promotions) per page fetched, as ``promoted@10%``.

**Printed**, per seed and order: the PageRank mass fetched after 1, 5, 10
and 20% of the pages, the share of the gap between due-time and
omniscient closed at 10%, and the share of the top 0.1% of pages (by
PageRank) fetched by 10% and 20%; then the mean over the seeds.
``--png``: the curves (matplotlib, if installed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import _order_model as model  # noqa: E402

#: the orders run by default: (name, across hosts, within a host)
ORDERS: tuple[tuple[str, str, str], ...] = (
    ("due-time", "due", "fifo"),
    ("rank/fifo", "rank", "fifo"),
    ("rank/inlinks", "rank", "inlinks"),
    ("decay/fifo", "decay", "fifo"),
    ("decay/inlinks", "decay", "inlinks"),
    ("decay/opic", "decay", "opic"),
    ("budget/inlinks", "budget", "inlinks"),
    ("file/inlinks", "file", "inlinks"),
    ("file-decay/inlinks", "file-decay", "inlinks"),
    ("omniscient", "omniscient", "pagerank"),
)
CHECKPOINTS = (0.01, 0.05, 0.10, 0.20)
#: the issue's targets at 10% of the pages fetched
TARGET_GAP, TARGET_TOP = 0.5, 0.9


@dataclass(frozen=True)
class Row:
    seed: int
    name: str
    host: str
    within: str
    mass: tuple[float, ...]  # at CHECKPOINTS
    gap10: float
    top10: float
    top20: float
    seconds: float
    due_per_tick: float  # hosts due with work per tick, mean
    per_page: dict[str, float]  # the Redis work the order implies, per page fetched (Crawl.costs)
    double10: float = 0.0  # share of the first 10% of fetches spent on a page already fetched
    promo10: float = 0.0  # promotions (pages the sketch served) per page among the first 10% of fetches


def parse_orders(specs: list[str] | None) -> list[model.Order]:
    """``NAME=HOST/WITHIN`` (or ``HOST/WITHIN``); the default list when none;
    due-time and omniscient always run (the gap is measured between them)."""
    if not specs:
        return [model.Order(n, h, w) for n, h, w in ORDERS]
    out = [model.Order("due-time", "due", "fifo")]
    for spec in specs:
        name, _, hw = spec.rpartition("=")
        host, _, within = hw.partition("/")
        out.append(model.Order(name or hw, host, within or "fifo"))
    out.append(model.Order("omniscient", "omniscient", "pagerank"))
    return out


def slots_of(args: argparse.Namespace, hosts: int) -> int:
    return args.slots or max(1, round(args.capacity * hosts / args.delay))


def run_seed(args: argparse.Namespace, seed: int, orders: list[model.Order],
             curves: dict[str, list[tuple[int, model.Curve]]]) -> list[Row]:
    spec = model.GraphSpec(pages=args.pages, hosts=args.hosts, copy=args.copy)
    t0 = time.perf_counter()
    g = model.generate(spec, seed)
    t1 = time.perf_counter()
    pr, iters = model.pagerank(g)
    t2 = time.perf_counter()
    top = model.top_pages(pr)
    ranks = model.host_ranks(g, pr)
    seeds = model.pick_seeds(g, args.seed_share, seed)
    slots = slots_of(args, g.hosts)
    until = max(1, int(round(args.until * g.n)))
    homes_in_top = float(np.isin(top, g.start[:-1]).mean())
    print(f"\nseed {seed}: {g.n:,} pages, {g.hosts:,} hosts (largest {int(g.sizes.max()):,} pages), "
          f"{g.links:,} links ({g.internal_share():.0%} within a host), in-degree exponent "
          f"{model.indegree_exponent(g):.2f}; generated in {t1 - t0:.1f} s, PageRank in {iters} iterations, "
          f"{t2 - t1:.1f} s; top 0.1%: {top.size:,} pages ({homes_in_top:.0%} home pages, at most "
          f"{int(np.bincount(g.host_of[top]).max())} in one host)")
    print(f"  crawl: {seeds.size:,} seeds, delay {args.delay} ticks, {slots} slots a tick, until {until:,} pages",
          flush=True)
    rows: list[Row] = []
    for order in orders:
        crawl = model.simulate(g, order, seeds=seeds, slots=slots, delay=args.delay, until=until,
                               pr=pr, ranks=ranks, tie_seed=seed)
        c = model.curve(crawl, pr, top)
        curves.setdefault(order.name, []).append((seed, c))
        ks = [int(round(x * g.n)) for x in CHECKPOINTS]
        k10 = int(round(0.1 * g.n))
        d10 = float(crawl.double[:k10].mean()) if crawl.double is not None and crawl.double.size else 0.0
        p10 = float(crawl.promoted[:k10].mean()) if crawl.promoted is not None and crawl.promoted.size else 0.0
        rows.append(Row(seed=seed, name=order.name, host=order.host, within=order.within, double10=d10,
                        promo10=p10,
                        mass=tuple(c.mass_at(k) for k in ks), gap10=float("nan"),
                        top10=c.top_at(int(round(0.1 * g.n))), top20=c.top_at(int(round(0.2 * g.n))),
                        seconds=crawl.seconds, due_per_tick=float(np.mean(crawl.due_hosts or [0])),
                        per_page={k: v / max(1, crawl.fetched.size) for k, v in crawl.costs.items()}))
        pp = rows[-1].per_page
        print(f"  {order.name:<20} {crawl.seconds:5.1f} s, {rows[-1].due_per_tick:,.0f} hosts due a tick; per page: "
              f"{pp['links']:.1f} links, {pp['increments']:.2f} to a queued page, {pp['pfadd']:.2f} (page, other "
              f"host) pairs, {pp['rank_updates']:.2f} host ranks raised; {crawl.costs['new_pairs']:,} linking pairs "
              "in all", flush=True)
        if crawl.double is not None:
            print(f"  {'':<20} frontier: {d10:.2%} of the first 10% fetches double ({pp['double']:.4f} a page by "
                  f"{args.until:.0%}); per page: {pp['sightings']:.2f} sketch updates, {pp['promotions']:.3f} "
                  f"promotions, {pp['replaced']:.2f} counters replaced, {pp['recent_hits']:.2f} sightings of a "
                  f"page fetched last, {pp['skip_evicted']:.4f} skip-set evictions; at the end: sketches "
                  f"{crawl.costs['sketch_held']:,} entries in {crawl.costs['sketch_hosts']:,} hosts, recent "
                  f"{crawl.costs['recent_held']:,}, skip sets {crawl.costs['skip_held']:,} (at most "
                  f"{crawl.costs['skip_max']} a host)", flush=True)
            if "refused" in crawl.costs:
                print(f"  {'':<20} exact guard: per page {pp['refused']:.3f} promotions refused (fetched), "
                      f"{pp['refused_full']:.4f} (skip set full), {pp['ignored_hits']:.2f} sightings ignored; "
                      f"{crawl.costs['ignored_held']:,} pages ignored at the end", flush=True)
            sent = pp["promotions"] + pp.get("refused", 0.0) + pp.get("refused_full", 0.0)
            print(f"  {'':<20} promotions: {p10:.3f} a page by 10%, {pp['promotions']:.3f} by {args.until:.0%} "
                  f"({sent:.3f} sent, refused ones too); {pp['due']:.3f} counters a page reached T (what "
                  "promoting on sighting would send)"
                  + (f"; {pp['capped']:.3f} serves a page capped" if "capped" in crawl.costs else ""), flush=True)
            if "cross_unseen" in crawl.costs:
                print(f"  {'':<20} own host's links only: {pp['cross_unseen']:.2f} links from other hosts a page "
                      "not counted", flush=True)
    due = next(r for r in rows if r.host == "due").mass[2]
    omni = next(r for r in rows if r.host == "omniscient").mass[2]
    return [Row(**{**asdict(r), "gap10": model.gap_closed(r.mass[2], due, omni)}) for r in rows]


def table(rows: list[Row], title: str) -> str:
    dbl = any(model.Order(r.name, r.host, r.within).frontier is not None for r in rows)
    head = ("order", "across hosts", "within", *(f"mass@{x:.0%}" for x in CHECKPOINTS), "gap closed@10%",
            "top0.1%@10%", "top0.1%@20%", *(("promoted@10%", "double@10%") if dbl else ()))
    lines = [title, "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join([r.name, r.host, r.within, *(f"{m:.3f}" for m in r.mass),
                                        f"{r.gap10:.2f}", f"{r.top10:.3f}", f"{r.top20:.3f}",
                                        *((f"{r.promo10:.3f}", f"{r.double10:.2%}") if dbl else ())]) + " |")
    return "\n".join(lines)


def mean_rows(rows: list[Row], orders: list[model.Order]) -> list[Row]:
    out = []
    for o in orders:
        rs = [r for r in rows if r.name == o.name]
        out.append(Row(seed=-1, name=o.name, host=o.host, within=o.within,
                       mass=tuple(float(np.mean([r.mass[i] for r in rs])) for i in range(len(CHECKPOINTS))),
                       gap10=float(np.mean([r.gap10 for r in rs])), top10=float(np.mean([r.top10 for r in rs])),
                       top20=float(np.mean([r.top20 for r in rs])), seconds=float(np.mean([r.seconds for r in rs])),
                       due_per_tick=float(np.mean([r.due_per_tick for r in rs])),
                       double10=float(np.mean([r.double10 for r in rs])),
                       promo10=float(np.mean([r.promo10 for r in rs])),
                       per_page={k: float(np.mean([r.per_page[k] for r in rs])) for k in rs[0].per_page}))
    return out


def plot(curves: dict[str, list[tuple[int, model.Curve]]], pages: int, until: float, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--png: matplotlib is not installed (requirements-bench.txt); no figure", file=sys.stderr)
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for name, runs in curves.items():
        seed, c = runs[0]
        step = max(1, c.mass.size // 400)
        x = np.arange(1, c.mass.size + 1, step) / pages
        style = "--" if name in ("due-time", "omniscient") else "-"
        ax1.plot(x, c.mass[::step], style, label=name)
        ax2.plot(x, c.top[::step] / c.top_count, style, label=name)
    for ax, ylabel in ((ax1, "PageRank mass fetched"), (ax2, "share of the top 0.1% pages fetched")):
        ax.set_xlabel("share of the pages fetched")
        ax.set_ylabel(ylabel)
        ax.set_xlim(0, until)
        ax.axvline(0.1, color="grey", lw=0.5)
        ax.grid(alpha=0.3)
    ax2.axhline(TARGET_TOP, color="grey", lw=0.5)
    ax1.legend(fontsize=8)
    fig.suptitle(f"crawl order on a generated web of {pages:,} pages (seed {next(iter(curves.values()))[0][0]})")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench order", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pages", type=int, default=2_000_000)
    p.add_argument("--hosts", type=int, default=0, help="default: pages / 20")
    p.add_argument("--seed", type=int, action="append", help="repeatable; default 1 2 3")
    p.add_argument("--delay", type=int, default=10, help="ticks between two fetches of a host")
    p.add_argument("--capacity", type=float, default=0.02,
                   help="slots a tick as a share of hosts / delay (what politeness alone would allow)")
    p.add_argument("--slots", type=int, default=0, help="fetch slots a tick (overrides --capacity)")
    p.add_argument("--seed-share", type=float, default=0.1, help="share of the hosts whose home page is a seed")
    p.add_argument("--until", type=float, default=0.2, help="share of the pages fetched when a crawl stops")
    p.add_argument("--copy", type=float, default=model.GraphSpec.copy,
                   help="share of internal links copied from the host's template (0: none)")
    p.add_argument("--order", action="append", metavar="NAME=HOST/WITHIN",
                   help=f"orders to run besides due-time and omniscient; hosts: {', '.join(model.HOST_KEYS)}, "
                        f"decay<alpha>; within: {', '.join(model.WITHIN)}, or what the production frontier can "
                        "carry: sketch<K>t<T>[m][+g][+r<R>][+p<N>][+q][+i][+c<N>], x, e<N>, xe<N>, x+e<N> (model.Frontier)")
    p.add_argument("--png", type=Path, help="draw the first seed's curves here (matplotlib)")
    p.add_argument("--json", type=Path, help="write every row here")
    args = p.parse_args(argv)
    if args.until < max(CHECKPOINTS):
        p.error(f"--until must be at least {max(CHECKPOINTS)}")
    try:
        orders = parse_orders(args.order)
    except ValueError as e:
        p.error(str(e))
    seeds = args.seed or [1, 2, 3]
    curves: dict[str, list[tuple[int, model.Curve]]] = {}
    rows: list[Row] = []
    for seed in seeds:
        rs = run_seed(args, seed, orders, curves)
        rows += rs
        print(table(rs, f"\nseed {seed}"), flush=True)
    means = mean_rows(rows, orders)
    if len(seeds) > 1:
        print(table(means, f"\nmean over seeds {', '.join(map(str, seeds))}"))
    print(f"\ntargets at 10% fetched: gap closed >= {TARGET_GAP}, top 0.1% fetched >= {TARGET_TOP} (every seed)")
    for o in orders:
        if o.host in ("due", "omniscient"):
            continue
        rs = [r for r in rows if r.name == o.name]
        ok = all(r.gap10 >= TARGET_GAP for r in rs), all(r.top10 >= TARGET_TOP for r in rs)
        print(f"  {o.name:<20} gap {'met' if ok[0] else 'MISSED'} (min {min(r.gap10 for r in rs):.2f}), "
              f"top 0.1% {'met' if ok[1] else 'MISSED'} (min {min(r.top10 for r in rs):.3f})"
              + (f", double fetches at most {max(r.double10 for r in rs):.2%}" if o.frontier else ""))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "rows": [asdict(r) for r in rows]}, indent=1))
    if args.png and plot(curves, args.pages, args.until, args.png):
        print(f"figure: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
