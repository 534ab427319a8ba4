"""Throughput of the test web on one core.

The server is pinned to CPU 0 and a load generator (keep-alive connections,
one request at a time each, as Scrapy does) to CPU 1. Prints pages/s and MB/s
for small pages and for the default open-web size distribution.

    python bench/bench_testweb.py [--seconds 5] [--connections 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from devkit.testweb.config import WebConfig  # noqa: E402
from devkit.testweb.control import TestWebProcess  # noqa: E402


class Client(asyncio.Protocol):
    def __init__(self, port: int, domains: int, pages: int, stats: dict[str, int], stop: float) -> None:
        self.port, self.domains, self.pages = port, domains, pages
        self.stats, self.stop = stats, stop
        self.buffer = bytearray()
        self.need = -1
        self.n = 0
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.send()

    def send(self) -> None:
        self.n += 1
        d = self.n % self.domains
        k = (self.n * 7) % self.pages
        self.transport.write(  # type: ignore[attr-defined]
            b"GET /p/%d.html HTTP/1.1\r\nHost: d%d.test:%d\r\nAccept: */*\r\n\r\n" % (k, d, self.port)
        )

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if self.need < 0:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buffer[:end]).lower()
                start = head.index(b"content-length:") + 15
                length = int(head[start: head.index(b"\r\n", start)])
                self.need = end + 4 + length
            if len(self.buffer) < self.need:
                return
            self.stats["bytes"] += self.need
            del self.buffer[: self.need]
            self.need = -1
            self.stats["pages"] += 1
            if time.monotonic() >= self.stop:
                self.transport.close()
                if not self.done.done():
                    self.done.set_result(None)
                return
            self.send()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def load(port: int, config: WebConfig, seconds: float, connections: int) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    stats = {"pages": 0, "bytes": 0}
    start = time.monotonic()
    clients = []
    for _ in range(connections):
        _, proto = await loop.create_connection(
            lambda: Client(port, config.domains, config.pages, stats, start + seconds),
            "127.0.0.1", port,
        )
        clients.append(proto)
    await asyncio.gather(*(c.done for c in clients))
    elapsed = time.monotonic() - start
    return stats["pages"] / elapsed, stats["bytes"] / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    if (os.cpu_count() or 1) >= 2 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {1})
        server_cpu: int | None = 0
    else:
        server_cpu = None
    cases = [
        ("small pages (2 KB)", WebConfig(domains=50, pages=100, size_fixed=2_000)),
        ("open-web sizes (median 138 KB, mean 242 KB)", WebConfig(domains=50, pages=100)),
    ]
    print(f"test web throughput, server on one core, {args.connections} keep-alive connections")
    for label, config in cases:
        with TestWebProcess(config, cpu=server_cpu) as web:
            asyncio.run(load(web.port, config, 0.5, args.connections))  # warm the page cache
            pages, mb = asyncio.run(load(web.port, config, args.seconds, args.connections))
        print(f"  {label:45s} {pages:9.0f} pages/s {mb:9.1f} MB/s")


if __name__ == "__main__":
    main()
