"""`scrapy cluster` against two real Scrapyd servers on loopback: deploy,
a sharded billion crawl that runs to the end, a second run beside the first,
status of each run, cancel, a job that fails on its node reported as failed,
inputs checked before anything is submitted, and refusal. The two servers
and the deploy are the module's: each test tells its own jobs by their run."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawler.commands.cluster import deploy_targets, judge_log
from tests.servers import ROOT, free_port, free_port_run, scrapy_env, wait_until

QUIET = dict(links=6, size_fixed=3000, private_share=0, cross_share=0.3, dup_share=0.2, crawl_delay_share=0)


class Scrapyd:
    """A Scrapyd server on a free loopback port, started (``wait()``: until it answers)."""

    def __init__(self, workdir: Path, *, username: str = "", password: str = "") -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True)
        self.port = free_port()
        self.auth = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode() if username else ""
        (self.dir / "scrapyd.conf").write_text(
            f"[scrapyd]\nbind_address = 127.0.0.1\nhttp_port = {self.port}\npoll_interval = 0.5\n"
            f"max_proc = 4\neggs_dir = {self.dir}/eggs\nlogs_dir = {self.dir}/logs\ndbs_dir = {self.dir}/dbs\n"
            + (f"username = {username}\npassword = {password}\n" if username else ""))
        # jobs run on the deployed egg's settings (crawler.settings), not devkit's, and get
        # CRAWLER_CONTACT only from `cluster schedule`, as on a node that has none
        self.proc = subprocess.Popen([sys.executable, "-m", "scrapyd"], cwd=self.dir,
                                     env=scrapy_env(None, settings=None, CRAWLER_CONTACT=""),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait(self) -> Scrapyd:
        def answers() -> bool:
            try:
                self.open("daemonstatus.json")
                return True
            except OSError:
                return False

        wait_until(answers, 30, "scrapyd to start", every=0.1)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self, endpoint: str, data: bytes | None = None) -> dict[str, Any]:
        headers = {"Authorization": self.auth} if self.auth else {}
        request = urllib.request.Request(f"{self.url}/{endpoint}", data, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.loads(resp.read())

    def jobs(self) -> dict[str, list[dict[str, object]]]:
        return self.open("listjobs.json?project=crawler")

    def job_ids(self) -> set[object]:
        """Every job the node knows: pending, running or finished."""
        return {job["id"] for state in ("pending", "running", "finished") for job in self.jobs()[state]}

    def schedule(self, data: dict[str, str]) -> None:
        body = urllib.parse.urlencode({"project": "crawler", **data}).encode()
        assert self.open("schedule.json", body)["status"] == "ok"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Scrapyd]]:
    folder = tmp_path_factory.mktemp("scrapyd")
    servers = [Scrapyd(folder / f"scrapyd{i}") for i in range(2)]
    yield [server.wait() for server in servers]
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def deployed(nodes: list[Scrapyd]) -> subprocess.CompletedProcess[str]:
    """``cluster deploy`` of this checkout to both nodes, once for the module."""
    return cluster("deploy", "--nodes", ",".join(n.url for n in nodes), "--version", "1")


#: the test web's hosts, for jobs on the deployed project's settings (which map nothing), and its one
#: address a shared front end, as devkit.settings has it (else billion's CRAWLER_IP_DELAY of 1 s paces
#: every domain's pages one at a time through 127.0.0.1)
TEST_WEB = ("--setting", 'CRAWLER_HOST_MAP={"*.test": "127.0.0.1"}', "--setting", "CRAWLER_ALLOW_PRIVATE=*.test",
            "--setting", "CRAWLER_IP_SHARED=127.0.0.1/32", "--setting", "CRAWLER_IP_SHARED_DELAY=0",
            "--setting", "CRAWLER_IP_SHARED_CONCURRENCY=100000")


CONTACT = ("--setting", "CRAWLER_CONTACT=ops@example.org")


def cluster(*args: str, redis_url: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``scrapy cluster`` on a machine without CRAWLER_CONTACT in its environment."""
    return subprocess.run([sys.executable, "-m", "scrapy", "cluster", *args], cwd=cwd,
                          env=scrapy_env(redis_url, CRAWLER_CONTACT=""), capture_output=True, text=True, timeout=180,
                          check=False)


def run_of(scheduled: subprocess.CompletedProcess[str]) -> str:
    match = re.search(r"^run (\d{8}T\d{6}Z): ", scheduled.stdout, re.MULTILINE)
    assert match, scheduled.stdout
    return match.group(1)


