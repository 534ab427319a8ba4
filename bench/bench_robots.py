"""robots.txt as the real web serves it, measured on the job users run.

Two runs of ``scrapy crawl billion`` with its defaults (WARC on, robots on),
over HTTPS, each against its own test web, audited from the web's request
log:

1. ``redirects``: ``--domains`` (200) domains, 15% whose robots.txt answers
   http -> https, 15% apex -> www, 10% 503 for the first ``--outage`` (30)
   seconds. Seeds are bare ``http://`` URLs for the http -> https ones.
   Printed: allowed pages fetched of those that exist, disallowed paths
   fetched (must be 0), pages lost (must be 0), intervals under the delay
   at the site (must be 0), postponed requests, worst event-loop stall.
2. ``hostile``: 20 domains, half with 30,000 wildcard rules, half with a
   600 KiB robots.txt. Printed: worst event-loop stall of the crawl, and the
   CPU per link of the check, ours against Protego's own ``can_fetch``
   (in this process, on the rules the crawl parses).

    python bench/bench_robots.py [--domains 200] [--delay 1] [--outage 30] [--only redirects|hostile]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.testweb.config import WebConfig  # noqa: E402
from devkit.testweb.control import TestWebProcess, consecutive  # noqa: E402
from devkit.testweb.site import Site  # noqa: E402
from tests.servers import RedisServer, run_scrapy, scrapy_env  # noqa: E402

PAGES = 15  # below billion's depth limit (16): every page is reachable by the chain of links


def crawl(web: TestWebProcess, seeds: list[str], work: Path, redis: RedisServer, delay: float,
          *settings: str) -> dict:
    (work / "seeds.txt").write_text("\n".join(seeds) + "\n")
    stats_file = work / "stats.json"
    args = ["crawl", "billion", "-a", f"seeds={work / 'seeds.txt'}", "-s", f"CRAWLER_DOMAIN_DELAY={delay}",
            "-s", f"CRAWLER_STATS_FILE={stats_file}", "-s", f"CRAWLER_WARC_DIR={work / 'warc'}",
            "-s", f"CRAWLER_TLS_CA_FILE={web.ca_file}", "-s", "CRAWLER_PROGRESS_INTERVAL=10"]
    for s in settings:
        args += ["-s", s]
    started = time.monotonic()
    result = run_scrapy(args, scrapy_env(redis.url, CRAWLER_CONTACT="bench@example.org"), timeout=900)
    if result.returncode != 0:
        print(result.stderr[-3000:])
        raise SystemExit(f"the crawl failed: exit {result.returncode}")
    stats = json.loads(stats_file.read_text())
    stats["_seconds"] = time.monotonic() - started
    return stats


def redirects(args: argparse.Namespace, work: Path, redis: RedisServer) -> None:
    faults = {"https": 0.15, "www": 0.15, "outage": 0.10}
    config = WebConfig(domains=args.domains, pages=PAGES, links=12, tls=True, also_plain=True,
                       robots_faults=faults, robots_outage_s=args.outage, private_share=0.1,
                       cross_share=0.05, crawl_delay_share=0, latency_ms=100, bandwidth=2_000_000)
    with TestWebProcess(config) as web:
        site = Site(config, web.port, web.plain_port)
        seeds = [web.url(d, plain=site.robots_fault(d) == "https") for d in range(args.domains)]
        stats = crawl(web, seeds, work, redis, args.delay, "CRAWLER_ROBOTS_RETRY=5", "CRAWLER_ROBOTS_ERROR_TTL=20")
        log = web.log()
    by_domain = defaultdict(list)
    for e in log:
        by_domain[e.domain].append(e)
    expected = fetched = disallowed = 0
    for d in range(args.domains):
        name = config.domain(d)
        entries = by_domain[name]
        got = {"/" if e.path == "/p/0.html" else e.path for e in entries if e.path == "/" or e.path.startswith("/p/")}
        want = {"/", *(f"/p/{k}.html" for k in range(1, PAGES))}
        expected += len(want)
        fetched += len(want & got)
        disallowed += sum(e.path.startswith("/private/") for e in entries)
    short = sum(1 for a, b in consecutive(log) if b.ms - a.ms < args.delay * 1000)
    kinds = [site.robots_fault(d) for d in range(args.domains)]
    print(f"redirects: {args.domains} HTTPS domains, {kinds.count('https')} robots.txt http -> https, "
          f"{kinds.count('www')} apex -> www, {kinds.count('outage')} 503 for {args.outage:g}s; "
          f"delay {args.delay:g}s; {stats['_seconds']:.0f}s")
    print(f"  allowed pages fetched   {fetched} of {expected}  (lost: {expected - fetched})")
    print(f"  disallowed fetched      {disallowed}")
    print(f"  under the delay         {short} of {len(consecutive(log))} intervals at the site")
    print(f"  robots.txt              {stats.get('crawler/robots/fetched', 0)} fetches, "
          f"{stats.get('crawler/robots/redirects', 0)} redirects followed, "
          f"{stats.get('crawler/robots/postponed', 0)} requests postponed, "
          f"{stats.get('crawler/robots/unreachable', 0)} unreachable answers")
    print(f"  worst event-loop stall  {stats.get('crawler/loop/lag_max_ms', 0):.1f} ms")
    print(f"  dead letters            {sum(v for k, v in stats.items() if k.startswith('crawler/dlq/'))}")


def hostile(args: argparse.Namespace, work: Path, redis: RedisServer) -> None:
    config = WebConfig(domains=20, pages=PAGES, links=60, tls=True, robots_faults={"wildcards": 0.5, "big": 0.5},
                       private_share=0.1, crawl_delay_share=0, latency_ms=100, bandwidth=2_000_000)
    with TestWebProcess(config) as web:
        stats = crawl(web, [web.url(d) for d in range(20)], work, redis, args.delay)
        site = Site(config, web.port)
    print(f"hostile: 20 HTTPS domains, 10 with 30,000 wildcard rules, 10 with 600 KiB; {stats['_seconds']:.0f}s")
    print(f"  worst event-loop stall  {stats.get('crawler/loop/lag_max_ms', 0):.1f} ms "
          f"({stats.get('crawler/loop/stalls', 0)} over 100 ms)")
    print(f"  links checked against robots.txt before queueing: "
          f"{stats.get('crawler/links/robots_disallowed', 0)} refused, "
          f"{stats.get('crawler/links/robots_unchecked', 0)} left to the fetch-time check")
    from protego import Protego

    from crawler.robots import Rules, compile_rules

    body = site._hostile_robots("wildcards")[:512_000].decode()
    started = time.process_time()
    rules = Rules.from_compiled(compile_rules(body, "crawler"), "crawler")
    build = time.process_time() - started
    links = [site.url(0, f"/p/{i}.html") for i in range(3000)] + [site.url(0, f"/{i:x}q/x/crawl") for i in range(3000)]
    started = time.process_time()
    ours = [rules.allowed(u) for u in links]
    per_link = (time.process_time() - started) / len(links) * 1000
    parser = Protego.parse(body)
    sample = links[::60]
    started = time.process_time()
    theirs = [parser.can_fetch(u, "crawler") for u in sample]
    protego = (time.process_time() - started) / len(sample) * 1000
    assert theirs == ours[::60], "verdicts differ from Protego's"
    print(f"  check per link          {per_link:.4f} ms (Protego: {protego:.2f} ms, x{protego / per_link:.0f}); "
          f"parse and index {build * 1000:.0f} ms in the worker")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--domains", type=int, default=200)
    p.add_argument("--delay", type=float, default=1.0)
    p.add_argument("--outage", type=float, default=30.0)
    p.add_argument("--only", choices=("redirects", "hostile"))
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-robots-"))
    try:
        for name, run in (("redirects", redirects), ("hostile", hostile)):
            if args.only in (None, name):
                redis = RedisServer(work / f"redis-{name}").start()
                try:
                    (work / name).mkdir()
                    run(args, work / name, redis)
                finally:
                    redis.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
