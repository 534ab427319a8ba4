"""Drop-in into a scrapy-redis project (issue #23 items 1-2): the addon uses
the Redis scrapy-redis would use, and Scrapy's own delay and retry settings
keep their meaning across processes.

The last test is the issue's "done when": scrapy-redis's example project
(its files as in rmax/scrapy-redis@d34e9af, example-project/), with only the
``ADDONS`` line and the test web's host map added, crawls from a start URL
pushed with ``redis-cli lpush`` to ``localhost:6379``, two processes, and the
test web's request log shows ``DOWNLOAD_DELAY = 1`` between any two
requests to one host and every page (a 500 among them) fetched once under
``RETRY_ENABLED = False``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import redis
from scrapy import Request, Spider
from scrapy.http import Response
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler
from scrapy_redis.spiders import RedisCrawlSpider, RedisSpider

from crawler.addon import Addon
from crawler.connection import RedisUnavailable, configured_url
from crawler.embedded import EmbeddedRedis
from crawler.meta import ATTEMPTS
from crawler.middlewares.backoff import BackoffMiddleware
from crawler.settings_registry import SettingsError
from devkit.testweb.control import consecutive
from tests.servers import RedisServer, scrapy_env, wait_until

SCRAPY_REDIS_DEFAULT = "redis://localhost:6379/0"


@pytest.fixture(autouse=True)
def no_redis_url_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)


def addon_settings(tmp_path: Path, spidercls: type[Spider] = Spider, **values: object) -> Settings:
    """The settings as the addon leaves them for a crawler of ``spidercls``
    in a project that sets ``values`` (no spider modules: only these parts)."""
    settings = Settings()
    settings.setdict({"CRAWLER_STATE_DIR": str(tmp_path / "state"), **values}, priority="project")
    crawler = get_crawler(spidercls, settings_dict=None)
    Addon.from_crawler(crawler).update_settings(settings)
    return settings


class PlainSpider(Spider):
    name = "plain"


class FeedSpider(RedisSpider):
    name = "feed"


class SiteSpider(RedisCrawlSpider):  # a subclass of a subclass: still scrapy-redis's
    name = "site"


PARTS = {
    "scheduler line": (PlainSpider, {"SCHEDULER": "scrapy_redis.scheduler.Scheduler"}),
    "dupefilter line": (PlainSpider, {"DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter"}),
    "pipeline": (PlainSpider, {"ITEM_PIPELINES": {"scrapy_redis.pipelines.RedisPipeline": 400}}),
    "RedisSpider": (FeedSpider, {}),
    "RedisCrawlSpider subclass": (SiteSpider, {}),
}


@pytest.mark.parametrize("part", PARTS)
def test_a_scrapy_redis_part_means_scrapy_redis_s_redis(part: str, tmp_path: Path) -> None:
    spidercls, values = PARTS[part]
    settings = addon_settings(tmp_path, spidercls, **values)
    assert settings["REDIS_URL"] == SCRAPY_REDIS_DEFAULT
    # asked for, the embedded Redis is used all the same, by the frontier and scrapy-redis alike
    embedded = addon_settings(tmp_path, spidercls, CRAWLER_EMBEDDED_REDIS=True, **values)
    assert embedded["REDIS_URL"] == EmbeddedRedis.from_settings(embedded).url


def test_without_scrapy_redis_parts_the_embedded_redis(tmp_path: Path) -> None:
    settings = addon_settings(tmp_path, PlainSpider)
    assert settings["REDIS_URL"] == EmbeddedRedis.from_settings(settings).url
    assert settings["REDIS_URL"].startswith("unix://")
    with pytest.raises(RedisUnavailable, match="CRAWLER_EMBEDDED_REDIS is off"):
        addon_settings(tmp_path, PlainSpider, CRAWLER_EMBEDDED_REDIS=False)


def test_scrapy_redis_s_own_ways_of_naming_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # REDIS_PARAMS' host, port and db, as scrapy-redis passes them to redis-py
    settings = addon_settings(tmp_path, FeedSpider, REDIS_PARAMS={"host": "10.1.2.3", "port": 6380, "db": 2})
    assert settings["REDIS_URL"] == "redis://10.1.2.3:6380/2"
    assert addon_settings(tmp_path, PlainSpider, REDIS_PORT=6390)["REDIS_URL"] == "redis://localhost:6390/0"
    monkeypatch.setenv("REDIS_URL", "redis://10.9.9.9:1/0")  # named: wins over every default
    assert addon_settings(tmp_path, FeedSpider, CRAWLER_EMBEDDED_REDIS=True)["REDIS_URL"] == "redis://10.9.9.9:1/0"


def test_the_project_s_spiders_count_where_no_spider_is_known(tmp_path: Path) -> None:
    """``scrapy frontier``/``dlq`` and the crawl command settle the Redis
    before a spider is chosen: a RedisSpider anywhere in SPIDER_MODULES counts."""
    package = tmp_path / "dropinproj"
    (package / "spiders").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "spiders" / "__init__.py").write_text("")
    (package / "spiders" / "feed.py").write_text(
        "from scrapy_redis.spiders import RedisSpider\n\n\nclass Feed(RedisSpider):\n    name = 'feedx'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert configured_url(Settings({"SPIDER_MODULES": ["dropinproj.spiders"]})) == SCRAPY_REDIS_DEFAULT
        assert configured_url(Settings({"SPIDER_MODULES": []})) == ""  # the embedded Redis
    finally:
        sys.path.remove(str(tmp_path))


def test_download_delay_becomes_the_shared_delay(tmp_path: Path) -> None:
    settings = addon_settings(tmp_path, PlainSpider, DOWNLOAD_DELAY=1.5)
    assert settings.getfloat("CRAWLER_DOMAIN_DELAY") == 1.5
    assert settings.getfloat("DOWNLOAD_DELAY") == 0  # not a second time in each process
    both = addon_settings(tmp_path, PlainSpider, DOWNLOAD_DELAY=1.5, CRAWLER_DOMAIN_DELAY=4)
    assert (both.getfloat("CRAWLER_DOMAIN_DELAY"), both.getfloat("DOWNLOAD_DELAY")) == (4, 1.5)

    class Slow(Spider):
        name = "slow"
        download_delay = 2

    assert addon_settings(tmp_path, Slow).getfloat("CRAWLER_DOMAIN_DELAY") == 2
    with pytest.raises(SettingsError, match="^DOWNLOAD_DELAY must be a finite number >= 0, got 'soon'"):
        addon_settings(tmp_path, PlainSpider, DOWNLOAD_DELAY="soon")


def test_autothrottle_becomes_the_adaptive_delay(tmp_path: Path) -> None:
    settings = addon_settings(tmp_path, PlainSpider, AUTOTHROTTLE_ENABLED=True, AUTOTHROTTLE_TARGET_CONCURRENCY=2.0,
                              AUTOTHROTTLE_MAX_DELAY=30, DOWNLOAD_DELAY=0.5)
    assert settings.getfloat("CRAWLER_DELAY_FACTOR") == 0.5
    assert settings.getfloat("CRAWLER_DELAY_MAX") == 30
    assert settings.getfloat("CRAWLER_DOMAIN_DELAY") == 0.5
    assert settings.getbool("AUTOTHROTTLE_ENABLED") is False  # Scrapy's per-process one: off
    with pytest.raises(SettingsError, match="^AUTOTHROTTLE_TARGET_CONCURRENCY must be"):
        addon_settings(tmp_path, PlainSpider, AUTOTHROTTLE_ENABLED=True, AUTOTHROTTLE_TARGET_CONCURRENCY=0)


def backoff(redis_url: str, **values: object) -> BackoffMiddleware:
    crawler = get_crawler(PlainSpider, {"ADDONS": {Addon: 100}, "REDIS_URL": redis_url, **values})
    crawler.engine = crawler._create_engine()  # not open: no frontier to report dead letters to
    return BackoffMiddleware.from_crawler(crawler)


def test_scrapy_retry_settings_drive_the_backoff(redis_url: str) -> None:
    assert backoff(redis_url).max_attempts == 4  # CRAWLER_MAX_ATTEMPTS' default: RETRY_TIMES not set
    assert backoff(redis_url, RETRY_ENABLED=False).max_attempts == 1
    assert backoff(redis_url, RETRY_TIMES=0).max_attempts == 1
    assert backoff(redis_url, RETRY_TIMES=5).max_attempts == 6
    assert backoff(redis_url, RETRY_TIMES=5, CRAWLER_MAX_ATTEMPTS=2).max_attempts == 2
    codes = backoff(redis_url, RETRY_HTTP_CODES=[502, 408])
    assert [codes._retryable(s) for s in (500, 502, 408, 429)] == [False, True, True, False]
    mine = backoff(redis_url)
    assert [mine._retryable(s) for s in (500, 599, 429, 404)] == [True, True, True, False]
    with pytest.raises(SettingsError, match="^RETRY_HTTP_CODES must be a list of HTTP status codes"):
        backoff(redis_url, RETRY_HTTP_CODES=["soon"])


def test_scrapy_retry_meta_keys_and_priority(redis_url: str) -> None:
    url = "http://d0.test/p/1.html"
    failed = Response(url, status=500)
    mw = backoff(redis_url, RETRY_PRIORITY_ADJUST=-2)
    retry = mw.process_response(Request(url, priority=5), failed)
    assert isinstance(retry, Request) and retry.meta[ATTEMPTS] == 2 and retry.priority == 3
    assert mw.process_response(Request(url, meta={"max_retry_times": 0}), failed) is failed  # none for this one
    assert mw.process_response(Request(url, meta={"dont_retry": True}), failed) is failed
    many = Request(url, meta={"max_retry_times": 9, ATTEMPTS: 6})  # beyond CRAWLER_MAX_ATTEMPTS' 4
    assert isinstance(mw.process_response(many, failed), Request)
    assert backoff(redis_url).process_response(Request(url, priority=5), failed).priority == 5  # not set: kept
    off = backoff(redis_url, RETRY_ENABLED=False)
    assert off.process_response(Request(url, meta={"max_retry_times": 3}), failed) is failed


# The parts of scrapy-redis's example project (rmax/scrapy-redis, example-project/)
# this test needs, written out here: its settings (every line that changes
# what the crawl does), its pipeline (stamps each item with the time and the
# spider) and its RedisSpider reading ``myspider:start_urls``.
EXAMPLE = {
    "scrapy.cfg": "[settings]\ndefault = example.settings\n",
    "example/__init__.py": "",
    "example/settings.py": '''SPIDER_MODULES = ["example.spiders"]
NEWSPIDER_MODULE = "example.spiders"
USER_AGENT = "scrapy-redis (+https://github.com/rolando/scrapy-redis)"
DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
SCHEDULER = "scrapy_redis.scheduler.Scheduler"
SCHEDULER_PERSIST = True
ITEM_PIPELINES = {"example.pipelines.ExamplePipeline": 300, "scrapy_redis.pipelines.RedisPipeline": 400}
LOG_LEVEL = "DEBUG"
DOWNLOAD_DELAY = 1
''',
    "example/pipelines.py": '''from datetime import datetime, timezone


class ExamplePipeline:
    def process_item(self, item, spider):
        return {**item, "crawled": datetime.now(timezone.utc).isoformat(), "spider": spider.name}
''',
    "example/spiders/__init__.py": "",
    "example/spiders/myspider_redis.py": '''from scrapy_redis.spiders import RedisSpider


class MySpider(RedisSpider):
    name = "myspider_redis"
    redis_key = "myspider:start_urls"

    def __init__(self, *args, domain="", **kwargs):
        self.allowed_domains = [d for d in domain.split(",") if d]
        super().__init__(*args, **kwargs)

    def parse(self, response):
        return {"name": response.css("title::text").get(), "url": response.url}
''',
}

#: all that is added to the example's settings.py: the switch, and the way to the local test web
ADDED = '''
ADDONS = {"crawler.addon.Addon": 100}
CRAWLER_HOST_MAP = {"*.test": "127.0.0.1"}
CRAWLER_ALLOW_PRIVATE = ["*.test"]
'''


def port_6379_taken() -> str:
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            with socket.socket(family) as probe:
                probe.settimeout(1)
                if probe.connect_ex((host, 6379)) == 0:
                    return f"something listens on {host}:6379; this test starts its own Redis there"
        except OSError:
            continue
    return ""


def test_scrapy_redis_example_project_on_the_addon(make_web, tmp_path: Path) -> None:
    taken = port_6379_taken()
    if taken:
        pytest.skip(taken)
    server = RedisServer(tmp_path / "redis", port=6379).start()
    try:
        project = tmp_path / "example-project"
        for name, text in EXAMPLE.items():
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            (project / name).write_text(text)
        with open(project / "example" / "settings.py", "a") as settings:
            settings.write(ADDED)
        # answers that take 300 ms, and one request at a time per worker: while one worker fetches a
        # page, three domains wait for the other, so both fetch (with instant pages and many requests
        # in flight, the worker that acknowledges first learns when each domain is due and may take them all)
        web = make_web(domains=4, pages=5, links=4, size_fixed=2000, private_share=0, cross_share=0.2,
                       dup_share=0, crawl_delay_share=0, faults={"500": 0.25}, latency_ms=300, latency_sigma=0)
        urls = [web.url(d, "/" if k == 0 else f"/p/{k}.html") for d in range(4) for k in range(5)]
        env = scrapy_env(None, settings=None)  # the project in the working folder decides
        logs = [tmp_path / f"crawl{n}.log" for n in range(2)]
        procs = []
        for path in logs:
            with open(path, "w") as stderr:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "scrapy", "crawl", "myspider_redis", "-s", "RETRY_ENABLED=False",
                     "-s", "MAX_IDLE_TIME_BEFORE_CLOSE=8", "-s", "CONCURRENT_REQUESTS=1",
                     "-s", "REDIS_START_URLS_BATCH_SIZE=20"],
                    cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=stderr))
        try:
            # both workers up and waiting on their frontier, then the example's own workflow:
            # start URLs pushed to localhost:6379 with redis-cli
            opened = "Frontier crawler:{myspider_redis:0} opened on Redis at redis://localhost:6379/0"
            def both_opened() -> bool:
                assert all(p.poll() is None for p in procs), \
                    logs[0].read_text()[-3000:] + logs[1].read_text()[-3000:]
                return all(opened in path.read_text() for path in logs)

            wait_until(both_opened, 120, "both workers waiting on their frontier", every=0.1)
            subprocess.run(["redis-cli", "lpush", "myspider:start_urls", *urls], check=True, capture_output=True,
                           timeout=30)
            for proc in procs:
                proc.wait(timeout=180)
        finally:
            for proc in procs:
                proc.kill()
        errs = [path.read_text() for path in logs]
        assert [p.returncode for p in procs] == [0, 0], errs[0][-3000:] + errs[1][-3000:]
        for err in errs:
            assert "Addon: Redis redis://localhost:6379/0, the one scrapy-redis uses" in err, err[-3000:]
            assert "DOWNLOAD_DELAY = 1 is the delay between two requests to one domain across every process" in err
        log = web.log()
        pages = Counter((e.domain, e.path) for e in log if e.path != "/robots.txt")
        assert set(pages) == {(d, "/" if k == 0 else f"/p/{k}.html") for d in web.domains for k in range(5)}
        both = [sum("Crawled (" in line for line in err.splitlines()) for err in errs]
        assert min(both) > 0, both  # both processes fetched
        failing = [e for e in log if e.status == 500]
        assert failing, "the test web served no 500 page: the retry check would not check anything"
        assert max(pages.values()) == 1  # RETRY_ENABLED = False: every page, a 500 too, fetched once
        gaps = [(b.ms - a.ms, a.domain) for a, b in consecutive(log)]
        assert gaps and min(gaps)[0] >= 1000, sorted(gaps)[:3]  # DOWNLOAD_DELAY = 1, between any two requests
        client = redis.Redis(port=6379)
        items = [json.loads(i) for i in client.lrange("myspider_redis:items", 0, -1)]
        served = {f"http://{e.host}{e.target}" for e in log if e.status == 200}
        assert sorted(i["url"] for i in items) == sorted(u for u in urls if u in served)
        assert all(i["spider"] == "myspider_redis" for i in items)  # the example's two pipelines ran
        assert client.llen("myspider:start_urls") == 0  # every pushed URL was read
    finally:
        server.stop()
