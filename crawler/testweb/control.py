"""Run the test web in a child process and read its request log."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import asdict
from typing import Any, NamedTuple

from crawler.testweb.config import WebConfig


class LogEntry(NamedTuple):
    ms: float
    host: str
    target: str
    status: int

    @property
    def domain(self) -> str:
        return self.host.rsplit(":", 1)[0]

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


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
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> TestWebProcess:
        cmd = [sys.executable, "-m", "crawler.testweb", "--port", "0",
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
        self.port = int(line.strip().split("=", 1)[1])
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> TestWebProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def domains(self) -> list[str]:
        return [self.config.domain(i) for i in range(self.config.domains)]

    def url(self, domain: int | str, path: str = "/") -> str:
        name = self.config.domain(domain) if isinstance(domain, int) else domain
        return f"http://{name}:{self.port}{path}"

    def fetch(self, domain: int | str, path: str = "/", timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
        """GET a page straight from 127.0.0.1 with the right Host header."""
        name = self.config.domain(domain) if isinstance(domain, int) else domain
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", headers={"Host": f"{name}:{self.port}"}
        )
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def log(self, since: int = 0) -> list[LogEntry]:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.port}/__testweb__/log?since={since}", timeout=30
        ) as resp:
            text = resp.read().decode()
        entries = []
        for line in text.splitlines():
            ms, host, target, status = line.split("\t")
            entries.append(LogEntry(float(ms), host, target, int(status)))
        return entries


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
