"""The fault suite: real crawls of the test web under crashes, Redis outages,
hostile sites and bad input, checked from the server's log and from Redis.
Run it alone with ``pytest -m faults``."""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler.store import codec
from crawler.store import Frontier
from crawler.store import Keys
from crawler.store.keys import LuaScript, Scripts
from devkit.testweb.site import Site
from tests.servers import ROOT, RedisServer, cpu_seconds, scrapy_env, wait_until
from tests.test_scheduler import all_pages, crawl_cmd, page_fetches, start

pytestmark = pytest.mark.faults
QUIET = dict(links=6, size_fixed=3000, private_share=0, cross_share=0.3, dup_share=0.2, crawl_delay_share=0)


@pytest.fixture
def durable_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "aof", "--appendonly", "yes", "--appendfsync", "always").start()
    yield server
    server.stop()


def wait_for_pages(web, n: int, timeout: float = 60) -> None:
    wait_until(lambda: len(page_fetches(web.log())) >= n, timeout, f"{n} pages fetched")


def start_logged(cmd: list[str], redis_url: str, log: Path) -> subprocess.Popen[str]:
    """``start``, its stderr to ``log``, which the test reads while it runs."""
    return subprocess.Popen(cmd, cwd=ROOT, env=scrapy_env(redis_url), text=True,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))


OUTAGE = re.compile(r"redis=down\((\d+) attempts\)")


def attempts_reported(log: Path) -> int:
    """The reconnect attempts the worker's last progress line reports (0: none, or Redis up)."""
    found = OUTAGE.findall(log.read_text())
    return int(found[-1]) if found else 0


def test_three_kills_while_another_worker_keeps_going(redis_url: str, make_web) -> None:
    web = make_web(domains=4, pages=40, faults={"slow": 0.2}, slow_ms=800, **QUIET)
    cmd = crawl_cmd(web, "CRAWLER_DOMAIN_DELAY=0.05", "CRAWLER_LEASE_SECONDS=3", "DOWNLOAD_TIMEOUT=2")
    steady = start(cmd, redis_url)
    rng = random.Random()
    for kill in range(3):
        victim = start(cmd, redis_url)
        wait_for_pages(web, 15 * (kill + 1) + rng.randrange(10))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    out, err = steady.communicate(timeout=180)
    assert steady.returncode == 0, err[-3000:]
    fetches = page_fetches(web.log())
    assert all_pages(web) <= set(fetches)  # pages lost: 0
    client = redis.Redis.from_url(redis_url)
    expired = int(client.hget("crawler:{demo:0}:stats", "leases_expired") or 0)
    twice = sum(v - 1 for v in fetches.values())
    assert twice <= expired
    print(f"three kills: {expired} leases recovered, {twice} pages fetched twice")


def test_redis_restart_mid_crawl(durable_redis: RedisServer, make_web, tmp_path: Path) -> None:
    web = make_web(domains=4, pages=50, **QUIET)
    log = tmp_path / "worker.log"
    proc = start_logged(crawl_cmd(web, "CRAWLER_DOMAIN_DELAY=0.1"), durable_redis.url, log)
    wait_for_pages(web, 40)
    durable_redis.stop()
    # back once the worker has seen it gone, not after a guess at how long that takes
    wait_until(lambda: "is unreachable" in log.read_text() or proc.poll() is not None, 60, "the outage noticed")
    durable_redis.start()
    proc.wait(timeout=180)
    err = log.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert all_pages(web) <= set(page_fetches(web.log()))  # nothing lost
    assert err.count("is unreachable") == 1 and err.count("is back after") == 1
    assert "Traceback" not in err


CAPPED = 7  # reconnect attempts 0.5, 1, 2, 4, 5, 5 s apart: two at the cap (_outage._MAX_BACKOFF), 17.5 s


def test_redis_away_past_the_backoff_cap(durable_redis: RedisServer, make_web, tmp_path: Path) -> None:
    # the outage lasts until the worker reports reconnecting at the capped
    # interval (its progress line, on its own clock), not a fixed 30 s
    web = make_web(domains=3, pages=40, **QUIET)
    log = tmp_path / "worker.log"
    proc = start_logged(crawl_cmd(web, "CRAWLER_DOMAIN_DELAY=0.1", "CRAWLER_LEASE_SECONDS=300",
                                  "SCHEDULER_IDLE_BEFORE_CLOSE=0", "CRAWLER_PROGRESS_INTERVAL=0.25"),
                        durable_redis.url, log)
    wait_for_pages(web, 20)
    durable_redis.stop()
    cpu_before, started = cpu_seconds(proc.pid), time.monotonic()
    wait_until(lambda: attempts_reported(log) >= CAPPED or proc.poll() is not None, 90, "reconnects at the cap")
    assert proc.poll() is None, log.read_text()[-3000:]  # neither crashed nor idle-closed
    cpu_used = cpu_seconds(proc.pid) - cpu_before
    outage = time.monotonic() - started
    durable_redis.start()
    proc.wait(timeout=180)
    err = log.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert all_pages(web) <= set(page_fetches(web.log()))
    attempts = int(err.split("'crawler/redis/reconnect_attempts': ")[1].split(",")[0])
    # bounded, with backoff: no spinning (at most one a second, as over the 30 s this test once slept)
    assert attempts <= max(CAPPED + 2, outage), (attempts, outage)
    assert cpu_used < 0.25 * outage
    print(f"{outage:.1f} s outage: {attempts} reconnect attempts, {cpu_used:.2f} CPU s while waiting")


