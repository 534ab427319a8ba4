"""Scale checks of issue 7, printed, never asserted:

1. two crawl processes of one shard against one: pages/s of the whole crawl
   of the local test web (billion spider, politeness delay 0);
2. a hot domain linking to millions of new URLs: Redis memory before and
   after, with the per-domain queue cap (CRAWLER_DOMAIN_QUEUE_CAP).

    python bench/bench_scale.py [--domains 100] [--pages 150] [--hot-urls 2000000]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crawler.store import codec  # noqa: E402
from crawler.store import Frontier, Item  # noqa: E402
from crawler.store import Keys  # noqa: E402
from devkit.testweb.config import WebConfig  # noqa: E402
from devkit.testweb.control import TestWebProcess  # noqa: E402
from tests.servers import RedisServer, cpu_seconds  # noqa: E402


def warm(web: TestWebProcess, domains: int, pages: int) -> None:
    """Fetch every page once, so that both crawls find the test web's page
    cache equally warm (else the second crawl is served more cheaply)."""
    if domains * pages > 20_000:
        print("  (more pages than the test web caches: the warm-up cannot even the runs)")
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
    for d in range(domains):
        host = f"{web.config.domain(d)}:{web.port}"
        for k in range(pages):
            conn.request("GET", f"/p/{k}.html", headers={"Host": host})
            conn.getresponse().read()
    conn.close()


def crawl(workers: int, web: TestWebProcess, redis: RedisServer, seeds: Path) -> tuple[float, float]:
    """Pages/s over the wall-clock time of the processes (start-up and idle
    close included) and over the crawling window (first to last fetch, on
    the test web's clock); prints where the CPU went."""
    redis.client().flushall()
    before = len(web.log())
    env = dict(os.environ, PYTHONPATH=str(ROOT), REDIS_URL=redis.url, CRAWLER_CONTACT="bench@example.org",
               SCRAPY_SETTINGS_MODULE="devkit.settings")
    cmd = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}", "-s", "LOG_LEVEL=WARNING",
           "-s", "CRAWLER_DOMAIN_DELAY=0", "-s", "CRAWLER_WARC_DIR=", "-s", "CRAWLER_MAX_DEPTH=0",
           "-s", "CRAWLER_PROGRESS_INTERVAL=0"]
    shared = {"test web": web.proc.pid, "Redis": redis.proc.pid}  # type: ignore[union-attr]
    shared_before = {name: cpu_seconds(pid) for name, pid in shared.items()}
    children_before = os.times()
    started = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(workers)]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit("a crawl process failed")
    elapsed = time.perf_counter() - started
    children = os.times()
    cpu = {"crawlers": children.children_user + children.children_system
           - children_before.children_user - children_before.children_system}
    cpu.update({name: cpu_seconds(pid) - shared_before[name] for name, pid in shared.items()})
    fetches = [e for e in web.log(since=before) if e.path != "/robots.txt"]
    pages = len({(e.domain, e.path) for e in fetches})
    window = (max(e.ms for e in fetches) - min(e.ms for e in fetches)) / 1000
    print(f"  {workers} process{'es' if workers > 1 else ''}: {pages:,} pages; CPU s per 1,000 pages: "
          + ", ".join(f"{name} {seconds / pages * 1000:.2f}" for name, seconds in cpu.items()))
    return pages / elapsed, pages / window


def hot_domain(redis: RedisServer, urls: int, cap: int) -> None:
    client = redis.client()
    client.flushall()
    frontier = Frontier(client, Keys("bench", "hot", 0), domain_cap=cap)
    frontier.open()
    base = client.info("memory")["used_memory"]
    print(f"hot domain: {urls:,} new URLs of one domain, CRAWLER_DOMAIN_QUEUE_CAP={cap:,}")
    print(f"  {'URLs offered':>14s} {'queued':>9s} {'capped':>10s} {'Redis memory':>14s}")
    offered, batch = 0, 5000
    checkpoints = {cap // 2, cap, urls // 4, urls // 2, urls}
    while offered < urls:
        items = []
        for i in range(offered, offered + batch):
            url = f"http://hot.example/item/{i}"
            items.append(Item(hashlib.sha256(url.encode()).digest(), "hot.example", 0, codec.encode_url(url, 1)))
        frontier.add(items)
        offered += batch
        if any(offered >= c > offered - batch for c in checkpoints):
            status = frontier.status()
            used = client.info("memory")["used_memory"] - base
            print(f"  {offered:14,d} {status['queued']:9,d} {status['counters'].get('capped', 0):10,d} "
                  f"{used / 2**20:11.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--domains", type=int, default=100)
    parser.add_argument("--pages", type=int, default=150)
    parser.add_argument("--hot-urls", type=int, default=2_000_000)
    parser.add_argument("--cap", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer(Path(tmp) / "redis").start()
        web = TestWebProcess(WebConfig(domains=args.domains, pages=args.pages, private_share=0,
                                       crawl_delay_share=0)).start()
        try:
            seeds = Path(tmp) / "seeds.txt"
            seeds.write_text("".join(f"{web.url(d)}\n" for d in range(args.domains)))
            print(f"one shard, {args.domains} domains x {args.pages} pages, delay 0, on {os.cpu_count()} cores "
                  "(test web and Redis included)")
            warm(web, args.domains, args.pages)
            one = crawl(1, web, redis, seeds)
            two = crawl(2, web, redis, seeds)
            print(f"  {'':12s} {'wall clock':>20s} {'crawling window':>24s}")
            print(f"  1 process  {one[0]:10.1f} pages/s {'':8s} {one[1]:10.1f} pages/s")
            print(f"  2 processes{two[0]:10.1f} pages/s (x{two[0] / one[0]:.2f}) {two[1]:10.1f} pages/s "
                  f"(x{two[1] / one[1]:.2f})")
            hot_domain(redis, args.hot_urls, args.cap)
        finally:
            web.stop()
            redis.stop()


if __name__ == "__main__":
    main()
