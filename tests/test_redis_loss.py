"""Redis losing the frontier mid-crawl is detected (``crawler/store/epoch.py``, ``crawler/worker/_outage.py``):
a flush, a restart without persistence, a restart from an older snapshot; and
a Redis that saves nothing gets one warning at start. Real redis-server
processes without persistence, real crawls of the test web."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from hashlib import sha256
from pathlib import Path

import pytest
import redis
from scrapy.utils.test import get_crawler

from crawler.connection import persistence_warning
from crawler.store import REPLACED, REWOUND, VANISHED, FrontierLost
from crawler.worker._outage import SEQ_MARGIN
from crawler.worker.config import on_loss_policy
from crawler.store import Frontier, Item, Politeness
from crawler.store import Keys
from crawler.settings_registry import SettingsError
from tests.servers import ROOT, RedisServer, scrapy_env, wait_until

QUIET = {"links": 6, "size_fixed": 3000, "private_share": 0, "cross_share": 0.3, "dup_share": 0.2,
         "crawl_delay_share": 0}
BASE = "crawler:{billion:0}"


@pytest.fixture
def volatile_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server that keeps nothing on disk."""
    server = RedisServer(tmp_path / "redis", "--appendonly", "no").start()
    yield server
    server.stop()


def item(url: str, domain: str = "a.test") -> Item:
    return Item(sha256(url.encode()).digest(), domain, 0, url.encode())


def opened(client: redis.Redis) -> Frontier:
    frontier = Frontier(client, Keys("crawler", "t", 0), politeness=Politeness(delay=0))
    frontier.open()
    return frontier


# --- detection, in the frontier ------------------------------------------------

def test_a_flushed_frontier_is_noticed_and_nothing_is_written(volatile_redis: RedisServer) -> None:
    client = volatile_redis.client()
    frontier = opened(client)
    frontier.add([item(f"http://a.test/{i}") for i in range(20)])
    taken = frontier.take(5)
    assert len(taken.items) == 5
    client.flushall()
    with pytest.raises(FrontierLost) as caught:
        frontier.take(5, acks=[x.lease for x in taken.items])
    assert caught.value.kind == VANISHED
    assert caught.value.queued == 15  # what it knew at its last look
    assert client.keys("*") == []  # the refused dequeue wrote nothing: no acks, no leases
    with pytest.raises(FrontierLost):
        frontier.check_epoch()  # the idle look finds it too


def test_going_back_in_time_is_noticed_and_old_leases_stay_void(volatile_redis: RedisServer) -> None:
    client = volatile_redis.client()
    frontier, other = opened(client), opened(client)
    assert frontier.epoch.id == other.epoch.id  # the second worker found the first one's epoch
    frontier.add([item(f"http://a.test/{i}") for i in range(30)])
    before = frontier.take(5)
    client.save()  # the snapshot Redis will come back from
    after = frontier.take(5)
    other.take(1)
    volatile_redis.restart()  # loads the snapshot: the last leases never happened
    client = volatile_redis.client()
    with pytest.raises(FrontierLost) as caught:
        frontier.take(5, acks=[x.lease for x in before.items])
    lost = caught.value
    assert lost.kind == REWOUND and lost.found_seq == 5 and lost.seen_seq == 10
    assert client.zcard("crawler:{t:0}:leases") == 5  # the refused call acknowledged nothing
    # going on: a new epoch, whose lease ids never meet the lost epoch's
    frontier.renew(lost.known_id, lost.seen_seq + SEQ_MARGIN)
    assert frontier.epoch.id != lost.known_id
    fresh = frontier.take(5)
    assert min(int(x.lease) for x in fresh.items) > SEQ_MARGIN
    assert frontier.add([], acks=[x.lease for x in after.items]).acked == 0
    with pytest.raises(FrontierLost) as seen_by_other:
        other.take(1)  # the other worker: its epoch was replaced
    assert seen_by_other.value.kind == REPLACED


def test_a_durable_restart_is_not_a_loss(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "aof", "--appendonly", "yes", "--appendfsync", "always").start()
    try:
        frontier = opened(server.client())
        frontier.add([item(f"http://a.test/{i}") for i in range(10)])
        taken = frontier.take(3)
        server.restart()
        again = frontier.take(3, acks=[x.lease for x in taken.items])
        assert len(again.items) == 3 and frontier.epoch.queued == 4
        frontier.check_epoch()
    finally:
        server.stop()


