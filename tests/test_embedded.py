"""The embedded Redis: started once, shared by processes, persistent."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.embedded import EmbeddedRedis
from tests.servers import ROOT, run_scrapy, scrapy_env


@pytest.fixture
def embedded(state_dir: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(state_dir / "redis")
    yield server
    server.stop()


def _pid_from_child(state: Path) -> int:
    code = (
        "import sys; from crawler.embedded import EmbeddedRedis\n"
        "s = EmbeddedRedis(sys.argv[1]); s.ensure_running()\n"
        "print(s.client().info('server')['process_id'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(state)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True)
    return int(out.stdout.strip())


def test_starts_on_a_unix_socket_with_append_only_file(embedded: EmbeddedRedis) -> None:
    assert not embedded.is_running()
    url = embedded.ensure_running()
    assert url == f"unix://{embedded.socket}"
    client = embedded.client()
    assert client.config_get("appendonly")["appendonly"] == "yes"
    assert client.config_get("port")["port"] == "0"  # no TCP listener
    assert (embedded.state_dir / "redis.pid").exists()


def test_second_process_reuses_the_running_server(embedded: EmbeddedRedis) -> None:
    embedded.ensure_running()
    mine = embedded.client().info("server")["process_id"]
    assert _pid_from_child(embedded.state_dir) == mine


def test_concurrent_starters_get_one_server(embedded: EmbeddedRedis) -> None:
    code = (
        "import sys; from crawler.embedded import EmbeddedRedis\n"
        "s = EmbeddedRedis(sys.argv[1]); s.ensure_running()\n"
        "print(s.client().info('server')['process_id'])\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(embedded.state_dir)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    pids = {int(p.communicate(timeout=60)[0].strip()) for p in procs}
    assert len(pids) == 1


def test_data_survives_a_restart(embedded: EmbeddedRedis) -> None:
    embedded.ensure_running()
    embedded.client().rpush("frontier:test", b"one", b"two")
    old_pid = embedded.client().info("server")["process_id"]
    assert embedded.stop()
    assert not embedded.is_running()
    embedded.ensure_running()
    assert embedded.client().info("server")["process_id"] != old_pid
    assert embedded.client().lrange("frontier:test", 0, -1) == [b"one", b"two"]


def test_long_state_dir_falls_back_to_a_short_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    server = EmbeddedRedis(deep)
    assert len(str(server.socket)) <= 100
    assert str(server.socket).startswith("/tmp/crawler-redis-")
    try:
        server.ensure_running()
        assert server.client().ping()
    finally:
        server.stop()


def test_command_line_status_and_stop(state_dir: Path) -> None:
    env = scrapy_env(CRAWLER_STATE_DIR=str(state_dir))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "crawler.embedded", *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)

    assert cli("status").returncode == 1
    started = cli("start")
    assert started.returncode == 0 and started.stdout.startswith("unix://")
    assert "running" in cli("status").stdout
    assert "stopped embedded Redis" in cli("stop").stdout
    assert cli("status").returncode == 1
    assert cli("bogus").returncode == 2


def test_scrapy_crawl_without_redis_url_uses_the_embedded_server(state_dir: Path, make_web) -> None:
    web = make_web(domains=1, pages=3, size_fixed=3000, links=3, cross_share=0, dup_share=0, crawl_delay_share=0,
                   private_share=0)
    env = scrapy_env(None, CRAWLER_STATE_DIR=str(state_dir))
    try:
        result = run_scrapy(["crawl", "demo", "-a", f"start_urls={web.url(0, '/')}"], env)
        assert result.returncode == 0, result.stderr[-2000:]
        server = EmbeddedRedis(state_dir / "redis")
        assert server.is_running()
        # the crawl's frontier lives in the embedded server
        paths = {e.path for e in web.log()} - {"/robots.txt"}
        assert {"/", "/p/1.html", "/p/2.html"} <= paths
        enqueued = server.client().hget("crawler:{demo:0}:stats", "enqueued")
        assert int(enqueued) == len(paths)
    finally:
        EmbeddedRedis(state_dir / "redis").stop()
