"""Slack of a focused crawl (#34 item 8): how late each request reaches the
site after its domain was due, on a crawl of a few domains whose pages form
a chain (each page links to the next only), so every request waits on the
one before it and a late turn shows as a late arrival.

By default the billion spider with its own defaults (WARC on, in a
temporary folder; robots.txt on; the delay counted from the end of each
answer), no depth limit; ``--spider demo`` runs the demo spider (no WARC
unless ``--set CRAWLER_WARC_DIR=...``). A request's due time, from the test
web's log: the delay after the previous request to its domain (from the end
of its answer, ``--from finish``; from its arrival, ``--from start``, which
the site cannot see exactly: the crawler counts from when the answer began),
and never before the previous answer was all sent (the link is on that
page). The slack is the arrival minus that; robots.txt is left out. The
crawler's own share (parse the page, store the link, dequeue it, send the
request) is a few ms; anything near the ack interval, the poll backoff or the
0.5 s tick is the scheduler waiting on itself. tests/test_slack.py asserts a
bound on the same figure for 2 domains.

    python bench/bench_slack.py [--domains 1 3 10] [--pages 150] [--delay 0.05]
        [--from finish|start] [--spider billion|demo] [--latency-ms MS] [--tls]
        [--set NAME=VALUE]...

Prints, for each number of domains: the intervals measured, the median,
p90 and worst slack in ms, and how many were over 100 ms.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.testweb.config import WebConfig  # noqa: E402
from devkit.testweb.control import LogEntry, TestWebProcess, consecutive  # noqa: E402
from tests.servers import RedisServer, scrapy_env  # noqa: E402

#: a chain: one link per page, to the next page, nothing else
CHAIN = dict(links=1, size_fixed=2000, cross_share=0, dup_share=0, private_share=0, crawl_delay_share=0)


def slacks(log: list[LogEntry], delay: float, mode: str) -> list[float]:
    """Seconds from each page request's due time to its arrival (see the module's doc)."""
    out = []
    for a, b in consecutive(log):
        if a.path == "/robots.txt" or b.path == "/robots.txt" or not a.done:
            continue
        due = max((a.ms if mode == "start" else a.done) + delay * 1000, a.done)
        out.append((b.ms - due) / 1000)
    return out


def crawl_cmd(web: TestWebProcess, args: argparse.Namespace, tmp: Path) -> list[str]:
    starts = [web.url(d) for d in range(web.config.domains)]
    cmd = [sys.executable, "-m", "scrapy", "crawl", args.spider]
    settings = ["CRAWLER_PROGRESS_INTERVAL=0", "LOG_LEVEL=INFO", f"CRAWLER_DOMAIN_DELAY={args.delay}",
                f"CRAWLER_DELAY_FROM={args.mode}"]
    if args.spider == "billion":
        seeds = tmp / "seeds.txt"
        seeds.write_text("\n".join(starts))
        cmd += ["-a", f"seeds={seeds}"]
        settings += ["CRAWLER_CONTACT=ops@example.org", f"CRAWLER_WARC_DIR={tmp / 'warc'}", "CRAWLER_MAX_DEPTH=0"]
    else:
        cmd += ["-a", f"start_urls={','.join(starts)}"]
    for s in (*settings, *args.set):
        cmd += ["-s", s]
    return cmd


def measure(redis: RedisServer, domains: int, args: argparse.Namespace, tmp: Path) -> list[float]:
    redis.client().flushall()
    config = WebConfig(domains=domains, **{**CHAIN, "pages": args.pages, "latency_ms": args.latency_ms,  # type: ignore[arg-type]
                                           "tls": args.tls})
    with TestWebProcess(config) as web:
        result = subprocess.run(crawl_cmd(web, args, tmp), cwd=ROOT, env=scrapy_env(redis.url),
                                capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            print(result.stderr[-3000:])
            raise SystemExit("the crawl failed")
        log = web.log()
    fetched = {(e.domain, e.path) for e in log if e.path.startswith("/p/")}
    if len(fetched) < domains * (args.pages - 1):
        print(f"  (only {len(fetched)} of {domains * (args.pages - 1)} chained pages fetched)")
    return slacks(log, args.delay, args.mode)


def line(domains: int, slack: list[float]) -> str:
    if not slack:
        return f"{domains:>3} domains: no interval"
    ordered = sorted(slack)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (f"{domains:>3} domains: {len(slack):5d} intervals, slack median {statistics.median(slack) * 1000:6.1f} ms,"
            f" p90 {p90 * 1000:6.1f} ms, worst {ordered[-1] * 1000:6.1f} ms, {sum(s > 0.1 for s in slack)} over 100 ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--domains", type=int, nargs="+", default=[1, 3, 10])
    parser.add_argument("--pages", type=int, default=150, help="pages per domain, in one chain")
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--from", dest="mode", choices=("finish", "start"), default="finish")
    parser.add_argument("--spider", choices=("billion", "demo"), default="billion")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the test web's median time to first byte")
    parser.add_argument("--tls", action="store_true", help="HTTPS, a certificate per domain")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a crawl setting")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer(Path(tmp) / "redis").start()
        try:
            print(f"{args.spider}: chained pages, CRAWLER_DOMAIN_DELAY={args.delay} from {args.mode}, {args.pages} "
                  f"pages per domain, {'HTTPS' if args.tls else 'HTTP'}, answers after {args.latency_ms:g} ms (median)")
            for n in args.domains:
                print(line(n, measure(redis, n, args, Path(tmp))), flush=True)
        finally:
            redis.stop()


if __name__ == "__main__":
    main()
