"""Per-address politeness in the frontier's scripts (``lua/dequeue.lua``,
``lua/dns_done.lua``, ``ip_release`` in ``lua/_lib.lua``): a request goes
only when its domain is due and an address of its host is free and due;
names are looked up once for the crawl and kept beside the queues.

Time is a :class:`~crawler.clock.ManualClock` the scripts read too; marks
are placed 1 ms late (``_lib.lua``). Real Redis; the crawls against a test
web on many loopback addresses are in ``test_address_crawl.py``.
"""

from __future__ import annotations

from hashlib import sha256

import redis

from crawler.clock import ManualClock
from crawler.store import AddressPoliteness, Frontier, Item, Keys, Lookup, Politeness
from crawler.store.codec import encode_url
from crawler.worker._leases import Ack


def item(url: str, domain: str) -> Item:
    return Item(sha256(url.encode()).digest(), domain, 0, encode_url(url))


def make(client: redis.Redis, clock: ManualClock, shard: int = 0, *, delay: float = 0.0, ip_delay: float = 1.0,
         **addresses: float) -> Frontier:
    f = Frontier(client, Keys("crawler", "t", shard), politeness=Politeness(delay=delay),
                 addresses=AddressPoliteness(delay=ip_delay, **addresses), clock=clock)  # type: ignore[arg-type]
    f.open()
    return f


