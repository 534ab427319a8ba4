"""Sitemap parse throughput (crawler.sitemaps), in this process, no I/O.

A 50,000-URL urlset (each URL with lastmod, changefreq and priority), plain
and gzip, fed in 64 KiB chunks as a download would arrive, every ``feed`` call
doing its bounded step. Printed per body: URLs/s, MB/s of content (and of the
body as downloaded), calls, and the worst CPU time of one call.

    python bench/bench_sitemaps.py [--urls 50000] [--repeat 5]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--urls", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5, help="runs per body; the best is printed")
    args = ap.parse_args()
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
