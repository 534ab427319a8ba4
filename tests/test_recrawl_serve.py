"""Serving revisits (design/recrawl.md C.2, contract E): ``dequeue.lua``'s
``serve()`` picks each turn's source, a due revisit or the queue's head, by
the credit rule; the MIN guard; the re-arm; ``V`` entries through the same
lease, gate and parking as any request; expired and released ``V`` leases;
a domain's place in ``:ready`` with tracked URLs; the ledger.

The history records, due sets and the recrawl meta are written by the
history writes (``lua/_recrawl.lua``, not driven here): these tests seed them
directly with redis-py, as those writes lay them out (``crawler.recrawl.record``),
and drive ``dequeue.lua`` through :meth:`Frontier.take` on a real Redis, with a
:class:`~crawler.clock.ManualClock` (the scripts read its time).
"""

from __future__ import annotations

import random
from hashlib import sha256

import pytest
import redis
from scrapy import Request

from crawler.clock import ManualClock
from crawler.recrawl.record import History, Refers, key_of, pack
from crawler.store import AddressPoliteness, Frontier, Item, Keys, Lookup, Politeness
from crawler.store.codec import encode, encode_url
from crawler.store.keys import _read, _with_clock
from crawler.store.ledger import Ledger
from crawler.worker._leases import Ack

MIN = 3600  # s, rv_min
LEASE = 180.0  # s


def make(client: redis.Redis, clock: ManualClock, *, mode: str = "fixed", share: float = 0.5,
         delay: float = 0.0, ip_delay: float = 0.0, lease: float = LEASE, spider: str = "t") -> Frontier:
    f = Frontier(client, Keys("crawler", spider, 0), politeness=Politeness(delay=delay),
                 addresses=AddressPoliteness(delay=ip_delay), lease_seconds=lease, clock=clock)
    f.open()
    # what Frontier.open() writes from a Recrawl record (design/recrawl.md E), ms
    client.hset(f.keys.meta, mapping={"recrawl": mode, "rv_min": MIN * 1000, "rv_max": 30 * 86400 * 1000,
                                      "rv_share": repr(share)})
    return f


def item(url: str, domain: str = "a.test") -> Item:
    return Item(sha256(url.encode()).digest(), domain, 0, encode_url(url))


def k_of(url: str) -> str:
    return key_of(sha256(url.encode()).digest())


def track(client: redis.Redis, f: Frontier, url: str, domain: str = "a.test", *, last: int, due_ms: int,
          entry: bytes | None = None, etag: bytes = b"", refers: Refers | None = None, ready: bool = True) -> str:
    """A tracked URL as a history write leaves it: its record in hist:<d>, its
    due time in due:<d>, and (``ready``) base:rdue and the domain's place in
    base:ready as the write's ``revisit_ready`` sets them. Returns its k."""
    k = k_of(url)
    record = pack(History(entry=entry or encode_url(url), last=last, iv=86400, etag=etag, refers=refers))
    client.hset(f.keys.key("hist", domain), k, record)
    client.zadd(f.keys.key("due", domain), {k: due_ms})
    if ready:
        revisit_ready(client, f, domain)
    return k


def revisit_ready(client: redis.Redis, f: Frontier, domain: str) -> None:
    """``_lib.lua``'s ``revisit_ready``, as a history write calls it, run on this Redis."""
    lib = _with_clock(_read("_lib.lua"), f.clock.script_key)
    client.eval(lib + "\nrevisit_ready(KEYS[1], ARGV[1], now_ms())\nreturn 0", 2, f.keys.base, f.address_base,
                domain)


def old(clock: ManualClock) -> int:
    """A last visit (s) long enough ago for any revisit to go."""
    return int(clock.monotonic()) - 10 * MIN


def kinds(taken: list) -> str:
    return "".join("v" if x.entry[:1] == b"V" else "q" for x in taken)


def stat(client: redis.Redis, f: Frontier, name: str) -> int:
    return int(client.hget(f.keys.stats, name) or 0)


