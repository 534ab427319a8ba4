"""The addon in a project coming from scrapy-redis: its lines taken over,
one Redis for the frontier and scrapy-redis's components, ignored settings named."""

from __future__ import annotations

import logging

import pytest
import redis
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler
from scrapy_redis.connection import get_redis_from_settings

from crawler.addon import Addon
from crawler.connection import RedisUnavailable, get_redis
from crawler.embedded import EmbeddedRedis
from crawler.scheduler.scheduler import FrontierScheduler


def project(**values: object) -> Settings:
    settings = Settings()
    settings.setdict(values, priority="project")
    Addon().update_settings(settings)
    return settings


def test_scrapy_redis_scheduler_and_dupefilter_are_taken_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    settings = project(SCHEDULER="scrapy_redis.scheduler.Scheduler",
                       DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter")
    assert settings["SCHEDULER"] is FrontierScheduler
    assert settings["DUPEFILTER_CLASS"].__name__ == "BaseDupeFilter"
    mine = project(SCHEDULER="myproject.MyScheduler")  # anything else is the project's choice
    assert mine["SCHEDULER"] == "myproject.MyScheduler"


def test_one_redis_for_the_frontier_and_scrapy_redis(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)  # set only in the environment
    settings = project()
    assert settings["REDIS_URL"] == redis_url
    get_redis(settings).set("probe", "frontier")
    assert get_redis_from_settings(settings).get("probe") == b"frontier"


def test_scrapy_redis_host_and_port_name_the_one_redis(redis_server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    settings = project(REDIS_HOST="127.0.0.1", REDIS_PORT=redis_server.port, REDIS_DB=3)
    assert settings["REDIS_URL"] == f"redis://127.0.0.1:{redis_server.port}/3"  # not the embedded Redis
    get_redis(settings).set("probe", "frontier")
    assert get_redis_from_settings(settings).get("probe") == b"frontier"
    assert redis.Redis(port=redis_server.port, db=3).get("probe") == b"frontier"
    with pytest.raises(RedisUnavailable, match="REDIS_PORT and REDIS_DB must be integers"):  # no SystemExit
        project(REDIS_HOST="127.0.0.1", REDIS_PORT="sixty")


def test_embedded_redis_is_scrapy_redis_s_too(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    settings = project(CRAWLER_STATE_DIR=str(tmp_path / "state"))
    embedded = EmbeddedRedis.from_settings(settings)
    assert settings["REDIS_URL"] == embedded.url
    try:
        get_redis(settings).set("probe", "frontier")  # starts the embedded Redis
        assert get_redis_from_settings(settings).get("probe") == b"frontier"
    finally:
        embedded.stop()


def test_ignored_settings_are_named(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    crawler = get_crawler(settings_dict={
        "REDIS_URL": redis_url, "SCHEDULER": FrontierScheduler,
        "SCHEDULER_QUEUE_CLASS": "no.such.Queue", "DUPEFILTER_CLASS": "myproject.MyDupeFilter"})
    with caplog.at_level(logging.WARNING):
        FrontierScheduler.from_crawler(crawler)
    text = caplog.text
    assert "SCHEDULER_QUEUE_CLASS is ignored: the frontier keeps one queue per domain" in text
    assert "DUPEFILTER_CLASS myproject.MyDupeFilter is not used" in text
    assert text.count("is ignored") == 1


def test_redirects_given_up_on_are_dead_letters_unless_the_project_placed_redirects(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy.downloadermiddlewares.redirect import RedirectMiddleware

    from crawler.middlewares.deadletter import DeadLetterRedirectMiddleware

    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    mw = project().getdict("DOWNLOADER_MIDDLEWARES")
    assert mw[DeadLetterRedirectMiddleware] == 600 and mw[RedirectMiddleware] is None
    for placed in (None, 650):  # disabled, or moved: the project's choice stands
        path = "scrapy.downloadermiddlewares.redirect.RedirectMiddleware"
        mw = project(DOWNLOADER_MIDDLEWARES={path: placed}).getdict("DOWNLOADER_MIDDLEWARES")
        assert mw[path] == placed and DeadLetterRedirectMiddleware not in mw
