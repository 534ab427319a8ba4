"""The in-link order within a domain (CRAWLER_WITHIN_ORDER = "inlinks",
docs/frontier.md): a queued request many links lead to is promoted, served
before its turn, and its queued copy dropped when it comes up; a promotion
of a request the queue gave already is refused, so no URL is fetched twice;
the ledger adds up. Real redis-server processes, a real billion crawl."""

from __future__ import annotations

import subprocess
import sys
from hashlib import sha256
from pathlib import Path

import redis

from crawler.clock import ManualClock
from crawler.store import Frontier, Item, Keys, Ledger, Politeness, Promotion
from crawler.worker._inlinks import InlinkSketch
from tests.servers import ROOT, scrapy_env


def make(client: redis.Redis, clock: ManualClock, within: str = "inlinks", **kwargs) -> Frontier:
    f = Frontier(client, Keys("crawler", "in", 0), politeness=Politeness(delay=0.001), within=within,
                 clock=clock, **kwargs)
    f.open()
    return f


def entry(domain: str, i: int) -> bytes:
    return f"U0 https://{domain}/{i}".encode()


def items(domain: str, start: int, n: int) -> list[Item]:
    return [Item(sha256(entry(domain, i)).digest(), domain, 0, entry(domain, i)) for i in range(start, start + n)]


def served(f: Frontier, clock: ManualClock, rounds: int = 200) -> list[bytes]:
    """Everything served, one request a take (each acknowledged at once), the tier's jobs run between."""
    got: list[bytes] = []
    for _ in range(rounds):
        taken = f.take(1)
        got += [x.entry for x in taken.items]
        f.add([], acks=[f"{x.lease}:0:0:s" for x in taken.items])  # ended stored
        clock.advance(0.002)
        if not taken.items and not f.tiers.run().jobs and not f.queued():
            break
    return got


def balanced(f: Frontier) -> Ledger:
    status = f.status()
    ledger = Ledger.from_status({**status, "counters": {k.decode(): int(v) for k, v in
                                                        f.client.hgetall(f.keys.stats).items()}})
    assert ledger.balanced, ledger.as_dict()
    return ledger


def test_a_promoted_request_is_served_first_and_its_queued_copy_dropped(redis_client: redis.Redis,
                                                                         clock: ManualClock) -> None:
    f = make(redis_client, clock)
    result = f.add(items("a.test", 0, 6))
    assert result.positions == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6}
    (outcome,) = f.add([], promotions=[Promotion("a.test", 0, entry("a.test", 4), 5)]).promoted
    assert outcome == ("promoted", 0)
    got = served(f, clock)
    assert got == [entry("a.test", i) for i in (4, 0, 1, 2, 3, 5)]  # once each, the promoted first
    ledger = balanced(f)
    assert ledger.admitted == 7 and ledger.ends["superseded"] == 1 and ledger.ends["stored"] == 6


