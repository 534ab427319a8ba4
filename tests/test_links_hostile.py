"""No page freezes the crawl (#22 item 5): pages nested too deep for a tree
builder are scanned in linear time, the scan finds the links Lexbor finds,
and a crawl of a test web made of such pages keeps its event loop on time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler._hrefscan import SAFE_TAGS, risky, scan
from crawler.links import LinkExtractor
from devkit.testweb.config import NESTED_KINDS, WebConfig
from devkit.testweb.site import Site
from tests.servers import run_scrapy, scrapy_env

URL = "http://site.test/dir/page.html"

# --- the scan finds what Lexbor finds -----------------------------------------

_HREFS = st.sampled_from([
    "/p/1.html", "x.html", "../up/x.html", "http://other.test/a", "https://b.test:8443/q?x=1&y=2",
    "#frag", " #frag", "p.html#frag", "  spaced.html  ", "javascript:void(0)", "mailto:a@b.test",
    "/q?a=1&amp;b=2", "/q?a=1&copy=2", "/e&lt;x&gt;", "/n&#65;&#x42;&#0;", "/notit&notit;",
    "/caf\u00e9", "//proto.test/rel", "/tab\tin", "", "/a\"b", "/a'b", "/gt>in",
])
# no bare <svg> or <math>: inside one, <script> and <style> hold markup, and
# the scan cannot tell when an end tag of an element around it ends it
# (crawler._hrefscan); they come closed below
_NAMES = st.sampled_from(["a", "A", "div", "p", "span", "b", "i", "li", "ul", "table", "td", "tr", "section",
                          "dl", "dt", "select", "option", "abbr", "aside", "x-custom", "br", "title"])


def _attr_value(value: str) -> st.SearchStrategy[str]:
    options = []
    if '"' not in value:
        options.append(f'"{value}"')
    if "'" not in value:
        options.append(f"'{value}'")
    if value and not any(c in value for c in " \t\n\r\f>\"'=<`"):
        options.append(value)
    return st.sampled_from(options or ['""'])


@st.composite
def _anchor(draw: st.DrawFn) -> str:
    href = draw(_HREFS)
    name = draw(st.sampled_from(["href", "HREF", "Href"]))
    attrs = [name + draw(st.sampled_from(["=", " = ", "\n=\t"])) + draw(_attr_value(href))]
    if draw(st.booleans()):
        attrs.append("rel=" + draw(st.sampled_from(['nofollow', '"NoFollow noopener"', "noopener", '"x nofollow"'])))
    if draw(st.booleans()):
        attrs.insert(0, f'title="{draw(st.sampled_from(["a > b", "<a href=/in-attr>", "t"]))}"')
    if draw(st.booleans()):
        attrs.append("href=/second-wins-not")
    sep = draw(st.sampled_from([" ", "\n", "\t", "/"]))
    tag = draw(st.sampled_from(["a", "A"]))
    return f"<{tag}{sep}{' '.join(attrs)}{draw(st.sampled_from(['>', ' >', '/>']))}text</{tag}>"


_PIECES = st.one_of(
    _anchor(),
    _NAMES.map(lambda n: f"<{n}>"),
    _NAMES.map(lambda n: f"</{n}>"),
    st.sampled_from([
        "text ", "a < b ", "x <3 y ", "<!-- <a href=/in-comment> -->", "<!-->", "<!--->", "<!DOCTYPE html>",
        "<?xml version='1.0'?>", "</ >", "<br/>", "<img src=x.png>",
        "<script>var s = '<a href=/in-script>';</script>", "<style>a[href] { }</style>",
        "<textarea><a href=/in-textarea></textarea>", "<title><a href=/in-title></title>",
        "<template><a href=/in-template></a></template>", "<noscript><a href=/in-noscript>ns</a></noscript>",
        "<base href='http://base.test/root/'>", "<base href=' /other/'>", "<base target=_top>",
        '<meta name="robots" content="noindex">', '<meta name="robots" content="nofollow">',
        '<meta name="ROBOTS" content="NONE">', '<meta name="description" content="d">', '<meta charset="utf-8">',
        "<svg><a href=/svg-a>s</a></svg>", "<svg><style>a { }</style><title>t</title><a href=/svg-b/></svg>",
        "<math><mi><a href=/math-a>m</a></mi></math>", "<svg><![CDATA[ <a href=/cdata> ]]></svg>", "<table><a href=/foster>f</a><tr><td><a href=/cell>c</a></table>",
        "<a href=/outer><a href=/inner>nested</a></a>", "&amp; &lt; ", "\u00e9\u4e2d ",
    ]),
)


@st.composite
def pages(draw: st.DrawFn) -> bytes:
    pieces = draw(st.lists(_PIECES, max_size=40))
    head = draw(st.sampled_from(["", "<!DOCTYPE html><html><head>", "<html><body>"]))
    return (head + "".join(pieces)).encode()


@settings(max_examples=400, deadline=None)
@given(pages(), st.booleans())
def test_the_scan_finds_the_links_lexbor_finds(body: bytes, nofollow: bool) -> None:
    extract = LinkExtractor(nofollow=nofollow)
    for agent in ("", "crawler"):
        scanned, nofollow_scanned = extract.resolve(extract.by_scan(body), URL, agent)
        parsed, nofollow_parsed = extract.resolve(extract.by_tree(body), URL, agent)
        # the same links; in the order of the page's source, where the tree
        # may have moved some (an <a> in a <table> goes before it)
        assert sorted(scanned) == sorted(parsed) and nofollow_scanned == nofollow_parsed


def test_unknown_nested_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown nested kind 'marquee'"):
        WebConfig(nested={"marquee": 0.5})


def test_the_scan_finds_the_links_of_the_test_webs_pages() -> None:
    site = Site(WebConfig(domains=3, pages=20, trap_share=0.2, meta_nofollow_share=0.2), 8080)
    extract = LinkExtractor()
    bodies = [b"".join(bytes(p) for p in site.answer(f"d{d}.test", f"/p/{k}.html").parts)
              for d in range(3) for k in range(20)]
    bodies.append(b"".join(bytes(p) for p in site.answer("d0.test", "/hostile.html").parts))
    for body in bodies:
        url = "http://d0.test:8080/p/3.html"
        assert extract.resolve(extract.by_scan(body), url) == extract.resolve(extract.by_tree(body), url)
    assert sum(bool(extract(body, "http://d0.test:8080/")) for body in bodies) > 40  # pages with links


def test_the_scan_is_linear_on_cut_and_unterminated_markup() -> None:
    # each "<a" opens a tag that never ends: a scan that retried every "<"
    # would walk the rest of the page once per tag (80,000 x 250 KB)
    for unit in ("<a", "<a href='", "<div", "</x", "<!--", "<script>", "<a href=/x "):
        body = (unit * (250_000 // len(unit))).encode()
        found = scan(body)
        assert len(found) <= 1, (unit, found[:3])


def test_risky_pages_are_the_deep_ones() -> None:
    site = Site(WebConfig(domains=1, nested={kind: 1 / len(NESTED_KINDS) for kind in NESTED_KINDS}), 8080)
    for kind in NESTED_KINDS:
        body = b"".join(bytes(p) for p in site.nested_page(0, 1, kind).parts)
        assert len(body) == 250_000
        assert risky(body), kind
        links = LinkExtractor()(body, site.url(0, "/p/1.html"))
        expected = LinkExtractor()(b"".join(bytes(p) for p in site.page(0, 1).parts), site.url(0, "/p/1.html"))
        assert links == expected and links, kind
    # as many tags, all closed: parsed as usual
    flat = ("<p>" + "<span>x</span>" * (SAFE_TAGS * 2)).encode()
    assert not risky(flat)
    assert not risky(b"<div>" * SAFE_TAGS)  # few enough to parse whatever they hold


# --- a crawl of nested pages ----------------------------------------------------


def test_a_crawl_of_nested_pages_keeps_the_loop_on_time(redis_url: str, make_web, tmp_path: Path) -> None:
    kinds = {kind: 0.1 for kind in NESTED_KINDS}  # 70% of the domains
    web = make_web(domains=24, pages=4, nested=kinds, links=6, private_share=0, cross_share=0, dup_share=0,
                   crawl_delay_share=0, size_fixed=3000)
    site = Site(web.config, web.port)
    served = {web.config.domain(d): site.nested_kind(d) for d in range(24)}
    assert set(served.values()) == {*NESTED_KINDS, None}  # every kind, and plain domains
    (tmp_path / "seeds.txt").write_text("".join(web.url(d) + "\n" for d in range(24)))
    stats_file = tmp_path / "stats.json"
    args = ["crawl", "billion", "-a", f"seeds={tmp_path / 'seeds.txt'}"]
    for s in ("CRAWLER_PROGRESS_INTERVAL=0", f"CRAWLER_STATS_FILE={stats_file}", "CRAWLER_DOMAIN_DELAY=0",
              f"CRAWLER_WARC_DIR={tmp_path / 'warc'}", "CRAWLER_LOOP_PROBE_INTERVAL=0.1"):
        args += ["-s", s]
    result = run_scrapy(args, scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"), timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    stats = json.loads(stats_file.read_text())
    fetched = {(e.domain, e.path) for e in web.log() if e.path == "/" or e.path.startswith("/p/")}
    # every page was reached: the links of the nested pages were extracted
    for name in served:
        assert {p for n, p in fetched if n == name} >= {"/", "/p/1.html", "/p/2.html", "/p/3.html"}, name
    nested = sum(1 for n, _ in fetched if served[n] is not None)
    assert stats["crawler/links/scanned_pages"] == nested > 0
    # Lexbor took 2-4 s for each of these pages on the reactor thread
    lag = stats["crawler/loop/lag_max_ms"]
    assert lag < 1000, lag
    print(f"nested pages crawled: {nested}, worst event-loop stall {lag} ms")
