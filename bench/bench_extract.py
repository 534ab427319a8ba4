"""Link extraction on real pages (a folder of ``.html`` files: ``--corpus DIR``
or the environment variable ``BENCH_CORPUS``; bodies cut at 250 KB),
on one core: ours (Lexbor; plain hrefs joined by string work, the rest by
ada; canonical URLs), Scrapy's LinkExtractor, and Lexbor parsing alone as the
ceiling.

Then the key function (#50 item 7): the cost per host of the politeness and
shard key (``registered_domain``, the Public Suffix List over its ICANN
section alone, as before, and over both sections, as now), a link's cost
through ``domain_of``'s cache by origin, and the one-time build of the list.

Then the hostile pages (#22 item 5): 250 KB of markup a tree builder nests
ever deeper, one construct each (the test web's nested kinds and a few
more): the time of Lexbor's parse (what a page stalled the crawl before), of
ours (the page is found risky and scanned), and the cost of the risk check
on ordinary pages (the corpus, the test web's pages).

    python bench/bench_extract.py [--rounds 5] [--corpus DIR] [--only corpus|keys|hostile]

Without a corpus the corpus part is skipped (said so), or, with ``--only
corpus``, the script exits 2.
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

from crawler import identity  # noqa: E402
from crawler._hrefscan import risky  # noqa: E402
from crawler.links import LinkExtractor  # noqa: E402
from devkit.testweb.config import WebConfig  # noqa: E402
from devkit.testweb.site import NESTED_UNITS, Site  # noqa: E402

#: constructs found quadratic in Lexbor besides the test web's, and cheap ones for contrast
MORE_UNITS = {
    "blockquote": "<blockquote>",
    "div_a": '<div><a href="/x">x</a>',
    "div_attrs": "<div a=1 b=2 c=3 d=4>",
    "a_b": '<a href="/y"><b>',
    "b_i (Noah's ark: cheap)": "<b><i>",
    "a in a (cheap)": '<a href="/z">',
    "table_tr_td (cheap)": "<table><tr><td>",
    "p (cheap)": "<p>",
}


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


def best_of(rounds: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def hostile(rounds: int, corpus: list[tuple[str, bytes]]) -> None:
    size = 250_000
    ours = LinkExtractor()
    print(f"hostile pages, {size // 1000} KB each, one core: Lexbor's parse (before) and ours (after), best of "
          f"{min(rounds, 3)}")
    worst_before = worst_after = 0.0
    for name, unit in {**NESTED_UNITS, **MORE_UNITS}.items():
        body = ("<!DOCTYPE html><html><body>" + unit * (size // len(unit)))[:size].encode()
        before = best_of(min(rounds, 3), lambda body=body: LexborHTMLParser(body))
        after = best_of(min(rounds, 3), lambda body=body: ours(body, "http://hostile.test/"))
        worst_before, worst_after = max(worst_before, before), max(worst_after, after)
        print(f"  {name:26s} Lexbor {before * 1000:8.1f} ms   ours {after * 1000:6.1f} ms"
              f"   {'scanned' if risky(body) else 'parsed'}")
    print(f"  worst: Lexbor {worst_before * 1000:.0f} ms, ours {worst_after * 1000:.1f} ms")
    site = Site(WebConfig(), 8080)
    web = [b"".join(bytes(p) for p in site.page(d, k).parts)[:size] for d in range(3) for k in range(1, 30)]
    for label, pages in (("corpus", corpus), ("test web", [("http://d0.test:8080/p/1.html", b) for b in web])):
        if not pages:
            continue
        check = best_of(rounds, lambda pages=pages: [risky(b) for _, b in pages]) / len(pages)
        whole = best_of(rounds, lambda pages=pages: [ours.page(b, u) for u, b in pages]) / len(pages)
        scanned = sum(risky(b) for _, b in pages)
        print(f"  the risk check on the {label}'s pages: {check * 1e6:.0f} us per page, {check / whole:.1%} of "
              f"ours ({whole * 1e6:.0f} us); {scanned} of {len(pages)} scanned")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--corpus", type=Path, default=os.environ.get("BENCH_CORPUS") or None,
                        help="a folder of real .html pages (default: $BENCH_CORPUS)")
    parser.add_argument("--only", choices=("corpus", "keys", "hostile"))
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    if args.only in (None, "keys"):
        keys(args.rounds)
        if args.only == "keys":
            return
    if args.corpus is None:
        if args.only == "corpus":
            parser.error("no corpus: give --corpus DIR (a folder of real .html pages) or set BENCH_CORPUS")
        print("corpus part skipped: no corpus (--corpus DIR or BENCH_CORPUS)", flush=True)
        pages = []
    else:
        pages = [(page_url(p.name), p.read_bytes()[:250_000]) for p in sorted(Path(args.corpus).glob("*.html"))]
        if args.only != "hostile":
            corpus(args.rounds, pages, Path(args.corpus))
    if args.only != "corpus":
        hostile(args.rounds, pages)


#: suffixes of both sections, and unknown ones (the default rule), for the key bench
KEY_SUFFIXES = ("com", "co.uk", "de", "org", "com.br", "blogspot.com", "github.io", "herokuapp.com",
                "netlify.app", "test")


def keys(rounds: int, n: int = 20_000) -> None:
    """The politeness/shard key per host, ICANN section alone (before) and
    both sections (now), each host new to the cache as a new origin is."""
    import random

    import tldextract

    rng = random.Random(7)
    hosts = [f"{rng.choice(('www.', '', 'shop.', 'a.b.'))}site{i}.{KEY_SUFFIXES[i % len(KEY_SUFFIXES)]}"
             for i in range(n)]
    now = identity._extract
    print(f"key function (registered_domain), {n:,} distinct hosts, one core, best of {rounds}")
    try:
        for name, extract in (("before: ICANN section", None), ("now: ICANN + private", now)):
            started = time.perf_counter()
            if extract is None:
                extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
            else:
                extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None,
                                                include_psl_private_domains=True)
            extract("www.example.co.uk")  # builds the list's trie: once per process
            built = time.perf_counter() - started
            identity._extract = extract
            per_host = best_of(rounds, lambda: [identity.registered_domain(h) for h in hosts]) / n * 1e6
            print(f"  {name:24s} {per_host:6.2f} us per host   (list built once: {built * 1000:.0f} ms)")
    finally:
        identity._extract = now
    page = [f"https://{hosts[i % 4]}/p/{i}" for i in range(40)]  # a page's links: a few origins, cached
    identity.domain_of(page[0])
    per_link = best_of(rounds, lambda: [identity.domain_of(u) for _ in range(250) for u in page]) / 10_000 * 1e6
    print(f"  domain_of on a page's links (cached by origin): {per_link:.2f} us per link")


def corpus(rounds: int, pages: list[tuple[str, bytes]], where: Path) -> None:
    if not pages:
        sys.exit(f"no .html pages in {where}")
    mean_kb = sum(len(b) for _, b in pages) / len(pages) / 1000
    print(f"link extraction, {len(pages)} pages (mean {mean_kb:.0f} KB after the 250 KB cut), one core, best of {rounds}")
    ours = LinkExtractor()
    scrapy_le = ScrapyLinkExtractor()
    ceiling = measure("Lexbor parse only (ceiling)", pages, lambda u, b: len(LexborHTMLParser(b).tags("a")), rounds)
    fast = measure("ours: Lexbor + string join|ada + canon.", pages, lambda u, b: len(ours(b, u)), rounds)
    slow = measure("Scrapy LinkExtractor", pages,
                   lambda u, b: len(scrapy_le.extract_links(HtmlResponse(u, body=b, encoding="utf-8"))),
                   max(1, rounds // 2))
    print(f"  ours vs Scrapy's LinkExtractor: x{fast / slow:.1f}; ours at {fast / ceiling:.0%} of the parse ceiling")
    links, signed = (best_of(rounds, lambda s=s: [ours.page(b, u, signature=s) for u, b in pages]) / len(pages) * 1000
                     for s in (False, True))
    print(f"  links alone {links:.2f} ms/page, links + text signature (one tree) {signed:.2f} ms/page: x{signed / links:.2f}")
    print("  (the 2025 billion-page crawl's parser: 160 pages/s per process)")


if __name__ == "__main__":
    main()
