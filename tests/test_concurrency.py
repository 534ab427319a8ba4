"""The cap of requests in flight (crawler/extensions/concurrency.py): it
follows the due domains up and down, the memory budget caps it, event-loop
lag backs it off, and a user's CONCURRENT_REQUESTS stays a cap. Real Redis,
the real test web; each crawl logs every adjustment (DEBUG) and the tests
read that history."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import pytest
from scrapy.settings import Settings

from crawler.extensions.concurrency import Inputs, Policy
from crawler.settings_registry import setting
from crawler.spiders.billion import BillionSpider
from tests.servers import run_scrapy, scrapy_env

DOMAINS = 40
FLOOR = 4
PAGE = 20_000

#: a spider in two waves: the home page of every domain at once (many due
#: domains), then a chain of pages of one domain (one due domain at a time);
#: ``block`` CPU seconds of the reactor thread spent in each of the first pages
SPIDER = '''
import time
import scrapy


class Waves(scrapy.Spider):
    name = "waves"

    def __init__(self, urls="", chain="", block="0", **kwargs):
        super().__init__(**kwargs)
        self.urls = urls.split(",")
        self.chain = chain.split(",")
        self.block = float(block)
        self.left = len(self.urls)

    async def start(self):
        for url in self.urls:
            yield scrapy.Request(url, callback=self.wide)

    def wide(self, response):
        if self.block and self.left > len(self.urls) - 3:
            end = time.process_time() + self.block
            while time.process_time() < end:  # a page parsed on the reactor thread: CPU, not a wait
                pass
        self.left -= 1
        if self.left == 0:
            self.logger.info("Waves: narrow")
            yield scrapy.Request(self.chain[0], callback=self.narrow, cb_kwargs={"i": 0})

    def narrow(self, response, i):
        if i + 1 < len(self.chain):
            yield scrapy.Request(self.chain[i + 1], callback=self.narrow, cb_kwargs={"i": i + 1})
'''

LINE = re.compile(r"Concurrency cap (\d+) \((\w+)\): (\d+) in flight, (\d+) waiting, (\d+) due")


class Adjustment(NamedTuple):
    cap: int
    limit: str
    in_flight: int
    waiting: int
    due: int
    narrow: bool  # made after the wide wave ended


def crawl(web, redis_url: str, tmp_path: Path, *settings: str, block: float = 0.0,
          chain: int = 6) -> tuple[list[Adjustment], dict]:
    spider = tmp_path / "waves.py"
    spider.write_text(SPIDER)
    stats_file = tmp_path / "stats.json"
    urls = ",".join(web.url(d) for d in range(DOMAINS))
    pages = ",".join(web.url(0, f"/p/{i}.html") for i in range(1, chain + 1))
    args = ["runspider", str(spider), "-a", f"urls={urls}", "-a", f"chain={pages}", "-a", f"block={block}",
            "-s", "LOG_LEVEL=DEBUG", "-s", f"CRAWLER_STATS_FILE={stats_file}", "-s", "CRAWLER_PROGRESS_INTERVAL=0",
            "-s", "CRAWLER_DOMAIN_DELAY=1", "-s", "CRAWLER_CONCURRENCY_INTERVAL=0.2",
            "-s", f"CRAWLER_CONCURRENCY_MIN={FLOOR}", "-s", "CRAWLER_PREFETCH=16",
            "-s", "SCHEDULER_IDLE_BEFORE_CLOSE=1"]
    for s in settings:
        args += ["-s", s]
    result = run_scrapy(args, scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))
    assert result.returncode == 0, result.stderr[-3000:]
    history, narrow = [], False
    for line in result.stderr.splitlines():
        narrow = narrow or "Waves: narrow" in line
        if m := LINE.search(line):
            cap, limit, in_flight, waiting, due = m.groups()
            history.append(Adjustment(int(cap), limit, int(in_flight), int(waiting), int(due), narrow))
    assert history, result.stderr[-3000:]
    return history, json.loads(stats_file.read_text())


@pytest.fixture
def web(make_web):
    # every answer takes 0.3-0.6 s: the wide wave has most domains in flight at once
    return make_web(domains=DOMAINS, pages=10, latency_ms=400, latency_sigma=0.2, size_fixed=PAGE,
                    crawl_delay_share=0, private_share=0)


def test_cap_follows_the_due_domains_up_and_down(web, redis_url: str, tmp_path: Path) -> None:
    # CONCURRENT_REQUESTS=0 on the command line: Scrapy's "no limit", so the project's 64 is no cap
    history, stats = crawl(web, redis_url, tmp_path, "CONCURRENT_REQUESTS=0")
    wide = [a for a in history if not a.narrow]
    narrow = [a for a in history if a.narrow]
    # up: every domain due at once, the cap makes room for all of them (Scrapy's default was 16)
    assert max(a.cap for a in wide) >= DOMAINS
    assert stats["crawler/concurrency/in_flight_max"] > 16
    assert stats["crawler/concurrency/cap_max"] >= DOMAINS
    # the cap is what is in flight, waiting and due, plus the headroom
    assert all(a.cap == max(FLOOR, a.in_flight + a.waiting + a.due + FLOOR) for a in history if a.limit == "due")
    # down: one domain left, the cap falls back to the headroom over its one request
    late = narrow[2:]
    assert late, "no adjustment while the chain ran"
    assert max(a.cap for a in late) <= FLOOR + 3
    assert all(a.in_flight <= 1 for a in late)
    assert stats["item_scraped_count" if "item_scraped_count" in stats else "response_received_count"] > DOMAINS


def test_memory_budget_caps_it(web, redis_url: str, tmp_path: Path) -> None:
    # room for 6 bodies at the page cap (the pages' own size), while 40 domains are due
    history, stats = crawl(web, redis_url, tmp_path, "CONCURRENT_REQUESTS=0", f"CRAWLER_MEMORY_BUDGET={6 * PAGE}",
                           f"CRAWLER_MAX_PAGE_BYTES={PAGE}", chain=1)
    assert any(a.limit == "budget" and a.due > 6 for a in history)
    assert max(a.cap for a in history) == stats["crawler/concurrency/cap_max"] == 6
    # a page's robots.txt rides along with it
    assert stats["crawler/concurrency/in_flight_max"] <= 2 * 6


def test_loop_lag_backs_it_off(web, redis_url: str, tmp_path: Path) -> None:
    # any lag counts (CRAWLER_CONCURRENCY_LAG_CPU=0): on a loaded machine the
    # loop's thread may get less than half a core even while it parses
    history, stats = crawl(web, redis_url, tmp_path, "CONCURRENT_REQUESTS=0", "CRAWLER_CONCURRENCY_MAX_LAG_MS=500",
                           "CRAWLER_CONCURRENCY_LAG_CPU=0", block=1.5, chain=1)
    assert stats["crawler/concurrency/backoffs"] >= 1
    assert stats["crawler/loop/lag_max_ms"] > 500
    backed = [a for a in history if a.limit == "lag"]
    # the first back-off: three quarters of what was in flight (not below the floor)
    first = backed[0]
    assert first.cap == max(FLOOR, int(first.in_flight * 0.75))
    assert first.cap < first.in_flight + first.waiting + first.due + FLOOR


def test_users_concurrent_requests_is_a_cap(web, redis_url: str, tmp_path: Path) -> None:
    history, stats = crawl(web, redis_url, tmp_path, "CONCURRENT_REQUESTS=6", chain=1)
    assert max(a.cap for a in history) == 6
    assert "user" in {a.limit for a in history}
    # Scrapy's meaning: the cap holds the requests the engine starts; a robots.txt
    # fetched for one of them (Scrapy's engine.download) rides along, as in Scrapy
    assert stats["crawler/concurrency/in_flight_max"] <= 2 * 6


def test_off_leaves_scrapys_cap(web, redis_url: str, tmp_path: Path) -> None:
    spider = tmp_path / "waves.py"
    spider.write_text(SPIDER)
    stats_file = tmp_path / "stats.json"
    result = run_scrapy(["runspider", str(spider), "-a", f"urls={web.url(0)}", "-a", f"chain={web.url(1)}",
                         "-s", "CRAWLER_CONCURRENCY_INTERVAL=0", "-s", f"CRAWLER_STATS_FILE={stats_file}",
                         "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CRAWLER_DOMAIN_DELAY=0"],
                        scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))
    assert result.returncode == 0, result.stderr[-3000:]
    stats = json.loads(stats_file.read_text())
    assert not [k for k in stats if k.startswith("crawler/concurrency/")]


# --- the policy alone (no I/O) ---------------------------------------------

def inputs(in_flight: int = 0, due: int = 0, *, waiting: int = 0, lag: float = 0.0, loop_cpu: float = 0.6,
           cpu: float = 0.6) -> Inputs:
    return Inputs(in_flight, waiting, due, lag, loop_cpu, cpu)


def policy(**overrides: object) -> Policy:
    settings = Settings({"CRAWLER_MAX_PAGE_BYTES": BillionSpider.custom_settings["CRAWLER_MAX_PAGE_BYTES"]})
    values = {"floor": setting(settings, "CRAWLER_CONCURRENCY_MIN"),
              "budget_cap": setting(settings, "CRAWLER_MEMORY_BUDGET") // setting(settings, "CRAWLER_MAX_PAGE_BYTES"),
              "max_lag_ms": setting(settings, "CRAWLER_CONCURRENCY_MAX_LAG_MS"),
              "lag_cpu": setting(settings, "CRAWLER_CONCURRENCY_LAG_CPU"),
              "max_cpu": setting(settings, "CRAWLER_CONCURRENCY_MAX_CPU"), "user_cap": None, **overrides}
    return Policy(**values)  # type: ignore[arg-type]


def test_policy_follows_demand_within_the_budget() -> None:
    p = policy(floor=16)
    assert p.budget_cap == 1000  # 250 MB at 250 kB a body
    assert p.cap(inputs(0, 0)) == (16, "due")
    assert p.cap(inputs(100, 400, waiting=10)) == (526, "due")
    assert p.cap(inputs(20, 3)) == (39, "due")
    assert p.cap(inputs(700, 3000)) == (1000, "budget")  # however many are due


def test_policy_backs_off_on_lag_and_holds_on_cpu_then_grows_back() -> None:
    p = policy(floor=16, max_lag_ms=250, max_cpu=0.95)
    # a loop that is late while it hardly works (a wait, a CPU other processes hold): no back-off
    assert p.cap(inputs(400, 300, lag=600, loop_cpu=0.2)) == (716, "due")
    assert p.cap(inputs(400, 300, lag=600, loop_cpu=0.2)) == (716, "due")
    # one stall (a garbage collection, a slow page) is no back-off
    assert p.cap(inputs(400, 300, lag=600)) == (716, "due")
    assert p.cap(inputs(400, 300)) == (716, "due")
    assert p.cap(inputs(400, 300, lag=600)) == (716, "due")
    # late twice in a row: three quarters of what is in flight
    assert p.cap(inputs(400, 300, lag=600)) == (300, "lag")
    assert p.backed_off
    assert p.cap(inputs(300, 300, lag=600)) == (225, "lag")  # again: from the lower of the two
    assert p.cap(inputs(225, 300)) == (337, "lag")  # the loop keeps time: half more
    assert not p.backed_off
    assert p.cap(inputs(337, 300, cpu=0.99)) == (337, "cpu")  # CPU saturated: held at what is in flight
    caps = [p.cap(inputs(337, 300))[0] for _ in range(2)]
    assert caps == [505, 337 + 300 + 16]  # until demand decides again
    assert p.lag_cap is None
    # a back-off while nothing is in flight (the crawl paused) still grows back
    assert [p.cap(inputs(0, 2000, lag=600))[0] for _ in range(2)] == [1000, 16]
    assert [p.cap(inputs(16, 2000))[0] for _ in range(3)] == [24, 36, 54]


def test_policy_keeps_the_users_cap_and_the_floor() -> None:
    p = policy(floor=16, user_cap=64)
    assert p.cap(inputs(60, 500)) == (64, "user")
    assert p.cap(inputs(0, 0)) == (16, "due")
    assert policy(floor=16, user_cap=8).cap(inputs(0, 0)) == (8, "user")  # a user's cap below the floor wins
    tight = policy(floor=16, budget_cap=4)
    assert tight.cap(inputs(3, 100)) == (16, "budget")  # never below the floor


def test_concurrent_requests_keeps_scrapys_meaning() -> None:
    from scrapy.utils.test import get_crawler

    from crawler.extensions.concurrency import user_cap

    assert user_cap(get_crawler(settings_dict={})) == 16  # Scrapy's default is a cap, as in Scrapy
    assert user_cap(get_crawler(settings_dict={"CONCURRENT_REQUESTS": 40})) == 40
    assert user_cap(get_crawler(settings_dict={"CONCURRENT_REQUESTS": 0})) is None  # "no limit": the due domains
    assert user_cap(get_crawler(settings_dict={"CONCURRENT_REQUESTS": 0, "CRAWLER_CONCURRENCY_MAX": 300})) == 300


# --- on the crawl's one clock (crawler/clock.py) ------------------------------


def test_every_component_reads_the_crawls_one_clock(redis_url: str) -> None:
    from crawler.clock import ManualClock, clock_of
    from crawler.extensions.concurrency import ConcurrencyController
    from crawler.extensions.looplag import LoopLagProbe
    from crawler.extensions.progress import Progress
    from crawler.extensions.warc import WarcExtension
    from crawler.middlewares.backoff import BackoffMiddleware
    from crawler.middlewares.lock import DomainLockMiddleware
    from crawler.middlewares.robots import SharedRobotsMiddleware
    from tests.servers import crawler_for

    crawler = crawler_for(redis_url, CRAWLER_CLOCK="crawler.clock:ManualClock", ROBOTSTXT_OBEY=True,
                          SCHEDULER="crawler.scheduler.FrontierScheduler", CRAWLER_WARC_DIR="/nonexistent",
                          CRAWLER_PROGRESS_INTERVAL=1)
    clock = clock_of(crawler)
    assert isinstance(clock, ManualClock) and clock_of(crawler) is clock  # a callable, called once
    made = [cls(crawler) for cls in (SharedRobotsMiddleware, BackoffMiddleware, DomainLockMiddleware,
                                     WarcExtension, ConcurrencyController, LoopLagProbe, Progress)]
    assert all(component.clock is clock for component in made)


def manual(redis_url: str, **settings: object):
    from crawler.clock import ManualClock, use_clock
    from tests.servers import crawler_for

    crawler = crawler_for(redis_url, **settings)
    return crawler, use_clock(crawler, ManualClock())


def test_the_loop_probe_measures_lateness_on_the_crawls_clock(redis_url: str) -> None:
    from crawler.extensions.looplag import LoopLagProbe

    crawler, clock = manual(redis_url, CRAWLER_LOOP_PROBE_INTERVAL=0.125)
    probe = LoopLagProbe(crawler)
    probe.spider_opened()
    clock.advance(0.125)  # on time
    assert crawler.stats.get_value("crawler/loop/lag_ms") == 0
    clock.advance(0.375)  # the next tick ran 0.25 s late: the loop was busy
    assert crawler.stats.get_value("crawler/loop/lag_ms") == 250
    assert crawler.stats.get_value("crawler/loop/lag_max_ms") == 250
    assert crawler.stats.get_value("crawler/loop/stalls") == 1
    assert probe.worst_since() == 250 and probe.worst_since() == 0
    probe.spider_closed()
    clock.advance(1)
    assert crawler.stats.get_value("crawler/loop/lag_ms") == 250  # no tick after the close (it would be 875)


def test_adjustments_run_and_measure_on_the_crawls_clock(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    from crawler.extensions.concurrency import ConcurrencyController

    crawler, clock = manual(redis_url, CRAWLER_CONCURRENCY_INTERVAL=1)
    controller = ConcurrencyController(crawler)
    with caplog.at_level("DEBUG", logger="crawler.extensions.concurrency"):
        controller.spider_opened()
        assert crawler.stats.get_value("crawler/concurrency/adjustments") == 1
        clock.advance(0.999)
        assert crawler.stats.get_value("crawler/concurrency/adjustments") == 1
        clock.advance(0.501)  # due 0.001 s after the last move: run 0.5 s late
        assert crawler.stats.get_value("crawler/concurrency/adjustments") == 2
    controller.spider_closed()
    lags = [float(m.group(1)) for m in re.finditer(r"lag (\d+) ms", caplog.text)]
    assert lags == [0, 500], caplog.text


def test_progress_rates_are_read_on_the_crawls_clock(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    from crawler.extensions.progress import Progress

    crawler, clock = manual(redis_url, CRAWLER_PROGRESS_INTERVAL=2)
    progress = Progress(crawler)
    with caplog.at_level("INFO", logger="crawler.extensions.progress"):
        progress.spider_opened()
        crawler.stats.set_value("response_received_count", 10)
        clock.advance(1.999)
        assert "pages=" not in caplog.text
        clock.advance(0.001)
        assert "pages=10 (5.0/s)" in caplog.text, caplog.text
    progress.loop.stop()
