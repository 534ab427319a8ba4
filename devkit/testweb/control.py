"""Run the test web in a child process and read its request log."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any, NamedTuple

from devkit.process import stop as stop_process
from devkit.testweb.config import WebConfig


class LogEntry(NamedTuple):
    ms: float  # when the request's head was read (epoch ms, on the test web's monotonic clock)
    host: str
    target: str
    status: int
    done: float = 0.0  # just before the last bytes of its answer were written

    @property
    def domain(self) -> str:
        return self.host.rsplit(":", 1)[0]

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


def consecutive(log: Iterable[LogEntry]) -> list[tuple[LogEntry, LogEntry]]:
    """Each pair of requests to one domain that followed each other, by arrival:
    what a politeness audit measures (``b.ms - a.ms``, or ``b.ms - a.done``)."""
    by_domain: dict[str, list[LogEntry]] = {}
    for entry in log:
        by_domain.setdefault(entry.domain, []).append(entry)
    pairs = []
    for entries in by_domain.values():
        entries.sort(key=lambda e: e.ms)
        pairs += zip(entries, entries[1:])
    return pairs


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

    def fetch(self, domain: int | str, path: str = "/", timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
        """GET a page straight from 127.0.0.1 with the right Host header."""
        name = self.config.domain(domain) if isinstance(domain, int) else domain
        request = urllib.request.Request(
            f"{self.base}{path}", headers={"Host": f"{name}:{self.port}"}
        )
        try:
            with self._open(request, timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def log(self, since: int = 0) -> list[LogEntry]:
        with self._open(f"{self.base}/__testweb__/log?since={since}", 30) as resp:
            text = resp.read().decode()
        entries = []
        for line in text.splitlines():
            ms, host, target, status, done = line.split("\t")
            entries.append(LogEntry(float(ms), host, target, int(status), float(done)))
        return entries


    def counters(self) -> dict[str, int]:
        """Connections, TLS handshakes, resumed handshakes and requests so far."""
        with self._open(f"{self.base}/__testweb__/stats", 30) as resp:
            return json.loads(resp.read())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
