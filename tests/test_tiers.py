"""The compact tier (crawler/store/tiers.py, lua/_lib.lua push/tier_refill,
tier_take.lua, tier_done.lua): a domain's queue past its head is kept as
compressed blocks, served in order, never dropped, through a killed worker
and a Redis restart. Real redis-server processes."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import zlib
from collections import Counter
from hashlib import sha256
from pathlib import Path

import pytest
import redis

from crawler.clock import ManualClock
from crawler.store import Frontier, Item, Keys
from crawler.store.tiers import CLAIM_SECONDS, pack, unpack
from tests.servers import ROOT, RedisServer, run_scrapy, scrapy_env


def item(url: str, domain: str = "a.test", priority: int = 0) -> Item:
    return Item(sha256(url.encode()).digest(), domain, priority, url.encode(), False)


def make(client: redis.Redis, head: int = 4, block: int = 8, **kwargs) -> Frontier:
    frontier = Frontier(client, Keys("crawler", "t", 0), domain_cap=head, block=block, **kwargs)
    frontier.open()
    return frontier


def stats(client: redis.Redis, f: Frontier) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall(f.keys.stats).items()}


def take_all(f: Frontier, client: redis.Redis, rounds: int = 1000) -> list[bytes]:
    """Everything queued, in the order it is served, the tier's jobs run between dequeues."""
    got: list[bytes] = []
    for _ in range(rounds):
        taken = f.take(100)
        got += [x.entry for x in taken.items]
        f.add([], acks=[x.lease for x in taken.items])
        ran = f.tiers.run()
        if not taken.items and not ran.jobs and not client.zcard(f.keys.key("tiers")):
            break
    return got


def urls(n: int, domain: str = "a.test", start: int = 0) -> list[bytes]:
    return [f"U0 https://www.{domain}/articles/{i:06d}/a-title-of-some-length?page={i % 7}".encode()
            for i in range(start, start + n)]


def test_the_codec_round_trips_and_refuses_what_is_not_a_block() -> None:
    framed = [b"", b"U0 https://a.test/\n", bytes(range(256)) * 3, b"R\x81\xa3url"]
    links = [b"U0 https://a.test/1", b"", b"U1 https://a.test/2?x=1"]
    assert unpack(pack(framed)) == framed and pack(framed).split(b"\n", 1)[1][:1] == b"l"
    assert unpack(pack(links)) == links and pack(links).split(b"\n", 1)[1][:1] == b"n"
    assert unpack(pack([])) == []
    with pytest.raises(ValueError, match="not a block"):
        unpack(b"zz")
    with pytest.raises(ValueError, match="not a block"):
        unpack(b"2\nxzlib")
    with pytest.raises(ValueError, match="does not decompress"):
        unpack(b"2\nnnot zlib")
    for sample in (framed, links):
        with pytest.raises(ValueError, match="says 3 records and holds 2"):
            unpack(b"3\n" + pack(sample[:2]).partition(b"\n")[2])
    truncated = zlib.compress(b"\x00\x00\x00\x09abc")
    with pytest.raises(ValueError, match="ends inside a record"):
        unpack(b"1\nl" + truncated)


def test_past_the_head_nothing_is_dropped_and_the_order_is_kept(redis_client: redis.Redis) -> None:
    f = make(redis_client, head=4, block=8)
    entries = urls(100)
    result = f.add([item(e.decode()) for e in entries])
    assert (result.added, result.spilled) == (100, 96)
    s = stats(redis_client, f)
    assert s["queued"] == 100 and s["spill"] == 96 and "capped" not in s
    ran = f.tiers.run()
    assert ran.packed == 64  # a pack job takes eight blocks at most
    s = stats(redis_client, f)
    assert s["compact"] == 64 and s["spill"] == 32 and s["compact_bytes"] > 0
    assert redis_client.llen(f.keys.key("z", "a.test", "0")) == 8
    assert take_all(f, redis_client) == entries
    s = stats(redis_client, f)
    assert s["queued"] == 0 and s["spill"] == 0 and s["compact"] == 0 and s["compact_bytes"] == 0
    assert s["tier_unpacked"] == s["tier_packed"]


