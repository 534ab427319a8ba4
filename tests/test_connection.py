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
