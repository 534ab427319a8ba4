"""The frontier's Redis side: dedup, queues, politeness, leases, delays, batching.

Time is a :class:`~crawler.clock.ManualClock` (the ``clock`` fixture) that
the scripts read too: nothing sleeps, and times are asserted to the ms. A
domain's next turn is set 1 ms after its request's mark (``_lib.lua``:
marks are placed late rather than early).
"""

from __future__ import annotations

import gc
import re
from hashlib import sha256
from itertools import pairwise

import pytest
import redis
from scrapy.crawler import Crawler
from scrapy.settings import Settings

from crawler.clock import ManualClock
from crawler.scheduler import FrontierScheduler
from crawler.worker._leases import Ack
from crawler.store import Keys, Scripts
from crawler.worker._recent import Recent
from crawler.worker._shards import Outbox
from crawler.worker._writes import WriteBuffer
from crawler.store import (
    Dedup,
    Frontier,
    FrontierConfigError,
    Item,
    Politeness,
)
from tests.servers import ROOT, crawler_for


def item(url: str, domain: str = "a.test", priority: int = 0, dont_filter: bool = False) -> Item:
    return Item(sha256(url.encode()).digest(), domain, priority, url.encode(), dont_filter)


def make(client: redis.Redis, spider: str = "t", **kwargs) -> Frontier:
    frontier = Frontier(client, Keys("crawler", spider, 0), **kwargs)
    frontier.open()
    return frontier


def evalsha_calls(client: redis.Redis) -> int:
    return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


def drain(frontier: Frontier, n: int = 1000) -> list[bytes]:
    taken = frontier.take(n)
    frontier.add([], acks=[x.lease for x in taken.items])
    return [x.entry for x in taken.items]


def test_exact_dedup_is_atomic_test_and_add(redis_client: redis.Redis) -> None:
    f = make(redis_client)
    first = f.add([item(f"http://a.test/{i}") for i in range(100)])
    again = f.add([item(f"http://a.test/{i}") for i in range(50, 150)])
    assert (first.added, first.duplicates) == (100, 0)
    assert (again.added, again.duplicates) == (50, 50)
    within = f.add([item("http://a.test/x"), item("http://a.test/x")])
    assert (within.added, within.duplicates) == (1, 1)
    forced = f.add([item("http://a.test/x", dont_filter=True)])
    assert forced.added == 1


def test_exact_buckets_stay_compact_intsets(redis_client: redis.Redis) -> None:
    f = make(redis_client, dedup=Dedup("exact", capacity=100_000))
    f.add([item(f"http://a.test/{i}") for i in range(2000)])
    buckets = list(redis_client.scan_iter(match="crawler:{t:0}:seen:*"))
    assert 1 < len(buckets) <= 2 ** f.dedup.bucket_bits
    assert {redis_client.object("encoding", b) for b in buckets} == {b"intset"}
    assert sum(redis_client.scard(b) for b in buckets) == 2000


def test_bloom_false_positive_rate_and_growth(redis_client: redis.Redis) -> None:
    f = make(redis_client, dedup=Dedup("bloom", capacity=5_000, error_rate=0.01))
    added = f.add([item(f"http://a.test/in/{i}") for i in range(6_000)]).added
    assert added >= 5_940  # a few false positives among the first insertions
    count = int(redis_client.hget("crawler:{t:0}:bloom", "count"))
    assert count == 2  # full: a second filter was added
    again = f.add([item(f"http://a.test/in/{i}") for i in range(6_000)])
    assert again.added == 0  # never a false negative
    fresh = f.add([item(f"http://a.test/out/{i}") for i in range(20_000)])
    false_positive_rate = fresh.duplicates / 20_000
    assert false_positive_rate <= 0.01
    assert int(redis_client.hget("crawler:{t:0}:bloom", "count")) >= 3


def test_dedup_mode_cannot_change_under_a_stored_frontier(redis_client: redis.Redis) -> None:
    make(redis_client, dedup=Dedup("exact"))
    with pytest.raises(FrontierConfigError, match="created with CRAWLER_DEDUP='exact'"):
        make(redis_client, dedup=Dedup("bloom"))


def test_priority_first_then_fifo(redis_client: redis.Redis) -> None:
    f = make(redis_client)
    f.add([item("low1", priority=-1), item("mid1"), item("high1", priority=5),
           item("mid2"), item("low2", priority=-1), item("high2", priority=5)])
    order = []
    while True:
        got = drain(f, 1)
        if not got:
            break
        order += got
    assert order == [b"high1", b"high2", b"mid1", b"mid2", b"low1", b"low2"]


