"""The addon is safe to add (issue #35 item 1): outside ``billion`` it keeps
Scrapy's behaviour for what a project fetches (no HTML-only filter, no page
cap, no refusal of private or loopback addresses), says in one INFO line
what it does change, and each of its optional swaps is one setting away.

The first test is the issue's: a fresh ``scrapy startproject`` with only the
``ADDONS`` line, a spider fetching a JSON document, a PDF and an XML feed
from a server on 127.0.0.1, every body whole."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from scrapy import Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.addon import Addon
from crawler.settings_registry import setting
from crawler.spiders.billion import BillionSpider
from tests.servers import files_server as serve_files

# bodies larger than billion's page cap, of the kinds billion skips
BODIES = {
    "/data.json": ("application/json", json.dumps({"rows": [{"n": n, "pad": "x" * 40} for n in range(8000)]}).encode()),
    "/paper.pdf": ("application/pdf", b"%PDF-1.4\n" + bytes(range(256)) * 1600 + b"\n%%EOF\n"),
    "/feed.xml": ("application/rss+xml", b"<?xml version='1.0'?><rss><channel>"
                  + b"".join(b"<item><title>t%d</title></item>" % n for n in range(12000)) + b"</channel></rss>"),
}

SPIDER = '''
import hashlib
import scrapy


class FilesSpider(scrapy.Spider):
    name = "files"

    async def start(self):
        for path in ("/data.json", "/paper.pdf", "/feed.xml"):
            yield scrapy.Request(self.base + path)

    def parse(self, response):
        yield {"url": response.url, "length": len(response.body),
               "sha256": hashlib.sha256(response.body).hexdigest()}
'''


@pytest.fixture
def files_server() -> Iterator[str]:
    with serve_files(BODIES) as where:
        yield f"http://{where}"


def test_a_fresh_project_with_only_the_addon_gets_every_body_whole(redis_url: str, files_server: str,
                                                                   tmp_path: Path) -> None:
    scrapy = str(Path(sys.executable).parent / "scrapy")  # this venv's: the lower bounds' in their run
    subprocess.run([scrapy, "startproject", "files"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    project = tmp_path / "files"
    with open(project / "files" / "settings.py", "a") as settings:
        settings.write('\nADDONS = {"crawler.addon.Addon": 100}\n')
    (project / "files" / "spiders" / "files.py").write_text(SPIDER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPY_", "PYTHON", "CRAWLER_"))}
    env["REDIS_URL"] = redis_url
    out = project / "items.jsonl"
    done = subprocess.run([scrapy, "crawl", "files", "-a", f"base={files_server}", "-O", str(out)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    items = {i["url"].removeprefix(files_server): i for i in map(json.loads, out.read_text().splitlines())}
    assert {path: (i["length"], i["sha256"]) for path, i in items.items()} == {
        path: (len(body), hashlib.sha256(body).hexdigest()) for path, (_, body) in BODIES.items()}
    assert "crawler/skipped" not in done.stderr and "crawler/truncated" not in done.stderr
    # what the addon changes, said once at start
    said = [line for line in done.stderr.splitlines() if "Addon: changes " in line]
    assert len(said) == 1, done.stderr[-3000:]
    for part in ("SCHEDULER", "DUPEFILTER_CLASS", "crawler.fetch.DownloadHandler", "STATS_CLASS",
                 "LOG_FORMATTER", "garbage collector"):
        assert part in said[0], said[0]


def _settings(spidercls: type[Spider] = Spider, **values: object) -> Settings:
    settings = Settings()
    settings.setdict({"REDIS_URL": "redis://127.0.0.1:1/0", **values}, priority="project")
    spidercls.update_settings(settings)
    Addon.from_crawler(get_crawler(spidercls, settings_dict=None)).update_settings(settings)
    return settings


@pytest.mark.parametrize(("name", "switched"), [
    ("CRAWLER_HANDLER", lambda s: s.getdict("DOWNLOAD_HANDLERS").get("https") is None),
    ("CRAWLER_LEAN_STATS", lambda s: s.get("STATS_CLASS") == Settings().get("STATS_CLASS")),
    ("CRAWLER_LEAN_LOG", lambda s: s.get("LOG_FORMATTER") == Settings().get("LOG_FORMATTER")),
])
def test_each_swap_is_one_setting_away(name: str, switched) -> None:
    assert not switched(_settings())
    assert switched(_settings(**{name: False}))


def test_gc_tuning_is_one_setting_away(redis_url: str) -> None:
    from crawler.extensions.gcpauses import GcPauses

    before = gc.get_threshold()
    for tuned in (True, False):
        crawler = get_crawler(Spider, {"REDIS_URL": redis_url, "CRAWLER_GC_TUNING": tuned})
        pauses = GcPauses.from_crawler(crawler)
        pauses.spider_opened()
        try:
            assert (gc.get_threshold() != before) is tuned
            assert (gc.get_freeze_count() > 0) is tuned
        finally:
            pauses.spider_closed()
            gc.unfreeze()
        assert gc.get_threshold() == before


def test_billion_keeps_its_own_rules() -> None:
    ours = _settings(BillionSpider)
    plain = _settings()
    for name, billions in (("CRAWLER_HTML_ONLY", True), ("CRAWLER_MAX_PAGE_BYTES", 250_000),
                           ("CRAWLER_BLOCK_PRIVATE", True)):
        assert setting(ours, name) == billions, name
        assert setting(plain, name) != billions, name