def test_priority_first_then_fifo_across_the_tiers(redis_client: redis.Redis) -> None:
    f = make(redis_client, head=2, block=4)
    low, high = urls(30, start=0), urls(30, start=100)
    f.add([item(e.decode(), priority=0) for e in low])
    f.tiers.run()
    f.add([item(e.decode(), priority=5) for e in high])
    f.tiers.run()
    assert take_all(f, redis_client) == high + low


def test_a_head_waiting_for_its_block_leaves_the_ready_set_and_comes_back(redis_client: redis.Redis) -> None:
    f = make(redis_client, head=2, block=4)
    entries = urls(12)
    f.add([item(e.decode()) for e in entries])
    f.tiers.run()  # the spill (10) becomes two blocks, two records stay in the spill
    assert redis_client.llen(f.keys.key("z", "a.test", "0")) == 2
    first = f.take(10)  # the head's two; then the head waits for a block
    assert [x.entry for x in first.items] == entries[:2]
    assert first.fills == 1  # the fill job it made, for the caller to run soon
    assert redis_client.zscore(f.keys.ready, "a.test") is None
    assert stats(redis_client, f)["tier_waits"] == 1
    again = f.take(10)
    assert again.items == [] and again.fills == 0  # nothing until a worker unpacks; the job was made once
    f.tiers.run()
    assert redis_client.zscore(f.keys.ready, "a.test") is not None
    assert [x.entry for x in f.take(10).items] == entries[2:6]


def test_a_worker_killed_between_take_and_reply_loses_nothing(redis_client: redis.Redis,
                                                               clock: ManualClock) -> None:
    f = make(redis_client, head=2, block=4, clock=clock)
    entries = urls(40)
    f.add([item(e.decode()) for e in entries])
    # a worker takes the pack job and dies: its claim holds the job, the records stay in the spill
    taken = f.scripts.tier_take(keys=[f.keys.base], args=[10, int(CLAIM_SECONDS * 1000), 32])
    assert [j[0] for j in taken] == [b"p"] and len(taken[0][4]) == 32
    assert f.tiers.run().jobs == 0  # claimed: nobody else takes it yet
    assert redis_client.llen(f.keys.key("s", "a.test", "0")) == 38
    clock.advance(CLAIM_SECONDS + 1)
    assert f.tiers.run().packed == 32  # the claim ran out: taken again
    # the dead worker's reply, arriving late, is stale: nothing is doubled
    late = ["p", "a.test", "0", taken[0][3].decode(), 1, pack(taken[0][4][:4])]
    assert [int(x) for x in f.scripts.tier_done(keys=[f.keys.base], args=late)] == [0, 1, 0]
    assert take_all(f, redis_client) == entries


def test_a_stale_fill_is_refused_and_a_bad_block_is_counted_never_applied(redis_client: redis.Redis) -> None:
    f = make(redis_client, head=2, block=4)
    entries = urls(14)
    f.add([item(e.decode()) for e in entries])
    f.tiers.run()
    f.take(10)  # the head's two: a fill job waits
    taken = f.scripts.tier_take(keys=[f.keys.base], args=[10, 1000, 32])
    kind, domain, prio, count, block = taken[0]
    assert kind == b"f"
    wrong = ["f", "a.test", "0", count.decode(), 2, b"x", b"y"]  # two records for a block of four
    assert [int(x) for x in f.scripts.tier_done(keys=[f.keys.base], args=wrong)] == [0, 0, 1]
    assert stats(redis_client, f)["tier_refused"] == 1
    right = ["f", "a.test", "0", count.decode(), 4, *unpack(block)]
    assert [int(x) for x in f.scripts.tier_done(keys=[f.keys.base], args=right)] == [1, 0, 0]
    again = ["f", "a.test", "0", count.decode(), 4, *unpack(block)]  # the same reply twice: stale
    assert [int(x) for x in f.scripts.tier_done(keys=[f.keys.base], args=again)] == [0, 1, 0]
    assert entries[:2] + take_all(f, redis_client) == entries