def test_redis_out_of_memory(tmp_path: Path, make_web) -> None:
    server = RedisServer(tmp_path / "oom").start()
    try:
        client = server.client()
        web = make_web(domains=6, pages=3000, links=40, size_fixed=3000, private_share=0, crawl_delay_share=0,
                       cross_share=0.1, dup_share=0)
        # the crawl's scripts are in the cache first (~30 KB of Lua each, counted in
        # used_memory): the megabyte of room below is for the frontier's data
        scripts = Scripts(client)
        for name in (*Scripts.NAMES, "epoch"):
            client.script_load((getattr(scripts, name, None) or LuaScript(client, name, False)).script.script)
        used = client.info("memory")["used_memory"]
        client.config_set("maxmemory", used + 1_000_000)
        client.config_set("maxmemory-policy", "noeviction")
        proc = start(crawl_cmd(web, "CRAWLER_DOMAIN_DELAY=0", "CLOSESPIDER_PAGECOUNT=600",
                               "CRAWLER_ENQUEUE_BATCH=200"), server.url)
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        assert "Redis is out of memory" in err
        assert "Traceback" not in err  # no script refused for want of memory
        stats_line = err.split("'crawler/frontier/oom_dropped': ")
        assert len(stats_line) == 2 and int(stats_line[1].split(",")[0]) > 0
        assert len(page_fetches(web.log())) >= 100  # kept crawling what was queued
    finally:
        server.stop()


def test_hostile_sites_do_not_stop_the_crawl(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=5, pages=30, links=8, size_fixed=4000, private_share=0, crawl_delay_share=0,
                   cross_share=0.2, dup_share=0.1, trap_share=0.15, slow_ms=4000, big_size=2_000_000,
                   faults={"429": 0.05, "slow": 0.05, "drop": 0.05, "big": 0.05, "redirect": 0.05},
                   robots_faults={"invalid": 0.4})
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"{web.url(d)}\n" for d in range(5)) + "3,bad domain\nnot a url://x\n")
    result = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}",
         "-s", "CRAWLER_DOMAIN_DELAY=0", "-s", "DOWNLOAD_TIMEOUT=1", "-s", "CRAWLER_MAX_ATTEMPTS=2",
         "-s", "CRAWLER_BACKOFF_BASE=0.1", "-s", "CRAWLER_BACKOFF_JITTER=0.1", "-s", "CRAWLER_RETRY_AFTER_MAX=1",
         "-s", "CRAWLER_MAX_DEPTH=8", "-s", "CRAWLER_DOMAIN_BUDGET=60", "-s", "CRAWLER_DOMAIN_BUDGET_MAX=0",
         "-s", "CRAWLER_WARC_DIR=",
         "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CRAWLER_LEASE_SECONDS=30"],
        cwd=ROOT, env=scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"),
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    err = result.stderr
    assert "Bad seed, skipped: line 6" in err and "Bad seed, skipped: line 7" in err
    log = web.log()
    calendar = Counter(e.domain for e in log if e.path.startswith("/calendar/"))
    # the infinite calendar: within 8 links of a seed, at most 17 months around its entry
    assert calendar and max(calendar.values()) <= 2 * 8 + 1
    distinct = Counter(domain for domain, _ in {(e.domain, e.target) for e in log if e.path != "/robots.txt"})
    assert all(c <= 60 for c in distinct.values())  # the budget: URLs admitted per domain
    site = Site(web.config, web.port)
    healthy = {(web.config.domain(d), f"/p/{k}.html") for d in range(5) for k in range(1, 30)
               if site.page_fault(d, k) is None}
    fetched = {(e.domain, e.path) for e in log}
    assert len(healthy & fetched) >= 0.8 * len(healthy)  # the rest keeps its pace
    assert ("d0.test", "/hostile.html") in fetched or any(e.path == "/hostile.html" for e in log)
    for stat in ("crawler/backoff/retries", "crawler/truncated", "downloader/exception_count",
                 "crawler/links/found"):
        assert f"'{stat}': " in err, stat
    client = redis.Redis.from_url(redis_url)
    counts = json.loads(subprocess.run(
        [sys.executable, "-m", "scrapy", "dlq", "billion", "--counts", "--json"], cwd=ROOT,
        env=scrapy_env(redis_url), capture_output=True, text=True).stdout)
    assert counts.get("too_many_redirects", 0) + counts.get("retries_exhausted", 0) > 0
    assert client.zcard("crawler:{billion:0}:leases") == 0


