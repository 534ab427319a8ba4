"""Servers on 127.0.0.1 that answer with exact bytes, and Scrapy's own
HTTP/1.1 handler fetching the same bytes for reference.

    answers = [b"HTTP/1.1 200 OK\\nContent-Length: 5\\n\\nhello"]
    ours = asyncio.run(fetch_raw(answers))               # crawler.fetch
    theirs = scrapy_reference(answers)                   # HTTP11DownloadHandler
                                                         # + HttpCompressionMiddleware

Both give one :class:`Outcome` per answer, so a test can compare them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class RawServer:
    """Answers every request on a connection with ``answer``, written in
    ``piece``-byte writes, then closes the connection if ``close``."""

    def __init__(self, answer: bytes, close: bool = True, piece: int = 7) -> None:
        self.answer, self.close, self.piece = answer, close, piece
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not reader.at_eof():
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    break
                self.requests.append(head)
                for i in range(0, len(self.answer), self.piece):
                    writer.write(self.answer[i:i + self.piece])
                    await writer.drain()
                if self.close:
                    break
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()


@dataclass
class Outcome:
    """What a handler made of one answer: a response, or an error."""

    status: int = 0
    body: bytes = b""
    headers: dict[str, list[str]] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    protocol: str | None = None
    error: str = ""  # exception class name
    message: str = ""

    @classmethod
    def of(cls, result: Any) -> Outcome:
        if isinstance(result, BaseException):
            return cls(error=type(result).__name__, message=str(result))
        headers = {k.decode("latin-1").lower(): [v.decode("latin-1") for v in vs]
                   for k, vs in result.headers.items()}
        return cls(status=result.status, body=result.body, headers=headers, flags=list(result.flags),
                   protocol=result.protocol)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "body": base64.b64encode(self.body).decode()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(**{**data, "body": base64.b64decode(data["body"])})


def base_settings(**settings: Any) -> dict[str, Any]:
    return {"CRAWLER_HOST_MAP": {"*.test": "127.0.0.1"}, "CRAWLER_ALLOW_PRIVATE": ["127.0.0.1/32", "*.test"],
            **settings}


async def fetch_raw(answers: list[bytes], piece: int = 7, **settings: Any) -> list[Outcome]:
    """Each answer from its own server, fetched by one ``crawler.fetch`` handler."""
    from scrapy import Request
    from scrapy.utils.test import get_crawler

    from crawler.fetch import DownloadHandler

    handler = DownloadHandler(get_crawler(settings_dict=base_settings(**settings)))
    out: list[Outcome] = []
    for answer in answers:
        server = RawServer(answer, close=True, piece=piece)
        port = await server.start()
        try:
            out.append(Outcome.of(await handler.download_request(Request(f"http://127.0.0.1:{port}/"))))
        except Exception as e:  # noqa: BLE001 - the test looks at it
            out.append(Outcome.of(e))
        finally:
            server.stop()
    await handler.close()
    return out


_REFERENCE = """
import asyncio, json, sys
from scrapy.utils.reactor import install_reactor
install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
from twisted.internet import reactor
from scrapy import Request
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from tests.rawserver import Outcome, RawServer

job = json.load(sys.stdin)
results = []

async def main():
    crawler = get_crawler(settings_dict=job["settings"])
    handler = HTTP11DownloadHandler(crawler)
    middleware = HttpCompressionMiddleware(crawler=crawler)
    for answer in job["answers"]:
        server = RawServer(answer.encode("latin-1"), close=True, piece=job["piece"])
        port = await server.start()
        request = Request(f"http://127.0.0.1:{port}/")
        middleware.process_request(request)
        try:
            response = await handler.download_request(request)
            results.append(Outcome.of(middleware.process_response(request, response)).to_json())
        except Exception as e:
            results.append(Outcome.of(e).to_json())
        server.stop()
    await handler.close()

d = deferred_from_coro(main())
d.addBoth(lambda r: (print(r, file=sys.stderr) if r is not None else None, reactor.stop()))
reactor.run()
json.dump(results, sys.stdout)
"""


def scrapy_reference(answers: list[bytes], piece: int = 7, **settings: Any) -> list[Outcome]:
    """Each answer fetched by Scrapy's HTTP11DownloadHandler, its body then
    through HttpCompressionMiddleware, as a crawl would see it (in a child
    process: Twisted's reactor runs once per process)."""
    job = {"answers": [a.decode("latin-1") for a in answers], "piece": piece, "settings": settings}
    result = subprocess.run([sys.executable, "-c", _REFERENCE], input=json.dumps(job), capture_output=True,
                            text=True, cwd=ROOT, timeout=120, check=False)
    if result.returncode != 0 or not result.stdout:
        raise RuntimeError(f"the reference run failed: {result.stderr[-3000:]}")
    return [Outcome.from_json(o) for o in json.loads(result.stdout)]
