"""Framing and decoding in crawler.fetch against servers on 127.0.0.1 that
send exact bytes, each answer also fetched by Scrapy's HTTP11DownloadHandler
(and HttpCompressionMiddleware) for reference: what the real web sends and
Scrapy accepts is accepted here too, ambiguous framing is refused."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
import zlib
from typing import Any

import brotli
import pytest
from backports import zstd

from crawler.fetch._connection import Connection
from crawler.fetch._exchange import Exchange
from tests.rawserver import Outcome, RawServer, fetch_raw, scrapy_reference

CAP = 250_000
H = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"


def encoded(body: bytes, codings: bytes, *lines: bytes) -> bytes:
    """An answer whose body is ``body`` with ``codings`` applied in their order."""
    for coding in codings.replace(b" ", b"").split(b","):
        body = {b"gzip": gzip.compress, b"deflate": zlib.compress, b"br": brotli.compress,
                b"zstd": zstd.compress}[coding](body)
    head = b"".join(lines) or b"Content-Encoding: " + codings + b"\r\n"
    return H + head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def chunked(size_line: bytes, data: bytes = b"a" * 16) -> bytes:
    return H + b"Transfer-Encoding: chunked\r\n\r\n" + size_line + b"\r\n" + data + b"\r\n0\r\n\r\n"


_BAD_CRC = bytearray(gzip.compress(b"kept despite the check"))
_BAD_CRC[-8] ^= 0xFF  # the member's CRC32
_TEXT = b"".join(b"line %d of a page\n" % i for i in range(3000))

CASES: dict[str, bytes] = {
    # 1: bare LF ends the status line and headers, alone or mixed with CRLF
    "lf": b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
    "lf_mixed": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\nContent-Length: 5\r\n\nhello",
    "lf_mixed2": b"HTTP/1.1 200 OK\nContent-Length: 5\n\r\nhello",
    # 2: a line without a colon is skipped
    "bad_line": H + b"not a header\r\nContent-Length: 5\r\n\r\nhello",
    # 3, 4: gzip's CRC not checked; members one after the other
    "bad_crc": H + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(_BAD_CRC) + bytes(_BAD_CRC),
    "members": H + b"Content-Encoding: gzip\r\nContent-Length: 47\r\n\r\n"
    + gzip.compress(b"one ", mtime=0) + gzip.compress(b"two", mtime=0),
    # 5: stacked codings, in one header or several, any order
    "gzip_gzip": encoded(_TEXT, b"gzip, gzip"),
    "two_lines": encoded(_TEXT, b"gzip,br", b"Content-Encoding: gzip\r\n", b"Content-Encoding: br\r\n"),
    "four": encoded(_TEXT, b"zstd, deflate, br, gzip"),
    "four_other": encoded(_TEXT, b"gzip, br, deflate, zstd"),
    "unknown": H + b"Content-Encoding: foo\r\nContent-Length: 3\r\n\r\nraw",
    # 8: repeated identical lengths
    "length_list": H + b"Content-Length: 5, 5\r\n\r\nhello",
    "length_lines": H + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    "length_differ": H + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    # 17: chunk sizes are hex digits, maybe followed by spaces/tabs and an extension
    "chunk_0x": chunked(b"0x10"),
    "chunk_plus": chunked(b"+10"),
    "chunk_underscore": chunked(b"1_0"),
    "chunk_leading_space": chunked(b" 10"),
    "chunk_negative": H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n-2\r\nxx\r\n0\r\n\r\n",
    "chunk_extension": chunked(b"10;name=value"),
    "chunk_trailing_space": chunked(b"10 \t;x"),
    # framing that is ambiguous: refused
    "te_and_length": H + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "te_gzip": H + b"Transfer-Encoding: gzip\r\n\r\n" + gzip.compress(b"x"),
    "te_gzip_chunked": H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, tuple[Outcome, Outcome]]:
    """Each case as this handler and as Scrapy's handler answer it."""
    ours = asyncio.run(fetch_raw(list(CASES.values())))
    theirs = scrapy_reference(list(CASES.values()))
    return {name: pair for name, pair in zip(CASES, zip(ours, theirs, strict=True), strict=True)}


def same(pair: tuple[Outcome, Outcome]) -> Outcome:
    ours, theirs = pair
    assert not ours.error, (ours.error, ours.message)
    assert (ours.status, ours.body) == (theirs.status, theirs.body), (ours, theirs)
    assert ours.headers.get("content-encoding") == theirs.headers.get("content-encoding")
    return ours


def refused(pair: tuple[Outcome, Outcome], message: str) -> None:
    ours, theirs = pair
    assert ours.error == "DownloadFailedError" and message in ours.message, ours
    assert theirs.error, theirs  # Scrapy's handler fails too


