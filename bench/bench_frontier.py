"""The frontier against scrapy-redis, in one run, on one redis-server.

Prints, for scrapy-redis's scheduler (RFPDupeFilter + PriorityQueue, its
defaults) and ours (Request path and bulk-URL path):
  - URLs/s enqueued (links offered, duplicates included) and dequeued;
  - Redis round trips (client writes) and commands (server commandstats)
    per discovered URL and per fetched page;
  - bytes of Redis memory per seen URL at 1 million URLs: our exact mode,
    our Bloom mode (0.1%), and scrapy-redis's dupefilter layout.

    python bench/bench_frontier.py [--pages 2000] [--links 60] [--memory-urls 1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
import redis.connection  # noqa: E402
from scrapy import Request, Spider  # noqa: E402
from scrapy.utils.test import get_crawler  # noqa: E402

from crawler.store import Dedup, Frontier, Item  # noqa: E402
from crawler.store import Keys  # noqa: E402
from tests.servers import RedisServer  # noqa: E402

ROUND_TRIPS = 0
_send = redis.connection.AbstractConnection.send_packed_command


def _counting_send(self, command, check_health=True):  # type: ignore[no-untyped-def]
    global ROUND_TRIPS
    ROUND_TRIPS += 1
    return _send(self, command, check_health)


redis.connection.AbstractConnection.send_packed_command = _counting_send  # type: ignore[method-assign]


class BenchSpider(Spider):
    name = "bench"


def commands(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_multi", "cmdstat_exec"))


def links_of(page: int, links: int, domains: int, universe: int) -> list[str]:
    """Deterministic links: about half of them point at pages seen before."""
    out = []
    for i in range(links):
        h = int.from_bytes(hashlib.blake2b(b"%d:%d" % (page, i), digest_size=8).digest(), "big")
        target = h % universe
        suffix = "?utm_source=feed" if i % 10 == 0 else ""
        out.append(f"http://d{target % domains}.test/p/{target // domains}.html{suffix}")
    return out


def run_scheduler(kind: str, url: str, pages: int, links: int, domains: int) -> dict[str, float]:
    settings = {"REDIS_URL": url, "CONCURRENT_REQUESTS": 64, "LOG_ENABLED": False}
    if kind == "scrapy-redis":
        from scrapy_redis.scheduler import Scheduler

        settings.update(SCHEDULER_PERSIST=False, DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter")
        crawler = get_crawler(BenchSpider, settings)
        scheduler = Scheduler.from_crawler(crawler)
    else:
        from crawler.scheduler import FrontierScheduler

        settings.update(REQUEST_FINGERPRINTER_CLASS="crawler.scheduler.Fingerprinter",
                        CRAWLER_ENQUEUE_BATCH=1000)
        crawler = get_crawler(BenchSpider, settings)
        scheduler = FrontierScheduler.from_crawler(crawler)
    spider = BenchSpider.from_crawler(crawler)
    scheduler.open(spider)
    client = redis.Redis.from_url(url)
    universe = domains * 1000
    all_links = [links_of(p, links, domains, universe) for p in range(pages)]

    rt0, cmd0, t0 = ROUND_TRIPS, commands(client), time.perf_counter()
    offered = 0
    for page_links in all_links:
        if kind == "ours (bulk URLs)":
            offered += scheduler.session.offer(page_links, depth=1)
        else:
            for link in page_links:
                scheduler.enqueue_request(Request(link))
                offered += 1
        if kind != "scrapy-redis":
            scheduler.session.flush()  # what the end of a page's output does
    t1 = time.perf_counter()
    rt1, cmd1 = ROUND_TRIPS, commands(client)

    fetched = 0
    while True:
        request = scheduler.next_request()
        if request is None:
            break
        fetched += 1
        if kind != "scrapy-redis":
            scheduler.session.lease_of(request).ack()  # type: ignore[union-attr]
    if kind != "scrapy-redis":
        scheduler.session.flush()
    t2 = time.perf_counter()
    rt2, cmd2 = ROUND_TRIPS, commands(client)
    if kind != "scrapy-redis":
        scheduler.session._flusher.stop()  # type: ignore[union-attr]
    scheduler.close("finished")
    client.flushall()
    return {
        "enqueue_per_s": offered / (t1 - t0),
        "dequeue_per_s": fetched / (t2 - t1),
        "offered": offered,
        "fetched": fetched,
        "rt_per_url": (rt1 - rt0) / offered,
        "cmd_per_url": (cmd1 - cmd0) / offered,
        "rt_per_page": (rt2 - rt1) / max(fetched, 1),
        "cmd_per_page": (cmd2 - cmd1) / max(fetched, 1),
    }


def memory_per_url(client: redis.Redis, mode: str, n: int, capacity: int | None = None) -> float:
    """Bytes of the dedup structures (``MEMORY USAGE``, all samples) per URL.

    ``used_memory`` deltas would also count client query buffers of the
    batches, which Redis frees lazily.
    """
    client.flushall()
    digests = (hashlib.sha256(b"http://d%d.test/p/%d.html" % (i % 1000, i)).digest() for i in range(n))
    if mode == "scrapy-redis":
        batch: list[str] = []
        for i, _ in enumerate(range(n)):
            batch.append(hashlib.sha1(b"%d" % i).hexdigest())  # its RFPDupeFilter: SET of 40-char hex
            if len(batch) == 10_000:
                client.sadd("bench:dupefilter", *batch)
                batch = []
        if batch:
            client.sadd("bench:dupefilter", *batch)
    else:
        frontier = Frontier(client, Keys("bench", mode, 0),
                            dedup=Dedup(mode, capacity=capacity or n, error_rate=0.001))
        frontier.open()
        chunk: list[Item] = []
        for i, digest in enumerate(digests):
            chunk.append(Item(digest, "one.test", 0, b"x"))
            if len(chunk) == 5_000:
                frontier.add(chunk)
                chunk = []
        if chunk:
            frontier.add(chunk)
    pattern = "bench:dupefilter" if mode == "scrapy-redis" else (
        "bench:{%s:0}:%s*" % (mode, "seen:" if mode == "exact" else "bloom"))
    used = sum(client.memory_usage(key, samples=0) or 0 for key in client.scan_iter(match=pattern, count=1000))
    client.flushall()
    return used / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--links", type=int, default=60)
    parser.add_argument("--domains", type=int, default=100)
    parser.add_argument("--memory-urls", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp)).start()
        try:
            print(f"frontier benchmark: {args.pages} pages x {args.links} links over "
                  f"{args.domains} domains, one redis-server on loopback, pid {os.getpid()}")
            print(f"{'scheduler':20s} {'enqueue URL/s':>13s} {'dequeue URL/s':>13s} "
                  f"{'RT/URL':>7s} {'cmd/URL':>8s} {'RT/page':>8s} {'cmd/page':>9s}")
            results = {}
            for kind in ("scrapy-redis", "ours (Requests)", "ours (bulk URLs)"):
                r = run_scheduler(kind, server.url, args.pages, args.links, args.domains)
                results[kind] = r
                print(f"{kind:20s} {r['enqueue_per_s']:13.0f} {r['dequeue_per_s']:13.0f} "
                      f"{r['rt_per_url']:7.3f} {r['cmd_per_url']:8.3f} {r['rt_per_page']:8.3f} "
                      f"{r['cmd_per_page']:9.3f}   ({r['fetched']} unique of {r['offered']} offered)")
            base = results["scrapy-redis"]
            for kind in ("ours (Requests)", "ours (bulk URLs)"):
                r = results[kind]
                print(f"  {kind} vs scrapy-redis: enqueue x{r['enqueue_per_s'] / base['enqueue_per_s']:.1f}, "
                      f"dequeue x{r['dequeue_per_s'] / base['dequeue_per_s']:.1f}")
            client = server.client()
            print(f"\nRedis memory per seen URL at {args.memory_urls:,} URLs")
            for mode, capacity, label in (
                ("scrapy-redis", None, "scrapy-redis dupefilter (SET of hex SHA-1)"),
                ("exact", None, "ours, exact, capacity = URLs"),
                ("exact", 10_000_000, "ours, exact, default capacity (10M)"),
                ("bloom", None, "ours, Bloom 0.1% (compound), capacity = URLs"),
            ):
                per_url = memory_per_url(client, mode, args.memory_urls, capacity)
                print(f"  {label:48s} {per_url:6.1f} bytes")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
