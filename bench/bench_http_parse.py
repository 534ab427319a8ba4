"""HTTP/1.1 response parsing alone, on one core: CPU per response of
``crawler.fetch._exchange.Exchange`` (the project's parser) against the same
exchange framed by httptools (llhttp, with its leniency flags), and which of
the two accepts what the real web sends (bare LF line ends, a header line
without a colon, ``Content-Length: 5, 5``).

Responses are HTML of about 70 kB and 220 kB (the median and a large page of
the open web), framed by ``Content-Length`` or ``chunked`` (8 kB chunks, as
nginx sends), not compressed (decoding costs the same under either parser),
fed in 16 kB reads as the transport delivers them. No network, no event loop
turns: only parsing and keeping the body.

    python bench/bench_http_parse.py [--rounds 5] [--responses 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawler.fetch._exchange import Exchange, State  # noqa: E402
from crawler.fetch._http11 import LengthReader  # noqa: E402

try:
    import httptools
except ImportError:  # not a dependency: measured when installed
    httptools = None

READ = 16 * 1024
HEAD = (b"HTTP/1.1 200 OK\r\nServer: nginx/1.24.0\r\nDate: Fri, 04 Dec 2026 08:00:00 GMT\r\n"
        b"Content-Type: text/html; charset=utf-8\r\nConnection: keep-alive\r\nVary: Accept-Encoding\r\n"
        b"Cache-Control: max-age=600\r\nX-Frame-Options: SAMEORIGIN\r\n"
        b"Set-Cookie: session=0123456789abcdef; Path=/; HttpOnly; Secure\r\n"
        b"Strict-Transport-Security: max-age=31536000\r\nLast-Modified: Thu, 03 Dec 2026 10:00:00 GMT\r\n")


def page(size: int) -> bytes:
    row = b'<li><a href="/articles/%06d.html">An article title, number %06d</a> and some text.</li>\n'
    body = b"<!DOCTYPE html><html><head><title>t</title></head><body><ul>\n"
    i = 0
    while len(body) < size:
        body += row % (i, i)
        i += 1
    return body[:size]


def framed(body: bytes, chunked: bool) -> bytes:
    if not chunked:
        return HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body
    parts = [HEAD + b"Transfer-Encoding: chunked\r\n\r\n"]
    for i in range(0, len(body), 8192):
        piece = body[i:i + 8192]
        parts.append(b"%x\r\n" % len(piece) + piece + b"\r\n")
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)


def reads(answer: bytes) -> list[bytes]:
    return [answer[i:i + READ] for i in range(0, len(answer), READ)]


class LlhttpExchange(Exchange):
    """The same exchange (body kept by ``Exchange._keep``), framed by httptools."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.parser = httptools.HttpResponseParser(self)
        self.parser.set_dangerous_leniencies(lenient_optional_cr_before_lf=True, lenient_headers=True,
                                             lenient_spaces_after_chunk_size=True)

    def feed(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            from scrapy.exceptions import DownloadFailedError
            self.fail(DownloadFailedError(f"malformed response: {e}"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.state = State.BODY
        self.reader = LengthReader(0)  # never fed: httptools frames the body
        self.on_head(self)

    def on_body(self, body: bytes) -> None:
        self._keep(body)

    def on_message_complete(self) -> None:
        self._end(State.DONE)


def run(kind: type[Exchange], answers: list[list[bytes]]) -> list[Exchange]:
    out = []
    for pieces in answers:
        exchange = kind(lambda e: True, 250_000, 0, 65536, head_only=False)
        for piece in pieces:
            exchange.feed(piece)
        out.append(exchange)
    return out


def measure(kinds: list[type[Exchange]], answer: bytes, responses: int, rounds: int) -> list[float]:
    """Best CPU seconds per response over ``rounds`` for each kind, the kinds
    taking turns in each round (the allocator's state moves the numbers: a
    kind measured first, or alone, looks slower), after a round to warm up."""
    answers = [reads(answer)] * responses
    best = [float("inf")] * len(kinds)
    for n in range(rounds + 1):
        for i, kind in enumerate(kinds):
            started = time.process_time()
            run(kind, answers)
            if n:
                best[i] = min(best[i], (time.process_time() - started) / responses)
    return best


TOLERANCE = {
    "bare LF": b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
    "line without a colon": b"HTTP/1.1 200 OK\r\nnot a header\r\nContent-Length: 5\r\n\r\nhello",
    "Content-Length: 5, 5": b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
    "Content-Length twice": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
}


def tolerates(kind: type[Exchange], answer: bytes) -> bool:
    (exchange,) = run(kind, [[answer]])
    return exchange.finished and exchange.error is None and exchange.body() == b"hello"


async def main(rounds: int, responses: int) -> None:
    kinds: list[tuple[str, type[Exchange]]] = [("Exchange", Exchange)]
    if httptools is not None:
        kinds.append((f"httptools {httptools.__version__}", LlhttpExchange))
    else:
        print("httptools is not installed: the project's parser alone")
    print(f"{'response':<24}" + "".join(f"{name:>22}" for name, _ in kinds) + "   (µs CPU per response)")
    for size in (70_000, 220_000):
        body = page(size)
        for chunked in (False, True):
            answer = framed(body, chunked)
            check: Callable[[Exchange], bool] = lambda e, b=body: e.body() == b  # noqa: E731
            assert all(check(e) for _, k in kinds for e in run(k, [reads(answer)]))
            times = measure([k for _, k in kinds], answer, responses, rounds)
            label = f"{size // 1000} kB {'chunked' if chunked else 'Content-Length'}"
            print(f"{label:<24}" + "".join(f"{t * 1e6:>22.1f}" for t in times))
    print("\ntolerance (accepted as Scrapy's handler does)")
    for name, answer in TOLERANCE.items():
        print(f"{name:<24}" + "".join(f"{'yes' if tolerates(k, answer) else 'NO':>22}" for _, k in kinds))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--responses", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.responses))