def test_past_the_queue_cap_urls_are_spilled_marked_seen_and_kept(redis_client: redis.Redis) -> None:
    f = make(redis_client, domain_cap=3)
    result = f.add([item(f"hot{i}", "hot.test") for i in range(10)] + [item("cold", "cold.test")])
    assert (result.added, result.spilled) == (11, 7)
    assert int(redis_client.hget("crawler:{t:0}:stats", "spilled")) == 7
    assert redis_client.hget("crawler:{t:0}:stats", "capped") is None
    # spilled URLs are admitted: offered again, they are duplicates
    assert f.add([item(f"hot{i}", "hot.test") for i in range(3, 6)]).duplicates == 3
    got = []
    while len(got) < 11:
        got += drain(f)
        f.tiers.run()
    assert sorted(got) == sorted([f"hot{i}".encode() for i in range(10)] + [b"cold"])


def test_one_domain_cannot_starve_the_others(redis_client: redis.Redis) -> None:
    f = make(redis_client, politeness=Politeness(delay=60))
    f.add([item(f"hot{i}", "hot.test") for i in range(1000)] + [item("c1", "c1.test"), item("c2", "c2.test")])
    got = f.take(10)
    assert sorted(x.domain for x in got.items) == ["c1.test", "c2.test", "hot.test"]


def test_minimum_delay_on_the_server_clock(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, politeness=Politeness(delay=0.3), clock=clock)
    f.add([item(f"u{i}") for i in range(3)])
    stamps, acks = [], []
    for _ in range(1000):  # a call every ms
        got = f.take(10, acks)  # each request is done at once: acknowledged with the next call
        acks = []
        assert len(got.items) <= 1
        if got.items:
            stamps.append(got.now_ms)
            acks = [got.items[0].lease]
        if len(stamps) == 3:
            break
        clock.advance(0.001)
    # acknowledged 1 ms after its lease (the next call), marked 1 ms late, then the 300 ms delay
    assert [b - a for a, b in pairwise(stamps)] == [302, 302]
    counters = f.status()["counters"]
    assert counters.get("denials", 0) == 0  # nothing was popped and pushed back


def test_a_domain_is_parked_until_its_request_is_done(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, politeness=Politeness(delay=0.3), clock=clock)
    f.add([item(f"u{i}") for i in range(3)] + [item("other", "other.test")])
    first = f.take(10)
    assert sorted(x.domain for x in first.items) == ["a.test", "other.test"]
    lease = next(x.lease for x in first.items if x.domain == "a.test")
    clock.advance(0.5)  # longer than the delay: still parked, its request is out
    assert f.take(10).items == []
    assert redis_client.zscore(f.keys.ready, "a.test") is None
    # done 250 ms ago (the worker's clock): due 50 ms (and the 1 ms mark) after the acknowledgement
    acked = f.take(10, [Ack(lease, clock.monotonic() - 0.25)])
    assert acked.items == []
    assert acked.next_due_ms - acked.now_ms == 51
    clock.advance(0.05)
    assert f.take(10).items == []  # 1 ms early
    clock.advance(0.001)
    again = f.take(10)
    assert [x.domain for x in again.items] == ["a.test"]
    # a lease that expires unparks its domain too, the delay running from then
    f.take(10, [again.items[0].lease])
    clock.advance(0.301)
    f.lease_ms = 100
    lost = f.take(10)  # its worker dies: never acknowledged
    assert [x.domain for x in lost.items] == ["a.test"]
    assert redis_client.hget(f.keys.dom("a.test"), "busy") == lost.items[0].lease.encode()
    clock.advance(0.099)
    f.take(0)
    assert redis_client.hget(f.keys.dom("a.test"), "busy") is not None  # 1 ms before its deadline
    clock.advance(0.001)
    expired = f.take(0)  # returns the expired lease to its queue
    assert redis_client.hget(f.keys.dom("a.test"), "busy") is None
    assert redis_client.zscore(f.keys.ready, "a.test") - expired.now_ms == 300


def test_token_bucket_burst_then_rate(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, politeness=Politeness(rate=5, burst=3), clock=clock)
    f.add([item(f"u{i}") for i in range(6)])
    first = f.take(10)
    assert len(first.items) == 3  # the burst
    assert first.next_due_ms - first.now_ms == 200
    t0, stamps = first.now_ms, []
    for _ in range(1000):  # a call every ms
        clock.advance(0.001)
        got = f.take(10)
        stamps += [got.now_ms - t0] * len(got.items)
        if len(stamps) == 3:
            break
    assert stamps == [200, 400, 600]  # then one token every 1 / rate seconds


