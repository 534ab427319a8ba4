"""A day in an hour: the job users run (``billion``, WARC and robots.txt on,
an HTTPS test web of thousands of domains on shared addresses, slow
answers), two worker processes on one frontier, for ``--minutes`` (30), with
an optional fault schedule (``--chaos``), on one Redis (AOF on) or on a Redis
Cluster of three masters with a replica each (``--cluster``).

    python -m bench soak [--minutes 30] [--workers 2] [--chaos] [--cluster]
        [--schedule KIND@MINUTE,...] [--seed N] [--json FILE] [--out DIR]

Every ``--sample`` seconds (60) it records, per worker process, resident
memory, CPU per page, pages per second, the event loop's worst lateness of
the last minute (its ``/metrics``), open file descriptors and sockets; and
for Redis its memory, keys, CPU and commands per page by kind (``INFO
commandstats``). At the end it prints the table, the slopes (resident MB per
100k pages and per hour, per process, after the warm-up), the site-side
audits over the whole run (per-domain intervals against the delay, counted
from the end of each answer as billion does; per-address intervals against
the ip delay), pages fetched twice and why, the frontier's ledger, and every
stored page read back from its WARC record; it writes ``soak.png`` (each
series against time, the faults shaded), ``samples.jsonl`` and the summary
(``--json``). It exits 1 when a promise fails (the list is printed, each
with its figure).

Run as root it runs in private network and mount namespaces (``unshare``):
the WARC folder is a small tmpfs there (closed files are moved to the
output folder, as a real crawl ships them off), and the network to the test
web can be cut without touching the host. The faults (``--chaos``; at the
default times below, at seeded random times with ``--seed``, or as
``--schedule``), each named in the log with what it cost:

- ``kill``: SIGKILL a worker (its leases die with it); the bench's
  supervisor restarts it at once, as systemd would;
- ``stop``: SIGSTOP a worker for 30 s, then SIGCONT;
- ``redis_restart``: restart Redis (AOF on; SIGTERM, the same port and data);
  on a cluster: SIGKILL a master, let its replica take over (``failover``);
- ``redis_pause``: SIGSTOP Redis (a cluster: one master) for 20 s;
- ``disk_full``: the WARC disk full (to 0 bytes free) for a minute;
- ``outage_503`` / ``outage_timeout``: a tenth of the sites answer 503, or
  never answer, for two minutes;
- ``network``: the network to the test web cut for 20 s;
- ``together``: a worker killed while Redis is paused and the disk is full.

A page fetched twice at the site is explained when its first fetch was by a
worker killed or frozen at a fault (the first arrived before the fault, the
second after it: the lease died with the worker, or expired while it was
frozen), when the first answer never reached the crawler (the client hung
up, or the network was cut), or when it was leased from a master lost in a
failover; any other is a failed promise. An interval under a delay after
a request the site held unanswered (an outage) that the crawler gave up on
while the network was cut is counted apart: its reset could not reach the
site, which logged the request open.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_openweb import PROFILES, SHARED_CONCURRENCY, SHARED_DELAY, memory_split  # noqa: E402
from bench.memtrace import rss_mb  # noqa: E402
from bench.soak_report import plot, promises, report, summarize  # noqa: E402
from devkit.testweb.config import WebConfig  # noqa: E402
from devkit.testweb.control import LogEntry, TestWebProcess  # noqa: E402
from tests.servers import RedisServer, cpu_seconds, free_port  # noqa: E402

#: the default schedule of --chaos: (kind, share of the run after the warm-up, seconds)
SCHEDULE = (
    ("kill", 0.04, 0.0), ("stop", 0.13, 30.0), ("redis_restart", 0.22, 0.0), ("redis_pause", 0.31, 20.0),
    ("disk_full", 0.40, 60.0), ("outage_503", 0.49, 120.0), ("outage_timeout", 0.60, 120.0),
    ("network", 0.71, 20.0), ("together", 0.80, 60.0),
)
DURATIONS = {kind: seconds for kind, _, seconds in SCHEDULE}
WEB_CIDR = "127.1.0.0/16"  # the test web's layout addresses (devkit.testweb.config.layout_address)
IN_NAMESPACE = "SOAK_IN_NAMESPACE"  # set in the re-run inside the namespaces
FRONTIER = "crawler:{billion:0}"  # billion's frontier (crawler.store.Keys("crawler", "billion", 0).base)


@dataclass
class Fault:
    kind: str
    at: float  # seconds after the start, as scheduled
    seconds: float
    started: float = 0.0  # epoch seconds
    ended: float = 0.0
    target: str = ""
    notes: list[str] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)


@dataclass
class Worker:
    index: int
    port: int
    proc: subprocess.Popen[bytes] | None = None
    incarnation: int = 0
    started: float = 0.0
    expected_exit: bool = False  # killed by the schedule: its exit is no finding
    exits: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False  # frozen by the schedule: not sampled

    @property
    def name(self) -> str:
        return f"w{self.index}.{self.incarnation}"


# --- what the run is made of ------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace, out: Path, tmp: Path) -> None:
        self.args = args
        self.out = out
        self.tmp = tmp
        self.t0 = 0.0
        self.end = 0.0
        self.lock = threading.Lock()
        self.log: list[LogEntry] = []
        self.samples: list[dict[str, Any]] = []
        self.faults: list[Fault] = []
        self.findings: list[str] = []
        self.born: dict[str, float] = {}  # a worker incarnation's name -> its start, seconds into the run
        self.mover_paused = threading.Event()
        self.stopping = threading.Event()
        self.redis: RedisServer | None = None
        self.cluster: Any = None
        self.warc_live = tmp / "warc"  # the workers' WARC folder (a tmpfs in the namespace)
        self.warc_done = out / "warc"  # closed files, moved here
        self.workers = [Worker(i, free_port()) for i in range(args.workers)]
        self.last_leases = 0

    # --- services ---

    def start_services(self) -> None:
        a = self.args
        if os.environ.get(IN_NAMESPACE):
            from devkit import chaos

            chaos.loopback_up()
            self.warc_live.mkdir(parents=True, exist_ok=True)
            chaos.mount_tmpfs(self.warc_live, a.tmpfs_mb << 20)
        self.warc_live.mkdir(parents=True, exist_ok=True)
        self.warc_done.mkdir(parents=True, exist_ok=True)
        if a.cluster:
            from tests.servers import RedisClusterServers

            # a master silent for 2 s is failed over (about 2-3 s all told)
            self.cluster = RedisClusterServers(self.tmp / "cluster", 3, replicas=1, node_timeout_ms=2000).start()
            for node in self.cluster.nodes:
                pin(node.proc.pid, 1)
            self.redis_url = self.cluster.url
        else:
            self.redis = RedisServer(self.tmp / "redis", "--appendonly", "yes").start()
            pin(self.redis.proc.pid, 1)  # type: ignore[union-attr]
            self.redis_url = self.redis.url
        median, mean, bandwidth = PROFILES[a.profile]
        self.config = WebConfig(domains=a.domains, pages=a.pages, tls=True, latency_ms=a.latency_ms,
                                bandwidth=bandwidth or a.bandwidth, crawl_delay_share=0.0, private_share=0.02,
                                dup_share=0.1, cross_share=0.1, size_median=median, size_mean=mean,
                                addresses=a.addresses, address_skew=0.8)
        self.web = TestWebProcess(self.config, cpu=1).start()
        self.seeds = self.tmp / "seeds.txt"
        self.seeds.write_text("".join(f"{self.web.url(d)}\n" for d in range(a.domains)))
        self.host_map = json.dumps(self.web.host_map(www=False), separators=(",", ":"))

    def stop_services(self) -> None:
        self.stopping.set()
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.kill()
        self.web.stop()
        if self.cluster is not None:
            self.cluster.stop()
        if self.redis is not None:
            self.redis.stop()

    def redis_nodes(self) -> list[RedisServer]:
        return list(self.cluster.nodes) if self.cluster is not None else [self.redis]  # type: ignore[list-item]

    # --- workers ---

    def start_worker(self, w: Worker) -> None:
        a = self.args
        remaining = max(5, int(self.end - time.time()))
        w.incarnation += 1
        w.expected_exit = False
        cmd = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={self.seeds}",
               "-s", "LOG_LEVEL=INFO", "-s", f"CLOSESPIDER_TIMEOUT={remaining}",
               "-s", f"CRAWLER_DOMAIN_DELAY={a.delay}", "-s", f"CRAWLER_IP_DELAY={a.ip_delay}",
               "-s", f"CRAWLER_IP_SHARED_DELAY={SHARED_DELAY}", "-s", f"CRAWLER_IP_SHARED_CONCURRENCY={SHARED_CONCURRENCY}",
               "-s", f"CRAWLER_WARC_DIR={self.warc_live}", "-s", f"CRAWLER_WARC_MAX_BYTES={a.warc_file_mb << 20}",
               "-s", "CRAWLER_METRICS_ENABLED=True", "-s", f"CRAWLER_METRICS_PORT={w.port}",
               "-s", f"CRAWLER_HOST_MAP={self.host_map}", "-s", "CRAWLER_PROGRESS_INTERVAL=60",
               *(["-s", "CRAWLER_REDIS_CLUSTER=True"] if a.cluster else []),
               *(x for s in a.set for x in ("-s", s)),
               *(x for s in per_worker(a.worker_set, w.index) for x in ("-s", s))]
        env = dict(os.environ, PYTHONPATH=str(ROOT), REDIS_URL=self.redis_url, CRAWLER_CONTACT="bench@example.org",
                   SCRAPY_SETTINGS_MODULE="devkit.settings")
        env.update(s.split("=", 1) for s in per_worker(a.worker_env, w.index))
        logs = self.out / "logs"
        logs.mkdir(exist_ok=True)
        with open(logs / f"{w.name}.log", "wb") as f:
            w.proc = subprocess.Popen(["taskset", "-c", str(a.worker_cpu), *cmd], cwd=ROOT, env=env, stdout=f, stderr=f)
        w.started = time.time()
        self.born[w.name] = w.started - self.t0
        print(f"  {self.clock()} started worker {w.name} (pid {w.proc.pid}, {remaining} s to go)", flush=True)

    def supervise(self) -> None:
        """A worker that exited before the end is restarted (as systemd or
        Kubernetes would); an exit the schedule did not cause is a finding."""
        for w in self.workers:
            if w.proc is None or w.proc.poll() is None:
                continue
            code = w.proc.returncode
            w.exits.append({"worker": w.name, "code": code, "at": round(time.time() - self.t0, 1),
                            "expected": w.expected_exit})
            if not w.expected_exit:
                tail = (self.out / "logs" / f"{w.name}.log").read_text(errors="replace").splitlines()[-5:]
                self.findings.append(f"worker {w.name} exited {code} at {self.clock()} unasked: " + " | ".join(tail))
                print(f"  {self.clock()} FINDING: worker {w.name} exited {code}; restarting it", flush=True)
            w.proc = None
            if self.end - time.time() > 30:
                self.start_worker(w)

    def clock(self) -> str:
        s = time.time() - self.t0
        return f"[{int(s // 60):3d}:{int(s % 60):02d}]"

    # --- the WARC disk: closed files leave the tmpfs ---

    def move_closed(self, everything: bool = False) -> None:
        live = {w.proc.pid for w in self.workers if w.proc is not None and w.proc.poll() is None}
        newest: dict[str, Path] = {}
        files = sorted(self.warc_live.glob("*.warc.gz"))
        for p in files:  # <spider>-<shard>-<host>-<pid>-<stamp>-<n>: the last of a pid is open
            newest[p.name.rsplit("-", 2)[0]] = p
        for p in files:
            pid = int(p.name.rsplit("-", 3)[1])
            if everything or pid not in live or newest[p.name.rsplit("-", 2)[0]] != p:
                shutil.move(str(p), self.warc_done / p.name)

    def mover(self) -> None:
        while not self.stopping.wait(5):
            if not self.mover_paused.is_set():
                try:
                    self.move_closed()
                except OSError as exc:
                    print(f"  mover: {exc}", flush=True)

    # --- sampling ---

    def sample(self) -> None:
        now = time.time()
        with self.lock:
            try:
                self.log.extend(self.web.log(since=len(self.log)))
            except OSError as exc:
                print(f"  test web log not read: {exc}", flush=True)
        row: dict[str, Any] = {"t": round(now - self.t0, 1), "site_pages": sum(
            1 for e in self.log if e.status == 200 and e.path != "/robots.txt"), "site_requests": len(self.log),
            "workers": {}, "redis": redis_sample(self.redis_nodes())}
        for w in self.workers:
            if w.proc is None or w.proc.poll() is not None or w.stopped:  # a frozen worker would not answer
                continue
            row["workers"][w.name] = process_sample(w.proc.pid, w.port)
        queued = [s.get("crawler_frontier_queued") for s in row["workers"].values()]
        leases = [s.get("crawler_frontier_leases") for s in row["workers"].values()]
        row["queued"] = next((q for q in queued if q is not None), None)
        row["leases"] = next((q for q in leases if q is not None), None)
        if row["leases"] is not None:
            self.last_leases = int(row["leases"])
        self.samples.append(row)
        with open(self.out / "samples.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        prev = self.samples[-2] if len(self.samples) > 1 else None
        rate = (row["site_pages"] - prev["site_pages"]) / (row["t"] - prev["t"]) if prev else 0.0
        mem = ", ".join(f"{n} {s['rss_mb']:.0f} MB lag {s.get('lag_minute_ms', 0):.0f} ms"
                        for n, s in row["workers"].items())
        r = row["redis"]
        print(f"  {self.clock()} {row['site_pages']:,} pages ({rate:.1f}/s); {mem}; Redis "
              f"{(r.get('used_memory') or 0) / 2**20:.0f} MB, {r.get('keys') or 0:,} keys, queued "
              f"{'?' if row['queued'] is None else format(int(row['queued']), ',')}",
              flush=True)

    # --- faults ---

    def schedule(self) -> list[Fault]:
        a = self.args
        start, span = a.warmup * 60, (a.minutes - a.warmup) * 60
        if a.schedule:
            faults = []
            for item in a.schedule.split(","):
                kind, _, minute = item.partition("@")
                if kind not in DURATIONS:
                    raise SystemExit(f"--schedule: unknown fault {kind!r}; there are {', '.join(DURATIONS)}")
                faults.append(Fault(kind, float(minute) * 60, DURATIONS[kind]))
            return faults
        if not a.chaos:
            return [Fault("redis_restart", start + 0.5 * span, 0.0)] if a.cluster else []
        if a.seed is None:
            return [Fault(kind, start + share * span, seconds) for kind, share, seconds in SCHEDULE]
        rng = random.Random(a.seed)
        return sorted((Fault(kind, start + rng.uniform(0.02, 0.85) * span, seconds)
                       for kind, _, seconds in SCHEDULE), key=lambda f: f.at)

    def run_fault(self, f: Fault) -> None:
        f.started = time.time()
        print(f"  {self.clock()} FAULT {f.kind} begins", flush=True)
        try:
            getattr(self, f"fault_{f.kind}")(f)
        except Exception as exc:  # a fault that could not be thrown is a finding, not a crash of the bench
            f.notes.append(f"could not be thrown: {type(exc).__name__}: {exc}")
            self.findings.append(f"fault {f.kind}: {type(exc).__name__}: {exc}")
        f.ended = time.time()
        print(f"  {self.clock()} FAULT {f.kind} ends ({f.ended - f.started:.1f} s){'; ' if f.notes else ''}"
              f"{'; '.join(f.notes)}", flush=True)

    def pick(self) -> Worker:
        alive = [w for w in self.workers if w.proc is not None and w.proc.poll() is None]
        return alive[len(self.faults) % len(alive)] if alive else self.workers[0]

    def fault_kill(self, f: Fault, window: float = 5.0) -> None:
        w = self.pick()
        f.target = w.name
        w.expected_exit = True
        assert w.proc is not None
        w.proc.send_signal(signal.SIGKILL)
        f.cost["leases_out_before"] = self.last_leases
        time.sleep(window)  # the fault's window (its cost is measured around it)
        # the supervisor restarts it on its next round

    def fault_stop(self, f: Fault) -> None:
        from devkit import chaos

        w = self.pick()
        f.target = w.name
        assert w.proc is not None
        w.stopped = True
        with chaos.stopped(w.proc.pid):
            time.sleep(f.seconds)
        w.stopped = False

    def fault_redis_restart(self, f: Fault) -> None:
        if self.cluster is not None:
            f.kind = "failover"
            f.cost["leases_out_before"] = self.last_leases
            t = time.time()
            killed = self.cluster.kill_master(key=FRONTIER)  # the master holding the frontier
            f.target = f"master :{killed.port}"
            self.cluster.wait_failover(60)
            f.cost["failover_seconds"] = round(time.time() - t, 2)
            f.notes.append(f"replica took over in {f.cost['failover_seconds']} s")
            return
        assert self.redis is not None
        t = time.time()
        self.redis.restart()
        pin(self.redis.proc.pid, 1)  # type: ignore[union-attr]
        f.cost["redis_down_seconds"] = round(time.time() - t, 2)

    def fault_redis_pause(self, f: Fault) -> None:
        from devkit import chaos

        node = self.cluster.master_of(FRONTIER) if self.cluster is not None else self.redis
        assert node is not None
        f.target = f"redis :{node.port}"
        with chaos.stopped(node.proc.pid):  # type: ignore[union-attr]
            time.sleep(f.seconds)

    def fault_disk_full(self, f: Fault) -> None:
        from devkit import chaos

        self.mover_paused.set()
        try:
            with chaos.disk_full(self.warc_live):
                time.sleep(f.seconds)
        finally:
            self.mover_paused.clear()

    def _outage(self, f: Fault, mode: str) -> None:
        domains = self.web.outage(0.1, f.seconds, mode, seed=int(f.at))
        f.target = f"{len(domains)} domains"
        time.sleep(f.seconds)

    def fault_outage_503(self, f: Fault) -> None:
        self._outage(f, "503")

    def fault_outage_timeout(self, f: Fault) -> None:
        self._outage(f, "timeout")

    def fault_network(self, f: Fault) -> None:
        from devkit import chaos

        with chaos.network_cut(WEB_CIDR):
            time.sleep(f.seconds)

    def fault_together(self, f: Fault) -> None:
        """A worker killed while Redis is paused and the WARC disk is full."""
        pause = Fault("redis_pause", f.at, 20.0)
        full = Fault("disk_full", f.at, f.seconds)
        threads = [threading.Thread(target=self.fault_redis_pause, args=(pause,)),
                   threading.Thread(target=self.fault_disk_full, args=(full,))]
        for t in threads:
            t.start()
        time.sleep(2)
        kill = Fault("kill", f.at, 0.0)
        self.fault_kill(kill)
        f.target = f"{kill.target}, {pause.target}, the WARC disk"
        f.cost.update(kill.cost)
        for t in threads:
            t.join()

    # --- the run ---

    def run(self) -> None:
        a = self.args
        self.t0 = time.time()
        self.end = self.t0 + a.minutes * 60
        for w in self.workers:
            self.start_worker(w)
        threading.Thread(target=self.mover, daemon=True).start()
        pending = self.schedule()
        self.faults = []
        threads: list[threading.Thread] = []
        next_sample = self.t0 + a.sample
        while time.time() < self.end:
            now = time.time()
            while pending and now - self.t0 >= pending[0].at:
                f = pending.pop(0)
                self.faults.append(f)
                t = threading.Thread(target=self.run_fault, args=(f,), daemon=True)
                t.start()
                threads.append(t)
            self.supervise()
            if now >= next_sample:
                self.sample()
                next_sample += a.sample
            time.sleep(0.5)
        for t in threads:
            t.join()
        # each worker stops at its CLOSESPIDER_TIMEOUT: wait for the last pages to be stored
        deadline = time.time() + 300
        for w in self.workers:
            if w.proc is not None:
                try:
                    w.proc.wait(max(1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    self.findings.append(f"worker {w.name} did not stop within 5 minutes of the end")
                    w.proc.kill()
                    w.proc.wait()
                w.exits.append({"worker": w.name, "code": w.proc.returncode, "at": round(time.time() - self.t0, 1),
                                "expected": True, "final": True})
                if w.proc.returncode != 0:
                    self.findings.append(f"worker {w.name} ended with exit status {w.proc.returncode}")
        self.stopping.set()
        self.sample()
        with self.lock:  # whole again: an entry read while in flight had no end yet
            self.log = self.web.log()
        self.move_closed(everything=True)


# --- readings ---------------------------------------------------------------


def per_worker(items: list[str], index: int) -> list[str]:
    """The ``NAME=VALUE`` of ``INDEX:NAME=VALUE`` items meant for worker ``index``."""
    chosen = []
    for item in items:
        which, sep, rest = item.partition(":")
        if not sep or not which.isdigit() or "=" not in rest:
            raise SystemExit(f"expected INDEX:NAME=VALUE, got {item!r}")
        if int(which) == index:
            chosen.append(rest)
    return chosen


def pin(pid: int, cpu: int) -> None:
    subprocess.run(["taskset", "-cp", str(cpu), str(pid)], check=False, capture_output=True)


def scrape(port: int) -> dict[str, float]:
    """The crawl process's own metrics, names without labels (one spider, one shard)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name.split("{", 1)[0]] = values.get(name.split("{", 1)[0], 0.0) + float(value)
    return values