def test_bare_lf_ends_header_lines(outcomes) -> None:
    for name in ("lf", "lf_mixed", "lf_mixed2"):
        assert same(outcomes[name]).body == b"hello"
    one_byte_reads = asyncio.run(fetch_raw([CASES["lf"], CASES["lf_mixed2"], H + b"Content-Length: 2\r\n\r\nok"],
                                           piece=1))
    assert [o.body for o in one_byte_reads] == [b"hello", b"hello", b"ok"]


def test_malformed_header_line_is_skipped_and_counted(outcomes) -> None:
    response = same(outcomes["bad_line"])
    assert response.body == b"hello" and "not a header" not in str(response.headers)
    exchange = asyncio.run(exchange_for(CASES["bad_line"]))
    assert exchange.bad_header_lines == 1 and exchange.status == 200


def test_gzip_with_a_bad_crc_keeps_its_data(outcomes) -> None:
    assert same(outcomes["bad_crc"]).body == b"kept despite the check"
    assert "content-encoding" not in outcomes["bad_crc"][0].headers


def test_concatenated_gzip_members_are_all_decoded(outcomes) -> None:
    assert same(outcomes["members"]).body == b"one two"
    many = gzip.compress(b"ab", mtime=0) * 3000  # in one read, then in pieces
    answer = H + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(many) + many
    assert [o.body for o in asyncio.run(fetch_raw([answer, answer], piece=1 << 20))] == [b"ab" * 3000] * 2
    assert asyncio.run(fetch_raw([answer], piece=5))[0].body == b"ab" * 3000


@pytest.mark.parametrize("name", ["gzip_gzip", "two_lines", "four", "four_other"])
def test_stacked_codings_are_all_decoded(outcomes, name: str) -> None:
    response = same(outcomes[name])
    assert response.body == _TEXT and "content-encoding" not in response.headers


def test_unknown_coding_leaves_body_and_header(outcomes) -> None:
    response = same(outcomes["unknown"])
    assert response.body == b"raw" and response.headers["content-encoding"] == ["foo"]


def test_known_codings_after_an_unknown_one_are_undone_as_scrapy_does() -> None:
    answer = encoded(b"inner", b"gzip", b"Content-Encoding: foo, gzip\r\n")
    exchange = asyncio.run(exchange_for(answer))
    assert exchange.decoder is not None and exchange.body() == b"inner"
    assert exchange.codings_left == [b"foo"]  # the handler sets Content-Encoding to these
    (theirs,) = scrapy_reference([answer])
    assert theirs.body == b"inner" and theirs.headers["content-encoding"] == ["foo"]


def test_more_than_four_codings_are_refused() -> None:
    answer = encoded(b"x", b"gzip, gzip, gzip, gzip, gzip")
    (ours,) = asyncio.run(fetch_raw([answer]))
    assert ours.error == "DownloadFailedError" and "5 content codings, over 4" in ours.message


def _stacked_bomb() -> bytes:
    inner = gzip.compress(b"<html>" + b"\0" * (64 << 20), compresslevel=9)
    return encoded(inner, b"gzip", b"Content-Encoding: gzip, gzip\r\n")


def test_stacked_bomb_stops_at_the_cap_or_fails_at_maxsize() -> None:
    answer = _stacked_bomb()
    assert len(answer) < 10_000
    tracemalloc.start()
    capped, over, under = asyncio.run(fetch_raw([answer] * 3, piece=4096, CRAWLER_MAX_PAGE_BYTES=CAP))  # kept, cut
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(capped.body) == CAP and "download_stopped" in capped.flags
    assert capped.body.startswith(b"<html>\0\0") and "content-encoding" not in capped.headers
    assert peak < 10_000_000, peak
    (failed,) = asyncio.run(fetch_raw([answer], piece=4096, CRAWLER_SIZECAP_ENABLED=False,
                                      DOWNLOAD_MAXSIZE=1_000_000))
    assert failed.error == "TooLarge" and "once decoded" in failed.message, failed


def test_download_maxsize_bounds_decoded_bytes_without_the_page_cap() -> None:
    """10 kB of gzip that inflates to 10 MB: over DOWNLOAD_MAXSIZE once decoded."""
    answer = encoded(b"x" * 10_000_000, b"gzip")
    assert len(answer) < 20_000
    (over,) = asyncio.run(fetch_raw([answer], CRAWLER_SIZECAP_ENABLED=False, DOWNLOAD_MAXSIZE=8 * 1024 * 1024))
    assert over.error == "TooLarge" and "DOWNLOAD_MAXSIZE (8388608 bytes)" in over.message
    (theirs,) = scrapy_reference([answer], DOWNLOAD_MAXSIZE=8 * 1024 * 1024)
    assert theirs.error == "IgnoreRequest" and "exceeded DOWNLOAD_MAXSIZE" in theirs.message
    (under,) = asyncio.run(fetch_raw([answer], CRAWLER_SIZECAP_ENABLED=False, DOWNLOAD_MAXSIZE=20_000_000))
    (capped,) = asyncio.run(fetch_raw([answer], CRAWLER_MAX_PAGE_BYTES=CAP))
    assert len(under.body) == 10_000_000 and not under.error
    assert len(capped.body) == CAP and "download_stopped" in capped.flags  # the page cap truncates


