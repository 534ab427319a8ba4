"""The HTTP/1.1 server of the test web: asyncio protocol, keep-alive, a log.

Every request except the control paths under ``/__testweb__/`` is recorded as
``<epoch ms>\t<host>\t<target>\t<status>`` (status 0: connection dropped).
``GET /__testweb__/log?since=N`` returns the log from line N on.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from crawler.testweb.site import Reply, Site

_REASONS = {
    200: b"OK", 301: b"Moved Permanently", 302: b"Found", 400: b"Bad Request",
    404: b"Not Found", 410: b"Gone", 429: b"Too Many Requests",
    500: b"Internal Server Error", 503: b"Service Unavailable",
}
_CONTROL = "/__testweb__/"
_MAX_HEAD = 64 * 1024


class RequestLog:
    def __init__(self, path: Path | None = None) -> None:
        self.lines: list[str] = []
        self._flushed = 0
        self._file = open(path, "a", buffering=1 << 16) if path else None

    def add(self, host: str, target: str, status: int) -> None:
        self.lines.append(f"{time.time() * 1000:.1f}\t{host}\t{target}\t{status}\n")

    def flush(self) -> None:
        if self._file is not None and self._flushed < len(self.lines):
            self._file.writelines(self.lines[self._flushed:])
            self._file.flush()
            self._flushed = len(self.lines)

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


class HTTPProtocol(asyncio.Protocol):
    def __init__(self, site: Site, log: RequestLog) -> None:
        self.site = site
        self.log = log
        self.buffer = bytearray()
        self.waiting = False  # a delayed answer is pending; later requests wait
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.waiting:
            self._process()

    def _process(self) -> None:
        while self.transport is not None and not self.waiting:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > _MAX_HEAD:
                    self._reply(_bad_request(), keep_alive=False, head_only=False)
                return
            lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            request_line = lines[0].split(" ")
            host, connection, body_length = "", "", 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "host":
                    host = value.strip()
                elif name == "connection":
                    connection = value.strip().lower()
                elif name == "content-length" and value.strip().isdigit():
                    body_length = int(value.strip())
            if len(self.buffer) < end + 4 + body_length:
                return  # the body has not all arrived
            del self.buffer[: end + 4 + body_length]
            if len(request_line) != 3:
                self._reply(_bad_request(), keep_alive=False, head_only=False)
                return
            method, target, version = request_line
            keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
            head_only = method == "HEAD"
            if target.startswith(_CONTROL):
                self._reply(self._control(target), keep_alive, head_only)
                continue
            reply = self.site.answer(host, target)
            self.log.add(host, target, reply.status)
            if reply.drop:
                self.transport.abort()
                return
            if reply.delay:
                self.waiting = True
                asyncio.get_running_loop().call_later(
                    reply.delay, self._delayed, reply, keep_alive, head_only
                )
                return
            self._reply(reply, keep_alive, head_only)

    def _delayed(self, reply: Reply, keep_alive: bool, head_only: bool) -> None:
        self.waiting = False
        if self.transport is None:
            return
        self._reply(reply, keep_alive, head_only)
        self._process()

    def _reply(self, reply: Reply, keep_alive: bool, head_only: bool) -> None:
        assert self.transport is not None
        head = [
            b"HTTP/1.1 %d %s\r\n" % (reply.status, _REASONS.get(reply.status, b"Status")),
            b"Server: crawler-testweb\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            % (reply.content_type, reply.length),
        ]
        head.extend(b"%s: %s\r\n" % pair for pair in reply.headers)
        head.append(b"Connection: keep-alive\r\n\r\n" if keep_alive else b"Connection: close\r\n\r\n")
        self.transport.write(b"".join(head))
        if not head_only:
            self.transport.writelines(reply.parts)
        if not keep_alive:
            self.transport.close()
            self.transport = None

    def _control(self, target: str) -> Reply:
        path, _, query = target.partition("?")
        if path == _CONTROL + "log":
            since = 0
            for pair in query.split("&"):
                key, _, value = pair.partition("=")
                if key == "since" and value.isdigit():
                    since = int(value)
            body = "".join(self.log.lines[since:]).encode()
            return Reply(200, [body], content_type=b"text/tab-separated-values")
        if path == _CONTROL + "config":
            return Reply(200, [self.site.config.to_json().encode()], content_type=b"application/json")
        return Reply(404, [b"unknown control path\n"], content_type=b"text/plain")


def _bad_request() -> Reply:
    return Reply(400, [b"bad request\n"], content_type=b"text/plain")


async def serve(site: Site, log: RequestLog, host: str, port: int) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: HTTPProtocol(site, log), host, port, backlog=1024)
