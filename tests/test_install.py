"""The docs' install line (docs/addon.md), in a fresh virtualenv, then scrapy-redis's
example crawl spider (a RedisCrawlSpider: a RedisSpider with rules) and
RedisPipeline in a fresh `scrapy startproject`, switched to the addon: one
Redis, two processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import redis

from tests.servers import ROOT

SETTINGS = '''
# scrapy-redis's lines, as its example project has them
SCHEDULER = "scrapy_redis.scheduler.Scheduler"
DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
SCHEDULER_PERSIST = True
ITEM_PIPELINES = {"scrapy_redis.pipelines.RedisPipeline": 400}
# the switch
ADDONS = {"crawler.addon.Addon": 100}
# the local test web
CRAWLER_HOST_MAP = {"*.test": "127.0.0.1"}
CRAWLER_ALLOW_PRIVATE = ["*.test"]
ROBOTSTXT_OBEY = True
'''

SPIDERS = '''
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Rule
from scrapy_redis.spiders import RedisCrawlSpider


class SiteSpider(RedisCrawlSpider):
    """Whole sites, from URLs pushed to mycrawler:start_urls."""

    name = "mycrawler_redis"
    redis_key = "mycrawler:start_urls"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def parse_page(self, response):
        return {"title": response.css("title::text").get(), "url": response.url}
'''


def test_install_line_then_scrapy_redis_examples_on_the_addon(redis_url: str, make_web, tmp_path: Path) -> None:
    page = (ROOT / "docs" / "addon.md").read_text()
    assert "pip install /path/to/polite-crawler" in page  # the line tested here
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-compile", "-q", str(ROOT)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    # the environment of a user's shell: no PYTHONPATH into this checkout, no SCRAPY_SETTINGS_MODULE
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPY_", "PYTHON"))}
    # what installs is the runtime: no test web, no demo, no `*.test` host map, no
    # test-only package (trustme, warcio: the `test` extra); the crawls below run without them
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.util as u, crawler.settings as s; "
         "print(u.find_spec('devkit'), u.find_spec('crawler.testweb'), hasattr(s, 'CRAWLER_HOST_MAP'), "
         "u.find_spec('trustme'), u.find_spec('warcio'))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == ["None", "None", "False", "None", "None"], probe.stdout + probe.stderr
    scrapy = str(venv / "bin" / "scrapy")
    subprocess.run([scrapy, "startproject", "example"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    project = tmp_path / "example"
    with open(project / "example" / "settings.py", "a") as settings:
        settings.write(SETTINGS)
    (project / "example" / "spiders" / "examples.py").write_text(SPIDERS)

    web = make_web(domains=3, pages=12, links=5, size_fixed=3000, private_share=0, cross_share=0.3,
                   crawl_delay_share=0)
    client = redis.Redis.from_url(redis_url)
    env.update(REDIS_URL=redis_url, CRAWLER_CONTACT="ops@example.org")  # REDIS_URL only in the environment

    def crawl(spider: str, processes: int) -> list[str]:
        # startproject's DOWNLOAD_DELAY = 1 made twelve pages a domain take 12 s; what a delay means
        # across processes is tests/test_dropin.py's
        procs = [subprocess.Popen([scrapy, "crawl", spider, "-s", "MAX_IDLE_TIME_BEFORE_CLOSE=2",
                                   "-s", "DOWNLOAD_DELAY=0.2"], cwd=project,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(processes)]
        errs = []
        for proc in procs:
            try:
                errs.append(proc.communicate(timeout=120)[1])
            finally:
                proc.kill()
        assert all(p.returncode == 0 for p in procs), errs[0][-3000:]
        return errs

    client.rpush("mycrawler:start_urls", *(web.url(d) for d in range(3)))
    errs = crawl("mycrawler_redis", 2)
    assert all("Addon: SCHEDULER = scrapy_redis.scheduler.Scheduler replaced by" in e for e in errs), errs[0][-2000:]
    log = web.log()
    pages = Counter((e.domain, e.path) for e in log if e.path != "/robots.txt")
    assert {(d, f"/p/{k}.html") for d in web.domains for k in range(1, 12)} <= set(pages)
    assert max(pages.values()) == 1  # two processes, each page once
    assert max(Counter(e.domain for e in log if e.path == "/robots.txt").values()) == 1
    items = [json.loads(i) for i in client.lrange("mycrawler_redis:items", 0, -1)]
    assert sorted(i["url"] for i in items) == sorted({i["url"] for i in items})  # no item twice
    assert len(items) == len(pages) - 3  # every page but the three start pages, which the rules do not call back
    scraped = [re.search(r"'item_scraped_count': (\d+)", e) for e in errs]  # absent when 0
    assert sum(int(m.group(1)) for m in scraped if m) == len(items)
