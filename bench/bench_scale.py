"""Scale checks of issue 7, printed, never asserted:

1. two crawl processes of one shard against one: pages/s of the whole crawl
   of the local test web (billion spider, politeness delay 0);
2. a hot domain linking to millions of new URLs: Redis memory before and
   after, with the per-domain queue cap (CRAWLER_DOMAIN_QUEUE_CAP).

    python bench/bench_scale.py [--domains 50] [--pages 100] [--hot-urls 2000000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crawler.scheduler import codec  # noqa: E402
from crawler.scheduler.frontier import Frontier, Item  # noqa: E402
from crawler.scheduler.keys import Keys  # noqa: E402
from crawler.testweb.config import WebConfig  # noqa: E402
from crawler.testweb.control import TestWebProcess  # noqa: E402
from tests.servers import RedisServer  # noqa: E402


def crawl(workers: int, web: TestWebProcess, redis: RedisServer, seeds: Path) -> float:
    redis.client().flushall()
    before = len(web.log())
    env = dict(os.environ, PYTHONPATH=str(ROOT), REDIS_URL=redis.url, CRAWLER_CONTACT="bench@example.org")
    cmd = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}", "-s", "LOG_LEVEL=WARNING",
           "-s", "CRAWLER_DOMAIN_DELAY=0", "-s", "CRAWLER_WARC_DIR=", "-s", "CRAWLER_MAX_DEPTH=0",
           "-s", "CRAWLER_PROGRESS_INTERVAL=0"]
    started = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(workers)]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit("a crawl process failed")
    elapsed = time.perf_counter() - started
    pages = len({(e.domain, e.path) for e in web.log(since=before) if e.path != "/robots.txt"})
    return pages / elapsed


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
    parser.add_argument("--domains", type=int, default=50)
    parser.add_argument("--pages", type=int, default=100)
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
            one = crawl(1, web, redis, seeds)
            two = crawl(2, web, redis, seeds)
            print(f"  1 process : {one:7.1f} pages/s")
            print(f"  2 processes: {two:7.1f} pages/s  (x{two / one:.2f})")
            hot_domain(redis, args.hot_urls, args.cap)
        finally:
            web.stop()
            redis.stop()


if __name__ == "__main__":
    main()
