"""One short test per fault of the soak's chaos schedule (issue #39) that no
other test provokes alone, each against real ``scrapy crawl billion``
workers, a real redis-server and the test web, with the fault primitives of
``devkit/chaos.py``: a worker frozen (SIGSTOP) past its leases, Redis frozen
mid-crawl, the WARC disk truly full (a tmpfs in a private mount namespace,
filled to ENOSPC), a tenth of the sites in a 503 and in a timeout outage,
and the network to the test web cut (the whole scenario in a private
network namespace). SIGKILL of workers and Redis restarts are in
``tests/test_faults.py``.

After each, the soak's promises: every worker exits 0 and logs a ledger that
adds up, the frontier's ledger adds up with nothing queued, leased, lost or
unknown, every page counted stored is in a WARC response record that reads
back (warcio, digests checked), no two requests to a domain closer than its
delay at the site, and pages fetched twice only where a lease died with a
frozen worker."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from warcio.archiveiterator import ArchiveIterator

from devkit import chaos
from devkit.testweb.control import LogEntry, TestWebProcess, consecutive
from tests.servers import ROOT, RedisServer, private_tmpfs, run_scrapy, scrapy_env, wait_until

pytestmark = pytest.mark.faults
DELAY = 0.2
WEB: dict[str, Any] = dict(links=6, size_fixed=3000, private_share=0, cross_share=0.2, dup_share=0.1,
                           crawl_delay_share=0, retry_after=1)
FAST = (f"CRAWLER_DOMAIN_DELAY={DELAY}", "CRAWLER_PROGRESS_INTERVAL=0", "CRAWLER_BACKOFF_BASE=0.25",
        "CRAWLER_BACKOFF_MAX=1", "CRAWLER_BACKOFF_JITTER=0.1", "CRAWLER_RETRY_AFTER_MAX=1",
        "CRAWLER_ROBOTS_RETRY=1", "CRAWLER_ROBOTS_ERROR_TTL=2", "CRAWLER_WARC_MIN_FREE=0")


def billion(web: TestWebProcess, folder: Path, warc: Path, *settings: str) -> list[str]:
    """``scrapy crawl billion`` of every domain of ``web``, WARC files to ``warc``."""
    seeds = folder / "seeds.txt"
    seeds.write_text("".join(web.url(d) + "\n" for d in range(web.config.domains)))
    args = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}"]
    for s in (*FAST, f"CRAWLER_WARC_DIR={warc}", f"CRAWLER_HOST_MAP={json.dumps(web.host_map())}", *settings):
        args += ["-s", s]
    return args


def worker(cmd: list[str], redis_url: str, log: Path) -> subprocess.Popen[str]:
    """A crawl process, its stderr to ``log`` (read while it runs)."""
    return subprocess.Popen(cmd, cwd=ROOT, env=scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"),
                            text=True, stdout=subprocess.DEVNULL, stderr=log.open("w"))


def pages(log: list[LogEntry]) -> Counter[tuple[str, str]]:
    """Page requests (robots.txt left out) by (domain, path)."""
    return Counter((e.domain, e.path) for e in log if e.path != "/robots.txt")


def warc_pages(folder: Path) -> Counter[str]:
    """URLs of the 200 response records in ``folder``'s WARC files, each
    record read back whole, its digests checked (warcio raises otherwise)."""
    found: Counter[str] = Counter()
    for path in sorted(folder.glob("*.warc.gz")):
        with path.open("rb") as f:
            for record in ArchiveIterator(f, check_digests="raise"):
                if record.rec_type == "response":
                    record.content_stream().read()
                    if record.http_headers.get_statuscode() == "200":
                        found[record.rec_headers.get_header("WARC-Target-URI")] += 1
    return found


def ledger(redis_url: str) -> dict[str, Any]:
    shown = run_scrapy(["frontier", "billion", "--json"], scrapy_env(redis_url))
    assert shown.returncode == 0, shown.stderr[-2000:]
    return json.loads(shown.stdout)[0]["ledger"]


def under_delay(log: list[LogEntry]) -> list[tuple[float, str, str, str]]:
    """Requests to a domain closer than the delay to the one before, as the site saw them."""
    return [(round(b.ms - a.ms, 1), a.domain, a.target, b.target) for a, b in consecutive(log)
            if b.ms - a.ms < DELAY * 1000]


def promises(book: dict[str, Any], errs: list[str], log: list[LogEntry], stored: Counter[str],
             every_page: bool = True) -> None:
    """The soak's promises after a fault (duplicates are each test's own)."""
    for err in errs:
        assert "Traceback" not in err, err[-3000:]
        line = [x for x in err.splitlines() if "Frontier ledger:" in x]
        assert line and "(adds up)" in line[-1], err[-3000:]
        assert "'crawler/ledger/" in err, err[-3000:]
    assert book["adds_up"], book
    assert book["queued"] == book["leased"] == book["delayed"] == book["lost"] == book["unknown"] == 0, book
    assert book["stored"] == len(stored), (book, len(stored))  # 0 pages acknowledged and not stored
    if every_page:
        assert book["dead"] == 0, book
        assert {(e.domain, e.path) for e in log if e.status == 200 and e.path != "/robots.txt"} == set(pages(log))
    assert under_delay(log) == []


def test_the_primitives_freeze_fill_and_refuse_to_touch_the_host(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with chaos.stopped(sleeper.pid):
            wait_until(lambda: chaos.frozen(sleeper.pid), 10, "stopped")
        wait_until(lambda: not chaos.frozen(sleeper.pid), 10, "continued")
        with pytest.raises(RuntimeError), chaos.stopped(sleeper.pid):  # continued even when the body raises
            raise RuntimeError
        wait_until(lambda: not chaos.frozen(sleeper.pid), 10, "continued after an error")
    finally:
        sleeper.kill()
        sleeper.wait()
    if not chaos.private_network():  # this test's own network and mounts: never changed
        for call in (lambda: chaos.cut_network(chaos.TESTWEB_CIDR), chaos.loopback_up,
                     lambda: chaos.restore_network(chaos.TESTWEB_CIDR)):
            with pytest.raises(chaos.ChaosRefused):
                call()
    if not chaos.private_mounts():
        with pytest.raises(chaos.ChaosRefused):
            chaos.mount_tmpfs(tmp_path / "m", 1 << 20)
    with pytest.raises(ValueError):
        chaos.entered(1, ["true"])
    if chaos.can_unshare():
        return
    folder = tmp_path / "disk"
    with private_tmpfs(folder, 1_000_000) as disk:
        assert not os.path.ismount(folder)  # not in this process's mounts
        with chaos.disk_full(disk) as filler:
            assert chaos.free_bytes(disk) == 0
            with pytest.raises(OSError) as full:
                (disk / "x").write_bytes(b"x" * 4096)
            assert full.value.errno == errno.ENOSPC
        assert not filler.exists() and chaos.free_bytes(disk) > 900_000
        with chaos.disk_full(disk, leave=8192):
            assert 8192 <= chaos.free_bytes(disk) < 8192 + 2 * 4096


def test_a_worker_frozen_past_its_leases_fetches_nothing_twice_but_its_page_in_flight(
        redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=4, pages=16, faults={"slow": 0.3}, slow_ms=1200, **WEB)
    warc = tmp_path / "warc"
    cmd = billion(web, tmp_path, warc, "CRAWLER_LEASE_SECONDS=3", "DOWNLOAD_TIMEOUT=2")
    frozen = worker(cmd, redis_url, tmp_path / "frozen.log")
    # frozen while the site holds one of its requests (a slow page): that lease dies with it
    held = wait_until(lambda: [e for e in web.log() if not e.done and not e.hung], 30, "a page in flight")
    with chaos.stopped(frozen.pid):
        before = web.log()
        steady = worker(cmd, redis_url, tmp_path / "steady.log")
        # the other worker takes the expired lease and fetches that page again
        wait_until(lambda: pages(web.log())[(held[0].domain, held[0].path)] >= 2, 30, "the page fetched again")
    for proc in (frozen, steady):
        proc.wait(timeout=60)
    errs = [(tmp_path / n).read_text() for n in ("frozen.log", "steady.log")]
    assert frozen.returncode == steady.returncode == 0, errs
    log = web.log()
    twice = {page for page, n in pages(log).items() if n > 1}
    # fetched twice: only pages the frozen worker had asked for before it froze
    asked_before = {(e.domain, e.path) for e in before}
    assert (held[0].domain, held[0].path) in twice and twice <= asked_before, (twice, asked_before)
    expired = int(redis.Redis.from_url(redis_url).hget("crawler:{billion:0}:stats", "leases_expired") or 0)
    assert 0 < len(twice) <= expired
    assert under_delay(log) == []
    # its page in flight timed out when it woke: the retry of a lease that had expired is void (lua/delay.lua),
    # not a second copy of a URL the other worker stored (the ledger was OFF BY -1 before)
    assert int(redis.Redis.from_url(redis_url).hget("crawler:{billion:0}:stats", "delay_void") or 0) >= 1
    promises(ledger(redis_url), errs, log, warc_pages(warc))


def test_redis_frozen_mid_crawl(durable_redis: RedisServer, make_web, tmp_path: Path) -> None:
    web = make_web(domains=4, pages=20, **WEB)
    warc = tmp_path / "warc"
    log = tmp_path / "worker.log"
    proc = worker(billion(web, tmp_path, warc, 'REDIS_PARAMS={"socket_timeout": 1}', "CRAWLER_LEASE_SECONDS=60"),
                  durable_redis.url, log)
    wait_until(lambda: len(pages(web.log())) >= 20 or proc.poll() is not None, 30, "20 pages fetched")
    assert durable_redis.proc is not None
    with chaos.stopped(durable_redis.proc.pid):
        # continued once the worker has seen it gone, not after a guess at how long that takes
        wait_until(lambda: "is unreachable" in log.read_text() or proc.poll() is not None, 30, "the outage noticed")
        during = len(pages(web.log()))
    proc.wait(timeout=60)
    err = log.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert err.count("is unreachable") == 1 and err.count("is back after") == 1, err[-3000:]
    # the first call that timed out stopped the others from waiting their own timeouts (crawler/_breaker.py)
    assert err.count("did not answer within its socket timeout") == 1 and "answers again after" in err, err[-3000:]
    web_log = web.log()
    assert during < len(pages(web_log))  # it went on after
    promises(ledger(durable_redis.url), [err], web_log, warc_pages(warc))
    assert max(pages(web_log).values()) == 1  # no lease died: nothing fetched twice


@pytest.fixture
def durable_redis(tmp_path: Path):  # type: ignore[no-untyped-def]
    server = RedisServer(tmp_path / "aof", "--appendonly", "yes", "--appendfsync", "always").start()
    yield server
    server.stop()


@pytest.mark.parametrize("mode", ["503", "timeout"])
def test_a_tenth_of_the_sites_down(mode: str, redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=10, pages=10, **WEB)
    warc = tmp_path / "warc"
    log = tmp_path / "worker.log"
    proc = worker(billion(web, tmp_path, warc, "DOWNLOAD_TIMEOUT=1", "CRAWLER_LEASE_SECONDS=30",
                          "CRAWLER_MAX_ATTEMPTS=8"), redis_url, log)
    wait_until(lambda: len(pages(web.log())) >= 10 or proc.poll() is not None, 30, "10 pages fetched")
    down = web.outage(0.1, 3, mode, seed=2)
    assert len(down) == 1
    proc.wait(timeout=60)
    err = log.read_text()
    assert proc.returncode == 0, err[-3000:]
    web_log = web.log()
    hit = [e for e in web_log if e.domain in down and (e.status == 503 or e.hung)]
    assert hit, "the outage was never met"  # the fault happened to the crawl
    promises(ledger(redis_url), [err], web_log, warc_pages(warc))
    # every page of the sites down fetched once it was over (promises: every page met got a 200);
    # what failed was retried, never fetched twice
    assert max(Counter((e.domain, e.path) for e in web_log if e.status == 200).values()) == 1
    assert {e.domain for e in web_log if e.status == 200 and e.path != "/robots.txt"} == set(web.domains)


TMPFS_BYTES = 4_000_000


def test_the_warc_disk_full_mid_record_pauses_the_crawl_until_space_returns(
        redis_url: str, make_web, tmp_path: Path) -> None:
    why = chaos.can_unshare()
    if why:
        pytest.skip(why)
    # pages of 60 kB: a record (about 15 kB compressed) is larger than the space left below
    web = make_web(domains=4, pages=20, **{**WEB, "size_fixed": 60_000})
    warc = tmp_path / "warc"
    warc.mkdir()
    log = tmp_path / "worker.log"
    # the tmpfs lives in a mount namespace a holder keeps, so the WARC files outlive the crawl
    holder = subprocess.Popen(chaos.on_private_tmpfs(warc, TMPFS_BYTES, ["sleep", "infinity"]))
    try:
        disk = chaos.in_mounts_of(holder.pid, warc)
        wait_until(lambda: os.path.ismount(disk), 10, "the tmpfs mounted")
        cmd = chaos.entered(holder.pid, billion(web, tmp_path, warc, "CRAWLER_PROGRESS_INTERVAL=0.25"), mount=True)
        proc = worker(cmd, redis_url, log)
        wait_until(lambda: len(pages(web.log())) >= 15 or proc.poll() is not None, 30, "15 pages fetched")
        with chaos.disk_full(disk, leave=8192):  # the next record is cut by ENOSPC part-way
            wait_until(lambda: "No space left for WARC files" in log.read_text() or proc.poll() is not None, 30,
                       "the full disk met")
            assert proc.poll() is None, log.read_text()[-3000:]
            wait_until(lambda: all(e.done or e.hung for e in web.log()), 30, "the pages in flight answered")
            paused_at = len(pages(web.log()))
            # paused: nothing fetched while the worker reports on (its progress line, every 0.25 s on
            # its clock) past two tries of the page waiting (one a second: warc.CHECK_INTERVAL)
            reports = lambda: log.read_text().split("No space left for WARC files", 1)[1].count("pages=")  # noqa: E731
            wait_until(lambda: reports() >= 10 or proc.poll() is not None, 30, "2.5 s of progress lines")
            assert len(pages(web.log())) == paused_at
            # nothing acknowledged that is not in a record that reads back
            assert ledger(redis_url)["stored"] <= len(warc_pages(disk))
        proc.wait(timeout=60)
        err = log.read_text()
        assert proc.returncode == 0, err[-3000:]
        stored = warc_pages(disk)
    finally:
        holder.terminate()
        holder.wait(timeout=10)
    assert "fetching resumed" in err and err.count("No space left for WARC files") == 1, err[-3000:]
    assert "'crawler/warc/low_space_pauses': 1" in err, err[-3000:]
    log_ = web.log()
    promises(ledger(redis_url), [err], log_, stored)
    assert max(pages(log_).values()) == 1 and max(stored.values()) == 1  # each page fetched and stored once
    assert len(stored) == 4 * 21  # every page: "/" and /p/0.html ... /p/19.html of each domain


def reported(log: Path, name: str) -> int:
    """The figure ``name`` of the worker's last progress line (``errors=12``), 0 before one."""
    found = re.findall(rf"\b{name}=(\d+)", log.read_text())
    return int(found[-1]) if found else 0


