"""A bare asyncio crawler, written for bench_openweb.py only: no storage, no
Redis, no crash safety. The yardstick of what a crawl costs with nothing but
an event loop (uvloop), pooled HTTP connections (aiohttp), Lexbor link
extraction (selectolax) and robots.txt (protego).

    python bench/bare_crawler.py SEEDS --delay 10 --seconds 120 [--ca-file PEM]
        [--user-agent UA] [--concurrency 1000] [--max-bytes 250000]

One task per domain: robots.txt first, then one page at a time, ``--delay``
seconds from the end of the previous answer to the next request (billion's
``CRAWLER_DELAY_FROM = "finish"``), or robots.txt's Crawl-delay if longer.
Every ``*.test`` host resolves to 127.0.0.1 (the test web).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

import aiohttp
import uvloop
from protego import Protego
from selectolax.lexbor import LexborHTMLParser

_TRACKING = ("utm_", "gclid=", "fbclid=")
_FOLLOWED = 'a[href]:not([href^="#"]):not([rel~="nofollow" i])'
#: our clock reads the end of an answer a hair before the site logs it: this
#: much more than the delay keeps every interval the site sees at the delay
_MARGIN = 0.05


class LoopbackResolver(aiohttp.abc.AbstractResolver):
    """Every host is 127.0.0.1: the test web serves them all."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict[str, Any]]:
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


def bare_clean(url: str) -> str:
    """Fragment cut, tracking-only query dropped: what dedup compares."""
    url = urldefrag(url)[0]
    base, _, query = url.partition("?")
    if query and all(p.startswith(_TRACKING) for p in query.split("&")):
        return base
    return url


class BareCrawler:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.agent = args.user_agent.split("/", 1)[0]  # the product token robots groups match
        self.seen: set[str] = set()
        self.queues: dict[str, deque[str]] = {}
        self.robots: dict[str, Protego | None] = {}
        self.last_done: dict[str, float] = {}
        self.running: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.gate = asyncio.Semaphore(args.concurrency)
        self.pages = self.errors = 0

    def add(self, url: str) -> None:
        url = bare_clean(url)
        if url in self.seen or not url.startswith(("http://", "https://")):
            return
        self.seen.add(url)
        host = urlsplit(url).netloc.lower()
        self.queues.setdefault(host, deque()).append(url)
        if host not in self.running:
            self.running.add(host)
            task = asyncio.get_running_loop().create_task(self.domain(host, url.split("//", 1)[0]))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def fetch(self, url: str) -> tuple[int, str, bytes]:
        """(status, content type, body cut at --max-bytes); (0, "", b"") on errors."""
        async with self.gate:
            try:
                async with self.session.get(url, allow_redirects=False) as resp:
                    chunks, size = [], 0
                    while size < self.args.max_bytes:
                        chunk = await resp.content.read(65536)
                        if not chunk:
                            break
                        chunks.append(chunk)
                        size += len(chunk)
                    if size >= self.args.max_bytes:
                        resp.close()  # the rest is not wanted: drop the connection
                    return resp.status, resp.headers.get("Content-Type", ""), b"".join(chunks)
            except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError):
                self.errors += 1
                return 0, "", b""

    async def wait_turn(self, host: str, delay: float) -> None:
        last = self.last_done.get(host)
        if last is not None:
            await asyncio.sleep(max(0.0, last + delay + _MARGIN - time.monotonic()))

    async def domain(self, host: str, scheme: str) -> None:
        delay = self.args.delay
        try:
            if host not in self.robots:
                status, _, body = await self.fetch(f"{scheme}//{host}/robots.txt")
                self.last_done[host] = time.monotonic()
                text = body.decode("utf-8", "replace") if 200 <= status < 300 else ""
                self.robots[host] = Protego.parse(text) if text else None
            rules = self.robots[host]
            if rules is not None:
                delay = max(delay, rules.crawl_delay(self.agent) or 0.0)
            queue = self.queues[host]
            while queue:
                url = queue.popleft()
                if rules is not None and not rules.can_fetch(url, self.agent):
                    continue
                await self.wait_turn(host, delay)
                status, ctype, body = await self.fetch(url)
                self.last_done[host] = time.monotonic()
                if status == 200 and ctype.startswith("text/html"):
                    self.pages += 1
                    self.bare_links(body, url)
        finally:
            self.running.discard(host)

    def bare_links(self, body: bytes, url: str) -> None:
        for node in LexborHTMLParser(body).css(_FOLLOWED):
            href = node.attributes.get("href")
            if href:
                self.add(urljoin(url, href.strip()))

    async def run(self) -> None:
        context = ssl.create_default_context(cafile=self.args.ca_file) if self.args.ca_file else False
        connector = aiohttp.TCPConnector(limit=0, ssl=context, resolver=LoopbackResolver(), ttl_dns_cache=None)
        timeout = aiohttp.ClientTimeout(total=60, sock_connect=20)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=True,
                                         headers={"User-Agent": self.args.user_agent}) as self.session:
            for line in Path(self.args.seeds).read_text().splitlines():
                if line.strip():
                    self.add(line.strip())
            await asyncio.sleep(self.args.seconds)
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        print(f"bare: {self.pages} pages, {len(self.seen)} URLs seen, {self.errors} errors", file=sys.stderr)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("seeds")
    p.add_argument("--delay", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--ca-file")
    p.add_argument("--user-agent", default="crawler/0.1 (+bench@example.org)")
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--max-bytes", type=int, default=250_000, help="bodies cut here, as billion's default")
    uvloop.run(BareCrawler(p.parse_args()).run())


if __name__ == "__main__":
    main()
