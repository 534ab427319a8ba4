"""`scrapy cluster` against two real Scrapyd servers on loopback: deploy,
a sharded billion crawl that runs to the end, status, cancel, and refusal."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import ROOT, free_port, scrapy_env

QUIET = dict(links=6, size_fixed=3000, private_share=0, cross_share=0.3, dup_share=0.2, crawl_delay_share=0)


class Scrapyd:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True)
        self.port = free_port()
        (self.dir / "scrapyd.conf").write_text(
            f"[scrapyd]\nbind_address = 127.0.0.1\nhttp_port = {self.port}\npoll_interval = 0.5\n"
            f"max_proc = 4\neggs_dir = {self.dir}/eggs\nlogs_dir = {self.dir}/logs\ndbs_dir = {self.dir}/dbs\n")
        # jobs run on the deployed egg's settings (crawler.settings), not devkit's
        self.proc = subprocess.Popen([sys.executable, "-m", "scrapyd"], cwd=self.dir, env=scrapy_env(None, settings=None),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/daemonstatus.json", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("scrapyd did not start") from None
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def jobs(self) -> dict[str, list[dict[str, object]]]:
        with urllib.request.urlopen(f"{self.url}/listjobs.json?project=crawler", timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Scrapyd]]:
    servers = [Scrapyd(tmp_path / f"scrapyd{i}") for i in range(2)]
    yield servers
    for server in servers:
        server.stop()


#: the test web's hosts, for jobs on the deployed project's settings (which map nothing)
TEST_WEB = ("--setting", 'CRAWLER_HOST_MAP={"*.test": "127.0.0.1"}', "--setting", "CRAWLER_ALLOW_PRIVATE=*.test")


def cluster(*args: str, redis_url: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy", "cluster", *args], cwd=ROOT,
                          env=scrapy_env(redis_url), capture_output=True, text=True, timeout=180)


def test_deploy_schedule_status_and_cancel(nodes: list[Scrapyd], redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=6, pages=10, **QUIET)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"{web.url(d)}\n" for d in range(6)))
    urls = ",".join(n.url for n in nodes)

    deployed = cluster("deploy", "--nodes", urls, "--version", "1")
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert deployed.stdout.count("deployed crawler 1") == 2

    scheduled = cluster("schedule", "billion", "--nodes", urls, "--shards", "3", "--seeds", str(seeds),
                        "--redis", f"{redis_url},{redis_url}", "--setting", "CRAWLER_DOMAIN_DELAY=0",
                        "--setting", "CRAWLER_CONTACT=ops@example.org", "--setting", "CRAWLER_WARC_DIR=", *TEST_WEB)
    assert scheduled.returncode == 0, scheduled.stdout + scheduled.stderr
    assert "shard 0/3: job billion-0-of-3 on " + nodes[0].url in scheduled.stdout
    assert "shard 1/3: job billion-1-of-3 on " + nodes[1].url in scheduled.stdout
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        status = cluster("status", "billion", "--nodes", urls, "--shards", "3")
        if status.stdout.count(": finished") == 3:
            break
        time.sleep(1)
    assert status.stdout.count(": finished") == 3, status.stdout
    fetched = Counter((e.domain, e.path) for e in web.log() if e.path != "/robots.txt")
    assert {(d, f"/p/{k}.html") for d in web.domains for k in range(1, 10)} <= set(fetched)
    assert max(fetched.values()) == 1

    slow = cluster("schedule", "billion", "--nodes", urls, "--shards", "2", "--seeds", str(seeds),
                   "--redis", f"{redis_url},{redis_url}", "--setting", "CRAWLER_DOMAIN_DELAY=30",
                   "--setting", "CRAWLER_CONTACT=ops@example.org", "--setting", "SCHEDULER_FLUSH_ON_START=True",
                   *TEST_WEB)
    assert slow.returncode == 0, slow.stdout
    deadline = time.monotonic() + 60
    while "running" not in (status := cluster("status", "billion", "--nodes", urls, "--shards", "2")).stdout:
        assert time.monotonic() < deadline, status.stdout
        time.sleep(0.5)
    cancelled = cluster("cancel", "billion", "--nodes", urls, "--shards", "2")
    assert cancelled.returncode == 0 and cancelled.stdout.count("billion-") == 2
    deadline = time.monotonic() + 60
    while cluster("status", "billion", "--nodes", urls, "--shards", "2").stdout.count(": finished") < 2:
        assert time.monotonic() < deadline
        time.sleep(0.5)


def test_unreachable_node_submits_nothing(nodes: list[Scrapyd], tmp_path: Path) -> None:
    urls = f"{nodes[0].url},http://127.0.0.1:{free_port()}"
    deployed = cluster("deploy", "--nodes", urls)
    assert deployed.returncode == 1
    assert "deployed crawler" in deployed.stdout and "unreachable" in deployed.stdout
    result = cluster("schedule", "billion", "--nodes", urls, "--shards", "4", "--seeds", "redis:seeds")
    assert result.returncode == 1 and "unreachable" in result.stdout
    jobs = nodes[0].jobs()
    assert jobs["pending"] == [] and jobs["running"] == [] and jobs["finished"] == []
    refused = cluster("schedule", "nosuchspider", "--nodes", nodes[0].url, "--shards", "2")
    assert refused.returncode == 1 and "refused" in refused.stdout
    bad = cluster("schedule", "billion", "--nodes", nodes[0].url, "--shards", "0")
    assert bad.returncode != 0 and "--shards must be an integer >= 1" in bad.stderr