def ledger(f: Frontier) -> Ledger:
    return Ledger.from_status(f.status())


def both_waiting(client: redis.Redis, clock: ManualClock, f: Frontier, n: int) -> None:
    f.add([item(f"http://a.test/new/{i}") for i in range(n)])
    for i in range(n):
        track(client, f, f"http://a.test/old/{i}", last=old(clock), due_ms=clock.ms() - 1000 + i)


# --- the credit rule ----------------------------------------------------------


def test_share_half_alternates_within_one_turn(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, share=0.5)
    both_waiting(redis_client, clock, f, 100)
    seq = ""
    for _ in range(100):
        seq += kinds(f.take(1).items)
    assert len(seq) == 100
    for i in range(1, 101):
        assert abs(seq[:i].count("v") - 0.5 * i) <= 1, (i, seq)
    assert stat(redis_client, f, "revisits") == 50
    assert ledger(f).balanced
    # within one call the rule holds per request too
    g = make(redis_client, clock, share=0.5, spider="t2")
    both_waiting(redis_client, clock, g, 20)
    got = kinds(g.take(20).items)
    assert got.count("v") == 10 and "vv" not in got and "qq" not in got


@pytest.mark.parametrize("share", [0.1, 0.25, 0.3])
def test_other_shares_hold_within_one_turn(redis_client: redis.Redis, clock: ManualClock, share: float) -> None:
    f = make(redis_client, clock, share=share)
    both_waiting(redis_client, clock, f, 100)
    seq = "".join(kinds(f.take(1).items) for _ in range(100))
    for i in range(1, 101):
        assert abs(seq[:i].count("v") - share * i) <= 1, (i, seq)
    assert seq.count("v") == round(share * 100)


def test_share_zero_serves_revisits_only_when_no_new_url_waits(redis_client: redis.Redis,
                                                                clock: ManualClock) -> None:
    f = make(redis_client, clock, share=0.0)
    both_waiting(redis_client, clock, f, 10)
    assert kinds(f.take(10).items) == "q" * 10
    assert kinds(f.take(10).items) == "v" * 10  # the queue is empty: revisits take every turn


def test_share_one_puts_revisits_first(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, share=1.0)
    both_waiting(redis_client, clock, f, 10)
    assert kinds(f.take(10).items) == "v" * 10
    assert kinds(f.take(10).items) == "q" * 10  # no revisit is due: new URLs take every turn


def test_work_conservation_both_ways(redis_client: redis.Redis, clock: ManualClock) -> None:
    # revisits alone: every turn is theirs whatever the share
    f = make(redis_client, clock, share=0.0)
    for i in range(5):
        track(redis_client, f, f"http://a.test/{i}", last=old(clock), due_ms=clock.ms())
    assert kinds(f.take(10).items) == "vvvvv"
    # new URLs alone, share 1: every turn is theirs
    f = make(redis_client, clock, share=1.0, spider="t2")
    f.add([item(f"http://a.test/{i}") for i in range(5)])
    track(redis_client, f, "http://a.test/later", last=old(clock), due_ms=clock.ms() + 60_000)
    assert kinds(f.take(10).items) == "qqqqq"
    assert stat(redis_client, f, "revisits") == 0


# --- the revisit turn -----------------------------------------------------------