def test_deploy_schedule_status_and_cancel(nodes: list[Scrapyd], deployed: subprocess.CompletedProcess[str],
                                           redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=6, pages=10, **QUIET)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"{web.url(d)}\n" for d in range(6)))
    urls = ",".join(n.url for n in nodes)

    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert deployed.stdout.count("deployed crawler 1") == 2

    scheduled = cluster("schedule", "billion", "--nodes", urls, "--shards", "3", "--seeds", str(seeds),
                        "--redis", f"{redis_url},{redis_url}", "--setting", "CRAWLER_DOMAIN_DELAY=0",
                        *CONTACT, "--setting", "CRAWLER_WARC_DIR=", *TEST_WEB)
    assert scheduled.returncode == 0, scheduled.stdout + scheduled.stderr
    first = run_of(scheduled)
    assert f"shard 0/3: job billion-0-of-3-{first} on {nodes[0].url}" in scheduled.stdout
    assert f"shard 1/3: job billion-1-of-3-{first} on {nodes[1].url}" in scheduled.stdout
    # asked of Scrapyd (cheap) until the three jobs are done, then of `cluster status` once
    jobs = {f"billion-{i}-of-3-{first}" for i in range(3)}
    wait_until(lambda: jobs <= {j["id"] for n in nodes for j in n.jobs()["finished"]}, 150, "three shards finished",
               every=0.2)
    status = cluster("status", "billion", "--nodes", urls, "--shards", "3")
    assert status.stdout.count(": finished") == 3 and "finish reason finished" in status.stdout, status.stdout
    assert status.returncode == 0 and f"run {first}: billion, 3 shards" in status.stdout
    fetched = Counter((e.domain, e.path) for e in web.log() if e.path != "/robots.txt")
    assert {(d, f"/p/{k}.html") for d in web.domains for k in range(1, 10)} <= set(fetched)
    assert max(fetched.values()) == 1

    # a second run: its own job ids, so the finished first run hides nothing, and its own logs
    slow = cluster("schedule", "billion", "--nodes", urls, "--shards", "2", "--seeds", str(seeds),
                   "--redis", f"{redis_url},{redis_url}", "--setting", "CRAWLER_DOMAIN_DELAY=30",
                   *CONTACT, "--setting", "SCHEDULER_FLUSH_ON_START=True", *TEST_WEB)
    assert slow.returncode == 0, slow.stdout + slow.stderr
    second = run_of(slow)
    assert second != first
    status = wait_until(lambda: (s := cluster("status", "billion", "--nodes", urls)).stdout.count(": running") >= 2
                        and s, 60, "two shards running", every=0.5)
    assert f"run {second}: billion, 2 shards" in status.stdout and first not in status.stdout
    older = cluster("status", "billion", "--nodes", urls, "--run", first)
    assert older.returncode == 0 and older.stdout.count(": finished") == 3, older.stdout
    expected = sorted([*(f"billion-{i}-of-3-{first}.log" for i in range(3)),
                       *(f"billion-{i}-of-2-{second}.log" for i in range(2))])

    def logs() -> list[str]:  # of these two runs (the module's other tests leave their own)
        return sorted(p.name for n in nodes for p in (n.dir / "logs" / "crawler" / "billion").glob("*.log")
                      if p.stem.endswith((first, second)))

    # Scrapyd says "running" before its launcher has made the job's log file
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: logs() == expected, 30, "every job's log file")
    assert logs() == expected

    cancelled = cluster("cancel", "billion", "--nodes", urls)
    assert cancelled.returncode == 0 and cancelled.stdout.count(f"-of-2-{second} on ") == 2, cancelled.stdout
    assert "was running" in cancelled.stdout
    status = wait_until(lambda: (s := cluster("status", "billion", "--nodes", urls)).stdout.count(": finished") >= 2
                        and s, 60, "two cancelled shards finished", every=0.5)
    assert status.stdout.count("finish reason shutdown") == 2, status.stdout


def test_failed_job_is_reported_failed(nodes: list[Scrapyd], deployed: subprocess.CompletedProcess[str]) -> None:
    node = nodes[0]
    assert deployed.returncode == 0
    # as an older `cluster schedule` submitted it: no CRAWLER_CONTACT, which the node does not have
    # (its run is older than the module's others: asked for by name)
    run = "20260101T000000Z"
    job = f"billion-0-of-1-{run}"
    node.schedule({"spider": "billion", "jobid": job, "shard": "0", "shards": "1"})
    wait_until(lambda: job in {j["id"] for j in node.jobs()["finished"]}, 60, "the job finished", every=0.2)
    status = cluster("status", "billion", "--nodes", node.url, "--run", run)
    assert status.returncode == 1, status.stdout + status.stderr
    assert f"shard 0: failed    billion-0-of-1-{run} on {node.url}: the billion spider crawls the open web: " \
           "set CRAWLER_CONTACT" in status.stdout, status.stdout
    # through `cluster schedule`: a Redis the node cannot reach
    dead = f"redis://127.0.0.1:{free_port()}/0"
    scheduled = cluster("schedule", "billion", "--nodes", node.url, "--shards", "1", "--seeds", "redis:seeds",
                        "--redis", dead, *CONTACT)
    assert scheduled.returncode == 0, scheduled.stdout + scheduled.stderr
    second = run_of(scheduled)
    status = wait_until(lambda: "failed" in (s := cluster("status", "billion", "--nodes", node.url)).stdout and s,
                        60, "the job reported failed", every=0.5)
    assert status.returncode == 1 and f"run {second}: billion, 1 shards" in status.stdout
    line = next(line for line in status.stdout.splitlines() if line.startswith("shard 0: "))
    assert line.startswith(f"shard 0: failed    billion-0-of-1-{second} on {node.url}: ") and dead[8:] in line, line