def test_many_domains_random_offers_and_takes_lose_nothing(redis_client: redis.Redis) -> None:
    rng = random.Random(7)
    f = make(redis_client, head=3, block=5)
    sent: dict[str, list[bytes]] = {}
    got: list[bytes] = []
    for step in range(60):
        batch = []
        for _ in range(rng.randrange(0, 40)):
            d = f"d{rng.randrange(6)}.test"
            e = f"U0 https://{d}/p{step}-{len(sent.get(d, []))}".encode()
            sent.setdefault(d, []).append(e)
            batch.append(item(e.decode(), d))
        f.add(batch)
        if rng.random() < 0.5:
            f.tiers.run(jobs=rng.randrange(1, 4))
        taken = f.take(rng.randrange(0, 30))
        got += [x.entry for x in taken.items]
        f.add([], acks=[x.lease for x in taken.items])
    got += take_all(f, redis_client)
    for d, mine in sent.items():
        assert [e for e in got if e.split(b"/")[2].decode() == d] == mine
    assert sorted(got) == sorted(e for mine in sent.values() for e in mine)
    s = stats(redis_client, f)
    assert s["queued"] == 0 and s["spill"] == 0 and s["compact"] == 0


def test_an_excluded_domain_drops_every_tier_and_counts_it(redis_client: redis.Redis) -> None:
    f = make(redis_client, head=2, block=4)
    f.add([item(e.decode()) for e in urls(20)])
    f.tiers.run()
    f.exclude(["a.test"])
    assert f.take(10).items == []
    s = stats(redis_client, f)
    assert s["excluded_dropped"] == 20 and s["queued"] == 0 and s["spill"] == 0 and s["compact"] == 0
    assert not redis_client.keys(f.keys.key("[qzs]", "a.test", "*"))
    assert f.tiers.run().jobs == 0 and redis_client.zcard(f.keys.key("tiers")) == 0


def test_without_a_head_size_there_is_no_tier_and_an_old_tier_still_drains(redis_client: redis.Redis) -> None:
    f = make(redis_client, head=2, block=4)
    entries = urls(20)
    f.add([item(e.decode()) for e in entries])
    f.tiers.run()
    g = make(redis_client, head=0, block=4)  # the setting went to 0 on a stored frontier
    more = urls(5, start=20)
    assert g.add([item(e.decode()) for e in more]).spilled == 5  # behind the tier, in order
    assert take_all(g, redis_client) == entries + more
    assert g.add([item(e.decode()) for e in urls(5, start=50)]).spilled == 0


def test_a_redis_restarted_with_aof_keeps_the_tier_and_serves_it_in_order(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "aof", "--appendonly", "yes", "--appendfsync", "always").start()
    try:
        client = server.client()
        f = make(client, head=2, block=4)
        entries = urls(30)
        f.add([item(e.decode()) for e in entries])
        f.tiers.run()
        first = [x.entry for x in f.take(10).items]
        kept = client.lrange(f.keys.key("z", "a.test", "0"), 0, -1)
        assert kept and first == entries[:2]
        client.close()
        server.restart()
        client = server.client()
        g = make(client, head=2, block=4)
        assert client.lrange(g.keys.key("z", "a.test", "0"), 0, -1) == kept
        # the first take's leases expired with the restart's clock, or not: acknowledged now
        assert first + take_all(g, client) == entries
        client.close()
    finally:
        server.stop()


def test_a_worker_sigkilled_holding_a_job_loses_nothing(redis_url: str, redis_client: redis.Redis,
                                                        clock: ManualClock) -> None:
    """A real process takes the pack job and is SIGKILLed before it replies."""
    f = make(redis_client, head=2, block=4, clock=clock)
    entries = urls(40)
    f.add([item(e.decode()) for e in entries])
    code = textwrap.dedent(f"""
        import sys, redis
        from crawler.clock import ManualClock
        from crawler.store import Frontier, Keys
        client = redis.Redis.from_url({redis_url!r})
        f = Frontier(client, Keys("crawler", "t", 0), domain_cap=2, block=4, clock=ManualClock(client))
        f.scripts.tier_take(keys=[f.keys.base], args=[10, 30000, 32])
        print("taken", flush=True)
        sys.stdin.read()  # held until it is killed
    """)
    worker = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "taken"
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        worker.kill()
    assert f.tiers.run().jobs == 0  # its claim holds the job until it runs out
    assert redis_client.llen(f.keys.key("s", "a.test", "0")) == 38  # nothing left the spill
    clock.advance(CLAIM_SECONDS + 1)
    assert take_all(f, redis_client) == entries