def _fd_link(fd: Path) -> str | None:
    """What an open file descriptor is; None for one closed since it was listed
    (a busy crawler closes sockets all the time: the sample went without its metrics)."""
    try:
        return os.readlink(fd)
    except FileNotFoundError:
        return None


def process_sample(pid: int, port: int) -> dict[str, Any]:
    s: dict[str, Any] = {"pid": pid}
    try:
        s["cpu_s"] = cpu_seconds(pid)
        s["rss_mb"] = rss_mb(pid)
        links = list(filter(None, map(_fd_link, Path(f"/proc/{pid}/fd").iterdir())))
        s["fds"] = len(links)
        s["memory"] = memory_split(pid)  # glibc's heap, other anonymous (Python's arenas), files
        s["sockets"] = sum(link.startswith("socket:") for link in links)
    except (OSError, StopIteration):
        s.setdefault("rss_mb", 0.0)
        return s
    try:
        m = scrape(port)
    except OSError:  # metrics not up yet, or the loop is stalled past the timeout
        return s
    s["pages"] = m.get("crawler_pages_fetched_total", 0.0)
    s["lag_minute_ms"] = m.get("crawler_loop_lag_minute_max_seconds", 0.0) * 1000
    s["lag_max_ms"] = m.get("crawler_loop_lag_max_seconds", 0.0) * 1000
    s["stalls"] = m.get("crawler_loop_stalls_total", 0.0)
    # full handshakes: mostly hosts met for the first time (each keeps a TLS session, robots rules, a name)
    s["tls_full"] = m.get("crawler_tls_handshakes_total", 0.0) - m.get("crawler_tls_resumed_total", 0.0)
    for key in ("crawler_frontier_queued", "crawler_frontier_leases"):
        if key in m:
            s[key] = m[key]
    return s