def test_overrides_from_settings_and_live_from_redis(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, politeness=Politeness(delay=0), overrides={"slow.test": {"delay": 60}}, clock=clock)
    f.add([item(f"s{i}", "slow.test") for i in range(3)] + [item(f"f{i}", "fast.test") for i in range(3)])
    got = f.take(10)
    assert [x.domain for x in got.items].count("slow.test") == 1
    assert [x.domain for x in got.items].count("fast.test") == 3
    f.set_policy("slow.test", delay=0)  # an operator lifts it while the crawl runs
    slow = next(x.lease for x in got.items if x.domain == "slow.test")
    assert f.take(10, [slow]).next_due_ms == clock.ms() + 1  # once its request is done, no delay
    clock.advance(0.001)
    assert len(f.take(10).items) == 2


def test_robots_crawl_delay_raises_the_delay(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, politeness=Politeness(delay=0), clock=clock)
    f.set_robots_delay("a.test", 30)
    f.add([item(f"u{i}") for i in range(3)])
    got = f.take(10)
    assert len(got.items) == 1 and got.next_due_ms is None  # parked while its request is out
    done = f.take(10, [Ack(got.items[0].lease, clock.monotonic())])
    assert done.next_due_ms - done.now_ms == 30_001


def test_a_retried_dequeue_returns_the_same_leases(redis_client: redis.Redis) -> None:
    f = make(redis_client, politeness=Politeness(delay=1))
    f.add([item(f"u{i}", f"d{i}.test") for i in range(4)])
    first = f.take(2, call="c1")  # its reply lost on the way, say: the client sends it again
    again = f.take(2, call="c1")
    assert [x.lease for x in again.items] == [x.lease for x in first.items] and len(first.items) == 2
    assert redis_client.zcard(f.keys.leases) == 2  # nothing taken twice, no lease without a worker
    assert redis_client.exists(f"{f.keys.base}:call:c1")
    other = f.take(10, call="c2", previous="c1")  # c1's reply arrived: its copy goes
    assert len(other.items) == 2 and {x.lease for x in other.items}.isdisjoint(x.lease for x in first.items)
    assert redis_client.keys(f"{f.keys.base}:call:*") == [f"{f.keys.base}:call:c2".encode()]


def test_a_kept_reply_outlives_a_cut_longer_than_two_minutes(redis_client: redis.Redis, clock: ManualClock) -> None:
    # leases of 5 minutes; the worker's reply is lost and its retry comes
    # 121 s later (a Redis outage): its leases are still held, and so is the
    # reply that names them, else the retry takes others and the first are
    # held by nobody until they expire
    f = make(redis_client, lease_seconds=300, clock=clock)
    f.add([item(f"u{i}", f"d{i}.test") for i in range(4)])
    first = f.take(2, call="c1")
    kept = f"{f.keys.base}:call:c1"
    ttl = redis_client.pttl(kept)
    assert 300_000 < ttl <= 301_000  # as long as its leases, and a second
    clock.advance(121)  # the frontier's clock moves; the kept reply's expiry runs on Redis's own:
    redis_client.pexpire(kept, ttl - 121_000)  # moved by as much
    again = f.take(2, call="c1")
    assert [x.lease for x in again.items] == [x.lease for x in first.items] and len(first.items) == 2
    assert redis_client.zcard(f.keys.leases) == 2


def test_a_reply_is_not_kept_past_its_leases(redis_client: redis.Redis) -> None:
    f = make(redis_client, lease_seconds=2)
    f.add([item("u0")])
    f.take(1, call="c1")
    assert 2_000 < redis_client.pttl(f"{f.keys.base}:call:c1") <= 3_000  # a retry then finds its leases expired


