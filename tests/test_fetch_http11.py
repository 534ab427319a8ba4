"""The HTTP/1.1 core of crawler.fetch as tables of bytes in and events out:
the framing decision (RFC 9112 6.3), the head, one reader per framing, and
the exchange's states and keep-alive. No sockets: these parts do no I/O.
tests/test_fetch_framing.py checks the same rules against Scrapy's own
handler over 127.0.0.1."""

from __future__ import annotations

import gzip

import pytest

from crawler.fetch._exchange import DECODE_STEP, PIECE, Exchange, State
from crawler.fetch._http11 import (
    Chunk,
    ChunkedReader,
    CloseReader,
    Data,
    EndOfMessage,
    Framing,
    Incomplete,
    Kind,
    LengthReader,
    Malformed,
    Refusal,
    framing,
    parse_head,
    split_head,
)

CL, TE = b"Content-Length", b"Transfer-Encoding"

FRAMING = [
    # status, HEAD request, headers -> framing
    (200, False, [(CL, b"5")], Framing(Kind.LENGTH, 5)),
    (200, False, [(CL, b"0")], Framing(Kind.LENGTH, 0)),
    (200, False, [(b"content-length", b" 5 ")], Framing(Kind.LENGTH, 5)),
    (200, False, [(CL, b"5, 5")], Framing(Kind.LENGTH, 5, merged=True)),
    (200, False, [(CL, b"5"), (CL, b"5")], Framing(Kind.LENGTH, 5, merged=True)),
    (200, False, [(CL, b"5"), (CL, b"6")], Refusal("bad Content-Length b'5,6'")),
    (200, False, [(CL, b"5, 6")], Refusal("bad Content-Length b'5, 6'")),
    (200, False, [(CL, b"-1")], Refusal("bad Content-Length b'-1'")),
    (200, False, [(CL, b"0x10")], Refusal("bad Content-Length b'0x10'")),
    (200, False, [(TE, b"chunked")], Framing(Kind.CHUNKED)),
    (200, False, [(b"transfer-encoding", b" Chunked ")], Framing(Kind.CHUNKED)),
    (200, False, [(TE, b"chunked"), (CL, b"3")],
     Refusal("ambiguous framing: both Transfer-Encoding and Content-Length")),
    (200, False, [(TE, b"gzip")], Refusal("ambiguous framing: Transfer-Encoding b'gzip', not chunked")),
    (200, False, [(TE, b"gzip, chunked")],
     Refusal("ambiguous framing: Transfer-Encoding b'gzip, chunked', not chunked")),
    (200, False, [(TE, b"chunked"), (TE, b"chunked")],
     Refusal("ambiguous framing: Transfer-Encoding b'chunked,chunked', not chunked")),
    (200, False, [], Framing(Kind.CLOSE)),
    (200, False, [(b"Connection", b"close")], Framing(Kind.CLOSE)),
    (101, False, [], Framing(Kind.CLOSE)),  # as before: 101 only answers an Upgrade, never asked
    # step 1: no body, whatever the fields say (ambiguous ones included)
    (200, True, [(CL, b"5")], Framing(Kind.NONE)),
    (200, True, [(TE, b"chunked"), (CL, b"3")], Framing(Kind.NONE)),
    (204, False, [(CL, b"5")], Framing(Kind.NONE)),
    (304, False, [(TE, b"gzip")], Framing(Kind.NONE)),
    (404, False, [(CL, b"7")], Framing(Kind.LENGTH, 7)),
]


@pytest.mark.parametrize("status, head_request, headers, expected", FRAMING)
def test_framing(status: int, head_request: bool, headers: list[tuple[bytes, bytes]],
                 expected: Framing | Refusal) -> None:
    assert framing(status, head_request, headers) == expected