def test_schedule_checks_inputs_before_submitting(nodes: list[Scrapyd], deployed: subprocess.CompletedProcess[str],
                                                  tmp_path: Path) -> None:
    node = nodes[0]
    assert deployed.returncode == 0
    before = node.job_ids()
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("https://example.org/\n")
    base = ("schedule", "billion", "--nodes", node.url, "--shards", "2")
    for args, message in [
        ((*base, "--seeds", str(seeds)), "set CRAWLER_CONTACT"),
        ((*base, *CONTACT), "cluster schedule needs --seeds"),
        ((*base, *CONTACT, "--seeds", "seeds.txt"), "give an absolute path"),
        ((*base, *CONTACT, "--seeds", str(tmp_path / "none.txt")), "does not exist"),
        ((*base, *CONTACT, "--seeds", str(seeds), "--setting", "CRAWLER_DOMAIN_DELAY=soon"), "CRAWLER_DOMAIN_DELAY"),
    ]:
        refused = cluster(*args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert refused.stderr.count("\n") == 1 and message in refused.stderr, (args, refused.stderr)
    assert node.job_ids() == before  # nothing submitted


def test_unreachable_node_submits_nothing(nodes: list[Scrapyd], tmp_path: Path) -> None:
    urls = f"{nodes[0].url},http://127.0.0.1:{free_port()}"
    deployed = cluster("deploy", "--nodes", urls)
    assert deployed.returncode == 1
    before = nodes[0].job_ids()
    # what went well on stdout, errors on stderr (as `scrapy crawl` has them)
    assert "deployed crawler" in deployed.stdout and "unreachable" not in deployed.stdout
    assert "cluster: error: " in deployed.stderr and "unreachable" in deployed.stderr
    result = cluster("schedule", "billion", "--nodes", urls, "--shards", "4", "--seeds", "redis:seeds", *CONTACT)
    assert result.returncode == 1 and "unreachable" in result.stderr and not result.stdout
    assert nodes[0].job_ids() == before  # nothing submitted
    refused = cluster("schedule", "nosuchspider", "--nodes", nodes[0].url, "--shards", "2", "--seeds", "redis:s")
    assert refused.returncode == 1 and "refused" in refused.stderr and "refused" not in refused.stdout
    status = cluster("status", "billion", "--nodes", urls)
    assert status.returncode == 1 and "unreachable" in status.stderr and "unreachable" not in status.stdout
    bad = cluster("schedule", "billion", "--nodes", nodes[0].url, "--shards", "0")
    assert bad.returncode != 0 and "--shards must be an integer >= 1" in bad.stderr


def test_default_deploy_target_only_when_alone(tmp_path: Path) -> None:
    cfg = tmp_path / "scrapy.cfg"
    shipped = (ROOT / "scrapy.cfg").read_text()
    cfg.write_text(shipped)
    assert deploy_targets(cfg) == (["http://localhost:6800/"], "crawler")
    cfg.write_text(shipped + "\n[deploy:node1]\nurl = http://10.0.0.1:6800/\nproject = crawler\n"
                   "\n[deploy:node2]\nurl = http://10.0.0.2:6800/\n")
    assert deploy_targets(cfg) == (["http://10.0.0.1:6800/", "http://10.0.0.2:6800/"], "crawler")


def test_job_outcome_from_the_log_tail() -> None:
    head = "2026-12-04 13:00:00 [scrapy.utils.log] INFO: Scrapy 2.19.0 started (bot: crawler)\n"
    closed = "2026-12-04 13:00:09 [scrapy.core.engine] INFO: Spider closed (finished)\n"
    assert judge_log(head + closed) == ("finished", "finish reason finished")
    failed = closed.replace("finished", "frontier_lost") + \
        "2026-12-04 13:00:09 [crawler.commands.crawl] ERROR: Crawl failed: frontier Redis lost\n"
    assert judge_log(head + failed) == ("failed", "frontier Redis lost")
    bad = "2026-12-04 13:00:01 [crawler.commands._fail] ERROR: crawler: error: CRAWLER_X must be > 0\n"
    assert judge_log(head + bad) == ("failed", "CRAWLER_X must be > 0")
    state, detail = judge_log(head + "2026-12-04 13:00:02 [scrapy.core.scraper] ERROR: Spider error\n")
    assert state == "failed" and detail.endswith("[scrapy.core.scraper] ERROR: Spider error")
    assert judge_log("")[0] == "failed"


#: what a checkout needs for `scrapy cluster deploy` to build the egg
CHECKOUT = ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "CHANGELOG.md", "crawler", "lua")


