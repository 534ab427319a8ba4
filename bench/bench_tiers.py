"""The compact tier at scale (#50): Redis memory per queued URL, enqueue and
dequeue rates, with the tier (a head of ``--head`` requests per domain, the
rest in zlib blocks of ``--block``) against without it (``--head 0``: every
request kept as it is, the frontier before the tier), printed, never asserted.

    python bench/bench_tiers.py [--urls 1000000 10000000] [--per-domain 1000]
        [--dedup bloom|exact] [--head 16] [--block 64] [--drain 200000]

For each size: a fresh redis-server (no persistence), the URLs enqueued
through the frontier's own script (``Frontier.add``: a page's links, 50 of
one domain per call, domains taken round-robin, as a crawl finds them),
the tier's jobs run by the frontier's own worker code between calls as a
worker's timer does (``CompactTier.run``); then ``used_memory`` against the
empty frontier's, per URL; then ``--drain`` requests dequeued and
acknowledged (``take`` of 128, the tier's jobs between takes), the
dequeue rate two ways: *polite* (a 1 ms delay: one request a domain a turn,
as a crawl with a delay is served) and *greedy* (no delay: a take empties a
domain's head at once, the tier's worst case), with Redis's CPU per
request (``INFO cpu``). The URLs: real paths (the links of the Rust documentation
pages in ``../shared/corpus``, when that folder is there, re-hosted on each
domain), else generated ones (labelled so); their mean length is printed.
Bloom dedup (the one a crawl of this size would run: 1.2 B per URL at 1 %)
is in the memory; its share is printed apart. 100 million URLs are
projected from the 1M and 10M runs (linear per URL at a fixed number per
domain): this machine holds them, but a run takes hours.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crawler.store import Dedup, Frontier, Item, Keys, Politeness  # noqa: E402
from tests.servers import RedisServer  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
LINKS_PER_CALL = 50


def real_paths(limit: int = 50_000) -> list[str]:
    """Paths and queries of the links of the corpus pages (their own site's), deduplicated."""
    from selectolax.lexbor import LexborHTMLParser

    paths: dict[str, None] = {}
    for page in sorted(CORPUS.glob("*.html")):
        base = "https://doc.rust-lang.org/" + page.stem.replace("__", "/") + ".html"
        for a in LexborHTMLParser(page.read_bytes()).css("a[href]"):
            href = a.attributes.get("href")
            if not href:
                continue
            url = urljoin(base, href).split("#", 1)[0]
            parts = urlsplit(url)
            if parts.netloc == "doc.rust-lang.org" and parts.path:
                paths[parts.path + (f"?{parts.query}" if parts.query else "")] = None
        if len(paths) >= limit:
            break
    return list(paths)


def generated_paths(n: int, rng: random.Random) -> list[str]:
    words = ["news", "sport", "world", "article", "products", "category", "tag", "blog", "2024", "2025", "page",
             "help", "docs", "user", "profile", "search", "video", "item", "store", "review", "guide", "index"]
    out = []
    for i in range(n):
        depth = rng.randint(1, 4)
        path = "/" + "/".join(rng.choice(words) for _ in range(depth)) + f"/{rng.randrange(10**6)}-{i}"
        out.append(path + (f".html?page={rng.randint(1, 30)}" if rng.random() < 0.2 else ".html"))
    return out


def memory(client) -> int:
    return int(client.info("memory")["used_memory"])


def redis_cpu(client) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def dequeue(f: Frontier, client, n: int) -> dict:
    """``n`` requests taken 128 at a time and acknowledged, the tier's jobs
    run as a worker's timer runs them (every ``CRAWLER_FLUSH_INTERVAL``,
    0.5 s: up to 4 passes of 16 jobs), and whenever a take came back short
    (a head waiting for its block): requests/s, and Redis CPU per request."""
    started, cpu = time.perf_counter(), redis_cpu(client)
    taken, tick = 0, time.perf_counter()
    while taken < n:
        got = f.take(128)
        taken += len(got.items)
        f.add([], acks=[x.lease for x in got.items])
        if len(got.items) < 128 or time.perf_counter() - tick >= 0.5:
            tick = time.perf_counter()
            for _ in range(4):
                if f.tiers.run(16).jobs < 16:
                    break
        if not got.items and not f.tiers.run(64).jobs and not client.zcard(f.keys.key("tiers")):
            break
    elapsed = time.perf_counter() - started
    return {"rate": taken / elapsed, "cpu_us": (redis_cpu(client) - cpu) / max(taken, 1) * 1e6}


def run(urls: int, per_domain: int, head: int, block: int, dedup: str, paths: list[str], drain: int) -> dict:
    domains = max(1, urls // per_domain)
    server = RedisServer(Path(f"/tmp/bench-tiers-{head}-{urls}"), "--save", "", "--appendonly", "no").start()
    try:
        client = server.client()
        f = Frontier(client, Keys("bench", "tiers", 0), dedup=Dedup(dedup, capacity=urls, error_rate=0.01),
                     politeness=Politeness(delay=0), domain_cap=head, block=block)
        f.open()
        f.tiers.run()  # the scripts loaded
        empty = memory(client)
        enqueue_cpu = redis_cpu(client)
        started = time.perf_counter()
        tier_s = 0.0
        sent = 0
        calls = 0
        offsets = [0] * domains
        rounds = (per_domain + LINKS_PER_CALL - 1) // LINKS_PER_CALL
        for r in range(rounds):
            for d in range(domains):
                name = f"site{d}.example"
                n = min(LINKS_PER_CALL, per_domain - offsets[d])
                items = []
                for k in range(offsets[d], offsets[d] + n):
                    url = f"https://www.{name}{paths[(k * 7919 + d) % len(paths)]}"
                    if k >= len(paths):
                        url += f"{'&' if '?' in url else '?'}n={k}"
                    entry = b"U1 " + url.encode()
                    items.append(Item(hashlib.sha256(entry).digest(), name, 0, entry))
                offsets[d] += n
                f.add(items)
                sent += n
                calls += 1
                if calls % 8 == 0:  # a worker's timer: the jobs due, a few passes (8 pages' links a tick)
                    t = time.perf_counter()
                    while f.tiers.run(16).jobs == 16:
                        pass
                    tier_s += time.perf_counter() - t
            if (r + 1) % 5 == 0:
                print(f"    {sent:,} / {urls:,} offered", flush=True)
        t = time.perf_counter()
        while f.tiers.run(64).jobs:
            pass
        tier_s += time.perf_counter() - t
        enqueue_s = time.perf_counter() - started
        enqueue_cpu = redis_cpu(client) - enqueue_cpu
        used = memory(client) - empty
        bloom = sum(int(client.strlen(k)) for k in client.scan_iter(match=f.keys.key("bloom", "*")))
        counters = {k.decode(): int(v) for k, v in client.hgetall(f.keys.stats).items()}
        queued = counters["queued"]  # the offered, less the Bloom filter's false positives
        assert queued == counters["enqueued"] and queued + counters.get("duplicates", 0) == urls, counters
        # dequeue: take, acknowledge, the tier's jobs between takes; two ways
        greedy = dequeue(f, client, drain // 2)
        f.politeness = Politeness(delay=0.001)  # one request a domain a turn, as a polite crawl
        f.open()
        polite = dequeue(f, client, drain // 2)
        return {"urls": urls, "domains": domains, "head": head, "used": used, "bloom": bloom,
                "per_url": used / queued, "per_url_no_dedup": (used - bloom) / queued if dedup == "bloom" else None,
                "enqueue_rate": urls / enqueue_s, "tier_share": tier_s / enqueue_s,
                "greedy": greedy, "polite": polite, "enqueue_cpu_us": enqueue_cpu / queued * 1e6,
                "compact": counters.get("compact", 0),
                "spill": counters.get("spill", 0), "compact_bytes": counters.get("compact_bytes", 0)}
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--urls", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--per-domain", type=int, default=1000)
    p.add_argument("--head", type=int, default=16)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--dedup", choices=["bloom", "exact"], default="bloom")
    p.add_argument("--drain", type=int, default=200_000, help="requests dequeued for the dequeue rate")
    args = p.parse_args()
    if CORPUS.is_dir():
        paths, origin = real_paths(), f"real paths of {CORPUS}"
    else:
        paths, origin = generated_paths(20_000, random.Random(1)), "GENERATED paths (no corpus found)"
    mean = sum(len("https://www.site123.example") + len(x) for x in paths) / len(paths)
    print(f"URLs: {origin}; {len(paths):,} distinct, mean URL {mean:.0f} B; {args.per_domain:,} per domain; "
          f"dedup {args.dedup}")
    rows = []
    for urls in args.urls:
        for head in (0, args.head):
            label = "without the tier (head 0)" if head == 0 else f"tier: head {head}, block {args.block}"
            print(f"  {urls:,} URLs, {label}:", flush=True)
            r = run(urls, args.per_domain, head, args.block, args.dedup, paths, min(args.drain, urls))
            rows.append(r)
            print(f"    Redis {r['used'] / 2**20:,.0f} MiB = {r['per_url']:.1f} B per URL"
                  + (f" ({r['per_url_no_dedup']:.1f} B without the Bloom filter's {r['bloom'] / 2**20:,.0f} MiB)"
                     if r["per_url_no_dedup"] is not None else "")
                  + f"; enqueue {r['enqueue_rate']:,.0f} URLs/s (tier jobs {r['tier_share']:.0%} of it; Redis "
                  f"{r['enqueue_cpu_us']:.1f} us a URL), dequeue and acknowledge: polite "
                  f"{r['polite']['rate']:,.0f}/s (Redis {r['polite']['cpu_us']:.1f} us each), greedy "
                  f"{r['greedy']['rate']:,.0f}/s (Redis {r['greedy']['cpu_us']:.1f} us); compact {r['compact']:,} "
                  f"({r['compact_bytes'] / max(r['compact'], 1):.1f} B each), spill {r['spill']:,}", flush=True)
    print("\nsummary (ratios within one run):")
    for urls in args.urls:
        off, on = [r for r in rows if r["urls"] == urls]
        print(f"  {urls:>11,} URLs: memory {on['per_url']:.1f} / {off['per_url']:.1f} B per URL "
              f"({on['used'] / off['used']:.2f}x); enqueue rate {on['enqueue_rate'] / off['enqueue_rate']:.2f}x, "
              f"dequeue rate polite {on['polite']['rate'] / off['polite']['rate']:.2f}x, "
              f"greedy {on['greedy']['rate'] / off['greedy']['rate']:.2f}x")
    big = max(args.urls)
    on = [r for r in rows if r["urls"] == big and r["head"] > 0][0]
    off = [r for r in rows if r["urls"] == big and r["head"] == 0][0]
    print(f"  projected to 100,000,000 URLs over {100_000_000 // args.per_domain:,} domains: "
          f"{on['per_url'] * 1e8 / 2**30:.2f} GiB with the tier, {off['per_url'] * 1e8 / 2**30:.2f} GiB without "
          f"(from the {big:,} run, linear per URL)")


if __name__ == "__main__":
    main()
