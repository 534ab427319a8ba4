"""The HTTP/1.1 server of the test web: asyncio protocol, keep-alive, a log.

Every request except the control paths under ``/__testweb__/`` is recorded as
``<epoch ms>\t<host>\t<target>\t<status>\t<done ms>\t<address>`` (status 0:
connection dropped), the first time being when the request's head was read,
the next just before the last bytes of its answer were written; the address
is the server's own end of the connection (the address the client connected
to: with a layout of addresses, WebConfig.addresses, the one its resolver
gave). Both are read on the
monotonic clock, set to the epoch once when the log opens: the interval
between two of them is time the site lived, whatever the system's wall clock
does meanwhile (a step of it between two stamps would be measured as part
of the interval, by the politeness audits among others). Four columns
follow for the changing pages (devkit/testweb/changes.py): the version a
page's body showed (``-``: a 304, or not a page), the page's version when it
was answered (what a 304 stood for; ``-``: not a page), the conditional
headers received (``n`` If-None-Match, ``m`` If-Modified-Since, ``nm``
both, ``-`` neither) and the schedule clock's time of the answer (s; ``-``:
not a page).
``GET /__testweb__/log?since=N`` returns the log from line N on;
``GET /__testweb__/stats`` counts connections, TLS handshakes and the
handshakes that resumed a session. ``GET /__testweb__/clock`` shows the
schedule clock (``now``, its ``origin`` in epoch s, ``manual``);
``?advance=S`` or ``?set=T`` moves a manual one. ``GET
/__testweb__/outage?share=0.1&seconds=120&mode=503|timeout&seed=N`` takes a
share of the domains down for a while (``Site.start_outage``): their pages
and robots.txt answer 503, or (``timeout``) nothing, the connection held
until the client hangs up (the log's ``hung`` column) or the outage ends
(then closed: its ``done``); such a request is logged with status 0.

With a layout the server listens on each of its addresses and on 127.0.0.1,
all on one port (``listen``). With ``tls`` the port speaks HTTPS only; ``also_plain`` adds a second port
with the same site over plain HTTP (one log, one set of counters). ``latency_ms`` delays each answer by
a log-normal time to first byte; ``bandwidth`` paces each connection's writes.
"""

from __future__ import annotations

import asyncio
import errno
import json
import math
import random
import socket
import ssl
import time
from collections.abc import Sequence
from pathlib import Path

from devkit.testweb.site import Reply, Site

_REASONS = {
    200: b"OK", 301: b"Moved Permanently", 302: b"Found", 304: b"Not Modified", 400: b"Bad Request",
    404: b"Not Found", 410: b"Gone", 429: b"Too Many Requests",
    500: b"Internal Server Error", 503: b"Service Unavailable",
}
_CONTROL = "/__testweb__/"
_MAX_HEAD = 64 * 1024


class RequestLog:
    """Every request: when its head was read, and when the last bytes of its
    answer were handed to the kernel (stamped just before: 0 until then;
    the arrival time for a dropped connection), and when the client hung up
    before the end of its answer (a size cap, a timeout; 0 if it did not);
    epoch ms on the monotonic clock, written to the microsecond."""

    def __init__(self, path: Path | None = None) -> None:
        # [arrived ms, host, target, status, done ms, address, hung ms, version, current, conditionals, at]
        self.entries: list[list] = []
        self._flushed = 0
        self._file = open(path, "a", buffering=1 << 16) if path else None
        self._epoch = _epoch_offset()

    def now(self) -> float:
        """Epoch ms on the monotonic clock (see the module's docstring)."""
        return (self._epoch + time.monotonic()) * 1000

    def add(self, host: str, target: str, status: int, arrived: float | None = None, address: str = "",
            reply: Reply | None = None, conditionals: str = "-") -> list:
        """A request read at ``arrived`` (``now()``; default: now) on a
        connection to ``address`` (the server's end), answered with
        ``reply`` (its version columns), with ``conditionals`` received."""
        if arrived is None:
            arrived = self.now()
        entry = [arrived, host, target, status, arrived if status == 0 else 0.0, address, 0.0,
                 _or_dash(getattr(reply, "version", None)), _or_dash(getattr(reply, "current", None)),
                 conditionals, _or_dash(getattr(reply, "at", None))]
        self.entries.append(entry)
        return entry

    def done(self, entry: list) -> None:
        entry[4] = self.now()

    def hung_up(self, entry: list) -> None:
        entry[6] = self.now()

    def text(self, since: int = 0) -> str:
        return "".join(f"{e[0]:.3f}\t{e[1]}\t{e[2]}\t{e[3]}\t{e[4]:.3f}\t{e[5]}\t{e[6]:.3f}"
                       f"\t{e[7]}\t{e[8]}\t{e[9]}\t{e[10]}\n" for e in self.entries[since:])

    def flush(self) -> None:
        if self._file is not None and self._flushed < len(self.entries):
            self._file.write(self.text(self._flushed))
            self._file.flush()
            self._flushed = len(self.entries)

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