def test_a_retry_after_its_leases_ran_out_hands_out_none_of_them(redis_client: redis.Redis,
                                                                 clock: ManualClock) -> None:
    # the kept reply is still there (Redis's own clock), but its leases ran out
    # on the frontier's clock: another worker's dequeue requeues and leases them
    # again, so a late retry must not hand them out a second time
    f = make(redis_client, lease_seconds=2, politeness=Politeness(delay=0), clock=clock)
    f.add([item("u0", "d0.test"), item("u1", "d1.test")])
    first = f.take(2, call="c1")
    clock.advance(1)
    assert [x.lease for x in f.take(2, call="c1").items] == [x.lease for x in first.items]  # still its own
    clock.advance(1)
    other = f.take(2, call="c2")  # another worker: the expired leases go back and out to it
    assert sorted(x.entry for x in other.items) == [b"u0", b"u1"]
    late = f.take(2, call="c1")
    assert late.items == [] and redis_client.zcard(f.keys.leases) == 2


def test_expired_leases_go_back_to_the_front(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, lease_seconds=0.3, clock=clock)
    f.add([item("first"), item("second")])
    leased = f.take(1)
    assert [x.entry for x in leased.items] == [b"first"]
    assert f.pending() == 2
    clock.advance(0.299)
    f.take(0)
    assert "leases_expired" not in f.status()["counters"]  # 1 ms before its deadline
    clock.advance(0.001)
    again = f.take(1)  # any worker's dequeue returns expired leases
    assert [x.entry for x in again.items] == [b"first"]
    assert f.status()["counters"]["leases_expired"] == 1


def test_one_call_acknowledges_each_held_lease_once(redis_client: redis.Redis, clock: ManualClock) -> None:
    """An acknowledgement call reads and drops its leases in one go: a lease
    named twice counts once, one not held is void, each parked domain waits
    its own delay from its own mark."""
    f = make(redis_client, politeness=Politeness(delay=1.0), clock=clock)
    f.add([item(f"https://{d}/{i}", d) for d in ("a.test", "b.test", "c.test") for i in range(2)])
    first = {x.domain: x.lease for x in f.take(10).items}
    assert sorted(first) == ["a.test", "b.test", "c.test"]  # one a domain: each parked
    a, b, c = first["a.test"], first["b.test"], first["c.test"]
    result = f.add([], acks=[f"{a}:0:0:s", f"{b}:600:0:s", f"{a}:0:0:s", "999999", f"{c}:0:0:d"])
    assert result.acked == 3
    counters = f.status()["counters"]
    assert (counters["acked"], counters["end_stored"], counters["end_dead"]) == (3, 2, 1)
    assert f.add([], acks=[a, b]).acked == 0  # held no more
    clock.advance(0.5)  # b.test's mark was 600 ms back: its delay is over
    assert [x.domain for x in f.take(10).items] == ["b.test"]
    clock.advance(0.6)
    assert sorted(x.domain for x in f.take(10).items) == ["a.test", "c.test"]


def test_lease_ids_follow_each_other_across_takes(redis_client: redis.Redis, clock: ManualClock) -> None:
    """A take reserves the ids it may give and gives the counter back what
    it did not use: ids follow each other, and the counter names the last."""
    f = make(redis_client, clock=clock)
    f.add([item(f"https://{d}/0", d) for d in ("a.test", "b.test", "c.test")])
    first = [int(x.lease) for x in f.take(2).items]
    second = [int(x.lease) for x in f.take(100).items]
    assert first + second == list(range(first[0], first[0] + 3))
    assert int(redis_client.get(f.keys.key("seq"))) == second[-1]


@pytest.mark.parametrize("ack", ["{}::400", "{}::400:s", "{}:0:400:zz"], ids=["no-end", "stored", "unknown-end"])
def test_a_fetchs_duration_stretches_its_domains_delay_whatever_else_the_ack_says(
        redis_client: redis.Redis, clock: ManualClock, ack: str) -> None:
    f = make(redis_client, politeness=Politeness(delay=0.1, factor=2.0), clock=clock)
    f.add([item(f"https://a.test/{i}") for i in range(2)])
    (first,) = f.take(5).items
    assert f.add([], acks=[ack.format(first.lease)]).acked == 1
    clock.advance(0.7)  # 2 x 400 ms from the mark, not the 100 ms delay
    assert f.take(5).items == []
    clock.advance(0.11)
    assert [x.entry for x in f.take(5).items] == [b"https://a.test/1"]
    assert f.status()["counters"]["delays_stretched"] == 1


def test_acknowledged_leases_never_come_back(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, lease_seconds=0.2, clock=clock)
    f.add([item("only")])
    leased = f.take(5)
    assert f.add([], acks=[leased.items[0].lease]).acked == 1
    clock.advance(0.25)
    assert f.take(5).items == [] and f.pending() == 0