HEADS = [
    # bytes received -> (status, version, headers, bad lines), or the error
    (b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n", (200, b"HTTP/1.1", [(b"A", b"1")], 0)),
    (b"HTTP/1.0 404 Not Found\nA: 1\n\n", (404, b"HTTP/1.0", [(b"A", b"1")], 0)),
    (b"HTTP/1.1 200 OK\r\nA: 1\nB:2\r\n\n", (200, b"HTTP/1.1", [(b"A", b"1"), (b"B", b"2")], 0)),
    (b"HTTP/1.1 200 OK\nA: 1\n\r\n", (200, b"HTTP/1.1", [(b"A", b"1")], 0)),
    (b"HTTP/1.1 200\r\nnot a header\r\n: no name\r\nA: 1\r\n\r\n", (200, b"HTTP/1.1", [(b"A", b"1")], 2)),
    (b"HTTP/1.1 200 OK\r\nA: 1\r\n folded\r\n\tagain\r\n\r\n", (200, b"HTTP/1.1", [(b"A", b"1 folded again")], 0)),
    (b"HTTP/1.1 200 OK\r\nA:\r\n\r\n", (200, b"HTTP/1.1", [(b"A", b"")], 0)),
    (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.x response: b'HTTP/2 200 OK'"),
    (b"ICY 200 OK\r\n\r\n", "not an HTTP/1.x response: b'ICY 200 OK'"),
    (b"HTTP/1.1 2x0 OK\r\n\r\n", "not an HTTP/1.x response: b'HTTP/1.1 2x0 OK'"),
]


@pytest.mark.parametrize("answer, expected", HEADS)
def test_heads(answer: bytes, expected: tuple | str) -> None:
    found = split_head(answer, 1000)
    assert found is not None and sum(found) == len(answer)
    if isinstance(expected, str):
        with pytest.raises(ValueError, match="^" + expected.replace("(", r"\(").replace(")", r"\)") + "$"):
            parse_head(answer[:found[0]])
        return
    head = parse_head(answer[:found[0]])
    assert (head.status, head.version, head.headers, head.bad_header_lines) == expected


@pytest.mark.parametrize("buffer, max_head, expected", [
    (b"HTTP/1.1 200 OK\r\nA: 1\r\n", 100, None),  # not ended yet
    (b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\nbody", 100, (22, 3)),
    (b"HTTP/1.1 200 OK\nA: 1\n\nbody", 100, (20, 2)),
    (b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n", 20, "response headers over 20 bytes"),
    (b"HTTP/1.1 200 OK\r\nA: 12345", 20, "response headers over 20 bytes"),  # over, not ended
    (b"HTTP/1.1 200 OK\r\n", 20, None),
])
def test_split_head(buffer: bytes, max_head: int, expected: tuple[int, int] | str | None) -> None:
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            split_head(buffer, max_head)
    else:
        assert split_head(buffer, max_head) == expected


def merged(events: list) -> list:
    """Consecutive Data events as one: the same body whatever the reads."""
    out: list = []
    for event in events:
        if isinstance(event, Data) and out and isinstance(out[-1], Data):
            out[-1] = Data(out[-1].data + event.data)
        else:
            out.append(event)
    return out


def run(reader: LengthReader | ChunkedReader | CloseReader, pieces: list[bytes], eof: bool) -> list:
    events: list = []
    for piece in pieces:
        events += reader.feed(piece)
        if events and not isinstance(events[-1], Data):
            return merged(events)
    if eof:
        events += reader.eof()
    return merged(events)


H = b"hello"
READERS = [
    # reader, bytes in, whether the connection ends after them -> events out
    ("length 5", lambda: LengthReader(5), H, False, [Data(H), EndOfMessage()]),
    ("length 5, more", lambda: LengthReader(5), H + b"HTTP/1.1", False, [Data(H), EndOfMessage(extra=8)]),
    ("length 5, short", lambda: LengthReader(5), b"hel", True, [Data(b"hel"), Incomplete()]),
    ("length 5, waits", lambda: LengthReader(5), b"hel", False, [Data(b"hel")]),
    ("length 0", lambda: LengthReader(0), b"", False, [EndOfMessage()]),
    ("length 0, more", lambda: LengthReader(0), b"xy", False, [EndOfMessage(extra=2)]),
    ("close", CloseReader, H, True, [Data(H), EndOfMessage()]),
    ("close, nothing", CloseReader, b"", True, [EndOfMessage()]),
    ("chunked", ChunkedReader, b"5\r\nhello\r\n0\r\n\r\n", False, [Data(H), EndOfMessage()]),
    ("chunked, two", ChunkedReader, b"2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n", False, [Data(H), EndOfMessage()]),
    ("chunked, bare LF", ChunkedReader, b"5\nhello\n3;x\nabc\r\n0\n\n", False, [Data(H + b"abc"), EndOfMessage()]),
    ("chunked, upper hex", ChunkedReader, b"A\r\n0123456789\r\n0\r\n\r\n", False,
     [Data(b"0123456789"), EndOfMessage()]),
    ("chunked, extension", ChunkedReader, b"5;name=value\r\nhello\r\n0\r\n\r\n", False, [Data(H), EndOfMessage()]),
    ("chunked, blanks", ChunkedReader, b"5 \t;x\r\nhello\r\n0\r\n\r\n", False, [Data(H), EndOfMessage()]),
    ("chunked, trailers", ChunkedReader, b"5\r\nhello\r\n0\r\nT: 1\r\nU: 2\r\n\r\n", False,
     [Data(H), EndOfMessage()]),
    ("chunked, more", ChunkedReader, b"5\r\nhello\r\n0\r\n\r\nHTTP", False, [Data(H), EndOfMessage(extra=4)]),
    ("chunked, short", ChunkedReader, b"5\r\nhel", True, [Data(b"hel"), Incomplete()]),
    ("chunked, no last chunk", ChunkedReader, b"5\r\nhello\r\n", True, [Data(H), Incomplete()]),
    ("chunked, no empty line", ChunkedReader, b"5\r\nhello\r\n0\r\n", True, [Data(H), Incomplete()]),
    ("chunked, 0x", ChunkedReader, b"0x5\r\nhello\r\n0\r\n\r\n", False, [Malformed("bad chunk size b'0x5'")]),
    ("chunked, +", ChunkedReader, b"+5\r\nhello\r\n", False, [Malformed("bad chunk size b'+5'")]),
    ("chunked, _", ChunkedReader, b"1_0\r\n", False, [Malformed("bad chunk size b'1_0'")]),
    ("chunked, leading space", ChunkedReader, b" 5\r\n", False, [Malformed("bad chunk size b' 5'")]),
    ("chunked, negative", ChunkedReader, b"5\r\nhello\r\n-2\r\nxx\r\n", False,
     [Data(H), Malformed("bad chunk size b'-2'")]),
    ("chunked, empty size", ChunkedReader, b"\r\n", False, [Malformed("bad chunk size b''")]),
    ("chunked, 17 digits", ChunkedReader, b"1" * 17 + b"\r\n", False,
     [Malformed("bad chunk size b'11111111111111111'")]),
    ("chunked, data overruns", ChunkedReader, b"2\r\nhello\r\n", False, [Data(b"he"), Malformed("malformed chunked body")]),
    ("chunked, long line", ChunkedReader, b"5" * 4097, False, [Malformed("chunk size line too long")]),
    ("chunked, line at the limit", ChunkedReader, b"0" * 4096, False, []),
]


@pytest.mark.parametrize("name, make, data, eof, expected", READERS, ids=[r[0] for r in READERS])
def test_readers(name: str, make, data: bytes, eof: bool, expected: list) -> None:
    assert run(make(), [data], eof) == expected
    if name in ("chunked, long line", "length 0, more"):
        return  # the line's length is checked per read; the first byte is already past the end
    # one byte per read: the bytes after the end come in reads of their own, never fed to the reader
    # (the exchange counts them)
    one_byte = [EndOfMessage() if isinstance(e, EndOfMessage) else e for e in expected]
    assert run(make(), [data[i:i + 1] for i in range(len(data))] or [b""], eof) == one_byte


def test_chunked_states_and_positions() -> None:
    """The chunked reader's named states, and where each piece of data ends
    in the bytes fed (the raw body is cut there when reading stops)."""
    reader = ChunkedReader()
    assert reader.state is Chunk.SIZE
    first = reader.feed(b"5\r\nhel")
    assert first == [Data(b"hel")] and first[0].end == 6 and reader.state is Chunk.DATA and reader.left == 2
    second = reader.feed(b"lo\r")
    assert second == [Data(b"lo")] and second[0].end == 8 and reader.state is Chunk.DATA_END
    assert reader.consumed == 8  # the CR waits for its LF
    assert reader.feed(b"\n3\r\nabc\r\n0\r\n") == [Data(b"abc")] and reader.state is Chunk.TRAILERS
    assert reader.feed(b"\r\nextra") == [EndOfMessage(extra=5)] and reader.state is Chunk.DONE
    assert reader.consumed == len(b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n")


def test_a_chunk_in_one_read_is_passed_on_without_a_copy() -> None:
    data = b"x" * 1000
    reader = ChunkedReader()
    reader.feed(b"3e8\r\n")
    (event,) = reader.feed(data)
    assert event.data is data


EXCHANGES = [
    # answer, HEAD request -> state, keep-alive, body
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", False, State.DONE, True, b"hello"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello", False, State.DONE, False, b"hello"),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", False, State.DONE, False, b"hello"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP", False, State.DONE, False, b"hello"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello", False, State.BODY, False, b"hello"),
    (b"HTTP/1.1 200 OK\r\n\r\nhello", False, State.BODY, False, b"hello"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", False, State.DONE, True,
     b"hello"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nX", False, State.DONE, False,
     b"hello"),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False, State.DONE, True, b"ok"),
    (b"HTTP/1.1 204 No Content\r\n\r\n", False, State.DONE, True, b""),
    (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", False, State.DONE, True, b""),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", True, State.DONE, True, b""),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", True, State.DONE, False, b""),  # a body to HEAD: off
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", False, State.FAILED, False, b""),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", False, State.FAILED, False, b""),
]


@pytest.mark.parametrize("answer, head_only, state, keep_alive, body", EXCHANGES)
def test_exchange_states(answer: bytes, head_only: bool, state: State, keep_alive: bool, body: bytes) -> None:
    for pieces in ([answer], [answer[i:i + 1] for i in range(len(answer))]):
        exchange = Exchange(lambda e: True, 1 << 62, 0, 65536, head_only=head_only)
        for piece in pieces:
            exchange.feed(piece)
        assert (exchange.state, exchange.keep_alive, exchange.body()) == (state, keep_alive, body)


@pytest.mark.parametrize("answer, state, keep_alive", [
    (b"HTTP/1.1 200 OK\r\n\r\nhello", State.DONE, False),  # framed by the connection's end
    (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello", State.LOST, False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", State.LOST, False),
    (b"HTTP/1.1 200 OK\r\nContent-", State.FAILED, False),
])
def test_exchange_at_the_connections_end(answer: bytes, state: State, keep_alive: bool) -> None:
    exchange = Exchange(lambda e: True, 1 << 62, 0, 65536, head_only=False)
    exchange.feed(answer)
    exchange.ended(None)
    assert (exchange.state, exchange.keep_alive) == (state, keep_alive)
    if state is State.FAILED:
        assert str(exchange.error) == "connection closed before the response"


def test_a_body_that_inflates_far_drains_in_steps_and_then_ends() -> None:
    """The body ends on the wire while decoded output still waits: DRAINING,
    one DECODE_STEP per pull, DONE (and reusable) once it is all out; the
    connection's end meanwhile is no data loss."""
    packed = gzip.compress(b"\0" * (DECODE_STEP * 3), mtime=0)
    answer = (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed)) + packed
    exchange = Exchange(lambda e: True, 1 << 62, 0, 65536, head_only=False)
    exchange.feed(answer)
    states = [exchange.state]
    while exchange.waiting:
        exchange.pull()
        exchange.ended(None)
        states.append(exchange.state)
    assert states == [State.DRAINING] * 3 + [State.DONE]
    assert exchange.kept == DECODE_STEP * 3 and exchange.keep_alive


def test_body_pieces_are_at_most_one_read_of_scrapys_handler() -> None:
    pieces: list[bytes] = []
    exchange = Exchange(lambda e: True, 1 << 62, 0, 65536, head_only=False,
                        on_data=lambda piece: pieces.append(piece) is None)
    body = bytes(range(256)) * 1000
    exchange.feed(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
    exchange.feed(body[:100])  # small reads are joined
    exchange.feed(body[100:])  # a large one is sliced
    assert exchange.state is State.DONE and b"".join(pieces) == body == exchange.body()
    assert [len(p) for p in pieces] == [PIECE] * (len(body) // PIECE) + [len(body) % PIECE]


def test_a_stop_after_a_piece_keeps_that_piece_and_no_more() -> None:
    pieces: list[bytes] = []

    def first_only(piece: bytes) -> bool:
        pieces.append(piece)
        return False

    exchange = Exchange(lambda e: True, 1 << 62, 0, 65536, head_only=False, on_data=first_only)
    body = b"y" * (PIECE * 3)
    exchange.feed(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert exchange.state is State.CUT and not exchange.keep_alive
    assert pieces == [body[:PIECE]] and exchange.body() == body[:PIECE]


def test_the_raw_chunked_body_ends_where_reading_stopped() -> None:
    """With raw bytes kept (WARC), a chunked body cut at the cap keeps its
    framing up to the end of the chunk data that crossed the cap."""
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n"
    for pieces in ([answer], [answer[i:i + 1] for i in range(len(answer))]):
        exchange = Exchange(lambda e: True, 7, 0, 65536, head_only=False, raw=True)
        for piece in pieces:
            if not exchange.finished:
                exchange.feed(piece)
        body = exchange.body()
        assert exchange.state is State.CUT and body == b"hellowo"
        assert exchange.raw_body(body) == (b"5\r\nhello\r\n5\r\nworld" if len(pieces) == 1 else b"5\r\nhello\r\n5\r\nwor")
    whole = Exchange(lambda e: True, 1 << 62, 0, 65536, head_only=False, raw=True)
    whole.feed(answer + b"extra")
    assert whole.raw_body(whole.body()) == answer[answer.index(b"\r\n\r\n") + 4:]