def test_pickle_in_redis_is_never_unpickled(redis_url: str, make_web, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    web = make_web(domains=1, pages=3, **QUIET)
    client = redis.Redis.from_url(redis_url)
    frontier = Frontier(client, Keys("crawler", "demo", 0))
    frontier.open()
    from crawler.store import Item

    for payload in (pickle.dumps(Exploit()), b"R" + pickle.dumps(Exploit())):
        frontier.add([Item(os.urandom(32), "d0.test", 5, payload)])
    result = subprocess.run([sys.executable, "-m", "scrapy", *crawl_cmd(web)[3:]], cwd=ROOT,
                            env=scrapy_env(redis_url), capture_output=True, text=True, timeout=120)
    # dropped, never run: two queue entries lost, which the crawl says (exit status 1)
    assert result.returncode == 1, result.stderr[-3000:]
    assert not marker.exists()
    assert "'crawler/frontier/undecodable': 2" in result.stderr
    assert "Crawl failed: 2 requests of this crawl were lost" in result.stderr
    assert codec.decode(codec.encode_url("http://x.test/"), None).url == "http://x.test/"  # type: ignore[arg-type]


def test_tls_and_auth_with_masked_passwords(tmp_path: Path, make_web) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(tmp_path / "cert.pem")], check=True, capture_output=True)
    from tests.servers import free_port

    port = free_port()
    server = RedisServer(tmp_path / "tls", "--port", "0", "--tls-port", str(port),
                         "--tls-cert-file", str(tmp_path / "cert.pem"), "--tls-key-file", str(tmp_path / "key.pem"),
                         "--tls-ca-cert-file", str(tmp_path / "cert.pem"), "--tls-auth-clients", "no",
                         port=port, password="s3cr3t-pw")
    server.client = lambda **kw: redis.Redis(host="127.0.0.1", port=port, password="s3cr3t-pw", ssl=True,  # type: ignore[method-assign]
                                             ssl_ca_certs=str(tmp_path / "cert.pem"), **kw)
    server.start()
    try:
        url = f"rediss://:s3cr3t-pw@127.0.0.1:{port}/0?ssl_ca_certs={tmp_path / 'cert.pem'}"
        web = make_web(domains=2, pages=5, **QUIET)
        result = subprocess.run([sys.executable, "-m", "scrapy", *crawl_cmd(web)[3:], "-s", "LOG_LEVEL=DEBUG"],
                                cwd=ROOT, env=scrapy_env(url), capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        assert all_pages(web) <= set(page_fetches(web.log()))
        assert "s3cr3t-pw" not in result.stderr + result.stdout
        wrong = url.replace("s3cr3t-pw", "guess")
        refused = subprocess.run([sys.executable, "-m", "scrapy", *crawl_cmd(web)[3:]], cwd=ROOT,
                                 env=scrapy_env(wrong), capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "refused the credentials" in refused.stderr
        assert "guess" not in refused.stderr
    finally:
        server.stop()


@pytest.mark.parametrize(("setting", "message"), [
    ("CRAWLER_MAX_PAGE_BYTES=big", "CRAWLER_MAX_PAGE_BYTES must be an integer >= 0, got 'big'"),
    ("CRAWLER_MAX_ATTEMPTS=0", "CRAWLER_MAX_ATTEMPTS must be an integer >= 1, got '0'"),
    ("CRAWLER_HTML_ONLY=perhaps", "CRAWLER_HTML_ONLY must be True or False, got 'perhaps'"),
    ("CRAWLER_DOMAIN_RATE=-1", "CRAWLER_DOMAIN_RATE must be a finite number >= 0, got '-1'"),
    ("CRAWLER_SHARD_REDIS_URLS=[1]",
     "CRAWLER_SHARD_REDIS_URLS must be a dict (a JSON object on the command line), got [1]"),
    ('CRAWLER_HOST_MAP={"*.test": "nowhere"}', "CRAWLER_HOST_MAP['*.test'] must be an IP address or a list of them, got 'nowhere'"),
])
def test_bad_settings_are_one_line_naming_the_setting(redis_url: str, setting: str, message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "demo", "-a", "start_urls=http://d0.test/",
                             "-s", setting], cwd=ROOT, env=scrapy_env(redis_url), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2  # a bad setting
    assert result.stderr.strip() == f"crawler: error: {message}"


def test_another_programs_keys_are_never_touched(redis_url: str, make_web) -> None:
    client = redis.Redis.from_url(redis_url)
    theirs = {"app:session:1": "a", "queue": "b", "demo:requests": "c", "crawler": "d"}
    for key, value in theirs.items():
        client.set(key, value)
    web = make_web(domains=2, pages=5, **QUIET)
    result = subprocess.run([sys.executable, "-m", "scrapy", *crawl_cmd(web, "CRAWLER_LOCK_DOMAINS=d0.test")[3:]],
                            cwd=ROOT, env=scrapy_env(redis_url), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert {k: client.get(k).decode() for k in theirs} == theirs
    ours = [k.decode() for k in client.keys("*") if k.decode() not in theirs]
    assert ours and all(k.startswith("crawler:{demo:0}:") for k in ours)
