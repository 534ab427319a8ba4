"""Real servers for the tests: redis-server processes on free loopback ports;
and a crawler for a scheduler to open under (``crawler_for``)."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import time
import types
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import redis
from scrapy import Spider
from scrapy.core.engine import ExecutionEngine
from scrapy.crawler import Crawler
from scrapy.utils.test import get_crawler

from crawler.embedded import find_redis_server
from devkit.process import stop as stop_process

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


class Quiet(Spider):
    name = "t"


def crawler_for(redis_url: str, **settings: object) -> Crawler:
    """A crawler whose engine exists but never starts (no download handlers)."""
    crawler = get_crawler(Quiet, settings_dict={"REDIS_URL": redis_url, "DOWNLOAD_HANDLERS": {"http": None,
                                                "https": None}, "CRAWLER_PROGRESS_INTERVAL": 0, **settings})
    crawler.spider = Quiet.from_crawler(crawler)
    crawler.engine = ExecutionEngine(crawler, lambda _: None)
    return crawler


def open_on(redis_url: str, clock: Any, **settings: object) -> Any:
    """A frontier scheduler on the test's Redis and clock (a ManualClock),
    opened under an engine that never starts."""
    from crawler.clock import use_clock
    from crawler.scheduler import FrontierScheduler

    crawler = crawler_for(redis_url, **settings)
    use_clock(crawler, clock)
    scheduler = FrontierScheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    return scheduler


def _cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds a running process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a running process has used so far."""
    return sum(_cpu_times(pid))


