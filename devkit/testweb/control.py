"""Run the test web in a child process and read its request log."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict
from itertools import pairwise
from typing import Any, Literal, NamedTuple

from devkit.process import stop as stop_process
from devkit.testweb.config import LOOPBACK, WebConfig, domain_addresses


class LogEntry(NamedTuple):
    ms: float  # when the request's head was read (epoch ms, on the test web's monotonic clock)
    host: str
    target: str
    status: int
    done: float = 0.0  # just before the last bytes of its answer were written (0: not yet)
    address: str = ""  # the test web's address the request came to (its end of the connection)
    hung: float = 0.0  # when the client hung up before the end of the answer (0: it did not)
    # a page's answer (devkit/testweb/changes.py): the version its body showed
    # (None: a 304, or not a page), the page's version when answered (what a
    # 304 stood for), the conditionals received ("n", "m", "nm", "-") and the
    # schedule clock's time of the answer (s)
    version: int | None = None
    current: int | None = None
    conditionals: str = "-"
    at: float | None = None

    @property
    def domain(self) -> str:
        return self.host.rsplit(":", 1)[0]

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


def consecutive(log: Iterable[LogEntry], by: Literal["domain", "address"] = "domain",
                ) -> list[tuple[LogEntry, LogEntry]]:
    """Each pair of requests to one domain (``by="address"``: to one address
    of the test web) that followed each other, by arrival: what a politeness
    audit measures (``b.ms - a.ms``, or ``b.ms - a.done``)."""
    if by not in ("domain", "address"):
        raise ValueError(f"by must be 'domain' or 'address', got {by!r}")
    groups: dict[str, list[LogEntry]] = {}
    for entry in log:
        groups.setdefault(entry.domain if by == "domain" else entry.address, []).append(entry)
    pairs = []
    for entries in groups.values():
        entries.sort(key=lambda e: e.ms)
        pairs += pairwise(entries)
    return pairs


def max_in_flight(log: Iterable[LogEntry], by: Literal["address", "domain"] = "address") -> dict[str, int]:
    """Per address (or domain), the most requests that were in flight at once:
    each request counts from its arrival (``ms``) to the end of its answer
    (``done``), or to when its client hung up (``hung``); one neither
    answered nor left when the log was read counts to the end. One that arrived at the very time another's answer ended follows it."""
    if by not in ("domain", "address"):
        raise ValueError(f"by must be 'domain' or 'address', got {by!r}")
    events: dict[str, list[tuple[float, int]]] = {}
    for entry in log:
        key = entry.address if by == "address" else entry.domain
        end = entry.done or entry.hung or float("inf")
        events.setdefault(key, []).extend(((entry.ms, 1), (end, -1)))
    result = {}
    for key, changes in events.items():
        changes.sort()  # at one time an end (-1) sorts before an arrival (+1)
        now = most = 0
        for _, change in changes:
            now += change
            most = max(most, now)
        result[key] = most
    return result