def test_a_revisit_is_leased_as_its_v_entry_and_re_armed(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    url = "http://a.test/page"
    k = track(redis_client, f, url, last=old(clock), due_ms=clock.ms())
    record = redis_client.hget(f.keys.key("hist", "a.test"), k)
    redis_client.hset(f.keys.key("rdom", "a.test"), "mu", "0.125")
    redis_client.hset(f.keys.key("rhost", "a.test"), mapping={"etag": clock.ms() + 1, "lm": clock.ms(),
                                                                "all": clock.ms() + 5000})
    got = f.take(10).items
    assert len(got) == 1
    assert got[0].entry == f"V{k}:5:0.125:".encode() + record  # etag and all distrusted; lm's time is up
    assert (got[0].domain, got[0].priority) == ("a.test", 0)
    assert redis_client.zscore(f.keys.key("due", "a.test"), k) == clock.ms() + LEASE * 1000 + MIN * 1000
    assert redis_client.zscore(f.keys.key("rdue"), "a.test") == clock.ms() + LEASE * 1000 + MIN * 1000
    assert stat(redis_client, f, "revisits") == 1
    assert stat(redis_client, f, "queued") == 0
    assert int(redis_client.hget(f.keys.dom("a.test"), "n") or 0) == 0
    ledger_now = ledger(f)
    assert (ledger_now.admitted, ledger_now.leased, ledger_now.balanced) == (1, 1, True)
    f.take(10, [Ack(got[0].lease, end="n")])
    done = ledger(f)
    assert (done.admitted, done.ends["not_modified"], done.leased, done.balanced) == (1, 1, 0, True)


def test_min_guard_a_recent_visit_is_never_leased(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    last = int(clock.monotonic()) - 10  # visited 10 s ago (a lost write's due, a lease given twice)
    k = track(redis_client, f, "http://a.test/recent", last=last, due_ms=clock.ms() - 1)
    f.add([item("http://a.test/new")])
    got = f.take(10).items
    assert kinds(got) == "q"  # the turn goes to the queue
    assert stat(redis_client, f, "rv_early") == 1
    assert redis_client.zscore(f.keys.key("due", "a.test"), k) == last * 1000 + MIN * 1000
    clock.advance(MIN - 10 - 0.001)
    assert f.take(10, [Ack(got[0].lease, end="s")]).items == []
    assert f.take(10).next_due_ms == last * 1000 + MIN * 1000
    clock.advance(0.001)
    assert kinds(f.take(10).items) == "v"
    assert stat(redis_client, f, "rv_early") == 1


def test_a_gone_record_leaves_the_schedule(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, share=1.0)
    k = track(redis_client, f, "http://a.test/gone", last=old(clock), due_ms=clock.ms())
    redis_client.hdel(f.keys.key("hist", "a.test"), k)
    f.add([item("http://a.test/new")])
    assert kinds(f.take(10).items) == "q"
    assert redis_client.zscore(f.keys.key("due", "a.test"), k) is None
    assert redis_client.zscore(f.keys.key("rdue"), "a.test") is None
    assert stat(redis_client, f, "revisits") == 0


def test_an_expired_revisit_goes_back_to_its_schedule_not_a_queue(redis_client: redis.Redis,
                                                                   clock: ManualClock) -> None:
    f = make(redis_client, clock, delay=2.0, lease=10)
    k = track(redis_client, f, "http://a.test/x", last=old(clock), due_ms=clock.ms())
    leased_at = clock.ms()
    assert kinds(f.take(10).items) == "v"
    assert redis_client.hget(f.keys.dom("a.test"), "busy") is not None  # parked like any lease
    clock.advance(10)
    after = f.take(10)  # the lease expired: taken back
    assert after.items == []
    assert stat(redis_client, f, "leases_expired") == 1
    assert stat(redis_client, f, "revisits") == 0 and stat(redis_client, f, "rv_expired") == 1
    assert stat(redis_client, f, "queued") == 0
    assert redis_client.exists(f.keys.key("qp", "a.test")) == 0
    assert redis_client.hget(f.keys.dom("a.test"), "busy") is None  # unparked
    rearmed = leased_at + 10_000 + MIN * 1000
    assert redis_client.zscore(f.keys.key("due", "a.test"), k) == rearmed
    assert redis_client.zscore(f.keys.ready, "a.test") == rearmed  # its next turn is its revisit's
    assert after.next_due_ms == rearmed
    status = ledger(f)
    assert (status.admitted, status.leased, status.queued, status.balanced) == (0, 0, 0, True)
    # no revisit before MIN after the lease ran out
    clock.advance(MIN - 0.001)
    assert f.take(10).items == []
    clock.advance(0.001)
    again = f.take(10).items
    assert kinds(again) == "v" and stat(redis_client, f, "revisits") == 1
    assert ledger(f).balanced


def test_a_released_revisit_waiting_in_its_queue_is_not_also_served_from_due(redis_client: redis.Redis,
                                                                               clock: ManualClock) -> None:
    """A revisit handed back waits at its queue's front, here longer than
    the lease + MIN it was re-armed for: it is leased once, from the queue,
    and re-armed then."""
    f = make(redis_client, clock, share=1.0, delay=LEASE + MIN + 60)
    k = track(redis_client, f, "http://a.test/x", last=old(clock), due_ms=clock.ms())
    first = f.take(10).items
    assert kinds(first) == "v"
    f.release([first[0].lease])
    due = f.keys.key("due", "a.test")
    assert redis_client.zscore(due, k) == clock.ms() + 30 * 86400 * 1000  # parked at MAX while queued
    clock.advance(LEASE + MIN + 61)
    again = f.take(10).items
    assert [x.entry for x in again] == [first[0].entry]
    assert redis_client.llen(f.keys.key("q", "a.test", "0")) == 0  # the queued copy is the one leased
    assert stat(redis_client, f, "queued") == 0 and stat(redis_client, f, "revisits") == 1
    assert redis_client.zscore(due, k) == clock.ms() + LEASE * 1000 + MIN * 1000  # re-armed as it is leased
    clock.advance(LEASE + MIN + 61)
    assert f.take(10).items == []  # that lease ran out unanswered: the domain's delay runs from then
    clock.advance(LEASE + MIN + 61)
    assert kinds(f.take(10).items) == "v"  # due again, once
    assert stat(redis_client, f, "revisits") == 1 and stat(redis_client, f, "rv_expired") == 1


def test_a_released_revisit_goes_to_the_front_of_its_queue(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, share=1.0, delay=2.0)
    k = track(redis_client, f, "http://a.test/x", last=old(clock), due_ms=clock.ms())
    f.add([item("http://a.test/new")])
    first = f.take(10).items
    assert kinds(first) == "v"
    assert f.release([first[0].lease]) == 1
    assert stat(redis_client, f, "queued") == 2 and stat(redis_client, f, "revisits") == 1
    assert redis_client.lindex(f.keys.key("q", "a.test", "0"), 0) == first[0].entry  # the front
    assert ledger(f).balanced
    clock.advance(2.001)  # the delay runs from the release
    again = f.take(10).items
    assert [x.entry for x in again] == [first[0].entry]  # leased again, as it was
    assert stat(redis_client, f, "queued") == 1 and stat(redis_client, f, "revisits") == 1
    assert redis_client.zscore(f.keys.key("due", "a.test"), k) == clock.ms() + LEASE * 1000 + MIN * 1000
    f.take(10, [Ack(again[0].lease, clock.monotonic(), end="s")])
    clock.advance(2.001)
    assert kinds(f.take(10).items) == "q"
    status = ledger(f)
    assert (status.admitted, status.ends["stored"], status.leased, status.balanced) == (2, 1, 1, True)


def test_the_ledger_adds_up_through_a_mixed_crawl(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, share=0.5, lease=30)
    f.add([item(f"http://a.test/new/{i}") for i in range(12)] + [item(f"http://b.test/{i}", "b.test")
                                                                   for i in range(4)])
    for i in range(12):
        track(redis_client, f, f"http://a.test/old/{i}", last=old(clock), due_ms=clock.ms())
    for i in range(4):
        track(redis_client, f, f"http://b.test/old/{i}", "b.test", last=old(clock), due_ms=clock.ms())
    ends = "snsdrkxlu"
    held: list[str] = []
    for turn in range(12):
        got = f.take(3, [Ack(lease, end=ends[(turn + i) % len(ends)]) for i, lease in enumerate(held[:2])]).items
        assert ledger(f).balanced, ledger(f).as_dict()
        if held[2:]:
            f.release(held[2:3])  # one handed back
            assert ledger(f).balanced, ledger(f).as_dict()
        held = [x.lease for x in got] + held[3:]
        clock.advance(1)
    clock.advance(60)  # the rest expire: revisits to their schedule, new URLs to their queues
    f.take(0)
    final = ledger(f)
    assert final.balanced, final.as_dict()
    assert final.leased == 0
    assert stat(redis_client, f, "revisits") > 0


# --- readiness ------------------------------------------------------------------


def test_a_domain_with_only_tracked_urls_is_ready_at_its_due_time(redis_client: redis.Redis,
                                                                  clock: ManualClock) -> None:
    f = make(redis_client, clock, delay=1.0)
    f.add([item("http://a.test/")])
    lease = f.take(10).items[0].lease
    # its visit is written (a history write: the record, due in 60 s) before the acknowledgement
    due = clock.ms() + 60_000
    track(redis_client, f, "http://a.test/", last=int(clock.monotonic()) - MIN, due_ms=due)
    revisit_ready(redis_client, f, "a.test")
    assert redis_client.zscore(f.keys.ready, "a.test") is None  # parked: the acknowledgement places it
    done = f.take(10, [Ack(lease, clock.monotonic(), end="s")])
    assert done.items == []
    assert redis_client.zscore(f.keys.ready, "a.test") == due
    assert done.next_due_ms == due
    clock.advance(59.999)
    assert f.take(10).items == []
    clock.advance(0.001)
    assert kinds(f.take(10).items) == "v"


def test_a_new_url_brings_forward_a_domain_ready_for_revisits_later(redis_client: redis.Redis,
                                                                    clock: ManualClock) -> None:
    f = make(redis_client, clock)
    track(redis_client, f, "http://a.test/old", last=old(clock), due_ms=clock.ms() + 600_000)
    revisit_ready(redis_client, f, "a.test")
    assert redis_client.zscore(f.keys.ready, "a.test") == clock.ms() + 600_000
    f.add([item("http://a.test/new")])
    assert redis_client.zscore(f.keys.ready, "a.test") == clock.ms()
    assert kinds(f.take(10).items) == "q"
    assert redis_client.zscore(f.keys.ready, "a.test") == clock.ms() + 600_000  # back to its revisit's turn


def test_an_idle_worker_is_told_when_the_next_revisit_comes_due(redis_client: redis.Redis,
                                                                clock: ManualClock) -> None:
    f = make(redis_client, clock)
    track(redis_client, f, "http://a.test/old", last=old(clock), due_ms=clock.ms() + 5000, ready=False)
    redis_client.zadd(f.keys.key("rdue"), {"a.test": clock.ms() + 5000})
    assert f.take(10).next_due_ms == clock.ms() + 5000  # from base:rdue: no ready entry was made


def test_recrawl_off_serves_nothing_tracked(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, mode="off", delay=1.0)
    f.add([item("http://a.test/")])
    lease = f.take(10).items[0].lease
    track(redis_client, f, "http://a.test/", last=old(clock), due_ms=clock.ms())
    track(redis_client, f, "http://b.test/", "b.test", last=old(clock), due_ms=clock.ms())
    revisit_ready(redis_client, f, "b.test")
    done = f.take(10, [Ack(lease, clock.monotonic(), end="s")])
    assert done.items == [] and done.next_due_ms is None
    assert redis_client.zcard(f.keys.ready) == 0
    redis_client.zadd(f.keys.ready, {"b.test": clock.ms()})  # put back by hand: still nothing served
    clock.advance(3600)
    assert f.take(10).items == []
    assert stat(redis_client, f, "revisits") == 0
    assert redis_client.zcard(f.keys.ready) == 0


# --- the gate, parking, host_of for V entries -------------------------------------


def answer(f: Frontier, layout: dict[str, list[str]], lookups: list[tuple[str, str]]) -> None:
    f.answer([Lookup(host, domain, "ok", tuple(layout[host])) for host, domain in lookups])


def test_the_gate_charges_a_revisit_to_its_hosts_address(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, delay=5.0, ip_delay=1.0)
    k = track(redis_client, f, "http://www.a.test/x", last=old(clock), due_ms=clock.ms())
    first = f.take(10)
    assert first.items == [] and first.lookups == [("www.a.test", "a.test")]  # the inner entry's host
    assert redis_client.zscore(f.keys.key("due", "a.test"), k) == clock.ms()  # nothing taken: not re-armed
    answer(f, {"www.a.test": ["127.1.0.7"]}, first.lookups)
    got = f.take(10).items
    assert kinds(got) == "v" and got[0].address == "127.1.0.7"
    assert redis_client.hget(f.keys.key("leasea"), got[0].lease) == b"127.1.0.7"
    assert redis_client.hget(f.keys.dom("a.test"), "busy") == got[0].lease.encode()
    assert redis_client.hget(f"{f.address_base}:ip:127.1.0.7", "out") == b"1"
    # another domain on the same address waits for it
    track(redis_client, f, "http://www.b.test/y", "b.test", last=old(clock), due_ms=clock.ms())
    answer(f, {"www.b.test": ["127.1.0.7"]}, f.take(10).lookups)
    assert f.take(10).items == []
    assert redis_client.zscore(f"{f.address_base}:ipwait:127.1.0.7", f"{f.keys.base}\nb.test") is not None
    # the revisit done: the address frees and is offered to b.test after its delay
    f.take(10, [Ack(got[0].lease, clock.monotonic(), end="n")])
    assert redis_client.hget(f"{f.address_base}:ip:127.1.0.7", "out") == b"0"
    clock.advance(1.001)
    nxt = f.take(10).items  # the address is offered to its waiter, which takes it
    assert kinds(nxt) == "v" and nxt[0].domain == "b.test" and nxt[0].address == "127.1.0.7"
    assert stat(redis_client, f, "ip_layout_errors") == 0
    assert ledger(f).balanced


@pytest.mark.parametrize(("etag", "refers"), [
    (b"", None),
    (b'W/"a:b\n\xff"', None),
    (b"", Refers(b"\n:\x00\xff\n:", 2**63, b":\n" * 8)),
    (b'"' + b":" * 200 + b'"', Refers(bytes(6), 0, bytes(16))),
])
def test_host_of_reads_a_v_entry(redis_client: redis.Redis, clock: ManualClock, etag: bytes,
                                 refers: Refers | None) -> None:
    """The gate reads the host of a ``V`` entry from its inner entry, past the
    fixed part (+30 with a WARC part) and the ETag, for ``U`` and ``R`` inner
    entries alike: the lookup it asks for names that host."""
    f = make(redis_client, clock, ip_delay=1.0)
    inner = {
        "u.test": encode_url("http://Host-U.u.test:8080/p?q"),
        "r.test": encode(Request("http://user@host-r.r.test/p", headers={"X": "1"}), None),  # type: ignore[arg-type]
    }
    for domain, entry in inner.items():
        track(redis_client, f, f"http://{domain}/", domain, last=old(clock), due_ms=clock.ms(), entry=entry,
              etag=etag, refers=refers)
    got = f.take(10)
    assert sorted(got.lookups) == [("host-r.r.test", "r.test"), ("host-u.u.test", "u.test")]
    assert stat(redis_client, f, "ip_layout_errors") == 0
    answer(f, {"host-u.u.test": ["127.1.0.1"], "host-r.r.test": ["127.1.0.2"]}, got.lookups)
    leased = {x.domain: x for x in f.take(10).items}
    assert {d: x.address for d, x in leased.items()} == {"u.test": "127.1.0.1", "r.test": "127.1.0.2"}
    for domain, x in leased.items():
        assert x.entry.endswith(inner[domain])


def test_a_v_entry_laid_out_otherwise_is_counted_and_handed_out_uncharged(redis_client: redis.Redis,
                                                                         clock: ManualClock) -> None:
    f = make(redis_client, clock, ip_delay=1.0)
    k = track(redis_client, f, "http://a.test/", last=old(clock), due_ms=clock.ms())
    record = redis_client.hget(f.keys.key("hist", "a.test"), k)
    redis_client.hset(f.keys.key("hist", "a.test"), k, record[:40])  # cut after its ETag: no entry to read
    got = f.take(10).items
    assert kinds(got) == "v" and got[0].address == ""
    assert stat(redis_client, f, "ip_layout_errors") == 1


# --- a model: random takes, acknowledgements (with or without their write),
# hand-backs, expiries and new URLs -------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_no_revisit_sooner_than_min_and_the_ledger_holds(redis_client: redis.Redis, clock: ManualClock,
                                                         seed: int) -> None:
    """Against a model of the rules: at every step the ledger adds up; a
    tracked URL's revisits that may have been sent (acknowledged, expired,
    or still out: all but those handed back) are at least MIN apart, whether
    their visit's write came (stamping ``last``) or was lost."""
    rng = random.Random(seed)
    f = make(redis_client, clock, share=rng.choice([0.0, 0.5, 1.0]), delay=rng.choice([0.0, 2.0]), lease=300)
    urls = [f"http://a.test/{i}" for i in range(6)] + [f"http://b.test/{i}" for i in range(4)]
    for url in urls:
        domain = url.split("/")[2]
        track(redis_client, f, url, domain, last=old(clock), due_ms=clock.ms() + rng.randrange(0, 4000) * 1000)
    held: dict[str, tuple[str, str, float]] = {}  # lease -> (domain, k, leased at s)
    sent: dict[str, list[float]] = {}  # k -> times of its revisits that may have been sent
    fresh = 0
    for _ in range(150):
        op = rng.random()
        acks: list[Ack] = []
        if op < 0.3 and held:  # acknowledge some, their visits written (or the write lost)
            for lease in rng.sample(sorted(held), rng.randint(1, len(held))):
                domain, k, at = held.pop(lease)
                acks.append(Ack(lease, clock.monotonic(), end=rng.choice("sn")))
                if k and rng.random() < 0.7:
                    # the write: last stamped now, due an interval on (at times sooner than
                    # MIN, as a hint could: the MIN guard holds it)
                    key = f.keys.key("hist", domain)
                    record = bytearray(redis_client.hget(key, k))
                    record[1:5] = int(clock.monotonic()).to_bytes(4, "big")
                    redis_client.hset(key, k, bytes(record))
                    redis_client.zadd(f.keys.key("due", domain), {k: clock.ms() + rng.randrange(0, 2 * MIN) * 1000})
                    revisit_ready(redis_client, f, domain)
        elif op < 0.4 and held:  # hand some back unsent
            back = rng.sample(sorted(held), rng.randint(1, len(held)))
            f.release(back)
            for lease in back:
                domain, k, at = held.pop(lease)
                if k:
                    sent[k].remove(at)
        elif op < 0.5:
            fresh += 1
            f.add([item(f"http://a.test/new/{fresh}")])
        else:
            clock.advance(rng.choice([0.5, 3, 60, 301, 900, 2000]))
        for lease, (domain, k, at) in list(held.items()):
            if clock.monotonic() >= at + 300:  # expired: taken back by the next call, may have been sent
                del held[lease]
        got = f.take(rng.randint(1, 3), acks).items
        for x in got:
            k = ""
            if x.entry[:1] == b"V":
                k = x.entry[1:].split(b":", 1)[0].decode()
                sent.setdefault(k, []).append(clock.monotonic())
            held[x.lease] = (x.domain, k, clock.monotonic())
        status = ledger(f)
        assert status.balanced, status.as_dict()
    assert sum(len(times) for times in sent.values()) >= 5
    for k, times in sent.items():
        for a, b in zip(sorted(times), sorted(times)[1:]):
            assert b - a >= MIN, (k, a, b)
