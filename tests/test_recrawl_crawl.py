"""Recrawling in real crawls (docs/recrawl.md): real ``scrapy crawl billion``
against real Redis and a test web whose pages change on known schedules
(``devkit/testweb/changes.py``), with validators, 304s and WARC files read
back. Intervals are seconds here, so a crawl of a few seconds sees several
visits of each page; the audits read the site's own log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from devkit.testweb.config import WebConfig
from devkit.testweb.control import LogEntry, TestWebProcess
from tests.servers import ROOT, RedisServer, run_scrapy, scrapy_env, wait_until

DELAY = 0.2  # the domain delay, s
MIN = 2.0  # CRAWLER_RECRAWL_MIN and _INTERVAL, s
RUN = 14  # seconds each crawl runs (CLOSESPIDER_TIMEOUT)

WEB = WebConfig(domains=2, pages=5, size_fixed=2000, crawl_delay_share=0, links=4, cross_share=0, dup_share=0, private_share=0,
                change_share=0.5, change_mean_min_s=1.0, change_mean_max_s=4.0,
                validators={"etag": 0.5, "last_modified": 0.5})


def env(redis_url: str) -> dict[str, str]:
    return scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org")


def args(seeds: Path, tmp: Path, *extra: str) -> list[str]:
    settings = {"CRAWLER_RECRAWL": "fixed", "CRAWLER_RECRAWL_INTERVAL": MIN, "CRAWLER_RECRAWL_MIN": MIN,
                "CRAWLER_RECRAWL_MAX": 60, "CRAWLER_DOMAIN_DELAY": DELAY, "CRAWLER_IP_DELAY": 0,
                "CLOSESPIDER_TIMEOUT": RUN, "CRAWLER_PROGRESS_INTERVAL": 0,
                "CRAWLER_WARC_DIR": tmp / "warc", "CRAWLER_STATS_FILE": tmp / "stats.json",
                "ROBOTSTXT_OBEY": False, "CRAWLER_SITEMAPS": False}
    out = ["crawl", "billion", "-a", f"seeds={seeds}"]
    for name, value in settings.items():
        out += ["-s", f"{name}={value}"]
    return out + list(extra)


class Crawl:
    def __init__(self, web: TestWebProcess, log: list[LogEntry], stats: dict[str, Any],
                 frontier: dict[str, Any], warc: Path) -> None:
        self.web, self.log, self.stats, self.frontier, self.warc = web, log, stats, frontier, warc

    def pages(self) -> dict[tuple[str, str], list[LogEntry]]:
        by: dict[tuple[str, str], list[LogEntry]] = defaultdict(list)
        for e in self.log:
            if e.path.startswith("/p/") or e.path == "/":
                by[(e.domain, e.path)].append(e)
        for entries in by.values():
            entries.sort(key=lambda e: e.ms)
        return by


@pytest.fixture(scope="module")
def crawl(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    redis_server.client().flushall()
    tmp = tmp_path_factory.mktemp("recrawl")
    web = TestWebProcess(WEB).start()
    try:
        seeds = tmp / "seeds.txt"
        seeds.write_text("\n".join(web.url(d) for d in web.domains) + "\n")
        result = run_scrapy(args(seeds, tmp), env(redis_server.url))
        assert result.returncode == 0, result.stderr[-3000:]
        frontier = run_scrapy(["frontier", "billion", "--json"], env(redis_server.url))
        assert frontier.returncode == 0, frontier.stderr[-2000:]
        yield Crawl(web, web.log(), json.loads((tmp / "stats.json").read_text()),
                    json.loads(frontier.stdout)[0], tmp / "warc")
    finally:
        web.stop()


def test_pages_are_revisited_never_sooner_than_min(crawl: Crawl) -> None:
    pages = crawl.pages()
    revisited = [k for k, entries in pages.items() if len(entries) >= 2]
    assert len(revisited) >= len(pages) // 2, {k: len(v) for k, v in pages.items()}
    for key, entries in pages.items():
        for a, b in zip(entries, entries[1:]):
            if a.status >= 500:  # a failed attempt's retry is the same visit
                continue
            assert b.ms - a.ms >= MIN * 1000, (key, a, b)


def test_revisits_are_conditional_and_304s_are_revisit_records(crawl: Crawl) -> None:
    pages = crawl.pages()
    # a failed attempt's retry (a 5xx, or an answer still going when the
    # next began: the client gave up) is the same visit, sent as the first was
    later = [b for entries in pages.values() for a, b in zip(entries, entries[1:])
             if a.status < 500 and 0 < a.done <= b.ms]
    conditional = [e for e in later if e.conditionals != "-"]
    # all but the verifications (one in CRAWLER_RECRAWL_VERIFY_EVERY) carry the page's validator
    assert len(conditional) >= len(later) * 0.8, [(e.target, e.conditionals) for e in later]
    not_modified = [e for e in crawl.log if e.status == 304]
    assert not_modified, "no revisit of an unchanged page was answered 304"
    profiles: dict[str, int] = defaultdict(int)
    plain_304 = 0
    for path in crawl.warc.glob("*.warc.gz"):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type == "revisit":
                    profiles[record.rec_headers.get_header("WARC-Profile").rsplit("/", 1)[-1]] += 1
                    assert record.rec_headers.get_header("WARC-Refers-To-Target-URI")
                elif record.rec_type == "response" and record.http_headers.get_statuscode() == "304":
                    plain_304 += 1
    assert plain_304 == 0
    assert profiles["server-not-modified"] == len(not_modified)
    assert crawl.stats.get("crawler/frontier/ended/not_modified", 0) >= len(not_modified)


def test_the_ledger_adds_up_with_revisits(crawl: Crawl) -> None:
    ledger = crawl.frontier["ledger"]
    assert ledger["adds_up"], ledger
    assert ledger["not_modified"] > 0
    assert ledger["admitted"] > ledger["stored"] - ledger["not_modified"]


@contextmanager
def fresh_web(redis_server: RedisServer, tmp: Path) -> Iterator[tuple[TestWebProcess, Path]]:
    """An empty Redis, the test web started, and its seed file."""
    redis_server.client().flushall()
    web = TestWebProcess(WEB).start()
    try:
        seeds = tmp / "seeds.txt"
        seeds.write_text("\n".join(web.url(d) for d in web.domains) + "\n")
        yield web, seeds
    finally:
        web.stop()


def test_a_sigkilled_worker_keeps_the_history(redis_server: RedisServer, tmp_path: Path) -> None:
    client = redis_server.client()
    with fresh_web(redis_server, tmp_path) as (web, seeds):
        child = subprocess.Popen([sys.executable, "-m", "scrapy", *args(seeds, tmp_path, "-s", "CLOSESPIDER_TIMEOUT=0")],
                                 cwd=ROOT, env=env(redis_server.url), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: sum(1 for e in web.log() if e.status == 304) >= 2, 60, "two 304s")
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        hist = {k: client.hgetall(k) for k in client.scan_iter(match="*:hist:*")}
        tracked = sum(len(v) for v in hist.values())
        assert tracked >= 5, hist.keys()
        before = len(web.log())
        result = run_scrapy(args(seeds, tmp_path, "-s", "CLOSESPIDER_TIMEOUT=6"), env(redis_server.url))
        assert result.returncode == 0, result.stderr[-3000:]
        after = web.log()[before:]
        # the restart revisits (conditionally) what the killed worker had tracked: nothing starts over
        assert [e for e in after if e.conditionals != "-"], "no conditional revisit after the restart"
        assert sum(len(client.hgetall(k)) for k in client.scan_iter(match="*:hist:*")) >= tracked


def test_past_the_tracking_cap_a_url_is_fetched_once_counted_and_said(redis_server: RedisServer,
                                                                       tmp_path: Path) -> None:
    """``CRAWLER_RECRAWL_MAX_TRACKED`` reached: the URLs past it are fetched
    once, never revisited, counted in the frontier and said in the log."""
    client = redis_server.client()
    with fresh_web(redis_server, tmp_path) as (web, seeds):
        result = run_scrapy(args(seeds, tmp_path, "-s", "CLOSESPIDER_TIMEOUT=8", "-s", "CRAWLER_RECRAWL_MAX_TRACKED=3"),
                            env(redis_server.url))
        assert result.returncode == 0, result.stderr[-3000:]
        log = web.log()
    assert sum(client.hlen(k) for k in client.scan_iter(match="*:hist:*")) == 3
    (stats_key,) = [k for k in client.scan_iter(match="*:stats") if client.hexists(k, "rv_untracked")]
    untracked = int(client.hget(stats_key, "rv_untracked"))
    visits: dict[str, int] = defaultdict(int)
    for e in log:
        if e.path.startswith("/p/") or e.path == "/":
            visits[f"{e.domain}{e.path}"] += 1
    assert untracked == sum(1 for n in visits.values() if n == 1) > 0, visits
    assert sum(1 for n in visits.values() if n > 1) <= 3
    assert f"Frontier recrawl: {untracked} URLs were fetched without a history" in result.stderr