def test_basic_auth_from_scrapy_cfg_and_a_metrics_port_per_job(redis_url: str, make_web, tmp_path: Path) -> None:
    node = Scrapyd(tmp_path / "scrapyd", username="ops", password="s3cr:et").wait()
    try:
        project = tmp_path / "checkout"
        project.mkdir()
        for name in CHECKOUT:
            (project / name).symlink_to(ROOT / name)
        (project / "scrapy.cfg").write_text(
            "[settings]\ndefault = crawler.settings\n\n"
            f"[deploy:node1]\nurl = {node.url}/\nproject = crawler\nusername = ops\npassword = s3cr:et\n")
        # without the credentials: refused, on stderr
        bare = cluster("deploy", "--nodes", node.url, cwd=project)
        assert bare.returncode == 1 and "HTTP 401" in bare.stderr, bare.stdout + bare.stderr
        deployed = cluster("deploy", "--version", "1", cwd=project)
        assert deployed.returncode == 0 and f"{node.url}/: deployed crawler 1" in deployed.stdout, \
            deployed.stdout + deployed.stderr

        web = make_web(domains=8, pages=20, **QUIET)
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("".join(f"{web.url(d)}\n" for d in range(8)))
        base = free_port_run(2)
        sd = tmp_path / "prometheus" / "crawler.json"
        sd.parent.mkdir()
        # two jobs on one node: each its own metrics port, both listed for Prometheus's file_sd
        scheduled = cluster("schedule", "billion", "--shards", "2", "--seeds", str(seeds), "--redis", redis_url,
                            "--setting", "CRAWLER_DOMAIN_DELAY=30", *CONTACT, *TEST_WEB,
                            "--metrics-port", str(base), "--metrics-sd", str(sd), cwd=project)
        assert scheduled.returncode == 0, scheduled.stdout + scheduled.stderr
        run = run_of(scheduled)
        targets = json.loads(sd.read_text())
        assert targets == [{"targets": [f"127.0.0.1:{base + shard}"],
                            "labels": {"scrapyd_job": f"billion-{shard}-of-2-{run}", "run": run}}
                           for shard in range(2)]
        # each job served its own port (a job without seeds of its shard ends at once: its log says it)
        logs = node.dir / "logs" / "crawler" / "billion"

        def served() -> bool:
            texts = [(logs / f"billion-{shard}-of-2-{run}.log") for shard in range(2)]
            return all(t.is_file() and f"Prometheus metrics on http://127.0.0.1:{base + shard}/metrics" in t.read_text()
                       for shard, t in enumerate(texts))

        try:
            wait_until(served, 60, "both jobs' metrics lines", every=0.2)
        except TimeoutError:
            raise AssertionError("\n".join(f"{p.name}:\n{p.read_text()[-3000:]}" for p in logs.glob("*.log"))
                                 or f"no job log in {logs}") from None

        def scraped() -> list[int]:  # and a running one answers there with its own shard
            found = []
            for shard in range(2):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{base + shard}/metrics", timeout=5) as resp:
                        if f'shard="{shard}",spider="billion"' in resp.read().decode():
                            found.append(shard)
                except OSError:
                    pass
            return found

        wait_until(scraped, 60, "a job's /metrics", every=0.2)
        status = cluster("status", "billion", cwd=project)
        assert f"run {run}: billion, 2 shards" in status.stdout and ": running" in status.stdout, \
            status.stdout + status.stderr
        cancelled = cluster("cancel", "billion", cwd=project)
        assert cancelled.returncode == 0 and "was running" in cancelled.stdout, cancelled.stdout + cancelled.stderr
        for result in (bare, deployed, scheduled, status, cancelled):
            assert "s3cr" not in result.stdout + result.stderr  # the password is never shown
        # a port per job needs a base: 0 (any free port) cannot be listed
        refused = cluster("schedule", "billion", "--shards", "2", "--seeds", str(seeds), *CONTACT,
                          "--metrics-port", "0", "--metrics-sd", str(sd), cwd=project)
        assert refused.returncode == 2 and "--metrics-sd" in refused.stderr, refused.stdout + refused.stderr
    finally:
        node.stop()
