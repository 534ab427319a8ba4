"""Recrawling against the optimum (design/recrawl.md C.8, build step 12):
billion with its defaults (WARC on, robots.txt on) revisiting an HTTPS test
web whose pages change on known schedules, its freshness measured exactly
from the site's log and set against the scheduling model's optimum and the
uniform policy for the same fetches (bench/_recrawl_log.py).

    python bench/bench_recrawl.py [--minutes 6] [--warmup 90] [--domains 20] [--pages 20]
        [--delay 0.5] [--share 0.5] [--row 2.0] [--day SECONDS] [--latency-ms 50]
        [--addresses N] [--ip-delay S] [--mode adaptive|fixed|adaptive75|lying|kill]... [--kill]
        [--kill-at 0.5] [--seed 1] [--keep DIR] [--set NAME=VALUE]...

**The scale.** One model day is ``--day`` seconds (default: the one that
puts the run on ``--row`` visits per page per model day, the model's table
in C.5, for the budget the crawler gives a domain: ``SHARE × 86400 / (delay
+ 1)`` revisits a day, E): ``CRAWLER_RECRAWL_MIN`` is a twentieth of it (the
design's 5 s at a 100 s day; never under the delay), ``CRAWLER_RECRAWL_MAX``
60 days, the first interval (``CRAWLER_RECRAWL_INTERVAL``) the uniform
interval of that budget, and every page changes, its mean time between
changes log-uniform over a tenth of a day to 100 days (the model's 0.01-10
changes a day: three orders of magnitude, the fastest faster than the budget
can follow). The defaults (20 domains × 20 pages, 0.5 s, share 0.5) make a
120 s day: a 6-minute window sees about six visits a page.

**The web.** HTTPS, a log-normal time to first byte, the domains over
``--addresses`` loopback addresses (default one per domain; the crawler
gets the host map and ``CRAWLER_IP_DELAY`` = ``--ip-delay``, by default the
domain delay, so that the domain, not the address, bounds a domain's
fetches as the budget assumes), and the
server behaviours of the issue mapped to WebConfig: strong ETags, weak ETags,
Last-Modified only, both, none (``validators``); a token changing on every
request in a tenth of the pages (``noisy_share``); and in the ``lying`` mode
a fifth of the domains lying, one per lie (``lies``: conditionals ignored,
Last-Modified always now, Last-Modified frozen, ETag frozen; the seed is the
first from ``--seed`` that gives each lie exactly one domain).

**The modes**, one crawl process each, a fresh test web and Redis each:
``adaptive``; ``fixed`` at the interval uniform would use for the adaptive
run's fetches (pages / fetches per domain per s); ``adaptive75``, adaptive
held to 75 % of that budget (``CRAWLER_RECRAWL_BUDGET``, and the share
scaled alike: E's budget with a delay is ``SHARE × 86400 / (delay + 1)``);
``lying``, adaptive on the lying web; with ``--kill`` (or ``--mode
kill``) also ``kill``, adaptive SIGKILLed at ``--kill-at`` of the window and
restarted at once on the same frontier (history kept), its freshness and
tracked URLs set against the unkilled run's.

**Printed**: one table: mode, freshness, the optimum and uniform's expected
freshness for the same fetches, the ratio to the optimum, fetches in the
window, the 304 share of revisits to unchanged pages on honest hosts, body
bytes saved, WARC revisit records (read with warcio, by profile: ``snm``
server-not-modified, ``idp`` identical-payload-digest) against the log's
304s + identical payloads, tracked URLs in Redis at the end, and the
politeness audit (end of answer to next arrival at a domain under the
delay; same-URL gaps under MIN, a retry after a failure skipped; per
address as bench_openweb). Then the comparisons C.8 asks for.

Until the feature is in the tree (``crawler/middlewares/recrawl.py``) the
bench says so and stops (``--force`` runs it anyway).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._recrawl_log import Audit, Result, analyse, audit, fetch_ratio_for  # noqa: E402
from bench.bench_openweb import address_audit  # noqa: E402
from crawler.settings_registry import BY_NAME  # noqa: E402
from crawler.spiders.billion import BillionSpider  # noqa: E402
from devkit.testweb.changes import LIES  # noqa: E402
from devkit.testweb.config import WebConfig  # noqa: E402
from devkit.testweb.control import TestWebProcess  # noqa: E402
from devkit.testweb.site import Site  # noqa: E402
from tests.servers import RedisServer  # noqa: E402

MODES = ("adaptive", "fixed", "adaptive75", "lying", "kill")
#: what the domains' pages carry (the rest of the issue's behaviours: noisy_share, LIES)
VALIDATORS = {"etag": 0.3, "weak_etag": 0.2, "last_modified": 0.2, "both": 0.2, "none": 0.1}
#: the lying variant: a fifth of the domains, one per lie
LYING_SHARE = 0.2
#: the budget the crawler gives a domain with a delay counts this per fetch beside it (E: t̄)
TURN_S = 1.0
HELD = 0.75


@dataclass(frozen=True)
class Scale:
    """The model scaled to a run of minutes (see the module's docstring)."""

    day: float  # s per model day
    pages: int  # per domain
    delay: float
    share: float

    @property
    def budget(self) -> float:
        """Revisits per domain per s the crawler gives a domain with a delay (E)."""
        return self.share / (self.delay + TURN_S)

    @property
    def minimum(self) -> float:
        return max(self.day / 20, self.delay)

    @property
    def maximum(self) -> float:
        return 60 * self.day

    @property
    def interval(self) -> float:
        """Uniform's interval for the budget: every page once per pages / budget."""
        return self.pages / self.budget

    @property
    def change_range(self) -> tuple[float, float]:
        """Mean time between changes: 0.01-10 changes a model day."""
        return self.day / 10, 100 * self.day

    @property
    def row(self) -> float:
        """Visits per page per model day at the budget (the model's table's rows)."""
        return self.budget * self.day / self.pages


def scale_of(args: argparse.Namespace) -> Scale:
    budget = args.share / (args.delay + TURN_S)
    day = args.day or args.row * args.pages / budget
    return Scale(day=day, pages=args.pages, delay=args.delay, share=args.share)


def web_config(args: argparse.Namespace, scale: Scale, lying: bool) -> WebConfig:
    low, high = scale.change_range
    fields = dict(domains=args.domains, pages=args.pages, tls=True, latency_ms=args.latency_ms,
                  size_median=30_000, size_mean=70_000, links=20, cross_share=0.1, dup_share=0.1,
                  private_share=0.0, crawl_delay_share=0.0, change_share=1.0, change_mean_min_s=low,
                  change_mean_max_s=high, validators=dict(VALIDATORS), noisy_share=args.noisy,
                  addresses=min(args.addresses, args.domains))
    if not lying:
        return WebConfig(seed=args.seed, **fields)
    lies = {lie: LYING_SHARE / len(LIES) for lie in LIES}
    for seed in range(args.seed, args.seed + 10_000):
        config = WebConfig(seed=seed, lies=lies, **fields)
        if sorted(lying_domains(config).values()) == sorted(LIES) or args.domains < len(LIES):
            return config
    raise SystemExit(f"no seed from {args.seed} gives each lie exactly one of {args.domains} domains")


def lying_domains(config: WebConfig, site: Site | None = None) -> dict[int, str]:
    """Domain -> its lie."""
    site = site or Site(config, 0)
    return {d: lie for d in range(config.domains) if (lie := site.host_rules(d).lie) is not None}


def recrawl_settings(mode: str, scale: Scale, fixed_interval: float, fixed_budget: float) -> dict[str, str]:
    """The CRAWLER_RECRAWL* settings of a mode (every one in the registry)."""
    out = {"CRAWLER_RECRAWL": "fixed" if mode == "fixed" else "adaptive",
           "CRAWLER_RECRAWL_MIN": f"{scale.minimum:g}", "CRAWLER_RECRAWL_MAX": f"{scale.maximum:g}",
           "CRAWLER_RECRAWL_SHARE": f"{scale.share:g}",
           "CRAWLER_RECRAWL_INTERVAL": f"{(fixed_interval if mode == 'fixed' else scale.interval):g}"}
    if mode == "adaptive75":
        out["CRAWLER_RECRAWL_BUDGET"] = f"{HELD * fixed_budget * 86400:g}"  # revisits per domain per day
        out["CRAWLER_RECRAWL_SHARE"] = f"{HELD * scale.share:g}"  # E's budget with a delay, held alike
    return out


def command(args: argparse.Namespace, scale: Scale, seeds: Path, warc: Path, seconds: float,
            recrawl: dict[str, str], host_map: dict[str, str] | None) -> list[str]:
    settings = {"LOG_LEVEL": "WARNING", "CLOSESPIDER_TIMEOUT": f"{seconds:g}",
                "CRAWLER_DOMAIN_DELAY": f"{scale.delay:g}", "CRAWLER_WARC_DIR": str(warc),
                "CRAWLER_PROGRESS_INTERVAL": "0", **recrawl}
    if host_map:  # a layout of addresses: the crawler resolves through it, its ip delay the domain's
        settings["CRAWLER_HOST_MAP"] = json.dumps(host_map, separators=(",", ":"))
        settings["CRAWLER_IP_DELAY"] = f"{args.ip_delay:g}"
    for pair in args.set:
        name, _, value = pair.partition("=")
        settings[name] = value
    unknown = [name for name in settings if name.startswith("CRAWLER_") and name not in BY_NAME]
    if unknown:
        raise SystemExit(f"not in crawler/settings_registry.toml: {', '.join(unknown)}")
    cmd = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}"]
    for name, value in settings.items():
        cmd += ["-s", f"{name}={value}"]
    return cmd