def system_seconds(pid: int) -> float:
    """The system (kernel) part of :func:`cpu_seconds`: system calls, I/O."""
    return _cpu_times(pid)[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free ports (a service that numbers
    its processes' ports from a base: ``--metrics-port``)."""
    while True:
        base = free_port()
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()


def free_cluster_port() -> int:
    """A free port whose cluster-bus port (port + 10000) is free too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class RedisServer:
    """A redis-server on 127.0.0.1:<free port>, data in ``workdir``."""

    def __init__(self, workdir: Path, *args: str, port: int | None = None, password: str | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.args = list(args)
        self.port = port or free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, **kwargs)  # type: ignore[arg-type]

    def start(self, timeout: float = 10) -> RedisServer:
        cmd = [find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1",
               "--dir", str(self.workdir), "--save", "", "--daemonize", "no",
               "--logfile", str(self.workdir / "redis.log"), *self.args]
        if self.password:
            cmd += ["--requirepass", self.password]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.client(socket_timeout=1).ping():
                    return self
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                pass
            except redis.ResponseError:
                return self  # loading or auth errors still mean it is up
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.workdir / "redis.log")
                raise RuntimeError(f"redis-server did not start: {log.read_text() if log.exists() else ''}")
            time.sleep(0.02)

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def scrapy_env(redis_url: str | None = None, *, settings: str | None = "devkit.settings",
               **extra: str) -> dict[str, str]:
    """The environment of a ``scrapy`` child: ``redis_url`` its Redis, the
    checkout importable, ``settings`` its settings module (``devkit.settings``:
    the project's, plus the test web's host map; None: the project in the
    working directory decides)."""
    env = dict(os.environ)
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    if settings is not None:
        env["SCRAPY_SETTINGS_MODULE"] = settings
    env.pop("REDIS_URL", None)
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_scrapy(args: list[str], env: dict[str, str], *, cwd: Path = ROOT,
               timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``scrapy <args>`` as a real child process."""
    return subprocess.run([sys.executable, "-m", "scrapy", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def wait_until(predicate: Callable[[], T], timeout: float, what: str = "", every: float = 0.02) -> T:
    """Ask ``predicate`` every ``every`` seconds until it answers something
    true, and return that; ``TimeoutError`` naming ``what`` after ``timeout``
    seconds. For waiting on another process; a test of this process's own
    timing drives a ``crawler.clock.ManualClock`` instead."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what or getattr(predicate, '__name__', 'condition')}: not within {timeout} s")
        time.sleep(every)


def garbage_of(run: Callable[[], object]) -> list[str]:
    """What ``run`` leaves that only the cyclic collector could free: type
    names with their module (``crawler.fetch._tls.TLSProtocol``), and the
    code of frames (``frame crawler/_breaker.py``)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        left = [f"frame {o.f_code.co_filename}" if isinstance(o, types.FrameType)
                else f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return left


@contextmanager
def private_tmpfs(folder: Path, size_bytes: int) -> Iterator[Path]:
    """A real tmpfs of ``size_bytes`` at ``folder``, in a mount namespace a
    holder process keeps (``devkit.chaos.on_private_tmpfs``); yields the
    folder as this process reaches it, through the holder's mounts."""
    from devkit import chaos

    folder.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(chaos.on_private_tmpfs(folder, size_bytes, ["sleep", "infinity"]))
    try:
        disk = chaos.in_mounts_of(holder.pid, folder)
        wait_until(lambda: os.path.ismount(disk), 10, "the tmpfs mounted")
        yield disk
    finally:
        holder.terminate()
        holder.wait(timeout=10)


def have_redis() -> bool:
    try:
        find_redis_server()
        return True
    except FileNotFoundError:
        return False



@contextmanager
def files_server(bodies: dict[str, tuple[str, bytes]]) -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1 answering ``bodies`` (path ->
    (Content-Type, body)) and 404 for any other path; yields ``host:port``."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Files(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            kind, body = bodies.get(self.path, ("text/plain", b"not here"))
            self.send_response(200 if self.path in bodies else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


__all__ = ["ROOT", "RedisClusterServers", "RedisServer", "files_server", "free_port", "have_redis", "run_scrapy",
           "scrapy_env", "wait_until"]


class RedisClusterServers:
    """A Redis Cluster of real redis-server processes on 127.0.0.1, for the
    tests and the benchmarks (``bench/bench_soak.py``)::

        cluster = RedisClusterServers(workdir, primaries=3, replicas=1, node_timeout_ms=1000).start()
        cluster.url                      # REDIS_URL of a node (with CRAWLER_REDIS_CLUSTER = True)
        cluster.nodes                    # every RedisServer: the primaries first, then the replicas
        cluster.master_of(key)           # the node serving ``key``'s slot now
        dead = cluster.kill_master(0)    # SIGKILL the master of slot range 0 (or ``key=``)
        new = cluster.wait_failover(30)  # its replica took over: the new master
        cluster.stop()

    ``start`` splits the 16384 slots evenly over the ``primaries``, gives each
    ``replicas`` replicas (``CLUSTER REPLICATE``) and returns once every node
    says ``cluster_state:ok`` and every replica is in sync
    (``master_link_status:up``). ``node_timeout_ms`` is
    ``cluster-node-timeout``: a master that stops answering for that long is
    failed over (about twice that, all told); no persistence (AOF off, no
    RDB), as replication alone is what a failover keeps. The primary ``i``
    starts on ``nodes[i]``, its replicas on ``nodes[primaries + i * replicas + j]``;
    after a failover ``master_of``, ``primaries()`` and ``replicas()`` say who
    is what now."""

    def __init__(self, workdir: Path, primaries: int = 3, replicas: int = 0, node_timeout_ms: int = 5000) -> None:
        self.primaries_count = primaries
        self.replicas_count = replicas
        self.nodes = [
            RedisServer(Path(workdir) / f"node{i}", "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(node_timeout_ms),
                        "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
                        port=free_cluster_port())
            for i in range(primaries * (1 + replicas))
        ]
        self.killed: list[RedisServer] = []
        self._failing = 0  # a slot of the last master killed
        self._ids: dict[int, str] = {}  # port -> node id

    def start(self, timeout: float = 30) -> RedisClusterServers:
        for node in self.nodes:
            node.start()
        self._ids = {n.port: n.client().execute_command("CLUSTER", "MYID").decode() for n in self.nodes}
        for i, node in enumerate(self.nodes[:self.primaries_count]):
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", *self._range(i))
        first = self.nodes[0].client()
        for node in self.nodes[1:]:
            first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
        wait_until(lambda: all(int(n.client().cluster("info")["cluster_known_nodes"]) == len(self.nodes)
                               for n in self.nodes), timeout, "cluster nodes met", every=0.05)
        for i in range(self.primaries_count):
            master = self._ids[self.nodes[i].port]
            for replica in self._replicas_of(i):
                replica.client().execute_command("CLUSTER", "REPLICATE", master)
        wait_until(self._formed, timeout, "cluster formed (cluster_state ok, replicas in sync)", every=0.05)
        return self

    def _range(self, i: int) -> tuple[int, int]:
        """The slots of primary ``i``: the 16384 split evenly, the last taking the rest."""
        step = 16384 // self.primaries_count
        return i * step, (16383 if i == self.primaries_count - 1 else (i + 1) * step - 1)

    def _replicas_of(self, i: int) -> list[RedisServer]:
        first = self.primaries_count + i * self.replicas_count
        return self.nodes[first:first + self.replicas_count]

    def alive(self) -> list[RedisServer]:
        return [n for n in self.nodes if n not in self.killed]

    def _formed(self) -> bool:
        try:
            for node in self.alive():
                client = node.client(socket_timeout=1)
                if client.cluster("info")["cluster_state"] != "ok":
                    return False
                # every node sees each slot range served by a master and its replicas
                ranges = client.execute_command("CLUSTER", "SLOTS")
                if len(ranges) != self.primaries_count or any(len(r) - 2 != 1 + self.replicas_count
                                                              for r in ranges):
                    return False
                info = client.info("replication")
                if info["role"] == "slave" and (info.get("master_link_status") != "up"
                                                or int(info.get("master_sync_in_progress", 0))):
                    return False
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError, OSError):
            return False
        return True

    def master_of(self, key: str | bytes | None = None, *, slot: int | None = None) -> RedisServer:
        """The live node serving ``key``'s slot (or ``slot``) as its master now."""
        from redis.cluster import key_slot

        if slot is None:
            slot = key_slot(key.encode() if isinstance(key, str) else key or b"")
        by_port = {n.port: n for n in self.alive()}
        for node in self.alive():
            try:
                for low, high, master, *_ in node.client(socket_timeout=1).execute_command("CLUSTER", "SLOTS"):
                    if low <= slot <= high and int(master[1]) in by_port:
                        return by_port[int(master[1])]
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                continue
        raise LookupError(f"no live master serves slot {slot}")

    def primaries(self) -> list[RedisServer]:
        return [n for n in self.alive() if n.client().info("replication")["role"] == "master"]

    def replicas(self) -> list[RedisServer]:
        return [n for n in self.alive() if n.client().info("replication")["role"] == "slave"]

    def kill_master(self, i: int = 0, *, key: str | None = None) -> RedisServer:
        """SIGKILL the master now serving slot range ``i`` (of ``primaries``;
        or ``key``'s slot): no shutdown, no last write. Returns the dead node."""
        from redis.cluster import key_slot

        slot = key_slot(key.encode()) if key is not None else self._range(i)[0]
        node = self.master_of(slot=slot)
        self._failing = slot
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait()
        node.proc = None
        self.killed.append(node)
        return node

    def wait_failover(self, timeout: float = 30) -> RedisServer:
        """Wait until a replica took over the slots of the last master killed:
        it says ``role:master``, every live node says ``cluster_state:ok`` and
        names it for those slots. Returns it."""
        dead = self.killed[-1]

        def promoted() -> RedisServer | None:
            try:
                node = self.master_of(slot=self._failing)
                if node is dead or node.client(socket_timeout=1).info("replication")["role"] != "master":
                    return None
                for other in self.alive():
                    client = other.client(socket_timeout=1)
                    if client.cluster("info")["cluster_state"] != "ok":
                        return None
                    if not any(low <= self._failing <= high and int(master[1]) == node.port
                               for low, high, master, *_ in client.execute_command("CLUSTER", "SLOTS")):
                        return None
                return node
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError, OSError, LookupError):
                return None

        return wait_until(promoted, timeout, f"failover of master :{dead.port}", every=0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.alive()[0].port}/0"