def redis_sample(nodes: list[RedisServer]) -> dict[str, Any]:
    """Memory, keys, CPU and calls by command, summed over the masters that answer."""
    total: dict[str, Any] = {"used_memory": 0, "keys": 0, "cpu_s": 0.0, "calls": Counter(), "answered": 0}
    for node in nodes:
        if node is None or node.proc is None or node.proc.poll() is not None:
            continue
        try:
            c = node.client(socket_timeout=2)
            if c.info("replication").get("role") != "master":
                continue
            total["used_memory"] += c.info("memory")["used_memory"]
            total["keys"] += c.dbsize()
            cpu = c.info("cpu")
            total["cpu_s"] += cpu["used_cpu_user"] + cpu["used_cpu_sys"]
            for name, stat in c.info("commandstats").items():
                total["calls"][name.removeprefix("cmdstat_")] += stat["calls"]
            total["answered"] += 1
        except Exception:  # paused or restarting: this sample goes without it
            continue
    total["calls"] = dict(total["calls"])
    return total


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--warmup", type=float, help="minutes of warm-up left out of slopes and lags (min(8, a third))")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--domains", type=int, default=3000)
    p.add_argument("--pages", type=int,
                   help="pages per domain: enough not to run out (400, or 1.2 times what a domain can be "
                        "given in --minutes at --delay: 864 for 120 minutes at 10 s)")
    p.add_argument("--addresses", type=int, default=200, help="loopback addresses the domains share")
    p.add_argument("--delay", type=float, default=10.0)
    p.add_argument("--ip-delay", type=float, default=1.0)
    p.add_argument("--profile", choices=sorted(PROFILES), default="small", help="page sizes (bench_openweb's)")
    p.add_argument("--latency-ms", type=float, default=200.0)
    p.add_argument("--bandwidth", type=int, default=500_000)
    p.add_argument("--sample", type=float, default=60.0, help="seconds between samples")
    p.add_argument("--worker-cpu", type=int, default=0, help="the CPU the workers run on (the test web and Redis: 1)")
    p.add_argument("--chaos", action="store_true", help="throw the fault schedule at the run")
    p.add_argument("--seed", type=int, help="with --chaos: the faults at random times drawn from this seed")
    p.add_argument("--schedule", help="KIND@MINUTE,... instead (kinds: " + ", ".join(DURATIONS) + ")")
    p.add_argument("--cluster", action="store_true",
                   help="a Redis Cluster of 3 masters with a replica each; without --chaos, one failover mid-run")
    p.add_argument("--tmpfs-mb", type=int, default=2048, help="the WARC disk's size (a tmpfs)")
    p.add_argument("--warc-file-mb", type=int, default=64, help="CRAWLER_WARC_MAX_BYTES, in MB")
    p.add_argument("--out", type=Path, help="the output folder (output/soak-<time>)")
    p.add_argument("--json", type=Path, help="write the summary here too")
    p.add_argument("--keep-warc", action="store_true", help="keep the WARC files (they are removed once read back)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a Scrapy setting for the workers")
    p.add_argument("--worker-set", action="append", default=[], metavar="INDEX:NAME=VALUE",
                   help="a Scrapy setting for one worker only (an A/B within one run)")
    p.add_argument("--worker-env", action="append", default=[], metavar="INDEX:NAME=VALUE",
                   help="an environment variable for one worker only (LD_PRELOAD=..., MALLOC_...)")
    args = p.parse_args()
    if args.warmup is None:
        args.warmup = min(8.0, args.minutes / 3)
    if args.pages is None:  # a domain that runs out leaves the crawl: the rate falls, the run measures less
        args.pages = max(400, math.ceil(1.2 * args.minutes * 60 / max(args.delay, 1.0)))
    per_worker(args.worker_set + args.worker_env, -1)  # a malformed one is refused before anything starts
    if os.geteuid() == 0 and not os.environ.get(IN_NAMESPACE):
        from devkit.chaos import PRIVATE_NAMESPACES

        env = dict(os.environ, **{IN_NAMESPACE: "1"})
        child = subprocess.Popen([*PRIVATE_NAMESPACES, sys.executable, *sys.argv], env=env)  # unshare execs it
        for sig in (signal.SIGTERM, signal.SIGHUP):  # a kill of this process reaches the soak, which cleans up
            signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:  # Ctrl-C reached the child too (one process group): wait for its cleanup
                continue
    if (args.chaos or args.schedule) and not os.environ.get(IN_NAMESPACE):
        raise SystemExit("--chaos needs root: the network and disk faults run in private namespaces (unshare)")
    signal.signal(signal.SIGTERM, _interrupt)  # a kill stops the services (workers, test web, Redis) like Ctrl-C
    signal.signal(signal.SIGHUP, _interrupt)
    out = args.out or ROOT / "output" / time.strftime("soak-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as name:  # the tmpfs stays mounted
        soak = Soak(args, out, Path(name))
        soak.start_services()
        print(f"soak: {args.minutes:g} min, {args.workers} workers, {args.domains:,} HTTPS domains on "
              f"{args.addresses} addresses, {args.profile} pages, {args.delay:g} s per domain, {args.ip_delay:g} s per "
              f"address; warm-up {args.warmup:g} min; output {out}", flush=True)
        try:
            soak.run()
            summary = summarize(soak)
        finally:
            soak.stop_services()
    summary["promises"] = [{"promise": n, "ok": ok, "figure": fig} for n, ok, fig in promises(summary, args)]
    text = json.dumps(summary, indent=1, default=str)  # first: a failure of the table below loses nothing
    (out / "summary.json").write_text(text)
    if args.json:
        args.json.write_text(text)
    report(summary, soak)
    plot(soak, out / "soak.png")
    failed = [p_ for p_ in summary["promises"] if not p_["ok"]]
    print("\npromises:")
    for p_ in summary["promises"]:
        print(f"  {'ok  ' if p_['ok'] else 'FAIL'} {p_['promise']}: {p_['figure']}")
    if not args.keep_warc:
        shutil.rmtree(out / "warc", ignore_errors=True)
    return 1 if failed else 0


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:  # the services are stopped by then (main's finally)
        sys.exit(f"soak: interrupted ({exc or 'Ctrl-C'}); workers, test web and Redis stopped, no summary")