def test_a_promotion_of_a_request_given_already_is_refused(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    f.add(items("a.test", 0, 4))
    taken = f.take(1)  # position 1 given
    f.add([], acks=[f"{x.lease}:0:0:s" for x in taken.items])
    outcomes = f.add([], promotions=[Promotion("a.test", 0, entry("a.test", 0), 1),   # served already
                                     Promotion("a.test", 0, entry("a.test", 2), 3),
                                     Promotion("a.test", 0, entry("a.test", 2), 3),   # twice
                                     Promotion("a.test", 0, entry("a.test", 9), 9),   # never given
                                     Promotion("b.test", 0, entry("b.test", 0), 1)]).promoted
    assert [o for o, _ in outcomes] == ["late", "promoted", "again", "unknown", "unknown"]
    assert outcomes[0][1] == 1  # what the queue had given: the worker stops counting up to it
    clock.advance(0.002)
    assert served(f, clock) == [entry("a.test", i) for i in (2, 1, 3)]
    stats = {k.decode(): int(v) for k, v in redis_client.hgetall(f.keys.stats).items()}
    assert (stats["promoted"], stats["promote_late"], stats["promote_again"], stats["superseded"]) == (1, 1, 1, 1)
    balanced(f)


def test_places_name_the_items_offered_whatever_the_order_of_their_domains(redis_client: redis.Redis,
                                                                            clock: ManualClock) -> None:
    # offered interleaved, sent grouped by domain and priority: each place still names its own item
    a, b = items("a.test", 0, 3), items("b.test", 0, 2)
    high = Item(sha256(b"U0 https://a.test/high").digest(), "a.test", 5, b"U0 https://a.test/high")
    forced = Item(a[0].digest, "a.test", 0, a[0].entry, dont_filter=True)
    f = make(redis_client, clock)
    f.add(items("a.test", 0, 1))  # a.test/0 seen: its copy offered again is a duplicate
    result = f.add([forced, a[0], b[0], a[1], high, b[1], a[2]])
    # a.test at priority 0 in the order offered, the dont_filter one first
    assert result.positions == {1: 2, 3: 1, 4: 3, 5: 1, 6: 2, 7: 4}
    assert result.added == 6 and result.duplicates == 1


def test_positions_hold_across_the_compact_tier_and_requests_put_back(redis_client: redis.Redis,
                                                                      clock: ManualClock) -> None:
    f = make(redis_client, clock, domain_cap=2, block=4)
    f.add(items("a.test", 0, 20))
    f.tiers.run()  # 18 past the head: blocks and a spill
    taken = f.take(1)  # position 1
    assert f.release([x.lease for x in taken.items]) == 1  # given back: to the head's front, no new position
    clock.advance(0.002)
    f.add([], promotions=[Promotion("a.test", 0, entry("a.test", 15), 16)])
    got = served(f, clock)
    assert got == [entry("a.test", 15)] + [entry("a.test", i) for i in range(20) if i != 15]
    balanced(f)


def test_positions_start_behind_what_was_queued_before_the_order_was_on(redis_client: redis.Redis,
                                                                        clock: ManualClock) -> None:
    before = make(redis_client, clock, within="fifo")
    before.add(items("a.test", 0, 3))
    assert before.add(items("a.test", 3, 1)).positions == {}  # fifo: none given
    after = make(redis_client, clock)  # turned on: a new generation
    assert after.add(items("a.test", 4, 2)).positions == {1: 5, 2: 6}
    after.add([], promotions=[Promotion("a.test", 0, entry("a.test", 5), 6)])
    assert served(after, clock) == [entry("a.test", i) for i in (5, 0, 1, 2, 3, 4)]
    balanced(after)


def test_an_excluded_domain_drops_its_promoted_requests_too(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    f.add(items("a.test", 0, 4) + items("b.test", 0, 2))
    f.add([], promotions=[Promotion("a.test", 0, entry("a.test", 3), 4)])
    f.exclude(["a.test"])
    assert served(f, clock) == [entry("b.test", 0), entry("b.test", 1)]
    assert f.add([], promotions=[Promotion("a.test", 0, entry("a.test", 2), 3)]).promoted == (("excluded", 0),)
    assert not [k for k in redis_client.scan_iter(match=f.keys.pattern()) if b":pq:" in k or b":sp:" in k]
    ledger = balanced(f)
    assert ledger.ends["excluded"] == 5


def test_the_sketch_promotes_the_most_linked_and_stops_at_what_was_served() -> None:
    sketch = InlinkSketch(counters=2, threshold=2)
    d = "a.test"
    assert sketch.sighted(d, 0, b"k1", 1, "https://a.test/1") is None  # count 1
    assert sketch.sighted(d, 0, b"k2", 2, "https://a.test/2") is None
    # full: k3 takes the lowest counter (1): count 2, inherited 1, 1 guaranteed
    assert sketch.sighted(d, 0, b"k3", 3, "https://a.test/3", depth=2) is None
    assert sketch.sighted(d, 0, b"k3", 3, "https://a.test/3", depth=2) == \
        Promotion(d, 0, b"U2 https://a.test/3", 3)  # 2 guaranteed: promoted
    assert sketch.sighted(d, 0, b"k3", 3, "https://a.test/3") is None  # once
    sketch.given(d, 0, 5)  # the queue gave its first 5: nothing at or below is counted again
    assert all(sketch.sighted(d, 0, b"k4", 4, "https://a.test/4") is None for _ in range(5))
    assert sketch.sighted(d, 1, b"k4", 4, "https://a.test/4") is None  # another priority counts on its own
    assert sketch.sighted(d, 1, b"k4", 4, "https://a.test/4") is not None
    small = InlinkSketch(domains=2)
    for name in ("a.test", "b.test", "c.test"):
        small.sighted(name, 0, b"k", 1, "https://x/")
    assert len(small) == 2  # the least recently sighted domain forgotten


def test_a_domain_gets_a_share_of_its_turns_promoted_the_best_first() -> None:
    """A site whose links lead everywhere would have most of its requests
    promoted: 1 + share x (requests its queue gave) at most, the counter of the
    highest guaranteed count first when one is allowed."""
    sketch = InlinkSketch(counters=8, threshold=2, share=1 / 3)
    d = "a.test"
    sighted = lambda k, n: [sketch.sighted(d, 0, k, 10 + int(k[1:]), f"https://a.test/{k.decode()}")
                            for _ in range(n)]
    assert sighted(b"k1", 2)[-1] is not None  # the first is allowed
    assert sighted(b"k2", 2) == [None, None] and sighted(b"k3", 4) == [None] * 4  # capped: they keep counting
    sketch.given(d, 0, 3)  # three given (positions 1-3): 1 + 1 promotions allowed
    promoted = sighted(b"k2", 1)[0]
    assert promoted is not None and promoted.position == 13  # k3, counted most, not k2 just sighted
    assert sighted(b"k2", 1) == [None]


def test_billion_promotes_what_links_lead_to_and_fetches_each_page_once(redis_url: str, make_web,
                                                                               tmp_path: Path) -> None:
    web = make_web(domains=1, pages=60, links=6, size_fixed=3000, private_share=0, cross_share=0, dup_share=0,
                   crawl_delay_share=0)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(web.url(0) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}", "-s", "CRAWLER_DOMAIN_DELAY=0.02",
         "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CRAWLER_KEY_PREFIX=inl", "-s", "CONCURRENT_REQUESTS=1"],
        cwd=ROOT, env=scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"), capture_output=True, text=True,
        timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    client = redis.Redis.from_url(redis_url)
    stats = {k.decode(): int(v) for k, v in client.hgetall("inl:{billion:0}:stats").items()}
    pages = [e.path for e in web.log() if e.path != "/robots.txt"]
    assert len(pages) == len(set(pages))  # each page once
    # every promoted copy fetched, every queued copy it overtook dropped; refused ones counted
    assert stats.get("promoted", 0) > 0 and stats["promoted"] == stats.get("superseded", 0)
    assert "'crawler/frontier/inlinks/promoted'" in result.stderr
    assert "adds up" in result.stderr


def test_the_process_remembers_each_requests_position_and_priority() -> None:
    from crawler.worker._recent import Recent

    recent = Recent(10)
    batch = [Item(bytes([i]) * 32, "a.test", prio, b"U0 x") for i, prio in enumerate((0, -3, 7, 2**19))]
    recent.mark(batch, unseen=(), positions={1: 5, 2: 6, 3: 70_000, 4: 8})
    assert [recent.position(i.digest) for i in batch] == [(5, 0), (6, -3), (70_000, 7), None]  # a priority too far
    recent.mark([Item(b"z" * 32, "a.test", 0, b"U0 z")], unseen=())  # fifo: none
    assert b"z" * 32 in recent and recent.position(b"z" * 32) is None


def test_only_links_to_the_pages_own_host_are_counted(redis_url: str, clock: ManualClock) -> None:
    from tests.servers import open_on

    scheduler = open_on(redis_url, clock, CRAWLER_WITHIN_ORDER="inlinks", CRAWLER_FLUSH_INTERVAL=10)
    try:
        session = scheduler.session
        session.offer(["https://a.test/1", "https://b.test/1"], canonical=True)
        session.flush()  # queued: their positions known to this process
        for _ in range(3):
            assert session.unknown(["https://a.test/1", "https://b.test/1"], depth=1, origin="https://a.test/") == []
        sketch = session._writes.inlinks
        assert "a.test" in sketch._by_domain and "b.test" not in sketch._by_domain
        promoted = session._writes.promotions
        assert [(p.domain, p.entry) for p in promoted] == [("a.test", b"U1 https://a.test/1")]
    finally:
        scheduler.close("finished")


def test_without_an_origin_each_link_counts_for_its_own_domain(redis_url: str, clock: ManualClock) -> None:
    """``unknown()`` called without the linking page's origin (another
    spider's links): the links found again are counted domain by domain."""
    from tests.servers import open_on

    scheduler = open_on(redis_url, clock, CRAWLER_WITHIN_ORDER="inlinks", CRAWLER_FLUSH_INTERVAL=10)
    try:
        session = scheduler.session
        session.offer(["https://a.test/1", "https://b.test/1", "https://a.test/2"], canonical=True)
        session.flush()
        for _ in range(2):
            assert session.unknown(["https://a.test/1", "https://b.test/1"], depth=1) == []
        sketch = session._writes.inlinks
        assert set(sketch._by_domain) == {"a.test", "b.test"}
        promoted = sorted((p.domain, p.entry) for p in session._writes.promotions)
        assert promoted == [("a.test", b"U1 https://a.test/1"), ("b.test", b"U1 https://b.test/1")]
    finally:
        scheduler.close("finished")
