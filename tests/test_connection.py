"""REDIS_URL handling: one place, masked passwords, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from scrapy.settings import Settings

from crawler.connection import RedisUnavailable, get_redis, mask_url
from tests.servers import RedisServer, free_port, run_scrapy, scrapy_env


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:s3cret@host:6379/2", "redis://:***@host:6379/2"),
        ("rediss://user:p%40ss@host/0", "rediss://user:***@host/0"),
        ("unix:///tmp/r.sock?db=1", "unix:///tmp/r.sock?db=1"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_connects_with_redis_url_setting(redis_url: str) -> None:
    client = get_redis(Settings({"REDIS_URL": redis_url}))
    assert client.ping()


def test_redis_url_from_environment(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    client = get_redis(Settings())
    client.set("from-env", 1)
    assert client.get("from-env") == b"1"


def test_malformed_url_is_one_clear_error() -> None:
    with pytest.raises(RedisUnavailable, match=r"^invalid REDIS_URL http://x:\*\*\*@h/0: "):
        get_redis(Settings({"REDIS_URL": "http://x:pw@h/0"}))


def test_unreachable_server_masks_the_password() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisUnavailable) as info:
        get_redis(Settings({"REDIS_URL": url}))
    message = str(info.value)
    assert message.startswith("cannot connect to Redis at redis://:***@127.0.0.1:")
    assert "hunter2" not in message and "\n" not in message


def test_wrong_password_is_reported(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, password="right").start()
    try:
        bad = server.url.replace(":right@", ":wrong@")
        with pytest.raises(RedisUnavailable, match="refused the credentials"):
            get_redis(Settings({"REDIS_URL": bad}))
        assert get_redis(Settings({"REDIS_URL": server.url})).ping()
    finally:
        server.stop()


def test_embedded_off_and_no_url_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(RedisUnavailable, match="CRAWLER_EMBEDDED_REDIS is off"):
        get_redis(Settings({"CRAWLER_EMBEDDED_REDIS": False}))


@pytest.mark.parametrize("url", ["redis://:topsecret@127.0.0.1:{port}/0", "nonsense://user:topsecret@host/0"])
def test_scrapy_crawl_with_bad_redis_url_prints_one_line(url: str) -> None:
    url = url.format(port=free_port())
    result = run_scrapy(["crawl", "demo", "-a", "start_urls=http://d0.test/"], scrapy_env(url))
    assert result.returncode == (2 if url.startswith("nonsense") else 1)  # a bad setting, or Redis unreachable
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("crawler: error: ")
    assert "topsecret" not in result.stderr and "Traceback" not in result.stderr


def test_a_silent_redis_costs_one_socket_timeout_then_calls_fail_unsent(tmp_path: Path) -> None:
    """SIGSTOP: the first call waits its socket timeout; the calls after it are
    refused before they are sent (RedisNotAnswering, not a second timeout),
    the server is never asked them, and the first ping it answers after
    SIGCONT lets calls through again."""
    import redis

    from crawler._breaker import RedisNotAnswering
    from devkit import chaos
    from tests.servers import wait_until

    server = RedisServer(tmp_path / "r").start()
    try:
        client = get_redis(Settings({"REDIS_URL": server.url, "REDIS_PARAMS": {"socket_timeout": 0.5}}))
        client.set("k", "1")
        assert server.proc is not None
        with chaos.stopped(server.proc.pid):
            with pytest.raises(redis.TimeoutError) as first:
                client.incr("k")
            assert not isinstance(first.value, RedisNotAnswering)  # this one was sent and waited
            for _ in range(3):
                with pytest.raises(RedisNotAnswering):
                    client.incr("k")
            with pytest.raises(RedisNotAnswering):
                client.pipeline().incr("k").incr("k").execute()
        wait_until(lambda: _answers(client), 10, "calls let through once Redis answers a ping")
        # 1, +1 by the incr that timed out (it was in the server's socket and ran), +1 by the first
        # that went through after: none refused here ever reached the server
        assert int(client.get("k")) == 3
    finally:
        server.stop()


def test_a_probe_of_a_server_gone_for_good_leaves_no_garbage_and_ends_with_its_client(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Silent, then killed: the probe thread pings a refused port until the
    client is dropped. Its failed pings leave nothing for the cyclic collector
    (a cycle each would be hours of garbage, and a pause of the loop when the
    oldest generation is collected), and the thread ends with the client."""
    import gc
    import threading

    import redis

    from crawler import _breaker
    from devkit import chaos
    from tests.servers import garbage_of, wait_until

    monkeypatch.setattr(_breaker, "PROBE_EVERY", 0.01)
    pings = []
    connect = redis.Connection._connect  # counts the probe's attempts; each still opens a socket
    monkeypatch.setattr(redis.Connection, "_connect", lambda conn: (pings.append(1), connect(conn))[1])
    server = RedisServer(tmp_path / "r").start()
    client = get_redis(Settings({"REDIS_URL": server.url, "REDIS_PARAMS": {"socket_timeout": 0.3}}))
    client.ping()
    assert server.proc is not None
    try:
        with chaos.stopped(server.proc.pid):
            with pytest.raises(redis.TimeoutError):
                client.incr("k")
            server.proc.kill()
            server.proc.wait()
        start = len(pings)
        left = garbage_of(lambda: wait_until(lambda: len(pings) >= start + 30, 10, "30 failed pings"))
        ours = [name for name in left if name.startswith(("redis.", "crawler.")) or "crawler" in name]
        assert not ours, ours[:12]

        def probing() -> bool:
            return any(t.name == f"redis-probe 127.0.0.1:{server.port}" for t in threading.enumerate())

        assert probing()
        del client
        gc.collect()
        wait_until(lambda: not probing(), 10, "the probe thread gone with its client")
    finally:
        server.stop()


def _answers(client) -> bool:  # type: ignore[no-untyped-def]
    import redis

    try:
        client.incr("k")
    except redis.TimeoutError:
        return False
    return True


def test_a_worker_starting_while_redis_is_silent_waits_for_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A worker restarted by its supervisor while Redis is paused (the
    soak's `together` fault: its start failed after one socket timeout)
    waits for Redis to answer, up to ``START_WAIT``, and starts."""
    import threading

    from devkit import chaos
    from tests.servers import wait_until

    server = RedisServer(tmp_path / "r").start()
    assert server.proc is not None
    started: list[object] = []
    try:
        with chaos.stopped(server.proc.pid):
            thread = threading.Thread(target=lambda: started.append(_start(server.url)))
            thread.start()
            wait_until(lambda: "does not answer (Timeout" in caplog.text, 10, "the wait logged")
            assert not started
        thread.join(10)
        assert not thread.is_alive() and len(started) == 1 and not isinstance(started[0], Exception), started
        assert started[0].ping()  # type: ignore[attr-defined]
    finally:
        server.stop()


def test_a_redis_silent_past_the_start_wait_fails_the_start_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crawler import connection
    from devkit import chaos

    monkeypatch.setattr(connection, "START_WAIT", 1.0)
    server = RedisServer(tmp_path / "r").start()
    assert server.proc is not None
    try:
        with chaos.stopped(server.proc.pid):
            error = _start(server.url)
        assert isinstance(error, RedisUnavailable)
        assert str(error) == f"cannot connect to Redis at {server.url}: no answer within 1s"
    finally:
        server.stop()


def _start(url: str) -> object:
    """get_redis as a worker's start calls it (checked); the error if it fails."""
    try:
        return get_redis(Settings({"REDIS_URL": url, "REDIS_PARAMS": {"socket_timeout": 0.5}}), check=True)
    except RedisUnavailable as exc:
        return exc