class TestWebProcess:
    """``with TestWebProcess(WebConfig(domains=5)) as web: web.url(0, "/")``"""

    __test__ = False  # not a pytest class

    def __init__(self, config: WebConfig | dict[str, Any] | None = None, *,
                 log_path: str | None = None, cpu: int | None = None) -> None:
        if config is None:
            config = WebConfig()
        elif isinstance(config, dict):
            config = WebConfig(**config)
        self.config = config
        self.log_path = log_path
        self.cpu = cpu
        self.port = 0
        self.ca_file: str | None = None  # with tls: the CA certificate clients trust
        self.plain_port: int | None = None  # with tls and also_plain: the plain HTTP port
        self.proc: subprocess.Popen[str] | None = None
        self._addresses: list[str] | None = None  # each domain's address, computed on first use
        self._numbers: dict[str, int] | None = None  # each domain's number by name, likewise

    def start(self) -> TestWebProcess:
        cmd = [sys.executable, "-m", "devkit.testweb", "--port", "0",
               "--config", json.dumps(asdict(self.config))]
        if self.log_path:
            cmd += ["--log", self.log_path]
        if self.cpu is not None:
            cmd = ["taskset", "-c", str(self.cpu), *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY port="):
            self.stop()
            raise RuntimeError(f"test web did not start: {line!r}")
        fields = dict(part.split("=", 1) for part in line.split()[1:])
        self.port = int(fields["port"])
        self.ca_file = fields.get("ca")
        self.plain_port = int(fields["plain"]) if "plain" in fields else None
        handlers: list[Any] = [_NoRedirect]
        if self.ca_file:
            context = ssl.create_default_context(cafile=self.ca_file)
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)
        return self

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    def __enter__(self) -> TestWebProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def domains(self) -> list[str]:
        return [self.config.domain(i) for i in range(self.config.domains)]

    def url(self, domain: int | str, path: str = "/", *, plain: bool = False) -> str:
        """The URL of ``path`` on ``domain``; ``plain``: on the plain HTTP port."""
        name = self.config.domain(domain) if isinstance(domain, int) else domain
        if plain:
            assert self.plain_port is not None, "the test web serves no plain HTTP port (also_plain)"
            return f"http://{name}:{self.plain_port}{path}"
        return f"{self.config.scheme}://{name}:{self.port}{path}"

    @property
    def base(self) -> str:
        return f"{self.config.scheme}://127.0.0.1:{self.port}"

    def _open(self, request: urllib.request.Request | str, timeout: float) -> Any:
        return self._opener.open(request, timeout=timeout)

    @property
    def addresses(self) -> list[str]:
        """The address of each domain, by number (WebConfig.addresses; all
        127.0.0.1 without a layout)."""
        if self._addresses is None:
            self._addresses = domain_addresses(self.config)
        return self._addresses

    def address_of(self, domain: int | str) -> str:
        """The address ``domain`` (a number, or a name: ``d3.test``,
        ``www.d3.test``, with a port or not) is served on; 127.0.0.1 for the
        names outside the layout (the sitemap sites, unknown names)."""
        if not self.config.spread:
            return LOOPBACK
        if isinstance(domain, int):
            return self.addresses[domain]
        if self._numbers is None:
            self._numbers = {self.config.domain(i).lower(): i for i in range(self.config.domains)}
        name = domain.rsplit(":", 1)[0].lower().rstrip(".")
        number = self._numbers.get(name, self._numbers.get(name.removeprefix("www.")))
        return LOOPBACK if number is None else self.addresses[number]

    def host_map(self, www: bool = True) -> dict[str, str]:
        """``CRAWLER_HOST_MAP`` for a crawler of this test web: each domain's
        name (and with ``www`` its ``www.`` name, which the site serves too)
        to its address, exact names, then one pattern for every other name
        under the domains' suffix (``*.test``) to 127.0.0.1, where the server
        listens too (the sitemap sites, links to unknown names); exact names
        win over patterns (crawler/resolver.py)."""
        mapping: dict[str, str] = {}
        for i, address in enumerate(self.addresses):
            name = self.config.domain(i).lower()
            mapping[name] = address
            if www:
                mapping["www." + name] = address
        suffix = self.config.domain_template.rsplit("}", 1)[-1]
        if suffix.startswith(".") and len(suffix) > 1:
            mapping["*" + suffix.lower()] = LOOPBACK
        return mapping

    def fetch(self, domain: int | str, path: str = "/", timeout: float = 10, *,
              address: str | None = None) -> tuple[int, dict[str, str], bytes]:
        """GET a page with the right Host header from ``address``: by default
        the domain's (127.0.0.1 without a layout); over HTTPS the domain's
        name goes in the TLS handshake (SNI) and its certificate is checked."""
        name = self.config.domain(domain) if isinstance(domain, int) else domain
        address = address or self.address_of(domain)
        if address != LOOPBACK:
            return self._fetch_at(address, name, path, timeout)
        request = urllib.request.Request(
            f"{self.base}{path}", headers={"Host": f"{name}:{self.port}"}
        )
        try:
            with self._open(request, timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def _fetch_at(self, address: str, name: str, path: str, timeout: float) -> tuple[int, dict[str, str], bytes]:
        conn: http.client.HTTPConnection
        if self.config.tls:
            assert self.ca_file is not None
            conn = _PinnedHTTPSConnection(address, self.port, name, ssl.create_default_context(cafile=self.ca_file),
                                          timeout)
        else:
            conn = http.client.HTTPConnection(address, self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers={"Host": f"{name}:{self.port}", "Connection": "close"})
            resp = conn.getresponse()
            return resp.status, dict(resp.headers), resp.read()
        finally:
            conn.close()

    def log(self, since: int = 0) -> list[LogEntry]:
        with self._open(f"{self.base}/__testweb__/log?since={since}", 30) as resp:
            text = resp.read().decode()
        entries = []
        for line in text.splitlines():
            ms, host, target, status, done, *rest = line.split("\t")
            address, hung, version, current, conditionals, at = (rest + ["", "0", "-", "-", "-", "-"])[:6]
            entries.append(LogEntry(float(ms), host, target, int(status), float(done), address, float(hung),
                                    _number(version, int), _number(current, int), conditionals,
                                    _number(at, float)))
        return entries

    def clock(self, advance: float | None = None, set_to: float | None = None) -> dict[str, Any]:
        """The schedule clock of the changing pages (``now``, its ``origin``
        in epoch s, ``manual``), after moving a manual one by ``advance``
        seconds or to ``set_to``."""
        query = urllib.parse.urlencode({key: value for key, value in (("advance", advance), ("set", set_to))
                                        if value is not None})
        try:
            with self._open(f"{self.base}/__testweb__/clock?{query}", 30) as resp:
                return dict(json.loads(resp.read()))
        except urllib.error.HTTPError as err:
            raise ValueError(err.read().decode().strip()) from None

    def outage(self, share: float, seconds: float, mode: str = "503", seed: int = 0) -> list[str]:
        """Take ``share`` of the domains down for ``seconds`` from now: their
        pages and robots.txt answer 503 (with the config's ``Retry-After``)
        or, with ``mode="timeout"``, nothing (held until the client hangs up
        or the outage ends); the domains it took (which ones: drawn from
        ``seed``). Replaces an outage under way; ``seconds=0`` ends it."""
        query = urllib.parse.urlencode({"share": share, "seconds": seconds, "mode": mode, "seed": seed})
        try:
            with self._open(f"{self.base}/__testweb__/outage?{query}", 30) as resp:
                return list(json.loads(resp.read())["domains"])
        except urllib.error.HTTPError as err:
            raise ValueError(err.read().decode().strip()) from None

    def counters(self) -> dict[str, int]:
        """Connections, TLS handshakes, resumed handshakes and requests so far."""
        with self._open(f"{self.base}/__testweb__/stats", 30) as resp:
            return json.loads(resp.read())


def _number(text: str, kind: type) -> Any:
    return None if text == "-" else kind(text)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to ``address``, with ``name`` in the handshake (SNI) and checked
    against the certificate: what a client whose resolver gave ``address`` does."""

    def __init__(self, address: str, port: int, name: str, context: ssl.SSLContext, timeout: float) -> None:
        super().__init__(address, port, timeout=timeout, context=context)
        self.name = name

    def connect(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.name)  # type: ignore[attr-defined]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