def test_a_crawl_whose_domains_pass_their_head_fetches_every_page_once(redis_url: str, make_web) -> None:
    web = make_web(domains=2, pages=60, links=12, size_fixed=2000, private_share=0, cross_share=0, dup_share=0,
                   crawl_delay_share=0)
    starts = ",".join(web.url(d) for d in range(2))
    # a 0.1 s delay: links arrive faster than a domain is served, so spills pass a block
    # before a worker's tick (without one the head drains as fast and the spill moves up whole)
    result = run_scrapy(["crawl", "demo", "-a", f"start_urls={starts}", "-s", "CRAWLER_DOMAIN_QUEUE_CAP=2",
                         "-s", "CRAWLER_FRONTIER_BLOCK=4", "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CRAWLER_DOMAIN_DELAY=0.1",
                         "-s", "CRAWLER_KEY_PREFIX=tiercrawl"], scrapy_env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    pages = Counter((e.domain, e.path) for e in web.log() if e.path.startswith("/p/"))
    assert {(d, f"/p/{k}.html") for d in web.domains for k in range(1, 60)} <= set(pages)
    assert set(pages.values()) == {1}  # each exactly once
    client = redis.Redis.from_url(redis_url)
    s = {k.decode(): int(v) for k, v in client.hgetall("tiercrawl:{demo:0}:stats").items()}
    assert s["tier_packed"] > 0 and s["tier_unpacked"] == s["tier_packed"]
    assert s["queued"] == 0 and s["spill"] == 0 and s["compact"] == 0
    assert "'crawler/frontier/tier/packed'" in result.stderr
    # the operator's view: scrapy frontier's tiers
    shown = subprocess.run([sys.executable, "-m", "scrapy", "frontier", "demo", "--json", "-s",
                            "CRAWLER_KEY_PREFIX=tiercrawl"], cwd=ROOT, env=scrapy_env(redis_url),
                           capture_output=True, text=True, timeout=60)
    tiers = json.loads(shown.stdout)[0]["tiers"]
    assert tiers["packed"] == tiers["unpacked"] == s["tier_packed"] and tiers["head"] == tiers["compact"] == 0
    text = subprocess.run([sys.executable, "-m", "scrapy", "frontier", "demo", "-s", "CRAWLER_KEY_PREFIX=tiercrawl"],
                          cwd=ROOT, env=scrapy_env(redis_url), capture_output=True, text=True, timeout=60).stdout
    assert f"tiers         head 0, spill 0, compact 0 in 0.0 MiB; {s['tier_packed']} packed" in text, text


def test_a_worker_fills_a_head_its_take_ran_low_at_once_not_at_its_tick(redis_url: str, clock) -> None:
    """A fast domain is not held to a head a tick: the take that made a fill
    job has the worker run the tier's jobs on the next turn of the reactor."""
    from crawler.worker.session import FILL_SPACING
    from tests.servers import open_on

    scheduler = open_on(redis_url, clock, CRAWLER_DOMAIN_QUEUE_CAP=2, CRAWLER_FRONTIER_BLOCK=4,
                        CRAWLER_FLUSH_INTERVAL=10, CRAWLER_DOMAIN_DELAY=0, CRAWLER_PREFETCH=2)
    try:
        session = scheduler.session
        store = session.store
        session.offer([f"https://a.test/{i}" for i in range(20)], canonical=True)
        session.flush()
        store.tiers.run()  # the spill packed into blocks
        head = store.keys.key("q", "a.test", "0")
        assert redis.Redis.from_url(redis_url).llen(store.keys.key("z", "a.test", "0")) == 4
        assert scheduler.next_request() is not None  # a take of the head's 2: run low, a fill job made
        assert scheduler.crawler.stats.get_value("crawler/frontier/tier/unpacked") is None
        clock.advance(0)  # the reactor's next turn, long before the 10-s tick
        assert scheduler.crawler.stats.get_value("crawler/frontier/tier/unpacked") == 4
        assert redis.Redis.from_url(redis_url).llen(head) == 4
        session._fill_soon()  # another take's fill jobs, at once: the next pass waits its spacing
        assert session._fill_call.getTime() - clock.timers.seconds() == pytest.approx(FILL_SPACING)
    finally:
        scheduler.close("finished")
