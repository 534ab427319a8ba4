"""An end-to-end crawl of the local test web by plain Scrapy (in-memory
scheduler, Scrapy's LinkExtractor), scrapy-redis's scheduler (same spider)
and ours (the billion spider on the Redis frontier): same concurrency, one
process each, politeness delay 0.

Prints pages/s, CPU seconds per 1,000 pages (the crawl process; Redis's own
CPU shown apart), peak memory (max RSS) and duplicate fetches (the same page
fetched twice, from the test web's log).

    python bench/bench_crawl.py [--domains 50] [--pages 100] [--links 60]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.testweb.config import WebConfig  # noqa: E402
from devkit.testweb.control import TestWebProcess  # noqa: E402
from tests.servers import RedisServer  # noqa: E402


def run(name: str, cmd: list[str], env: dict[str, str], web: TestWebProcess, redis: RedisServer,
        pages_total: int) -> dict[str, float]:
    redis.client().flushall()
    before_log = len(web.log())
    cpu_redis = redis.client().info("cpu")
    started = time.perf_counter()
    proc = subprocess.Popen(["taskset", "-c", "0", *cmd], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    if status != 0:
        print(err[-3000:])
        raise SystemExit(f"{name}: the crawl failed")
    cpu_after = redis.client().info("cpu")
    redis_cpu = sum(cpu_after[k] - cpu_redis[k] for k in ("used_cpu_sys", "used_cpu_user"))
    log = web.log(since=before_log)
    fetched = Counter((e.domain, e.path) for e in log if e.path != "/robots.txt" and e.status == 200)
    pages = len(fetched)
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "pages": pages,
        "coverage": pages / pages_total,
        "pages_s": pages / elapsed,
        "cpu_per_1000": cpu / pages * 1000,
        "redis_cpu_per_1000": redis_cpu / pages * 1000,
        "pages_per_cpu_s": pages / cpu,
        "rss_mb": usage.ru_maxrss / 1024,
        "duplicates": sum(n - 1 for n in fetched.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--domains", type=int, default=50)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--links", type=int, default=60)
    args = parser.parse_args()
    config = WebConfig(domains=args.domains, pages=args.pages, links=args.links, dup_share=0.15,
                       cross_share=0.1, private_share=0.0, crawl_delay_share=0.0)
    total = args.domains * args.pages
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer(Path(tmp) / "redis").start()
        subprocess.run(["taskset", "-cp", "1", str(redis.proc.pid)], capture_output=True)  # type: ignore[union-attr]
        web = TestWebProcess(config, cpu=1).start()
        try:
            seeds = Path(tmp) / "seeds.txt"
            seeds.write_text("\n".join(web.url(d) for d in range(args.domains)) + "\n")
            starts = ",".join(web.url(d) for d in range(args.domains))
            base_env = dict(os.environ, PYTHONPATH=str(ROOT), REDIS_URL=redis.url,
                            SCRAPY_SETTINGS_MODULE="devkit.settings")
            plain_env = dict(base_env, SCRAPY_SETTINGS_MODULE="bench.plain_settings")
            common = ["-s", "LOG_LEVEL=WARNING", "-s", "CONCURRENT_REQUESTS=64"]
            runs = {
                "plain Scrapy": (
                    [sys.executable, "-m", "scrapy", "crawl", "followall", "-a", f"start_urls={starts}", *common],
                    plain_env),
                "scrapy-redis scheduler": (
                    [sys.executable, "-m", "scrapy", "crawl", "followall", "-a", f"start_urls={starts}", *common,
                     "-s", "SCHEDULER=scrapy_redis.scheduler.Scheduler",
                     "-s", "DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter",
                     "-s", f"REDIS_URL={redis.url}"],
                    plain_env),
                "ours (billion, frontier)": (
                    [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}", *common,
                     "-s", "CRAWLER_DOMAIN_DELAY=0", "-s", "CRAWLER_WARC_DIR=", "-s", "CRAWLER_MAX_DEPTH=0",
                     "-s", "CRAWLER_CONTACT=bench@example.org", "-s", "CRAWLER_PROGRESS_INTERVAL=0"],
                    base_env),
            }
            print(f"end-to-end crawl: {args.domains} domains x {args.pages} pages, {args.links} links/page "
                  f"(15% differ only by tracking parameters), open-web page sizes; crawler on CPU 0, "
                  f"test web and Redis on CPU 1")
            print(f"{'crawler':26s} {'pages':>6s} {'pages/s':>8s} {'CPU s/1k':>9s} {'+Redis':>7s} "
                  f"{'pages/CPU s':>12s} {'peak MB':>8s} {'dup fetches':>12s}")
            results = {}
            for name, (cmd, env) in runs.items():
                r = results[name] = run(name, cmd, env, web, redis, total)
                print(f"{name:26s} {r['pages']:6.0f} {r['pages_s']:8.1f} {r['cpu_per_1000']:9.2f} "
                      f"{r['redis_cpu_per_1000']:7.2f} {r['pages_per_cpu_s']:12.1f} {r['rss_mb']:8.0f} "
                      f"{r['duplicates']:12.0f}")
            ours, plain = results["ours (billion, frontier)"], results["plain Scrapy"]
            print(f"  ours vs plain Scrapy: x{ours['pages_per_cpu_s'] / plain['pages_per_cpu_s']:.1f} pages per CPU "
                  f"second (x{(ours['cpu_per_1000']) and plain['cpu_per_1000'] / (ours['cpu_per_1000'] + ours['redis_cpu_per_1000']):.1f} "
                  f"counting Redis's CPU), x{ours['pages_s'] / plain['pages_s']:.1f} pages/s")
        finally:
            web.stop()
            redis.stop()


if __name__ == "__main__":
    main()
