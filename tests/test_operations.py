"""The addon in a fresh `scrapy startproject` project and `scrapy frontier`,
with real Redis, real HTTP and real processes (the Prometheus endpoint:
test_metrics.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import redis

from tests.servers import ROOT, RedisServer, run_scrapy, scrapy_env

QUIET = dict(links=6, size_fixed=3000, private_share=0, cross_share=0.3, dup_share=0.2, crawl_delay_share=0)

SPIDER = '''
import scrapy


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start="", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = start.split(",")

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
        yield {"url": response.url}
'''


def test_addon_in_a_new_project_with_two_processes(redis_url: str, make_web, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "scrapy", "startproject", "shop", str(tmp_path / "shop")],
                   check=True, capture_output=True, timeout=60)
    project = tmp_path / "shop"
    (project / "shop" / "spiders" / "site.py").write_text(SPIDER)
    with open(project / "shop" / "settings.py", "a") as settings:
        settings.write(
            '\nADDONS = {"crawler.addon.Addon": 100}\n'
            'CRAWLER_HOST_MAP = {"*.test": "127.0.0.1"}\n'
            'CRAWLER_ALLOW_PRIVATE = ["*.test"]\n'
            'SCHEDULER_PERSIST = True\n'
            # the project's own choices win over the addon's
            'DOWNLOADER_MIDDLEWARES = {"crawler.middlewares.lock.DomainLockMiddleware": None}\n'
        )
    web = make_web(domains=3, pages=15, **QUIET)
    starts = ",".join(web.url(d) for d in range(3))
    env = scrapy_env(redis_url, settings=None)  # the new project's own settings
    # startproject's DOWNLOAD_DELAY = 1 made fifteen pages a domain take 15 s; what a delay means across
    # processes is tests/test_dropin.py's
    procs = [subprocess.Popen([sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"start={starts}",
                               "-s", "DOWNLOAD_DELAY=0.2"],
                              cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs[0][-3000:]
    assert "crawler.addon.Addon" in errs[0]
    assert "crawler.middlewares.acks.FrontierAckDownloaderMiddleware" in errs[0]
    assert "DomainLockMiddleware" not in errs[0].split("Enabled downloader middlewares")[1].split("]")[0]
    fetched = Counter((e.domain, e.path) for e in web.log() if e.path != "/robots.txt")
    assert {(d, f"/p/{k}.html") for d in web.domains for k in range(1, 15)} <= set(fetched)
    assert max(fetched.values()) == 1  # two processes, one frontier, each page once
    assert all(c == 1 for c in Counter(e.domain for e in web.log() if e.path == "/robots.txt").values())
    client = redis.Redis.from_url(redis_url)
    assert int(client.hget("crawler:{site:0}:stats", "enqueued")) == len(fetched)
    # the project's commands gained `scrapy frontier` and `scrapy dlq` from the entry points
    status = subprocess.run([sys.executable, "-m", "scrapy", "frontier", "site", "--json"], cwd=project,
                            env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(status.stdout)[0]["seen"] == len(fetched)


def test_frontier_command(redis_url: str, make_web) -> None:
    web = make_web(domains=2, pages=10, faults={"404": 0.3}, **QUIET)
    env = scrapy_env(redis_url)
    result = run_scrapy(["crawl", "demo", "-a", f"start_urls={web.url(0)},{web.url(1)}",
                         "-s", "CRAWLER_DEDUP=bloom", "-s", "CRAWLER_DEDUP_CAPACITY=1000"], env)
    assert result.returncode == 0, result.stderr[-3000:]

    def frontier(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "scrapy", "frontier", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    report = json.loads(frontier("demo", "--json").stdout)[0]
    assert report["queued"] == 0 and report["leases"] == 0 and report["shard"] == 0
    assert report["dead_letters"]["http_404"] >= 1
    assert report["dedup"] == "bloom" and 0 < report["bloom_error_rate"] < 0.001
    assert report["seen"] == report["counters"]["enqueued"] > 0
    assert report["redis_used_memory"] > 0
    shown = frontier("demo").stdout
    assert "demo shard 0" in shown and "dead letters  http_404" in shown and "denials" in shown
    watch = subprocess.Popen([sys.executable, "-m", "scrapy", "frontier", "demo", "--shard", "0", "--json",
                              "--watch", "0.3"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert watch.stdout is not None
    lines = [watch.stdout.readline() for _ in range(3)]
    watch.terminate()
    watch.wait()
    assert all(json.loads(line)["shard"] == 0 for line in lines)
    for bad, message in ((["nosuch"], "no frontier of spider 'nosuch'"),
                         (["demo", "--shard", "7"], "no frontier crawler:{demo:7}"),
                         (["demo", "--watch", "-1"], "--watch must be > 0")):
        result = frontier(*bad)
        assert result.returncode != 0 and message in result.stderr and "Traceback" not in result.stderr


def test_errors_in_an_addon_project_are_one_line(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "scrapy", "startproject", "shop", str(tmp_path / "shop")],
                   check=True, capture_output=True, timeout=60)
    project = tmp_path / "shop"
    (project / "shop" / "spiders" / "site.py").write_text(SPIDER)
    with open(project / "shop" / "settings.py", "a") as settings:
        # the addon raises; the project's commands (ours) say it in one line
        settings.write('\nADDONS = {"crawler.addon.Addon": 100}\nCOMMANDS_MODULE = "crawler.commands"\n')
    server = RedisServer(tmp_path / "redis", password="right").start()
    try:
        wrong = f"redis://:wrong@127.0.0.1:{server.port}/0"
        for env, extra, message, status in (  # 1: Redis refused, 2: a bad setting
            (scrapy_env(wrong, settings=None), [], f"crawler: error: Redis at redis://:***@127.0.0.1:{server.port}/0 refused", 1),
            (scrapy_env(server.url, settings=None), ["-s", "CRAWLER_DEDUP=nope"], "crawler: error: CRAWLER_DEDUP must be", 2),
            (scrapy_env(server.url, settings=None), ["-s", "CRAWLER_ALLOW_PRIVATE=10.0.0.0/99"],
             "crawler: error: CRAWLER_ALLOW_PRIVATE: '10.0.0.0/99' is not a network", 2),
        ):
            result = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "site", "-a", "start=http://a.test/",
                                     *extra], cwd=project, env=env, capture_output=True, text=True, timeout=60)
            assert result.returncode == status, result.stderr[-2000:]
            assert message in result.stderr, result.stderr[-2000:]
            assert "Traceback" not in result.stderr and "Engine slot" not in result.stderr
            assert "wrong" not in result.stderr  # the password is masked
    finally:
        server.stop()


def test_dlq_purge_needs_a_filter_or_all_and_has_a_dry_run(redis_url: str, make_web) -> None:
    web = make_web(domains=2, pages=12, faults={"404": 0.4}, **QUIET)
    env = scrapy_env(redis_url)
    result = run_scrapy(["crawl", "demo", "-a", f"start_urls={web.url(0)},{web.url(1)}"], env)
    assert result.returncode == 0, result.stderr[-3000:]

    def dlq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "scrapy", "dlq", "demo", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    def counts() -> dict[str, int]:
        return json.loads(dlq("--counts", "--json").stdout)

    total = counts()["http_404"]
    letters = json.loads(dlq("--limit", "0", "--json").stdout)
    first = urlsplit(letters[0]["url"]).hostname or ""
    of_first = sum(1 for letter in letters if urlsplit(letter["url"]).hostname == first)
    assert total >= 2 and 0 < of_first <= total
    # no filter: every dead letter would go; that needs --all
    bare = dlq("--purge")
    assert bare.returncode == 2 and "--all" in bare.stderr and "Traceback" not in bare.stderr, bare.stderr
    assert counts()["http_404"] == total
    # a dry run says what would be deleted and deletes nothing
    dry = dlq("--purge", "--all", "--dry-run")
    assert dry.returncode == 0 and f"would purge {total} dead letters" in dry.stdout, dry.stdout + dry.stderr
    assert letters[0]["url"] in dry.stdout
    assert json.loads(dlq("--purge", "--domain", first, "--dry-run", "--json").stdout) == {"would_purge": of_first}
    assert counts()["http_404"] == total
    assert dlq("--dry-run").returncode == 2  # only with --purge
    assert json.loads(dlq("--purge", "--domain", first, "--json").stdout) == {"purged": of_first}
    assert json.loads(dlq("--purge", "--all", "--json").stdout) == {"purged": total - of_first}
    assert counts() == {}
