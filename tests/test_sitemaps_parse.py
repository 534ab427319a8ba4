"""crawler.sitemaps: the I/O-free sitemap parser (issue #38), on real bytes.

Every format plain and gzip, sniffed from the bytes; chunk boundaries anywhere;
the protocol's limits; and hostile bodies (gzip bombs, billion laughs, XXE,
giant tokens) costing bounded memory and bounded CPU per call.
"""

from __future__ import annotations

import gzip
import time
import tracemalloc
import zlib
from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.sitemaps import WORK_BYTES, Entry, SitemapParser, parse
from crawler.sitemaps._entry import (
    normalise_changefreq,
    normalise_lastmod,
    normalise_priority,
    normalise_pubdate,
)
from crawler.sitemaps._sniff import detect_format, detect_transport

NS = b'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'

URLSET = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
  <url>
    <loc>
      https://example.com/a
    </loc>
    <lastmod>2024-05-06T07:08:09+02:00</lastmod>
    <changefreq> Weekly </changefreq>
    <priority>0.8</priority>
    <image:image><image:loc>https://cdn.example.com/a.png</image:loc></image:image>
  </url>
  <url><loc>https://example.com/b?x=1&amp;y=2</loc><lastmod>2024-02-30</lastmod>
       <changefreq>sometimes</changefreq><priority>1.5</priority></url>
  <url><loc>/relative</loc></url>
  <url><loc>ftp://example.com/file</loc></url>
  <url><loc><![CDATA[https://example.com/c]]></loc><lastmod>2023</lastmod></url>
</urlset>
"""
URLSET_ENTRIES = [
    Entry("https://example.com/a", "page", "2024-05-06T07:08:09+02:00", "weekly", 0.8),
    Entry("https://example.com/b?x=1&y=2", "page", None, None, None),
    Entry("https://example.com/c", "page", "2023", None, None),
]

INDEX = b"""<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <sitemap><loc>https://example.com/s1.xml.gz</loc><lastmod>2024-01-01</lastmod></sitemap>
  <sitemap><loc>https://example.com/s2.txt</loc></sitemap>
</sitemapindex>"""
INDEX_ENTRIES = [
    Entry("https://example.com/s1.xml.gz", "sitemap", "2024-01-01"),
    Entry("https://example.com/s2.txt", "sitemap"),
]

RSS = b"""<?xml version="1.0"?>
<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom">
<channel>
  <title>News</title><link>https://example.com/</link>
  <atom:link href="https://example.com/feed" rel="self"/>
  <item><title>One</title><link> https://example.com/news/1 </link>
        <pubDate>Sat, 07 Sep 2002 09:42:31 GMT</pubDate></item>
  <item><title>No link</title></item>
  <item><link>news/relative</link></item>
  <item><link>https://example.com/news/2</link><pubDate>not a date</pubDate></item>
</channel>
</rss>"""
RSS_ENTRIES = [
    Entry("https://example.com/news/1", "page", "2002-09-07T09:42:31Z"),
    Entry("https://example.com/news/2", "page"),
]

ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title>Feed</title><link href="https://example.com/"/>
  <entry><link rel="self" href="https://example.com/e1.atom"/>
         <link rel="alternate" href="https://example.com/e1"/>
         <updated>2003-12-13T18:30:02Z</updated></entry>
  <entry><link href="https://example.com/e2"/><link href="https://example.com/e2-second"/></entry>
  <entry><link rel="enclosure" href="https://example.com/e3.mp3"/></entry>
</feed>"""
ATOM_ENTRIES = [
    Entry("https://example.com/e1", "page", "2003-12-13T18:30:02Z"),
    Entry("https://example.com/e2", "page"),
]

TEXT = (
    b"https://example.com/t1\r\n"
    b"\n"
    b"   http://example.com/t2   \n"
    b"not a url\n"
    b"/relative/path\n"
    b"mailto:someone@example.com\n"
    b"https://example.com/has space\n"
    b"\xff\xfe\xfd broken utf-8\n"
    b"https://example.com/\xc3\xa9t\xc3\xa9\n"
    b"https://example.com/last"
)
TEXT_ENTRIES = [
    Entry("https://example.com/t1"),
    Entry("http://example.com/t2"),
    Entry("https://example.com/\u00e9t\u00e9"),
    Entry("https://example.com/last"),
]

DOCUMENTS = {
    "urlset": (URLSET, URLSET_ENTRIES),
    "sitemapindex": (INDEX, INDEX_ENTRIES),
    "rss": (RSS, RSS_ENTRIES),
    "atom": (ATOM, ATOM_ENTRIES),
    "text": (TEXT, TEXT_ENTRIES),
}


def feed_all(parser: SitemapParser, chunks: Iterable[bytes]) -> list[Entry]:
    """Drive the parser as a caller on an event loop would: one call at a time."""
    out: list[Entry] = []
    for chunk in chunks:
        out += parser.feed(chunk)
        while parser.pending:
            out += parser.feed(b"")
    while not parser.done:
        out += parser.close()
    return out


def counters(p: SitemapParser) -> tuple[object, ...]:
    return (p.kind, p.error, p.truncated, p.urls, p.dropped_urls, p.invalid_urls, p.content_bytes)


def gzip_stream(head: bytes, unit: bytes, total: int, level: int) -> tuple[bytes, int]:
    """``head`` then ``unit`` repeated to ``total`` bytes, gzipped a MiB at a time
    (the test never holds the uncompressed body)."""
    c = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = unit * ((1 << 20) // len(unit))
    parts = [c.compress(head)]
    size = len(head)
    while size < total:
        parts.append(c.compress(block))
        size += len(block)
    parts.append(c.flush())
    return b"".join(parts), size


def urlset(n: int, start: int = 0) -> bytes:
    body = b"".join(b"<url><loc>https://example.com/p/%d</loc></url>\n" % i for i in range(start, start + n))
    return b"<urlset " + NS + b">\n" + body + b"</urlset>\n"


# -- each format, plain and gzip ------------------------------------------------


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("kind", list(DOCUMENTS))
def test_each_format(kind: str, compress: bool) -> None:
    body, expected = DOCUMENTS[kind]
    entries, p = parse(gzip.compress(body) if compress else body)
    assert entries == expected
    assert p.kind == kind
    assert p.transport == ("gzip" if compress else "identity")
    assert p.error is None and not p.truncated
    assert p.urls == len(expected)


def test_skipped_urls_are_counted() -> None:
    assert parse(URLSET)[1].invalid_urls == 2  # /relative, ftp://
    assert parse(RSS)[1].invalid_urls == 1  # news/relative
    # not a url, /relative/path, mailto:, a space inside, broken UTF-8 (the blank line is not counted)
    assert parse(TEXT)[1].invalid_urls == 5


def test_sitemapindex_children_are_sitemaps_and_image_locs_are_not_pages() -> None:
    entries, _ = parse(INDEX)
    assert {e.kind for e in entries} == {"sitemap"}
    urls = [e.url for e in parse(URLSET)[0]]
    assert "https://cdn.example.com/a.png" not in urls


# -- sniffed, not trusted ----------------------------------------------------------


SNIFFED = {
    "gzip of text": (gzip.compress(b"https://example.com/x\n"), "text"),
    "gzip of rss": (gzip.compress(RSS), "rss"),
    "gzip of atom": (gzip.compress(ATOM), "atom"),
    "xml with utf-8 BOM": (b"\xef\xbb\xbf" + URLSET, "urlset"),
    "BOM then blank lines then xml": (b"\xef\xbb\xbf\r\n\n  " + URLSET, "urlset"),
    "xml without declaration or namespace": (b"<urlset><url><loc>https://example.com/x</loc></url></urlset>", "urlset"),
    "comment before the root": (b"<!-- generated --><urlset " + NS + b"><url><loc>https://example.com/x</loc></url></urlset>", "urlset"),
    "utf-16 xml": (URLSET.replace(b"UTF-8", b"UTF-16").decode().encode("utf-16"), "urlset"),
    "latin-1 xml": (b'<?xml version="1.0" encoding="ISO-8859-1"?><urlset><url><loc>https://example.com/\xe9</loc></url></urlset>', "urlset"),
    "text with BOM": (b"\xef\xbb\xbfhttps://example.com/x\n", "text"),
    "google 0.84 namespace": (b'<urlset xmlns="http://www.google.com/schemas/sitemap/0.84"><url><loc>https://example.com/x</loc></url></urlset>', "urlset"),
}


@pytest.mark.parametrize("name", list(SNIFFED))
def test_format_sniffed_from_bytes(name: str) -> None:
    body, kind = SNIFFED[name]
    entries, p = parse(body)
    assert p.kind == kind and p.error is None
    assert entries and all(e.url.startswith("https://example.com/") for e in entries)
    if name == "latin-1 xml":
        assert entries == [Entry("https://example.com/\u00e9")]


def test_sniff_functions() -> None:
    assert detect_transport(b"\x1f", final=False) is None
    assert detect_transport(b"\x1f", final=True) == "identity"
    assert detect_transport(b"\x1f\x8b\x08", final=False) == "gzip"
    assert detect_transport(b"<u", final=False) == "identity"
    assert detect_format(b"\xef\xbb", final=False) == (None, 0)
    assert detect_format(b"\xef\xbb\xbf  \n", final=False) == (None, 6)
    assert detect_format(b"  \n", final=True) == ("empty", 3)
    assert detect_format(b"\xef\xbb\xbf \t<?xml", final=False) == ("xml", 5)
    assert detect_format(b"\xff\xfe<\x00", final=False) == ("xml", 0)
    assert detect_format(b"\x1f\x8b\x08", final=False) == ("gzip", 0)
    assert detect_format(b"http://x", final=False) == ("text", 0)
    assert detect_format(b"x<urlset>", final=False) == ("text", 0)


def test_not_a_sitemap() -> None:
    for body in (b"<html><body><a href='https://example.com/x'>x</a></body></html>", b"", b" \n\t "):
        entries, p = parse(body)
        assert (entries, p.kind, p.error) == ([], "unknown", None)
    # a gzip inside the gzip is not opened
    entries, p = parse(gzip.compress(gzip.compress(b"https://example.com/x\n")))
    assert (entries, p.kind) == ([], "unknown")


# -- chunk boundaries anywhere -----------------------------------------------------


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts})
    edges = [0, *points, len(body)]
    return [body[a:b] for a, b in zip(edges, edges[1:])]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(DOCUMENTS)),
    compress=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    work=st.sampled_from([1, 7, 64, WORK_BYTES]),
)
def test_chunk_boundaries_do_not_matter(kind: str, compress: bool, cuts: list[int], work: int) -> None:
    body, expected = DOCUMENTS[kind]
    body = (b"\xef\xbb\xbf\n" + body) if not compress else gzip.compress(body)
    whole, reference = parse(body)
    parser = SitemapParser(work_bytes=work)
    assert feed_all(parser, split(body, cuts)) == whole == expected
    assert counters(parser) == counters(reference)


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200_000), max_size=30), compress=st.booleans())
def test_chunk_boundaries_with_limits(cuts: list[int], compress: bool) -> None:
    body = urlset(1_500)
    body = gzip.compress(body) if compress else body
    whole, reference = parse(body, max_urls=1_000, max_bytes=60_000)
    parser = SitemapParser(max_urls=1_000, max_bytes=60_000)
    assert feed_all(parser, split(body, cuts)) == whole
    assert counters(parser) == counters(reference)
    assert reference.truncated and reference.error is None  # cut at the limit, not malformed
    assert len(whole) == 1_000 and reference.dropped_urls > 0 and reference.content_bytes == 60_000


