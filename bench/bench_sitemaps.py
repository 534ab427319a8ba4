"""Sitemap parse throughput (crawler.sitemaps), in this process, no I/O.

A 50,000-URL urlset (each URL with lastmod, changefreq and priority), plain
and gzip, fed in 64 KiB chunks as a download would arrive, every ``feed`` call
doing its bounded step. Printed per body: URLs/s, MB/s of content (and of the
body as downloaded), calls, and the worst CPU time of one call.

    python bench/bench_sitemaps.py [--urls 50000] [--repeat 5]

``--crawl``: the sitemaps in a real crawl instead (``scrapy crawl billion``,
real Redis, the test web): evil.test's hostile sitemaps (two gzip bombs of
``--bomb-mib`` MiB decompressed, one a gzip file, one sent as
Content-Encoding; loops, XXE, a cut gzip), big.test's 60,000 URLs and
maps.test's sitemap-only site, while ``--domains`` ordinary domains are
crawled beside them. Printed: the crawl process's peak RSS, the worst
event-loop stall (``crawler/extensions/looplag.py``), stalls over 100 ms,
and the sitemap stats.

    python bench/bench_sitemaps.py --crawl [--bomb-mib 1024] [--domains 20]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawler.sitemaps import SitemapParser  # noqa: E402

CHUNK = 65_536


def urlset(n: int) -> bytes:
    rows = b"".join(
        b"<url><loc>https://www.example.com/section/%d/article-%d.html</loc>"
        b"<lastmod>2024-05-06T07:08:09+00:00</lastmod><changefreq>weekly</changefreq>"
        b"<priority>0.%d</priority></url>\n" % (i % 97, i, i % 10)
        for i in range(n)
    )
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n' + rows + b"</urlset>\n"
    )


def run(body: bytes) -> tuple[int, float, float, int, int]:
    """(entries, wall seconds, worst CPU seconds of a call, calls, content bytes)."""
    parser = SitemapParser()
    entries = calls = 0
    worst = 0.0
    start = time.perf_counter()

    def step(data: bytes | None) -> None:
        nonlocal entries, calls, worst
        t = time.process_time()
        entries += len(parser.close() if data is None else parser.feed(data))
        worst = max(worst, time.process_time() - t)
        calls += 1

    for i in range(0, len(body), CHUNK):
        step(body[i : i + CHUNK])
        while parser.pending:
            step(b"")
    while not parser.done:
        step(None)
    wall = time.perf_counter() - start
    assert parser.error is None and not parser.truncated, (parser.error, parser.truncated)
    return entries, wall, worst, calls, parser.content_bytes


def crawl(args: argparse.Namespace) -> None:
    import json
    import os
    import subprocess
    import tempfile

    from devkit.testweb.config import WebConfig
    from devkit.testweb.control import TestWebProcess
    from tests.servers import ROOT, RedisServer, scrapy_env

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        redis = RedisServer(tmp / "redis").start()
        web = TestWebProcess(WebConfig(domains=args.domains, pages=40, size_fixed=20_000, crawl_delay_share=0,
                                       sitemaps=True, sitemap_bomb_mib=args.bomb_mib)).start()
        try:
            seeds = tmp / "seeds.txt"
            hosts = ["evil.test", "big.test", "maps.test", *web.domains]
            seeds.write_text("".join(f"{web.url(h)}\n" for h in hosts))
            stats_file = tmp / "stats.json"
            cmd = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}",
                   "-s", f"CRAWLER_DOMAIN_DELAY={args.delay}", "-s", "CRAWLER_PROGRESS_INTERVAL=0",
                   "-s", f"CRAWLER_WARC_DIR={tmp / 'warc'}", "-s", f"CRAWLER_STATS_FILE={stats_file}",
                   "-s", "CRAWLER_LOOP_PROBE_INTERVAL=0.01"]
            env = scrapy_env(redis.url, CRAWLER_CONTACT="ops@example.org")
            env.update({k: v for k, v in os.environ.items() if k.startswith("PYTHONASYNCIO")})  # debug: slow callbacks named
            started = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
            assert proc.stderr is not None
            err = proc.stderr.read()
            _, status, usage = os.wait4(proc.pid, 0)
            for line in err.splitlines():
                if "Executing <" in line and " took " in line:
                    print("slow:", line[-300:])
            if status != 0:
                print(err[-3000:])
                raise SystemExit("the crawl failed")
            stats = json.loads(stats_file.read_text())
            elapsed = time.perf_counter() - started
        finally:
            web.stop()
            redis.stop()
    pages = stats.get("response_received_count", 0)
    print(f"crawl of {len(hosts)} sites ({args.domains} ordinary domains beside the sitemap sites), two "
          f"{args.bomb_mib} MiB gzip bombs: {pages} responses in {elapsed:.1f} s")
    print(f"peak RSS {usage.ru_maxrss / 1024:.0f} MB; worst event-loop stall "
          f"{stats.get('crawler/loop/lag_max_ms', 0):.1f} ms; stalls over 100 ms: {stats.get('crawler/loop/stalls', 0)}; "
          f"bytes received {stats.get('downloader/response_bytes', 0) / 2**20:.1f} MiB")
    print("sitemaps: " + ", ".join(f"{k.split('/', 2)[2]} {v}" for k, v in sorted(stats.items())
                                   if k.startswith("crawler/sitemaps/")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--urls", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5, help="runs per body; the best is printed")
    ap.add_argument("--crawl", action="store_true", help="the hostile sitemaps in a real crawl (see above)")
    ap.add_argument("--bomb-mib", type=int, default=1024)
    ap.add_argument("--domains", type=int, default=20)
    ap.add_argument("--delay", type=float, default=0.2)
    args = ap.parse_args()
    if args.crawl:
        crawl(args)
        return
    plain = urlset(args.urls)
    bodies = {"plain": plain, "gzip": gzip.compress(plain, compresslevel=6)}
    print(f"{'body':6} {'size':>10} {'URLs':>7} {'URLs/s':>10} {'content MB/s':>13} {'body MB/s':>10} {'calls':>6} {'worst call':>11}")
    for name, body in bodies.items():
        results = [run(body) for _ in range(args.repeat)]
        entries, wall, _, calls, content = min(results, key=lambda r: r[1])
        worst = max(r[2] for r in results)
        print(
            f"{name:6} {len(body):>10,} {entries:>7,} {entries / wall:>10,.0f} {content / wall / 1e6:>13.1f} "
            f"{len(body) / wall / 1e6:>10.1f} {calls:>6} {worst * 1000:>8.1f} ms"
        )


if __name__ == "__main__":
    main()
