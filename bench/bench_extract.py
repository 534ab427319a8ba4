"""Link extraction on real pages (``../shared/corpus``, bodies cut at 250 KB),
on one core: ours (Lexbor; plain hrefs joined by string work, the rest by
ada; canonical URLs), Scrapy's LinkExtractor, and Lexbor parsing alone as the
ceiling.

    python bench/bench_extract.py [--rounds 5] [--corpus ../shared/corpus]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scrapy.http import HtmlResponse  # noqa: E402
from scrapy.linkextractors import LinkExtractor as ScrapyLinkExtractor  # noqa: E402
from selectolax.lexbor import LexborHTMLParser  # noqa: E402

from crawler.links import LinkExtractor  # noqa: E402


def page_url(name: str) -> str:
    """Where the page lives: ``alloc__rc__struct.Rc.html`` -> ``.../alloc/rc/struct.Rc.html``,
    so that its relative links resolve as they do on the real site."""
    return "https://doc.rust-lang.org/" + "/".join(name.split("__"))


def measure(name: str, pages: list[tuple[str, bytes]], fn: Callable[[str, bytes], int], rounds: int) -> float:
    fn(*pages[0])  # warm up
    best = float("inf")
    links = 0
    for _ in range(rounds):
        started = time.perf_counter()
        links = sum(fn(url, body) for url, body in pages)
        best = min(best, time.perf_counter() - started)
    size = sum(len(body) for _, body in pages)
    rate = len(pages) / best
    print(f"  {name:34s} {rate:8.0f} pages/s {size / best / 1e6:7.1f} MB/s   {links / len(pages):6.1f} links/page")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parent.parent.parent / "shared" / "corpus")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    pages = [(page_url(p.name), p.read_bytes()[:250_000]) for p in sorted(args.corpus.glob("*.html"))]
    if not pages:
        sys.exit(f"no .html pages in {args.corpus}")
    mean_kb = sum(len(b) for _, b in pages) / len(pages) / 1000
    print(f"link extraction, {len(pages)} pages (mean {mean_kb:.0f} KB after the 250 KB cut), one core, best of {args.rounds}")
    ours = LinkExtractor()
    scrapy_le = ScrapyLinkExtractor()
    ceiling = measure("Lexbor parse only (ceiling)", pages, lambda u, b: len(LexborHTMLParser(b).tags("a")), args.rounds)
    fast = measure("ours: Lexbor + string join|ada + canon.", pages, lambda u, b: len(ours(b, u)), args.rounds)
    slow = measure("Scrapy LinkExtractor", pages,
                   lambda u, b: len(scrapy_le.extract_links(HtmlResponse(u, body=b, encoding="utf-8"))),
                   max(1, args.rounds // 2))
    print(f"  ours vs Scrapy's LinkExtractor: x{fast / slow:.1f}; ours at {fast / ceiling:.0%} of the parse ceiling")
    print("  (the 2025 billion-page crawl's parser: 160 pages/s per process)")


if __name__ == "__main__":
    main()