# -- limits ------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_sixty_thousand_urls_give_fifty_thousand(compress: bool) -> None:
    body = urlset(60_000)
    entries, p = parse(gzip.compress(body) if compress else body)
    assert len(entries) == 50_000
    assert entries[-1].url == "https://example.com/p/49999"
    assert p.truncated and p.dropped_urls == 10_000 and p.error is None


def test_exactly_the_limit_is_not_truncated() -> None:
    entries, p = parse(b"".join(b"https://example.com/%d\n" % i for i in range(50_000)))
    assert len(entries) == 50_000 and not p.truncated and p.dropped_urls == 0


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_max_bytes_cuts_and_never_emits_a_cut_url(compress: bool) -> None:
    lines = b"".join(b"https://example.com/page/%05d\n" % i for i in range(1_000))  # 31 bytes a line
    body = gzip.compress(lines) if compress else lines
    entries, p = parse(body, max_bytes=31 * 10 + 20)
    assert [e.url for e in entries] == ["https://example.com/page/%05d" % i for i in range(10)]
    assert p.truncated and p.content_bytes == 330 and p.dropped_bytes > 0
    if not compress:
        assert p.dropped_bytes == len(lines) - 330
    p2 = SitemapParser(max_bytes=330)
    feed_all(p2, [body, b"more bytes after the cut"])
    assert p2.dropped_bytes == p.dropped_bytes + len(b"more bytes after the cut")