def network_scenario(folder: Path) -> None:
    """Inside a private network namespace (``PRIVATE_NAMESPACES``): Redis on
    127.0.0.1, a test web on 127.1.0.x, a crawl; the test web cut off while
    the crawl meets it, then back. Writes ``result.json`` (exit status, the
    ledger, the worker's log, the test web's log) for the test outside."""
    chaos.loopback_up()
    server = RedisServer(folder / "redis").start()
    web = TestWebProcess(dict(WEB, domains=4, pages=16, addresses=4)).start()
    log = folder / "worker.log"
    try:
        proc = worker(billion(web, folder, folder / "warc", "CRAWLER_PROGRESS_INTERVAL=0.25",
                              "CRAWLER_MAX_ATTEMPTS=10", "DOWNLOAD_TIMEOUT=2", f"CRAWLER_IP_DELAY={DELAY}"), server.url, log)
        wait_until(lambda: len(pages(web.log())) >= 15 or proc.poll() is not None, 30, "15 pages fetched")
        with chaos.network_cut(chaos.TESTWEB_CIDR):
            cut = web.log()  # the control path (127.0.0.1) still answers
            errors = reported(log, "errors")
            # back once the worker has met the cut a few times (the download errors its progress
            # line counts), not after a guess at how long that takes
            wait_until(lambda: reported(log, "errors") >= errors + 5 or proc.poll() is not None, 30, "the cut met")
            during = web.log()
        proc.wait(timeout=60)
        result = {"returncode": proc.returncode, "ledger": ledger(server.url), "err": log.read_text(),
                  "log": [list(e) for e in web.log()], "cut": len(cut), "during": len(during),
                  "domains": web.domains}
    finally:
        web.stop()
        server.stop()
    (folder / "result.json").write_text(json.dumps(result))


def test_the_network_to_the_test_web_cut(tmp_path: Path) -> None:
    why = chaos.can_unshare()
    if why:
        pytest.skip(why)
    done = subprocess.run([*chaos.PRIVATE_NAMESPACES, sys.executable, "-m", "tests.test_chaos", "network",
                           str(tmp_path)], cwd=ROOT, env=scrapy_env(None), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    err = result["err"]
    assert result["returncode"] == 0, err[-3000:]
    log = [LogEntry(*e) for e in result["log"]]
    assert result["during"] == result["cut"]  # the site saw nothing while it was cut off
    assert len(log) > result["during"]  # and the crawl went on after
    promises(result["ledger"], [err], log, warc_pages(tmp_path / "warc"))
    assert max(pages(log).values()) == 1
    assert {(d, f"/p/{k}.html") for d in result["domains"] for k in range(1, 16)} <= set(pages(log))


if __name__ == "__main__":
    if sys.argv[1:2] == ["network"]:
        network_scenario(Path(sys.argv[2]))