def test_release_hands_back_immediately(redis_client: redis.Redis) -> None:
    f = make(redis_client)
    f.add([item("a"), item("b")])
    leased = f.take(5)
    assert f.release([x.lease for x in leased.items]) == 2
    assert [x.entry for x in f.take(5).items] == [b"a", b"b"]


def test_delayed_requests_wait_on_the_server_clock(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock=clock)
    f.add([item("retry-me")])
    leased = f.take(1).items[0]
    assert f.delay([(0.4, leased.domain, leased.priority, leased.entry)], acks=[leased.lease]) == 1
    assert f.status()["leases"] == 0 and f.status()["delayed"] == 1
    clock.advance(0.399)
    assert f.take(1).items == []
    clock.advance(0.001)
    got = f.take(1)
    assert [x.entry for x in got.items] == [b"retry-me"]


def test_a_retry_of_a_lease_that_expired_is_void(redis_client: redis.Redis, clock: ManualClock) -> None:
    """A worker frozen past its lease wakes and retries its request: the
    lease went back to its queue (another worker may have stored the page),
    so the retry parks nothing, as a late acknowledgement ends nothing."""
    f = make(redis_client, lease_seconds=0.3, clock=clock)
    f.add([item("page")])
    stale = f.take(1).items[0]
    clock.advance(0.3)
    again = f.take(1).items  # the expired lease back in its queue, leased anew
    assert [x.entry for x in again] == [b"page"]
    retry = (0, stale.domain, stale.priority, stale.entry, stale.lease)
    assert f.delay([retry], acks=[stale.lease]) == 0
    assert f.status()["delayed"] == 0 and f.status()["counters"]["delay_void"] == 1
    # the held lease's retry parks, as before
    held = again[0]
    assert f.delay([(0, held.domain, held.priority, held.entry, held.lease)], acks=[held.lease]) == 1
    assert f.status()["delayed"] == 1 and f.status()["leases"] == 0


def test_push_domain_back(redis_client: redis.Redis) -> None:
    f = make(redis_client)
    f.add([item("a1"), item("a2"), item("b1", "b.test")])
    f.push_domain("a.test", 30)
    assert [x.domain for x in f.take(10).items] == ["b.test"]


def test_batches_are_one_round_trip(redis_client: redis.Redis) -> None:
    f = make(redis_client)
    # a script's first call on a server is refused (NOSCRIPT) and sent again
    # once loaded: one add, take and acknowledgement first, so that the test
    # counts the same calls whichever tests this server ran before it
    f.add([item("warm", "warm.test")])
    f.add([], acks=[x.lease for x in f.take(1).items])
    before = evalsha_calls(redis_client)
    f.add([item(f"u{i}", f"d{i % 50}.test") for i in range(2000)])
    taken = f.take(50)
    assert len(taken.items) == 50
    f.add([], acks=[x.lease for x in taken.items])
    assert evalsha_calls(redis_client) - before == 3


def test_clear_touches_only_this_frontier(redis_client: redis.Redis) -> None:
    redis_client.set("someone:else", "keep")
    mine, other = make(redis_client, "mine"), make(redis_client, "other")
    mine.add([item("x")])
    other.add([item("y")])
    assert mine.clear() > 0
    assert redis_client.get("someone:else") == b"keep"
    assert other.pending() == 1 and mine.pending() == 0
    assert all(k.startswith(b"crawler:{") for k in redis_client.keys("*") if k != b"someone:else")


def test_keys_share_one_hash_tag() -> None:
    keys = Keys("crawler", "billion", 3)
    assert keys.base == "crawler:{billion:3}"
    assert keys.dom("x.com").startswith("crawler:{billion:3}:")
    with pytest.raises(ValueError):
        Keys("crawler", "bad{name}", 0)


@pytest.mark.parametrize("manual", [False, True], ids=["server-clock", "manual-clock"])
def test_script_errors_name_their_own_file_and_line(redis_client: redis.Redis, clock: ManualClock,
                                                    manual: bool) -> None:
    # a manual clock's key is written into one line of _lib.lua: the lines still map
    scripts = Scripts(redis_client, clock.script_key if manual else None)
    lua = ROOT / "lua"
    cases = ((["x", 1000, 0, 1, 0, "", "", 0], "dequeue.lua", "want"),  # a count that is not a number
             ([10, 1000, 0, 1, 0, "", "", "y"], "_lib.lua", "for i = 1, n"))  # a list length that is not
    for args, filename, text in cases:
        with pytest.raises(redis.ResponseError) as caught:
            scripts.dequeue(keys=["crawler:{t:0}"], args=args)
        found = re.search(rf"{re.escape(filename)}:(\d+)", str(caught.value))
        assert found, str(caught.value)
        assert text in (lua / filename).read_text().splitlines()[int(found.group(1)) - 1]
        assert "user_script" not in str(caught.value)