def revisit_records(folder: Path) -> Counter[str]:
    """WARC records by kind in every WARC file under ``folder``: ``revisit/<profile's
    last segment>`` for revisits, the record type for the rest (read with warcio)."""
    from warcio.archiveiterator import ArchiveIterator

    counts: Counter[str] = Counter()
    for path in sorted(folder.rglob("*")):
        if not (path.name.endswith(".warc") or path.name.endswith(".warc.gz")):
            continue
        with path.open("rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type == "revisit":
                    profile = record.rec_headers.get_header("WARC-Profile") or ""
                    counts["revisit/" + profile.rstrip("/").rsplit("/", 1)[-1]] += 1
                else:
                    counts[record.rec_type] += 1
    return counts


def tracked_in_redis(redis: RedisServer) -> int:
    """URLs with a history: the sum of HLEN over the ``*:hist:*`` hashes (E's keys)."""
    client = redis.client()
    return sum(client.hlen(key) for key in client.scan_iter(match="*:hist:*", count=1000))


@dataclass
class Run:
    mode: str
    config: WebConfig
    result: Result
    audit: Audit
    per_address: dict[str, object] | None
    warc: Counter[str]
    tracked_redis: int
    fixed_interval: float


def run(mode: str, args: argparse.Namespace, scale: Scale, redis: RedisServer, tmp: Path,
        fixed_interval: float, fixed_budget: float) -> Run:
    config = web_config(args, scale, lying=mode == "lying")
    redis.client().flushall()
    web = TestWebProcess(config, cpu=1 if args.pin else None).start()
    try:
        folder = tmp / mode
        folder.mkdir(parents=True, exist_ok=True)
        seeds = folder / "seeds.txt"
        seeds.write_text("".join(f"{web.url(d)}\n" for d in range(config.domains)))
        window = args.minutes * 60
        total = args.warmup + window + 5
        recrawl = recrawl_settings(mode, scale, fixed_interval, fixed_budget)
        host_map = web.host_map(www=False) if config.spread else None
        env = dict(os.environ, PYTHONPATH=str(ROOT), REDIS_URL=redis.url, CRAWLER_CONTACT="bench@example.org",
                   SCRAPY_SETTINGS_MODULE="devkit.settings")
        pin = ["taskset", "-c", "0"] if args.pin else []
        stderr = (folder / "crawl.log").open("w")
        started = time.monotonic()
        proc = subprocess.Popen([*pin, *command(args, scale, seeds, folder / "warc", total, recrawl, host_map)],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        time.sleep(args.warmup)
        t0 = web.clock()["now"]
        ms0 = time.time()
        if mode == "kill":
            time.sleep(window * args.kill_at)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            left = total - (time.monotonic() - started)
            print(f"  {mode}: SIGKILLed the worker at {time.monotonic() - started:.0f} s, restarted at once",
                  flush=True)
            proc = subprocess.Popen([*pin, *command(args, scale, seeds, folder / "warc", left, recrawl, host_map)],
                                    cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        time.sleep(max(0.0, started + args.warmup + window - time.monotonic()))
        t1 = web.clock()["now"]
        ms1 = time.time()
        code = proc.wait()
        stderr.close()
        if code != 0:
            print((folder / "crawl.log").read_text()[-3000:])
            raise SystemExit(f"{mode}: the crawl failed ({code})")
        log = web.log()
    finally:
        web.stop()
    site = Site(config, 0)
    result = analyse(log, config, t0, t1, low=scale.minimum, high=scale.maximum, site=site,
                     page_cap=BillionSpider.custom_settings["CRAWLER_MAX_PAGE_BYTES"])
    checks = audit(log, config, scale.delay, scale.minimum)
    per_address = None
    if config.spread:
        answers = [(e.done - e.ms) / 1000 for e in log if ms0 * 1000 <= e.ms < ms1 * 1000 and e.done]
        ns = argparse.Namespace(ip_delay=args.ip_delay, shared_min=None, delay=scale.delay)
        per_address = address_audit(log, config, ns, sum(answers) / len(answers) if answers else 0.0, (ms0, ms1))
    if args.offenders:
        with args.offenders.open("a") as out:
            for (host, path), a, b in checks.url_offenders:
                out.write(f"{mode}\t{host}{path}\t{a:.3f}\t{b:.3f}\n")
    return Run(mode, config, result, checks, per_address, revisit_records(folder / "warc"),
               tracked_in_redis(redis), fixed_interval)


def pct(x: float) -> str:
    return "-" if x != x else f"{x:.1%}"


def table(runs: list[Run], scale: Scale) -> list[str]:
    head = (f"{'mode':11} {'fresh':>6} {'optimum':>7} {'uniform':>7} {'ratio':>6} {'fetches':>7} {'304 share':>9} "
            f"{'MB saved':>8} {'revisit rec snm/idp':>19} {'log 304/idp':>11} {'tracked':>7} {'dom<delay':>9} "
            f"{'url<MIN':>7} {'ip<delay':>8}")
    lines = [head]
    for r in runs:
        res, a = r.result, r.audit
        warc = f"{r.warc['revisit/server-not-modified']}/{r.warc['revisit/identical-payload-digest']}"
        logged = f"{res.revisits_304}/{res.revisits_identical}"
        ip = "-" if r.per_address is None else str(r.per_address["under"])
        lines.append(f"{r.mode:11} {pct(res.freshness):>6} {pct(res.optimum):>7} {pct(res.uniform):>7} "
                     f"{pct(res.ratio):>6} {res.fetches:7,} {pct(res.share_304):>9} {res.bytes_saved / 1e6:8.1f} "
                     f"{warc:>19} {logged:>11} {r.tracked_redis:7,} {a.domain_under:9} {a.url_under:7} {ip:>8}")
    return lines


def comparisons(runs: list[Run], scale: Scale, kill_at: float = 0.5) -> list[str]:
    by = {r.mode: r for r in runs}
    out = []
    if "adaptive" in by:
        res = by["adaptive"].result
        rates = [r for rs in res.rates_by_domain.values() for r in rs]
        budget = res.fetches / (res.window[1] - res.window[0])
        need = fetch_ratio_for(rates, budget, res.uniform)
        out.append(f"adaptive: {pct(res.freshness)} = {pct(res.ratio)} of the optimum for its fetches "
                   f"({pct(res.optimum)}); uniform expected {pct(res.uniform)}; the model's optimum needs "
                   f"{pct(need)} of these fetches for uniform's freshness (pooled over the domains)")
    if "fixed" in by:
        res = by["fixed"].result
        out.append(f"fixed every {by['fixed'].fixed_interval:.1f} s: measured {pct(res.freshness)}, uniform "
                   f"expected {pct(res.uniform)} for its fetches ({res.fetches:,})")
    if "adaptive75" in by and "fixed" in by:
        held, fixed = by["adaptive75"].result, by["fixed"].result
        fetched = held.fetches / fixed.fetches if fixed.fetches else math.nan
        verdict = "meets" if held.freshness >= fixed.freshness and fetched <= HELD + 0.05 else "misses"
        out.append(f"adaptive at 75 % of the budget: {pct(held.freshness)} with {pct(fetched)} of fixed's "
                   f"fetches, against fixed's {pct(fixed.freshness)}: {verdict} the target (uniform's freshness "
                   f"with at most 75 % of its fetches)")
    if "lying" in by:
        lying = by["lying"]
        liars = lying_domains(lying.config)
        fresh, best = lying.result.subset(liars)
        honest, honest_best = lying.result.subset(set(lying.result.tracked_by_domain) - set(liars))
        loss = (best - fresh) - (honest_best - honest) if liars else math.nan
        out.append(f"lying hosts ({', '.join(f'd{d} {lie}' for d, lie in sorted(liars.items()))}): their pages "
                   f"{pct(fresh)} against their optimum {pct(best)}, the honest ones {pct(honest)} against "
                   f"{pct(honest_best)}: the lies cost {pct(loss)} of freshness on those hosts (target <= 5 %)")
        if "adaptive" in by:
            out.append(f"  whole run: {pct(lying.result.freshness)} against adaptive's {pct(by['adaptive'].result.freshness)}")
    if "kill" in by and "adaptive" in by:
        killed, whole = by["kill"], by["adaptive"]
        diff = killed.result.freshness - whole.result.freshness
        out.append(f"SIGKILL at {kill_at:.0%} of the window: {pct(killed.result.freshness)} against the "
                   f"unkilled {pct(whole.result.freshness)} ({diff:+.1%}, target within 2 %); tracked in Redis "
                   f"{killed.tracked_redis:,} against {whole.tracked_redis:,}")
    for r in runs:
        if r.audit.url_under or r.audit.domain_under:
            out.append(f"{r.mode}: politeness: {r.audit.domain_under} domain intervals under {scale.delay:g} s "
                       f"(min {r.audit.domain_min_s:.3f} s), {r.audit.url_under} same-URL gaps under "
                       f"{scale.minimum:g} s (min {r.audit.url_min_s:.3f} s); --offenders FILE lists them")
    return out


def recrawl_landed() -> bool:
    return (ROOT / "crawler" / "middlewares" / "recrawl.py").exists()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=6.0, help="the measured window, after the warm-up")
    p.add_argument("--warmup", type=float, default=90.0, help="seconds before the window (discovery, robots.txt)")
    p.add_argument("--domains", type=int, default=20)
    p.add_argument("--pages", type=int, default=20, help="per domain")
    p.add_argument("--delay", type=float, default=0.5, help="CRAWLER_DOMAIN_DELAY, s")
    p.add_argument("--share", type=float, default=0.5, help="CRAWLER_RECRAWL_SHARE (and E's budget)")
    p.add_argument("--row", type=float, default=2.0, help="visits per page per model day the budget gives")
    p.add_argument("--day", type=float, default=0.0, help="seconds per model day (0: from --row)")
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--noisy", type=float, default=0.1, help="share of pages with a token new on every request")
    p.add_argument("--addresses", type=int, help="loopback addresses the domains spread over (default: one per "
                   "domain; 0: all on 127.0.0.1, a shared front end with no pace of its own, devkit/settings.py)")
    p.add_argument("--ip-delay", type=float, help="CRAWLER_IP_DELAY with a layout, and the per-address audit's "
                   "(default: the domain delay: billion's 1 s would make the address, not the domain, the bound)")
    p.add_argument("--mode", action="append", choices=MODES,
                   help="run only these (default: all but kill, in order)")
    p.add_argument("--kill", action="store_true", help="also the kill mode: adaptive SIGKILLed mid-window, restarted")
    p.add_argument("--kill-at", type=float, default=0.5, help="kill mode: when in the window (share)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pin", action="store_true", help="crawler on CPU 0, test web on CPU 1 (taskset)")
    p.add_argument("--keep", type=Path, help="keep the WARC files and crawl logs here")
    p.add_argument("--offenders", type=Path, help="append every same-URL gap under MIN here")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a Scrapy setting for every crawl")
    p.add_argument("--force", action="store_true", help="run even if the recrawl feature is not in this tree")
    args = p.parse_args()
    if args.addresses is None:
        args.addresses = args.domains
    if args.ip_delay is None:
        args.ip_delay = args.delay
    if not recrawl_landed() and not args.force:  # not an error: `make bench` goes on to the next one
        print("bench_recrawl: the recrawl feature (crawler/middlewares/recrawl.py) is not in this tree; nothing "
              "to measure (--force runs the crawls anyway: no revisit happens)", file=sys.stderr)
        return
    scale = scale_of(args)
    chosen = set(args.mode or (m for m in MODES if m != "kill")) | ({"kill"} if args.kill else set())
    modes = [m for m in MODES if m in chosen]
    print(f"=== recrawl: {args.domains} domains x {args.pages} pages over HTTPS ({args.latency_ms:g} ms to first "
          f"byte), a model day = {scale.day:g} s; delay {scale.delay:g} s, MIN {scale.minimum:g} s, MAX "
          f"{scale.maximum:g} s; budget {scale.budget * 86400:,.0f} revisits/domain/day (E: share {scale.share:g} x "
          f"86400 / (delay + {TURN_S:g})) = {scale.row:.2f} visits/page/model day; changes every "
          f"{scale.change_range[0]:g}-{scale.change_range[1]:g} s; window {args.minutes:g} min after "
          f"{args.warmup:g} s", flush=True)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = args.keep or Path(name)
        redis = RedisServer(Path(name) / "redis").start()
        try:
            fixed_interval, fixed_budget = scale.interval, scale.budget
            for mode in modes:
                r = run(mode, args, scale, redis, tmp, fixed_interval, fixed_budget)
                runs.append(r)
                res = r.result
                rate = res.fetches / (res.window[1] - res.window[0])  # visits per s, all domains
                if mode in ("adaptive", "fixed") and rate > 0 and res.tracked:
                    fixed_budget = rate / len(res.tracked_by_domain)  # per domain
                    if mode == "adaptive":  # fixed: uniform's interval for these fetches
                        fixed_interval = res.tracked / rate
                print("\n".join(table([r], scale)[1:] if len(runs) > 1 else table([r], scale)), flush=True)
        finally:
            redis.stop()
    print()
    print("\n".join(table(runs, scale)))
    print("\n".join(comparisons(runs, scale, args.kill_at)))


if __name__ == "__main__":
    main()