def test_the_policy_setting_is_checked() -> None:
    assert on_loss_policy(get_crawler(settings_dict={}).settings) == "stop"
    assert on_loss_policy(get_crawler(settings_dict={"CRAWLER_ON_FRONTIER_LOSS": "continue"}).settings) == "continue"
    with pytest.raises(SettingsError, match="CRAWLER_ON_FRONTIER_LOSS"):
        on_loss_policy(get_crawler(settings_dict={"CRAWLER_ON_FRONTIER_LOSS": "ignore"}).settings)


# --- the persistence warning -----------------------------------------------------

@pytest.mark.parametrize(("args", "warned"), [
    (("--appendonly", "no"), True),
    (("--appendonly", "yes"), False),
    (("--appendonly", "no", "--save", "60 1"), False),
    (("--appendonly", "no", "--rename-command", "CONFIG", ""), False),  # managed Redis: CONFIG refused
])
def test_persistence_warning(tmp_path: Path, args: tuple[str, ...], warned: bool) -> None:
    server = RedisServer(tmp_path / "r", *args).start()
    try:
        warning = persistence_warning(server.client())
    finally:
        server.stop()
    assert (warning is not None) == warned
    if warned:
        assert "saves nothing to disk" in warning and "SCHEDULER_PERSIST" in warning


# --- real crawls -------------------------------------------------------------------