def test_repeated_identical_content_length_is_accepted(outcomes) -> None:
    for name in ("length_list", "length_lines"):
        response = same(outcomes[name])
        assert response.body == b"hello" and response.headers["content-length"] == ["5"]
    refused(outcomes["length_differ"], "bad Content-Length")


@pytest.mark.parametrize("name", ["chunk_0x", "chunk_plus", "chunk_underscore", "chunk_leading_space",
                                  "chunk_negative"])
def test_chunk_sizes_are_strict_hex(outcomes, name: str) -> None:
    refused(outcomes[name], "bad chunk size")


def test_chunk_extensions_and_trailing_blanks_are_accepted(outcomes) -> None:
    assert same(outcomes["chunk_extension"]).body == b"a" * 16
    ours, theirs = outcomes["chunk_trailing_space"]  # as browsers; Twisted refuses it
    assert ours.body == b"a" * 16 and theirs.error == "ResponseDataLossError"


def test_chunk_lines_ended_by_bare_lf_are_accepted() -> None:
    answer = H + b"Transfer-Encoding: chunked\n\n5\nhello\n3;x\nabc\r\n0\n\n"
    for piece in (1, 7, 1000):
        (ours,) = asyncio.run(fetch_raw([answer], piece=piece))
        assert ours.body == b"helloabc" and not ours.error, (piece, ours)


def test_bytes_after_a_chunked_body_end_keep_alive() -> None:
    clean = asyncio.run(exchange_for(chunked(b"10"), piece=10_000))
    extra = asyncio.run(exchange_for(chunked(b"10") + b"HTTP/1.1 200 OK\r\n", piece=10_000))  # in one read
    assert clean.body() == extra.body() == b"a" * 16
    assert clean.keep_alive and not extra.keep_alive


@pytest.mark.parametrize("name, message", [
    ("te_and_length", "both Transfer-Encoding and Content-Length"),
    ("te_gzip", "Transfer-Encoding b'gzip', not chunked"),
    ("te_gzip_chunked", "Transfer-Encoding b'gzip, chunked', not chunked"),
])
def test_ambiguous_framing_is_refused(outcomes, name: str, message: str) -> None:
    ours, theirs = outcomes[name]
    assert ours.error == "DownloadFailedError" and message in ours.message, ours
    if name == "te_and_length":
        assert theirs.body == b"abc"  # Twisted lets Transfer-Encoding win; refused here (docs/differences.md)
    else:
        assert theirs.error == "DownloadFailedError"


@pytest.mark.parametrize("answer, version, until_close", [
    (b"HTTP/1.0 200 OK\r\n\r\nuntil the end", b"HTTP/1.0", True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"HTTP/1.1", False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", b"HTTP/1.1", False),
])
def test_exchange_says_version_and_framing(answer: bytes, version: bytes, until_close: bool) -> None:
    exchange = asyncio.run(exchange_for(answer))
    assert (exchange.version, exchange.until_close) == (version, until_close)
    assert exchange.body() in (b"ok", b"until the end") and not exchange.dataloss


async def exchange_for(answer: bytes, piece: int = 7, **kwargs: Any) -> Exchange:
    """The exchange for one GET to a server that sends ``answer`` and closes."""
    server = RawServer(answer, close=True, piece=piece)
    port = await server.start()
    loop = asyncio.get_running_loop()
    connection = Connection()
    await loop.create_connection(lambda: connection, "127.0.0.1", port)
    exchange = Exchange(lambda e: True, kwargs.get("limit", 1 << 62), kwargs.get("maxsize", 0), 65536,
                        head_only=False)
    done = connection.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", exchange)
    try:
        await done
    finally:
        connection.close()
        server.stop()
    return exchange


def test_one_read_past_the_cap_and_maxsize_is_cut_at_the_cap() -> None:
    """Bytes past the page cap are dropped before they count against
    DOWNLOAD_MAXSIZE: a page that arrives in one read is cut, not cancelled."""
    exchange = Exchange(lambda e: True, 50_000, 100_000, 65_536, head_only=False)
    exchange.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n" + b"x" * 200_000)
    assert exchange.finished and exchange.error is None
    assert exchange.cut and exchange.kept == 50_000 and exchange.received == 50_001  # the cut body ends at the cap