def test_enqueue_names_what_it_did_not_mark_seen(redis_client: redis.Redis) -> None:
    f = make(redis_client, domain_budget=2)
    redis_client.sadd(f.keys.excluded, "gone.test")
    result = f.add([item("hot0", "hot.test"), item("hot1", "hot.test"), item("hot2", "hot.test"),
                    item("old", "gone.test"), item("cold", "cold.test"), item("cold", "cold.test"),
                    item("forced", "cold.test", dont_filter=True)])
    # the third hot URL is over budget, gone.test is excluded; the duplicate is
    # seen, and a dont_filter request is never a question of seen
    assert result.unseen == (3, 4)


def test_links_marked_seen_are_not_sent_again(redis_client: redis.Redis) -> None:
    f = make(redis_client, domain_budget=3)
    recent = Recent(1000)
    writes = WriteBuffer(f, Outbox(Settings(), redis_client, None, "t", None), None, 100, 1.0, lambda: None,  # type: ignore[arg-type]
                         recent=recent)
    hot = [item(f"hot{i}", "hot.test") for i in range(5)]
    for offered in [*hot, item("cold", "cold.test"), item("forced", "cold.test", dont_filter=True)]:
        writes.add(offered)
    assert writes.flush() is not None
    # URLs over budget are not remembered: offered again once it is raised, they are taken
    assert [x.digest in recent for x in hot] == [True, True, True, False, False]
    assert item("cold").digest in recent and item("forced").digest not in recent


def test_recent_links_are_kept_in_two_generations() -> None:
    recent = Recent(2)
    recent.mark([item("a"), item("b")], ())
    assert item("a").digest in recent  # the newer generation filled: now the older
    recent.mark([item("c")], ())
    assert item("a").digest in recent and item("c").digest in recent
    recent.mark([item("d")], ())  # the newer filled again: the oldest is dropped
    assert item("a").digest not in recent and item("c").digest in recent and item("d").digest in recent
    # what a full garbage collection would visit, digest by digest: nothing
    assert not any(gc.is_tracked(generation) for generation in (recent.new, recent.old))


def open_scheduler(redis_url: str, **settings: object) -> tuple[Crawler, FrontierScheduler]:
    """A frontier scheduler opened on a real Redis, under an engine that never starts."""
    crawler = crawler_for(redis_url, **settings)
    scheduler = FrontierScheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    return crawler, scheduler


def test_links_known_in_the_process_are_left_out_before_they_are_checked(redis_url: str) -> None:
    from crawler.worker import session_of as frontier_service

    crawler, scheduler = open_scheduler(redis_url)
    try:
        service = frontier_service(crawler)
        assert service is not None
        old = [f"http://a.test/{i}" for i in range(3)]
        assert service.unknown(old) == old  # nothing marked seen yet
        assert service.offer(old, canonical=True) == 3
        scheduler.session.flush()
        new = ["http://a.test/new", "http://b.test/"]
        assert service.unknown([old[0], *new, old[2]]) == new
        assert crawler.stats.get_value("crawler/frontier/duplicates_local") == 2
        assert service.offer(new, canonical=True) == 2
    finally:
        scheduler.close("finished")


def test_the_engine_gets_at_most_turn_max_requests_in_one_turn_of_the_loop(redis_url: str) -> None:
    import asyncio

    from crawler.scheduler import scheduler as module

    _, scheduler = open_scheduler(redis_url, CRAWLER_PREFETCH=200)
    urls = [f"http://d{i}.test/" for i in range(module.TURN_MAX + 20)]  # one domain each: all due now
    scheduler.session.offer(urls, canonical=True)
    scheduler.session.flush()

    async def turns() -> list[int]:
        got = []
        for _ in range(3):  # each pass is one callback, as the engine's turn is
            n = 0
            while scheduler.next_request() is not None:
                n += 1
            got.append(n)
            await asyncio.sleep(0)  # the loop turns
        return got

    try:
        got = asyncio.run(turns())
        assert got == [module.TURN_MAX, 20, 0]
        assert scheduler.session._waker.call is not None and scheduler.session._waker.call.active()  # woken for the rest
    finally:
        scheduler.close("finished")