def crawl(web, tmp_path: Path, redis_url: str, *settings: str) -> subprocess.Popen[str]:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(web.url(d) for d in range(web.config.domains)) + "\n")
    cmd = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}",
           "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CRAWLER_DOMAIN_DELAY=0.05",
           "-s", f"CRAWLER_STATS_FILE={tmp_path / 'stats.json'}", "-s", f"CRAWLER_WARC_DIR={tmp_path / 'warc'}"]
    for s in settings:
        cmd += ["-s", s]
    return subprocess.Popen(cmd, cwd=ROOT, env=scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pages(web) -> Counter[tuple[str, str]]:
    return Counter((e.domain, e.path) for e in web.log() if e.path != "/robots.txt")


def process_state(pid: int) -> str:
    """The state letter of ``pid`` (Linux: ``T`` stopped, ``Z`` exited)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def freeze_holding_a_page(proc: subprocess.Popen[str], web, timeout: float = 60) -> None:
    """Stop the crawl process (SIGSTOP) at a moment it holds a page: one whose
    request reached the test web and whose answer had not been written when
    the process stopped (its log entry is still not done), so the crawl has
    not read it, nor stored its links. Without this, the loss may come when
    every page fetched was done and its links stored in the frontier about
    to go, with nothing held to go on with (as on a loaded machine)."""
    def stopped() -> bool:  # the signal is taken asynchronously
        state = process_state(proc.pid)
        assert state != "Z", proc.communicate()[1][-3000:]
        return state in "tT"

    def frozen_holding_a_page() -> bool:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        os.kill(proc.pid, signal.SIGSTOP)
        wait_until(stopped, 10, "the crawl process stopped", every=0.001)
        if any(e.done == 0 for e in web.log() if e.path != "/robots.txt"):
            return True
        os.kill(proc.pid, signal.SIGCONT)
        return False

    wait_until(frozen_holding_a_page, timeout, "a page in flight to freeze the crawl on", every=0.01)


@pytest.mark.parametrize("policy", ["stop", "continue"])
@pytest.mark.parametrize("event", ["flushall", "restart"])
def test_frontier_lost_mid_crawl(volatile_redis: RedisServer, make_web, tmp_path: Path,
                                 event: str, policy: str) -> None:
    # 240 pages, as in the issue; slow pages, so that pages are often in flight
    web = make_web(domains=4, pages=60, faults={"slow": 0.3}, slow_ms=300, **QUIET)
    proc = crawl(web, tmp_path, volatile_redis.url, f"CRAWLER_ON_FRONTIER_LOSS={policy}")
    wait_until(lambda: sum(pages(web).values()) >= 60 or proc.poll() is not None, 60, "60 pages")
    # the frontier goes while the crawl holds a page it has not read: with
    # `continue` its links are what the crawl goes on with; with `stop` they
    # must not be fetched
    freeze_holding_a_page(proc, web)
    try:
        if event == "flushall":
            volatile_redis.client().flushall()
        else:
            volatile_redis.restart()  # empty: nothing on disk
        lost_at = len(web.log())
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=180)
    stats = json.loads((tmp_path / "stats.json").read_text())
    fetched = pages(web)
    twice = sum(n - 1 for n in fetched.values())
    after = sum(1 for e in web.log()[lost_at:] if e.path != "/robots.txt")
    print(f"{event}/{policy}: {sum(fetched.values())} fetches of {len(fetched)} pages, "
          f"{twice} fetched twice, {after} after the loss, exit status {proc.returncode}")
    errors = [line for line in err.splitlines() if "] ERROR:" in line]
    loss_lines = [line for line in errors if f"Frontier {BASE} lost:" in line]
    assert len(loss_lines) == 1, err[-5000:]
    line = loss_lines[0]
    assert ("it is gone" in line and "queued requests" in line and "dedup state" in line), line
    assert ("Stopping the crawl" if policy == "stop" else "Going on in a new epoch") in line
    verdict = [e for e in errors if "[crawler.commands.crawl] ERROR: Crawl failed: " in e]
    assert len(verdict) == 1 and f"frontier {BASE} lost (vanished)" in verdict[0], err[-3000:]  # the last word
    other_errors = [e for e in errors if e not in loss_lines + verdict and "is unreachable" not in e]
    assert other_errors == [], err[-5000:]
    assert "nothing is lost" not in err
    assert "Traceback" not in err, err[-5000:]
    assert err.count("saves nothing to disk") == 1  # the start-up warning, once
    assert stats["crawler/frontier/lost"] == 1
    assert stats["crawler/exit/error"].startswith(f"frontier {BASE} lost (vanished)")
    if policy == "stop":
        assert stats["finish_reason"] == "frontier_lost"
        assert twice == 0  # nothing fetched again: it stopped
        assert volatile_redis.client().keys(f"{BASE}:epoch") == []  # the lost frontier is left alone
    else:
        assert "going on in epoch" in err
        assert stats["finish_reason"] == "finished"
        assert after > 20  # it went on crawling
        assert len(fetched) >= 200  # and reached (nearly) every page again
    assert proc.returncode != 0, f"exit status {proc.returncode}: the loss must fail the crawl"


def test_a_lua_error_is_logged_with_its_cost_and_the_timer_goes_on(redis_url: str, clock, caplog) -> None:
    """A Redis error that is not an outage (here a script's WRONGTYPE, from a
    key another program overwrote) is never swallowed: a write says what it
    cost and counts it; the session's timer, whose flush then fails the same
    way, logs it and keeps running."""
    import logging

    from scrapy import Request

    from crawler.clock import use_clock
    from crawler.scheduler import FrontierScheduler
    from tests.servers import crawler_for

    crawler = crawler_for(redis_url, SCHEDULER="crawler.scheduler.FrontierScheduler", CRAWLER_FLUSH_INTERVAL=1.0,
                          SCHEDULER_PERSIST=True)
    use_clock(crawler, clock)
    scheduler = FrontierScheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    try:
        session = scheduler.session
        base = session.store.keys.base
        client = redis.Redis.from_url(redis_url)
        client.set(f"{base}:dom:a.test", "not a hash")  # every script touching a.test now fails
        with caplog.at_level(logging.ERROR):
            session.push_domain("http://a.test/x", 5)
        assert crawler.stats.get_value("crawler/redis/errors") == 1
        assert "push-back of a.test by 5 s not applied: ResponseError" in caplog.text
        assert "WRONGTYPE" in caplog.text
        assert crawler.stats.get_value("crawler/frontier/domain_pushbacks") is None

        caplog.clear()
        session.offer_request(Request("http://a.test/page"))
        with caplog.at_level(logging.ERROR):
            clock.advance(1.0)  # the timer's flush: enqueue.lua fails on the same key
            clock.advance(1.0)  # and the timer still runs
        assert crawler.stats.get_value("crawler/frontier/tick_errors") == 2
        assert caplog.text.count("The frontier's timer failed") == 2
        client.delete(f"{base}:dom:a.test")  # repaired: the request was kept, and is stored now
    finally:
        scheduler.close("finished")
    assert client.zcard(f"{base}:ready") == 1 and crawler.stats.get_value("crawler/frontier/enqueued") == 1