def answer(f: Frontier, layout: dict[str, list[str]], lookups: list[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """Answer ``lookups`` from ``layout`` (host -> addresses; missing: NXDOMAIN)."""
    return f.answer([Lookup(host, domain, "ok", tuple(layout[host])) if host in layout else
                     Lookup(host, domain, "nx") for host, domain in lookups])


def test_a_name_is_looked_up_once_before_its_first_request(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    f.add([item(f"http://a.test/{i}", "a.test") for i in range(3)] + [item("http://b.test/", "b.test")])
    first = f.take(10)
    assert first.items == []  # nothing goes before its address is known
    assert sorted(first.lookups) == [("a.test", "a.test"), ("b.test", "b.test")]
    assert f.take(10).lookups == []  # claimed: asked of one worker only
    answer(f, {"a.test": ["127.1.0.1"], "b.test": ["127.1.0.2"]}, first.lookups)
    got = f.take(10)
    assert sorted((x.domain, x.address) for x in got.items) == [("a.test", "127.1.0.1"), ("b.test", "127.1.0.2")]
    assert redis_client.hget(f.keys.key("dns", "a.test"), "a") == b"127.1.0.1"


def test_one_request_at_a_time_per_address_and_the_delay_from_its_mark(redis_client: redis.Redis,
                                                                       clock: ManualClock) -> None:
    # three domains on one address, no domain delay: the address alone paces them
    f = make(redis_client, clock, ip_delay=1.0)
    f.add([item(f"http://{d}.test/{i}", f"{d}.test") for d in "abc" for i in range(2)])
    answer(f, {f"{d}.test": ["127.1.0.9"] for d in "abc"}, f.take(10).lookups)
    got = f.take(10)
    assert len(got.items) == 1 and got.items[0].address == "127.1.0.9"
    clock.advance(5)
    assert f.take(10).items == []  # its request is out: however long, nothing else goes there
    # done 250 ms ago: the address is due 750 ms (and the 1 ms mark) from now
    acked = f.take(10, [Ack(got.items[0].lease, clock.monotonic() - 0.25)])
    assert acked.items == []
    assert acked.next_due_ms - acked.now_ms == 751
    clock.advance(0.75)
    assert f.take(10).items == []  # 1 ms early
    clock.advance(0.001)
    again = f.take(10)
    assert len(again.items) == 1 and again.items[0].address == "127.1.0.9"
    status = redis_client.hgetall(f.address_base + ":ip:127.1.0.9")
    assert status[b"out"] == b"1" and status[b"served"] == b"2"


def test_waiting_domains_are_offered_the_address_in_turn(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, ip_delay=0.5)
    domains = [f"d{i}.test" for i in range(4)]
    f.add([item(f"http://{d}/{i}", d) for d in domains for i in range(2)])
    answer(f, {d: ["127.1.0.5"] for d in domains}, f.take(10).lookups)
    order, lease = [], None
    for _ in range(8):
        clock.advance(0.01)  # each answer takes 10 ms
        got = f.take(10, [Ack(lease, clock.monotonic())] if lease else [])
        while not got.items:
            clock.advance(0.5)
            got = f.take(10)
        assert len(got.items) == 1
        order.append(got.items[0].domain)
        lease = got.items[0].lease
    assert sorted(order) == sorted(domains * 2)  # every request went, one at a time
    assert set(order[:4]) == set(domains)  # each domain had its turn before any had a second
    assert f.take(10, [Ack(lease, clock.monotonic())]).items == []
    assert int(redis_client.hget(f.address_base + ":stats", "ip_waiting")) == 0


def test_a_domain_delay_and_an_address_delay_both_hold(redis_client: redis.Redis, clock: ManualClock) -> None:
    # a.test (delay 3 s) and b.test share 127.1.0.1 (1 s): a.test waits for its own turn too
    f = make(redis_client, clock, delay=3.0, ip_delay=1.0)
    f.add([item(f"http://a.test/{i}", "a.test") for i in range(2)] + [item(f"http://b.test/{i}", "b.test")
                                                                       for i in range(2)])
    answer(f, {"a.test": ["127.1.0.1"], "b.test": ["127.1.0.1"]}, f.take(10).lookups)
    stamps: dict[str, list[int]] = {"a.test": [], "b.test": []}
    acks: list[Ack] = []
    for _ in range(10_000):
        got = f.take(10, acks)
        acks = [Ack(x.lease, clock.monotonic()) for x in got.items]  # each done at once
        for x in got.items:
            stamps[x.domain].append(got.now_ms)
        if sum(map(len, stamps.values())) == 4:
            break
        clock.advance(0.01)
    every = sorted(t for ts in stamps.values() for t in ts)
    assert all(b - a >= 1001 for a, b in zip(every, every[1:]))  # the address's delay
    assert stamps["a.test"][1] - stamps["a.test"][0] >= 3001  # the domain's own


def test_a_name_with_several_addresses_uses_each(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, ip_delay=10.0)
    f.add([item(f"http://m.test/{i}", "m.test") for i in range(3)])
    answer(f, {"m.test": ["127.1.0.1", "127.1.0.2"]}, f.take(10).lookups)
    first = f.take(10).items
    second = f.take(10, [Ack(first[0].lease, clock.monotonic())]).items
    assert [x.address for x in first + second] == ["127.1.0.1", "127.1.0.2"]
    # both in their delay now: the third waits for the first to be due
    assert f.take(10, [Ack(second[0].lease, clock.monotonic())]).items == []
    clock.advance(10.001)
    third = f.take(10).items
    assert [x.address for x in third] == ["127.1.0.1"]


def test_an_expired_lease_frees_its_address(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, ip_delay=1.0)
    f.lease_ms = 1000
    f.add([item(f"http://a.test/{i}", "a.test") for i in range(2)])
    answer(f, {"a.test": ["127.1.0.1"]}, f.take(10).lookups)
    lost = f.take(10).items  # its worker dies
    assert len(lost) == 1
    clock.advance(1.0)
    f.take(0)  # the lease expires: its request goes back, the address's delay runs from now
    assert int(redis_client.hget(f.address_base + ":ip:127.1.0.1", "out")) == 0
    clock.advance(1.0)
    again = f.take(10).items
    assert [x.entry for x in again] == [lost[0].entry]


def test_released_leases_free_their_addresses(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, ip_delay=1.0)
    f.add([item("http://a.test/", "a.test")])
    answer(f, {"a.test": ["127.1.0.1"]}, f.take(10).lookups)
    taken = f.take(10).items
    assert f.release([taken[0].lease]) == 1
    assert int(redis_client.hget(f.address_base + ":ip:127.1.0.1", "out")) == 0


def test_one_address_space_for_every_shard_of_one_redis(redis_client: redis.Redis, clock: ManualClock) -> None:
    a, b = make(redis_client, clock, 0), make(redis_client, clock, 1)
    assert a.address_base == b.address_base
    a.add([item("http://a.test/", "a.test")])
    b.add([item("http://b.test/", "b.test")])
    answer(a, {"a.test": ["127.1.0.3"]}, a.take(10).lookups)
    answer(b, {"b.test": ["127.1.0.3"]}, b.take(10).lookups)
    first = a.take(10).items + b.take(10).items
    assert len(first) == 1  # one address: one request, whichever shard asked first
    waiting = b if first[0].domain == "a.test" else a
    owner = a if waiting is b else b
    owner.take(10, [Ack(first[0].lease, clock.monotonic())])
    clock.advance(1.001)
    owner.take(0)  # any shard's call offers the address to the other shard's waiting domain
    assert len(waiting.take(10).items) == 1


def test_missing_names_end_as_dead_letters_after_the_retries(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, nx_retries=2)
    f.add([item(f"http://gone.test/{i}", "gone.test") for i in range(3)])
    waits = []
    for _ in range(3):  # the first lookup and 2 retries
        lookups = f.take(10).lookups
        assert lookups == [("gone.test", "gone.test")]
        answer(f, {}, lookups)
        got = f.take(10)
        if got.items:
            break
        waits.append(got.next_due_ms - got.now_ms)
        clock.advance(waits[-1] / 1000)
    assert waits == [1000, 4000]  # 1 s, then 4 s between lookups
    assert sorted(x.address for x in got.items) == ["!nx"] * 3  # every URL, at once, unsent
    assert f.status()["counters"]["queued"] == 0


def test_a_failed_renewal_keeps_the_known_addresses_a_while(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, ttl=60.0, ip_delay=0.001)
    f.add([item(f"http://k.test/{i}", "k.test") for i in range(2)])
    answer(f, {"k.test": ["127.1.0.1"]}, f.take(10).lookups)
    first = f.take(10).items
    clock.advance(60)
    lookups = f.take(10, [Ack(first[0].lease, clock.monotonic() - 1)]).lookups
    f.answer([Lookup(host, d, "retry") for host, d in lookups])  # DNS is away: the crawl goes on
    assert [x.address for x in f.take(10).items] == ["127.1.0.1"]


def test_a_failed_lookup_postpones_and_loses_nothing(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    f.add([item("http://slow.test/", "slow.test")])
    lookups = f.take(10).lookups
    f.answer([Lookup("slow.test", "slow.test", "retry")])
    for _ in range(5):
        got = f.take(10)
        assert got.items == [] and got.next_due_ms is not None
        clock.advance((got.next_due_ms - got.now_ms) / 1000)
        if f.take(10).lookups:
            break
    else:
        raise AssertionError("never looked up again")
    answer(f, {"slow.test": ["127.1.0.1"]}, lookups)
    assert [x.address for x in f.take(10).items] == ["127.1.0.1"]


def test_an_unanswered_lookup_is_claimed_again(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, claim=5.0)
    f.add([item("http://a.test/", "a.test")])
    assert f.take(10).lookups  # the worker that claimed it dies
    clock.advance(4.999)
    assert f.take(10).lookups == []
    clock.advance(0.001)
    assert f.take(10).lookups == [("a.test", "a.test")]  # the claim ran out: its domain is claimed again


def test_refused_names_stay_refused(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, ttl=1.0)
    f.add([item(f"http://in.test/{i}", "in.test") for i in range(2)])
    f.answer([Lookup(host, d, "refused") for host, d in f.take(10).lookups])
    assert [x.address for x in f.take(10).items] == ["!refused", "!refused"]
    f.add([item("http://in.test/later", "in.test")])
    clock.advance(10)  # past its TTL: still refused, never looked up again
    got = f.take(10)
    assert got.lookups == [] and [x.address for x in got.items] == ["!refused"]


def test_a_name_that_moves_is_charged_to_its_new_address(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, ttl=60.0, ip_delay=0.001)
    f.add([item(f"http://mv.test/{i}", "mv.test") for i in range(3)])
    answer(f, {"mv.test": ["127.1.0.1"]}, f.take(10).lookups)
    first = f.take(10)
    assert [x.address for x in first.items] == ["127.1.0.1"]
    clock.advance(60)
    renewing = f.take(10, [Ack(first.items[0].lease, clock.monotonic() - 1)])
    # the TTL ran out: looked up again before the next request goes
    assert renewing.lookups == [("mv.test", "mv.test")] and renewing.items == []
    answer(f, {"mv.test": ["127.1.0.2"]}, renewing.lookups)
    moved = f.take(10)
    assert [x.address for x in moved.items] == ["127.1.0.2"]
    assert int(redis_client.hget(f.address_base + ":stats", "ip_moves")) == 1
    assert redis_client.zscore(f.address_base + ":ipbusy", "127.1.0.1") == 0


def test_shared_front_ends_by_count_and_by_range(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, delay=5.0, ip_delay=1.0, shared_min=3, shared_delay=0.1, shared_cap=2)
    domains = [f"s{i}.test" for i in range(4)]
    f.add([item(f"http://{d}/{i}", d) for d in domains for i in range(2)])
    flips = answer(f, {d: ["127.1.0.7"] for d in domains}, f.take(10).lookups)
    assert flips == [("127.1.0.7", "domains", 4)]  # the 4th domain made it one, said once
    assert answer(f, {"s0.test": ["127.1.0.7"]}, [("s0.test", "s0.test")]) == []
    # two in flight at once, their starts 100 ms apart, each domain still one at a time
    first = f.take(10).items
    assert len(first) == 1
    clock.advance(0.1)
    second = f.take(10).items
    assert len(second) == 1 and second[0].domain != first[0].domain
    clock.advance(0.1)
    assert f.take(10).items == []  # the cap: 2 in flight
    # a range: shared at once, without counting
    flips = f.answer([Lookup("cdn.test", "cdn.test", "ok", ("127.2.0.1", "127.2.9.9"), shared=("127.2.0.1",))])
    assert flips == [("127.2.0.1", "range", 1)]  # the one inside the range, not the other


def test_off_by_default_nothing_is_resolved_or_charged(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, ip_delay=0.0)
    f.add([item("http://a.test/", "a.test")])
    got = f.take(10)
    assert got.lookups == [] and [x.address for x in got.items] == [""]
    assert not redis_client.exists(f.keys.key("leasea"))


def test_the_host_is_read_from_either_kind_of_entry(redis_client: redis.Redis, clock: ManualClock) -> None:
    from scrapy import Request, Spider

    from crawler.store.codec import encode

    class S(Spider):
        name = "s"

        def parse(self, response): ...

    spider = S()
    long_path = "/" + "p" * 300  # a URL longer than a short msgpack string
    entries = [
        Item(b"1" * 32, "a.test", 0, encode(Request("https://user@WWW.A.test:8443/x", callback=spider.parse), spider)),
        Item(b"2" * 32, "b.test", 0, encode(Request(f"http://b.test{long_path}", meta={"k": (1, 2)}), spider)),
        Item(b"3" * 32, "[::1]", 0, encode_url("http://[::1]:8080/")),
        Item(b"4" * 32, "192.0.2.1", 0, encode_url("http://192.0.2.1/")),
    ]
    f = make(redis_client, clock)
    f.add(entries)
    got = f.take(10)
    assert sorted(got.lookups) == [("b.test", "b.test"), ("www.a.test", "a.test")]
    # an address in the URL is charged as it is, without a lookup
    assert sorted(x.address for x in got.items) == ["192.0.2.1", "::1"]
    answer(f, {"www.a.test": ["192.0.2.10"], "b.test": ["192.0.2.11"]}, got.lookups)
    assert sorted(x.address for x in f.take(10).items) == ["192.0.2.10", "192.0.2.11"]


def test_clearing_one_shard_leaves_the_other_shards_turns(redis_client: redis.Redis, clock: ManualClock) -> None:
    # one Redis, two shards: one address space. Shard 1's domains wait on
    # addresses, one behind shard 0's own request; shard 0 then closes (not
    # persistent) and clears its frontier while shard 1 goes on
    a, b = make(redis_client, clock, 0), make(redis_client, clock, 1)
    a.add([item("http://a.test/", "a.test"), item("http://a2.test/", "a2.test")])
    b.add([item(f"http://{d}.test/", f"{d}.test") for d in ("b1", "b2", "b3")])
    answer(a, {"a.test": ["127.1.0.4"], "a2.test": ["127.1.0.4"]}, a.take(10).lookups)
    assert [x.address for x in a.take(10).items] == ["127.1.0.4"]  # never answered; the other waits
    answer(b, {"b1.test": ["127.1.0.3"], "b2.test": ["127.1.0.3"], "b3.test": ["127.1.0.4"]}, b.take(10).lookups)
    first = b.take(10).items
    assert [x.domain for x in first] in (["b1.test"], ["b2.test"])  # the other waits, and b3.test too
    a.clear()
    assert not redis_client.keys(f"{a.keys.base}:*")  # shard 0's keys are gone, its waiting domain too:
    assert redis_client.zrange(f"{a.address_base}:ipwait:127.1.0.4", 0, -1) == [f"{b.keys.base}\nb3.test".encode()]
    assert int(redis_client.hget(f"{a.address_base}:stats", "ip_waiting")) == 2  # b3 and b1 or b2
    b.take(0, [Ack(first[0].lease, clock.monotonic())])
    served = [x.domain for x in first]
    for _ in range(5):
        clock.advance(1.001)
        served += [x.domain for x in b.take(10).items]
    assert sorted(served) == ["b1.test", "b2.test", "b3.test"]  # shard 1's parked domains all went
    assert b.pending() == 2 and b.queued() == 0  # two leased, none left stranded in a queue


def test_the_last_shard_to_clear_takes_the_address_space(redis_client: redis.Redis, clock: ManualClock) -> None:
    a, b = make(redis_client, clock, 0), make(redis_client, clock, 1)
    for f in (a, b):
        f.add([item(f"http://s{f.keys.shard}.test/", f"s{f.keys.shard}.test")])
        answer(f, {f"s{f.keys.shard}.test": ["127.1.0.5"]}, f.take(10).lookups)
        f.take(10)
    a.clear()
    assert redis_client.keys(f"{a.address_base}:*")  # shard 1 goes on with it
    b.clear()
    assert redis_client.keys("crawler:{t:*") == []


def test_a_lease_given_back_without_its_record_frees_its_address(redis_client: redis.Redis,
                                                                 clock: ManualClock) -> None:
    # release.lua and an expiry give a lease up the same way (_lib.lua's
    # requeue_lease): the address is freed even when the lease's record is
    # missing (a damaged frontier), else it stays busy for good
    f = make(redis_client, clock, ip_delay=1.0)
    f.add([item("http://a.test/", "a.test"), item("http://b.test/", "b.test")])
    answer(f, {"a.test": ["127.1.0.6"], "b.test": ["127.1.0.6"]}, f.take(10).lookups)
    taken = f.take(10).items
    assert len(taken) == 1
    redis_client.hdel(f.keys.lease, taken[0].lease)
    assert f.release([taken[0].lease]) == 0  # nothing to give back
    assert int(redis_client.hget(f.address_base + ":ip:127.1.0.6", "out")) == 0
    clock.advance(1.001)
    assert len(f.take(10).items) == 1  # the other domain's turn comes
