from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler.clock import ManualClock
from devkit.testweb.config import WebConfig
from devkit.testweb.control import TestWebProcess
from tests.servers import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's Redis, flushed for this test."""
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def clock(redis_client: redis.Redis) -> ManualClock:
    """A clock this test moves (``clock.advance(seconds)``), shown to the Lua
    scripts through its key on the test's Redis (``crawler/clock.py``)."""
    return ManualClock(redis_client)


@pytest.fixture
def make_web() -> Iterator[Callable[..., TestWebProcess]]:
    """``make_web(domains=3, pages=10, ...)`` starts a test web for this test."""
    started: list[TestWebProcess] = []

    def factory(config: WebConfig | None = None, **fields: Any) -> TestWebProcess:
        web = TestWebProcess(config or WebConfig(**fields)).start()
        started.append(web)
        return web

    yield factory
    for web in started:
        web.stop()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"