def test_max_compressed_bytes() -> None:
    body = gzip.compress(urlset(3_000), compresslevel=1)
    entries, p = parse(body, max_compressed_bytes=len(body) // 2)
    assert 0 < len(entries) < 3_000
    assert p.truncated and p.dropped_bytes == len(body) - len(body) // 2


def test_giant_url_text_is_skipped_with_bounded_memory() -> None:
    giant = b"https://example.com/" + b"x" * 20_000_000
    for body in (
        b"<urlset><url><loc>" + giant + b"</loc></url><url><loc>https://example.com/ok</loc></url></urlset>",
        giant + b"\nhttps://example.com/ok\n",
    ):
        chunks = [body[i : i + 1_000_000] for i in range(0, len(body), 1_000_000)]
        tracemalloc.start()
        try:
            parser = SitemapParser()
            entries = feed_all(parser, chunks)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert entries == [Entry("https://example.com/ok")]
        assert parser.invalid_urls == 1
        assert peak < 5_000_000, peak


def test_url_length_cap_is_a_constructor_argument() -> None:
    body = b"https://example.com/" + b"a" * 80 + b"\nhttps://example.com/short\n"
    assert [e.url for e in parse(body, max_url_length=50)[0]] == ["https://example.com/short"]
    assert len(parse(body)[0]) == 2


# -- bounded work per call ---------------------------------------------------------


def test_each_call_parses_at_most_work_bytes() -> None:
    body = urlset(40_000)  # ~2 MB
    parser = SitemapParser()
    first = parser.feed(body)
    assert parser.content_bytes <= WORK_BYTES
    assert parser.pending and parser.pending_bytes == len(body) - parser.content_bytes
    assert 0 < len(first) < 40_000
    calls = 1
    entries = list(first)
    while parser.pending:
        before = parser.content_bytes
        entries += parser.feed()
        assert parser.content_bytes - before <= WORK_BYTES
        calls += 1
    entries += parser.close()
    assert parser.done and len(entries) == 40_000
    assert calls >= len(body) // WORK_BYTES


def test_feed_after_close_is_refused() -> None:
    parser = SitemapParser()
    parser.feed(b"https://example.com/x")
    assert parser.close() == [Entry("https://example.com/x")]
    with pytest.raises(ValueError):
        parser.feed(b"more")


# -- bombs ---------------------------------------------------------------------------


def drive_measured(parser: SitemapParser, body: bytes, chunk: int = 65_536) -> tuple[list[Entry], float, int]:
    """Feed ``body`` in chunks; (entries, worst CPU seconds of a call, peak traced bytes)."""
    out: list[Entry] = []
    worst = 0.0

    def call(data: bytes | None) -> None:
        nonlocal worst
        t = time.process_time()
        out.extend(parser.close() if data is None else parser.feed(data))
        worst = max(worst, time.process_time() - t)

    tracemalloc.start()
    try:
        for i in range(0, len(body), chunk):
            call(body[i : i + chunk])
            while parser.pending:
                call(b"")
        while not parser.done:
            call(None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out, worst, peak


def test_gzip_bomb_of_zeros() -> None:
    body, size = gzip_stream(b"", b"\0", 1 << 30, 9)  # 1 GiB of zeros in ~1 MB
    assert size >= 1 << 30 and len(body) < 2_000_000
    parser = SitemapParser()
    entries, worst, peak = drive_measured(parser, body)
    print(f"\nzeros bomb: {len(body)} bytes -> {size} bytes; worst call {worst * 1000:.1f} ms CPU; peak {peak / 1e6:.2f} MB")
    assert entries == []
    assert parser.truncated and parser.content_bytes == parser.max_bytes and parser.error is None
    assert parser.dropped_bytes > 0
    assert peak < 50_000_000
    assert worst < 0.5


def test_gzip_bomb_of_urls() -> None:
    head = b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    body, size = gzip_stream(head, b"<url><loc>https://example.com/page</loc></url>\n", 1 << 30, 1)
    parser = SitemapParser(max_bytes=8 << 20)  # the 50 MiB default takes ~6x the time, same path
    entries, worst, peak = drive_measured(parser, body)
    print(f"\nurl bomb: {len(body)} bytes -> {size} bytes; worst call {worst * 1000:.1f} ms CPU; peak {peak / 1e6:.2f} MB")
    assert len(entries) == 50_000 and parser.kind == "urlset"
    assert parser.truncated and parser.content_bytes == 8 << 20 and parser.dropped_urls > 100_000
    assert parser.error is None  # cut at the limit, not malformed
    assert peak < 50_000_000
    assert worst < 0.5


# -- entities: never expanded ------------------------------------------------------------

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<urlset><url><loc>https://example.com/&lol9;</loc></url></urlset>"""

XXE = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<urlset><url><loc>https://example.com/&xxe;</loc></url></urlset>"""

XXE_PARAMETER = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]>
<urlset><url><loc>https://example.com/x</loc></url></urlset>"""

EXTERNAL_DTD_REFERENCE = b"""<?xml version="1.0"?>
<!DOCTYPE urlset SYSTEM "file:///etc/passwd">
<urlset><url><loc>https://example.com/&passwd;</loc></url></urlset>"""


@pytest.mark.parametrize(
    "body",
    [BILLION_LAUGHS, XXE, XXE_PARAMETER, EXTERNAL_DTD_REFERENCE, gzip.compress(BILLION_LAUGHS)],
    ids=["billion-laughs", "xxe", "xxe-parameter", "external-dtd", "billion-laughs-gzip"],
)
def test_entities_are_refused(body: bytes) -> None:
    tracemalloc.start()
    try:
        t = time.process_time()
        entries, p = parse(body)
        cpu = time.process_time() - t
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert entries == [] and p.error == "entities"
    assert "lol" not in repr(entries) and "root:" not in repr(entries)
    assert peak < 2_000_000 and cpu < 0.5


def test_external_dtd_is_not_read() -> None:
    body = b'<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "file:///etc/passwd"><urlset><url><loc>https://example.com/x</loc></url></urlset>'
    entries, p = parse(body)
    assert entries == [Entry("https://example.com/x")] and p.error is None


# -- broken bodies keep what came before ----------------------------------------------------


def test_truncated_gzip_keeps_earlier_urls() -> None:
    body = gzip.compress(urlset(2_000))
    entries, p = parse(body[: len(body) // 2])
    assert p.error == "gzip-truncated"
    assert 0 < len(entries) < 2_000
    assert entries == [Entry("https://example.com/p/%d" % i) for i in range(len(entries))]


def test_truncated_gzip_of_text_drops_the_cut_line() -> None:
    lines = b"".join(b"https://example.com/line/%d\n" % i for i in range(3_000))
    body = gzip.compress(lines)
    for cut in (len(body) // 3, len(body) - 9, len(body) - 1):
        entries, p = parse(body[:cut])
        assert p.error == "gzip-truncated"
        assert entries == [Entry("https://example.com/line/%d" % i) for i in range(len(entries))]


def test_corrupt_gzip_keeps_earlier_urls() -> None:
    document = urlset(2_000)
    part = document[: len(document) // 2]
    c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    # a block header of type 3 (reserved) after the flush: zlib fails right there
    body = c.compress(part) + c.flush(zlib.Z_FULL_FLUSH) + b"\xff" * 16
    entries, p = parse(body)
    assert p.error == "gzip" and p.error_detail
    assert entries == [Entry("https://example.com/p/%d" % i) for i in range(part.count(b"</url>"))]
    assert len(entries) > 900


def test_bad_gzip_checksum_is_an_error() -> None:
    body = bytearray(gzip.compress(urlset(10)))
    body[-8] ^= 0xFF  # the CRC-32 of the content
    entries, p = parse(bytes(body))
    assert p.error == "gzip"
    assert len(entries) == 10  # read before the trailer could be checked


@pytest.mark.parametrize(
    "tail",
    [b"<url><loc>https://example.com/bad</loc></oops>", b"<url><loc>https://example.com/bad</loc>", b"\x00\x01garbage"],
)
def test_malformed_xml_keeps_earlier_urls(tail: bytes) -> None:
    body = urlset(100)[: -len(b"</urlset>\n")] + tail
    entries, p = parse(body)
    assert p.error == "malformed" and p.kind == "urlset"
    assert entries == [Entry("https://example.com/p/%d" % i) for i in range(100)]
    assert p.pending is False and p.pending_bytes == 0


def test_input_after_an_error_is_dropped() -> None:
    parser = SitemapParser()
    parser.feed(b"<urlset><url></urlset>")
    assert parser.error == "malformed" and parser.done
    assert parser.feed(b"<url><loc>https://example.com/x</loc></url>" * 1000) == []
    assert parser.pending_bytes == 0 and not parser.pending


def test_giant_token_and_deep_nesting_stop_the_read() -> None:
    entries, p = parse(b"<urlset><url><loc>https://example.com/x</loc></url><a b='" + b"x" * 2_000_000)
    assert entries == [Entry("https://example.com/x")] and p.error == "token-too-large"
    entries, p = parse(b"<urlset><url><loc>https://example.com/x</loc></url>" + b"<a>" * 10_000)
    assert entries == [Entry("https://example.com/x")] and p.error == "too-deep"


def test_gzip_members_are_read_in_turn() -> None:
    body = gzip.compress(b"https://example.com/1\n") + gzip.compress(b"https://example.com/2\n") + b"\0\0\0"
    entries, p = parse(body)
    assert [e.url for e in entries] == ["https://example.com/1", "https://example.com/2"]
    assert p.error is None


# -- fields --------------------------------------------------------------------------------


def test_lastmod() -> None:
    for ok in ("2024", "2024-05", "2024-05-06", "2024-05-06T07:08Z", "2024-05-06T07:08:09+02:00",
               "2024-05-06T07:08:09.123456-05:30", "2024-02-29", "2024-05-06T07:08:09"):
        assert normalise_lastmod(f" {ok}\n") == ok
    for bad in ("", "yesterday", "2023-02-29", "2024-13-01", "2024-05-06T25:00Z", "2024-05-06 07:08:09",
                "2024-05-06T07:08:09+24:00", "20240506", "2024-5-6", "2024-05-06T07:08:09Z" + "0" * 80):
        assert normalise_lastmod(bad) is None, bad
    assert normalise_pubdate("Sat, 07 Sep 2002 09:42:31 +0200") == "2002-09-07T09:42:31+02:00"
    assert normalise_pubdate("07 Sep 2002") is None or normalise_pubdate("07 Sep 2002") == "2002-09-07T00:00:00"
    assert normalise_pubdate("garbage") is None


def test_changefreq_and_priority() -> None:
    assert [normalise_changefreq(s) for s in (" DAILY ", "never", "fortnightly", "")] == ["daily", "never", None, None]
    assert [normalise_priority(s) for s in ("0.5", " 1.0 ", "0", ".3", "1", "1.")] == [0.5, 1.0, 0.0, 0.3, 1.0, 1.0]
    for bad in ("1.5", "-0.1", "nan", "inf", "1e-1", "0x1", "", "high", "0_5"):
        assert normalise_priority(bad) is None, bad