def _or_dash(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _epoch_offset() -> float:
    """Wall clock minus monotonic clock, seconds: of a few readings, the one
    whose monotonic bracket was the narrowest (least disturbed)."""
    best, offset = math.inf, 0.0
    for _ in range(5):
        before = time.monotonic()
        wall = time.time()
        after = time.monotonic()
        if after - before < best:
            best, offset = after - before, wall - (before + after) / 2
    return offset


_TICK = 0.05  # seconds between two paced writes


class Counters:
    def __init__(self) -> None:
        self.connections = 0
        self.tls_handshakes = 0
        self.tls_resumed = 0
        self.requests = 0

    def to_json(self) -> bytes:
        return json.dumps(vars(self), sort_keys=True).encode()


class HTTPProtocol(asyncio.Protocol):
    def __init__(self, site: Site, log: RequestLog, counters: Counters, rng: random.Random,
                 secure: bool) -> None:
        self.site = site
        self.secure = secure
        self.log = log
        self.counters = counters
        self.rng = rng
        self.buffer = bytearray()
        self.waiting = False  # a delayed or paced answer is pending; later requests wait
        self.transport: asyncio.Transport | None = None
        self.address = ""  # the server's end of the connection: where the client connected
        self.current: list | None = None  # the log entry of the request being answered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sockname = transport.get_extra_info("sockname")
        self.address = str(sockname[0]) if sockname else ""
        self.counters.connections += 1
        tls = transport.get_extra_info("ssl_object")
        if tls is not None:  # asyncio completes the handshake first
            self.counters.tls_handshakes += 1
            self.counters.tls_resumed += bool(tls.session_reused)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.current is not None and not self.current[4]:
            # the client hung up before the answer's end (a size cap, a timeout):
            # its answer never ended, but nothing was in flight after this
            self.log.hung_up(self.current)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.waiting:
            self._process()

    def _process(self) -> None:
        if self.buffer[:2] == b"\x16\x03":  # a TLS greeting on a plain port: 400, as nginx answers it
            self._reply(_bad_request(), keep_alive=False, head_only=False)
            return
        while self.transport is not None and not self.waiting:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > _MAX_HEAD:
                    self._reply(_bad_request(), keep_alive=False, head_only=False)
                return
            lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            request_line = lines[0].split(" ")
            host, connection, body_length = "", "", 0
            if_none_match: str | None = None
            if_modified_since: str | None = None
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "host":
                    host = value.strip()
                elif name == "connection":
                    connection = value.strip().lower()
                elif name == "content-length" and value.strip().isdigit():
                    body_length = int(value.strip())
                elif name == "if-none-match":
                    if_none_match = value.strip()
                elif name == "if-modified-since":
                    if_modified_since = value.strip()
            if len(self.buffer) < end + 4 + body_length:
                return  # the body has not all arrived
            # read now: stamped before the answer is made, which takes time
            arrived = self.log.now()
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
            reply = self.site.answer(host, target, self.secure, (if_none_match, if_modified_since))
            received = ("n" if if_none_match is not None else "") + ("m" if if_modified_since is not None else "")
            reply.entry = self.current = self.log.add(host, target, reply.status, arrived, self.address,
                                                      reply, received or "-")
            self.counters.requests += 1
            if reply.drop:
                self.log.done(reply.entry)  # the drop is its answer: stamped before it, as answers are
                self.transport.abort()
                return
            if reply.hold:  # an outage's timeout: no byte until the client hangs up or the outage ends
                reply.entry[4] = 0.0  # not answered (yet): logged as status 0, not as a drop
                self.waiting = True
                asyncio.get_running_loop().call_later(reply.hold, self._end_hold, reply.entry)
                return
            config = self.site.config
            if config.latency_ms:
                reply.delay += self.rng.lognormvariate(math.log(config.latency_ms / 1000),
                                                       config.latency_sigma)
            if reply.delay:
                self.waiting = True
                asyncio.get_running_loop().call_later(
                    reply.delay, self._delayed, reply, keep_alive, head_only
                )
                return
            self._reply(reply, keep_alive, head_only)

    def _end_hold(self, entry: list) -> None:
        """A held request's outage is over: the connection is closed without
        an answer (stamped as its end), unless the client hung up first."""
        if self.transport is None or self.current is not entry:
            return
        self.log.done(entry)
        self.transport.abort()
        self.transport = None

    def _delayed(self, reply: Reply, keep_alive: bool, head_only: bool) -> None:
        self.waiting = False
        if self.transport is None:
            return
        self._reply(reply, keep_alive, head_only)
        self._process()

    def _reply(self, reply: Reply, keep_alive: bool, head_only: bool) -> None:
        assert self.transport is not None
        status = b"HTTP/1.1 %d %s\r\n" % (reply.status, _REASONS.get(reply.status, b"Status"))
        if reply.status == 304:  # no content, so no Content-Length/Type (RFC 9110 8.6, 15.4.5)
            head = [status, b"Server: crawler-testweb\r\n"]
        else:
            head = [status, b"Server: crawler-testweb\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                    % (reply.content_type, reply.length)]
        head.extend(b"%s: %s\r\n" % pair for pair in reply.headers)
        head.append(b"Connection: keep-alive\r\n\r\n" if keep_alive else b"Connection: close\r\n\r\n")
        bodiless = head_only or not reply.length
        if bodiless and reply.entry is not None:
            # the head is the whole answer (a 304, a HEAD): stamped before it goes, as the
            # last bytes of a body are below (stamped after, a 304 could read 1 ms short)
            self.log.done(reply.entry)
        self.transport.write(b"".join(head))
        rate = self.site.config.bandwidth
        if rate and not head_only and reply.length:
            self.waiting = True
            body = b"".join(reply.parts)
            self._pace(memoryview(body), max(1, int(rate * _TICK)), keep_alive, reply.entry)
            return
        if reply.entry is not None and not bodiless:
            # stamped before the bytes go: a stamp taken after the write can
            # fall after the client already has them, if this process is
            # descheduled in between (an interval 0.7 ms short, once in a while)
            self.log.done(reply.entry)
        if not head_only:
            self.transport.writelines(reply.parts)
        if not keep_alive:
            self.transport.close()
            self.transport = None

    def _pace(self, rest: memoryview, chunk: int, keep_alive: bool, entry: list | None) -> None:
        if self.transport is None:
            return
        if len(rest) > chunk:
            self.transport.write(rest[:chunk])
            asyncio.get_running_loop().call_later(_TICK, self._pace, rest[chunk:], chunk, keep_alive, entry)
            return
        if entry is not None:
            self.log.done(entry)  # before the last bytes go, as in _reply
        self.transport.write(rest)
        self.waiting = False
        if not keep_alive:
            self.transport.close()
            self.transport = None
            return
        self._process()

    def _control(self, target: str) -> Reply:
        path, _, query = target.partition("?")
        if path == _CONTROL + "log":
            since = 0
            for pair in query.split("&"):
                key, _, value = pair.partition("=")
                if key == "since" and value.isdigit():
                    since = int(value)
            body = self.log.text(since).encode()
            return Reply(200, [body], content_type=b"text/tab-separated-values")
        if path == _CONTROL + "stats":
            return Reply(200, [self.counters.to_json()], content_type=b"application/json")
        if path == _CONTROL + "outage":
            return self._outage(query)
        if path == _CONTROL + "clock":
            return self._clock(query)
        if path == _CONTROL + "config":
            return Reply(200, [self.site.config.to_json().encode()], content_type=b"application/json")
        return Reply(404, [b"unknown control path\n"], content_type=b"text/plain")


    def _clock(self, query: str) -> Reply:
        """``clock``: the schedule clock; ``?advance=S`` / ``?set=T``: move a manual one."""
        clock = self.site.clock
        args = dict(pair.partition("=")[::2] for pair in query.split("&") if pair)
        try:
            if "advance" in args:
                clock.advance(float(args["advance"]))
            if "set" in args:
                clock.set(float(args["set"]))
        except ValueError as exc:
            return Reply(400, [f"{exc}\n".encode()], content_type=b"text/plain")
        body = json.dumps({"now": clock.now(), "origin": clock.origin, "manual": clock.manual})
        return Reply(200, [body.encode()], content_type=b"application/json")

    def _outage(self, query: str) -> Reply:
        """``outage?share=0.1&seconds=120&mode=503|timeout&seed=N``: start one
        (Site.start_outage); the answer names the domains it took down."""
        args = dict(pair.partition("=")[::2] for pair in query.split("&") if pair)
        try:
            share, seconds = float(args.get("share", "0.1")), float(args.get("seconds", "120"))
            chosen = self.site.start_outage(share, seconds, args.get("mode", "503"), int(args.get("seed", "0")))
        except ValueError as exc:
            return Reply(400, [f"{exc}\n".encode()], content_type=b"text/plain")
        body = json.dumps({"domains": [self.site.config.domain(d) for d in chosen], "seconds": seconds,
                           "mode": self.site.outage_mode})
        return Reply(200, [body.encode()], content_type=b"application/json")


def _bad_request() -> Reply:
    return Reply(400, [b"bad request\n"], content_type=b"text/plain")


async def serve(site: Site, log: RequestLog, host: str | None, port: int | None,
                tls: ssl.SSLContext | None = None, counters: Counters | None = None,
                sock: socket.socket | None = None) -> asyncio.Server:
    """Serve ``site`` on ``host``:``port``, or on ``sock`` (one of ``listen``'s)."""
    loop = asyncio.get_running_loop()
    counters = counters or Counters()
    rng = random.Random(site.config.seed)
    secure = tls is not None

    def protocol() -> HTTPProtocol:
        return HTTPProtocol(site, log, counters, rng, secure)

    if sock is not None:
        return await loop.create_server(protocol, sock=sock, backlog=4096, ssl=tls)
    return await loop.create_server(protocol, host, port, backlog=4096, ssl=tls)


def listen(addresses: Sequence[str], port: int = 0, tries: int = 50) -> tuple[int, list[socket.socket]]:
    """Listening sockets on every one of ``addresses``, all on one port:
    ``port``, or (0) the one the system picks for the first address, tried on
    the others in turn, and another one after a clash (``tries`` times)."""
    for _ in range(tries):
        sockets: list[socket.socket] = []
        chosen = port
        try:
            for address in addresses:
                sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((address, chosen))
                sock.listen(4096)
                sock.setblocking(False)
                chosen = sock.getsockname()[1]
            return chosen, sockets
        except OSError as exc:
            for sock in sockets:
                sock.close()
            if port or exc.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no port free on all of {len(addresses)} addresses in {tries} tries")
