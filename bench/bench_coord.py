"""How many pages one Redis core coordinates (#50 item 5): the frontier's
page cycle driven as fast as this machine can, Redis CPU per page printed,
never asserted.

    python bench/bench_coord.py [--domains 10000] [--seconds 30] [--links 50]
        [--new 0.2] [--dedup exact|bloom] [--clients 2]

The cycle of one page, as a crawl process makes it: its request is leased
by a ``take`` of 128 (``dequeue.lua``), and its links go back with its
acknowledgement in one ``add`` (``enqueue.lua``: the acknowledgement, then
dedup and the push of each link). ``--links`` links a page, ``--new`` of
them new (the rest already seen: a site's menu), all of the page's own
domain; domains with a delay of 1 ms (one request a domain a turn, as a
polite crawl is served) and the compact tier on (the default head and
block). ``--clients`` processes drive it (each one take, its acks and
links, in turn). The job users run (``bench_openweb.py``) sends about 6
new URLs a page to Redis and next to no duplicates (its process's memory
of links catches them): ``--links 6 --new 1`` is its load, the defaults a
heavier one. Redis's CPU (``INFO cpu``, user + system) over the pages
is the figure: 1 / (CPU per page) is the most pages a second one Redis core
can coordinate. What it leaves out, each said where it is measured: per-
address politeness and names (``CRAWLER_IP_DELAY``, on in billion),
robots.txt records, history writes (recrawl off), the inbox of other
shards; ``bench_openweb.py`` prints the Redis CPU per page of the whole
job users run.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crawler.store import Dedup, Frontier, Item, Keys, Politeness  # noqa: E402
from tests.servers import RedisServer  # noqa: E402


def frontier(url: str, dedup: str, capacity: int, order: str = "due", within: str = "fifo") -> Frontier:
    import redis

    f = Frontier(redis.Redis.from_url(url), Keys("bench", "coord", 0),
                 dedup=Dedup(dedup, capacity=capacity, error_rate=0.01), politeness=Politeness(delay=0.001),
                 domain_cap=16, block=64, order=order, within=within)
    f.open()
    return f


def link(domain: str, n: int) -> Item:
    entry = b"U1 https://www.%s/articles/%d/some-title-of-a-page.html" % (domain.encode(), n)
    return Item(hashlib.sha256(entry).digest(), domain, 0, entry)


def drive(url: str, dedup: str, capacity: int, seconds: float, links: int, new: float, me: int,
          out: multiprocessing.Queue, order: str, take: int, within: str) -> None:
    f = frontier(url, dedup, capacity, order, within)
    fresh = int(links * new)
    pages, counter = 0, 10**9 * (me + 1)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        taken = f.take(take)
        items: list[Item] = []
        for x in taken.items:
            for k in range(links - fresh):  # already seen: the first links of its domain
                items.append(link(x.domain, k))
            for _ in range(fresh):
                counter += 1
                items.append(link(x.domain, counter))
        f.add(items, acks=[x.lease for x in taken.items])
        pages += len(taken.items)
        f.tiers.run(16)
    out.put(pages)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--domains", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--links", type=int, default=50)
    p.add_argument("--new", type=float, default=0.2)
    p.add_argument("--dedup", choices=["exact", "bloom"], default="exact")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--order", choices=["due", "rank"], default="due",
                   help="CRAWLER_DOMAIN_ORDER (rank: the weights are the domains linking, none here)")
    p.add_argument("--take", type=int, default=128,
                   help="requests a take asks for (a crawl's take is what its free slots allow: a few at a "
                        "politeness-bound rate, where each call's own cost is shared by few pages)")
    p.add_argument("--within", choices=["fifo", "inlinks"], default="fifo",
                   help="CRAWLER_WITHIN_ORDER (inlinks: positions given and counted; no promotions here)")
    args = p.parse_args()
    server = RedisServer(Path("/tmp/bench-coord"), "--save", "", "--appendonly", "no").start()
    try:
        capacity = args.domains * 200 + int(args.seconds * 20_000 * args.links * args.new)
        f = frontier(server.url, args.dedup, capacity, args.order, args.within)
        for start in range(0, args.domains, 1000):  # every domain seeded with its first links, already seen
            f.add([link(f"site{d}.example", k) for d in range(start, min(start + 1000, args.domains))
                   for k in range(args.links)])
        client = f.client
        cpu0 = client.info("cpu")
        calls0 = client.info("commandstats")
        out: multiprocessing.Queue = multiprocessing.Queue()
        procs = [multiprocessing.Process(target=drive, args=(server.url, args.dedup, capacity, args.seconds,
                                                              args.links, args.new, i, out, args.order, args.take,
                                                              args.within))
                 for i in range(args.clients)]
        started = time.perf_counter()
        for proc in procs:
            proc.start()
        pages = sum(out.get() for _ in procs)
        for proc in procs:
            proc.join()
        elapsed = time.perf_counter() - started
        cpu1 = client.info("cpu")
        calls1 = client.info("commandstats")
        cpu = sum(float(cpu1[k]) - float(cpu0[k]) for k in ("used_cpu_user", "used_cpu_sys"))
        system = float(cpu1["used_cpu_sys"]) - float(cpu0["used_cpu_sys"])
        per_page = cpu / pages
        print(f"{pages:,} pages in {elapsed:.1f} s ({pages / elapsed:,.0f} pages/s, {args.clients} driving "
              f"processes), {args.domains:,} domains, {args.links} links a page ({args.new:.0%} new), "
              f"dedup {args.dedup}, order {args.order}/{args.within}, takes of {args.take}")
        print(f"Redis CPU {cpu:.2f} s = {per_page * 1e3:.3f} ms a page -> one Redis core coordinates "
              f"{1 / per_page:,.0f} pages/s (Redis was {cpu / elapsed:.0%} busy, {system / cpu:.0%} of it the kernel's)")
        for name, stat in sorted(calls1.items()):
            before = calls0.get(name, {"calls": 0, "usec": 0})
            calls, usec = stat["calls"] - before["calls"], stat["usec"] - before["usec"]
            if calls:
                print(f"  {name.removeprefix('cmdstat_')}: {calls / pages:.2f} a page, {usec / pages:.1f} us a page")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
