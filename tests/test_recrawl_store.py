"""The fetch history's Redis side (design/recrawl.md C.1, E; ``lua/_recrawl.lua``):
history writes ride on acknowledgements through ``take``, ``add`` and
``delay`` and are applied before them, in the same call. Real Redis (the
session's server); time is a :class:`~crawler.clock.ManualClock` the
scripts read, so ``last`` and due times are asserted to the ms.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from crawler.clock import ManualClock
from crawler.recrawl.record import History, key_of, pack, unpack
from crawler.store import (
    CHANGED,
    CREATE,
    DELETE,
    NOT_MODIFIED_304,
    UPDATE,
    Frontier,
    HistoryWrite,
    Item,
    Keys,
    Politeness,
    Recrawl,
)
from crawler.store.codec import encode_url
from tests.servers import ROOT, RedisServer

HOUR = 3600
START_MS = 1_000_000_000  # the ManualClock's start, 1,000,000 s


@dataclass(frozen=True)
class Acked:
    """An acknowledgement as the worker keeps it, with the history write
    riding on it (``Ack.write``)."""

    lease: str
    write: HistoryWrite | None = None

    def wire(self, now: float) -> str:
        return f"{self.lease}:0:0:s"


def item(url: str, domain: str = "a.test") -> Item:
    return Item(sha256(url.encode()).digest(), domain, 0, encode_url(url))


def k_of(url: str) -> str:
    return key_of(sha256(url.encode()).digest())


def record(url: str, **fields: object) -> bytes:
    return pack(History(entry=encode_url(url), **fields))  # type: ignore[arg-type]


def make(client: redis.Redis, clock: ManualClock, mode: str = "fixed", **recrawl: object) -> Frontier:
    settings = {"min": HOUR, "max": 30 * 24 * HOUR, "distrust": 10 * 24 * HOUR, **recrawl}
    frontier = Frontier(client, Keys("crawler", "t", 0), politeness=Politeness(), clock=clock,
                        recrawl=Recrawl(mode=mode, **settings))  # type: ignore[arg-type]
    frontier.open()
    return frontier


def write(mode: str, url: str, domain: str = "a.test", **fields: object) -> HistoryWrite:
    rec = fields.pop("record", b"" if mode == DELETE else record(url, iv=int(fields.get("iv", 0))))  # type: ignore[arg-type]
    return HistoryWrite(mode, domain, k_of(url), rec, **fields)  # type: ignore[arg-type]


def update(client: redis.Redis, f: Frontier, url: str, domain: str = "a.test", **fields: object) -> HistoryWrite:
    """An UPDATE as the worker makes it: from the record as it read it, whose
    'last' (bytes 2-5) the new record still carries (the script's check that
    a write is applied once)."""
    stored = hist(client, f, url, domain)
    last = unpack(stored).last if stored else 0
    rec = fields.pop("record", None) or record(url, iv=int(fields.get("iv", 0)))  # type: ignore[arg-type]
    rec = rec[:1] + struct.pack(">I", last) + rec[5:]  # type: ignore[index,operator]
    return HistoryWrite(UPDATE, domain, k_of(url), rec, **fields)  # type: ignore[arg-type]


def leased(f: Frontier, url: str, domain: str = "a.test") -> str:
    """``url`` offered and leased: its lease id."""
    f.add([item(url, domain)])
    taken = f.take(10)
    (lease,) = [x.lease for x in taken.items if x.entry == encode_url(url)]
    return lease


def stats(client: redis.Redis, f: Frontier) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall(f.keys.stats).items()}


def hist(client: redis.Redis, f: Frontier, url: str, domain: str = "a.test") -> bytes | None:
    return client.hget(f.keys.hist(domain), k_of(url))


def due(client: redis.Redis, f: Frontier, url: str, domain: str = "a.test") -> float | None:
    return client.zscore(f.keys.due(domain), k_of(url))


def test_create_stamps_last_and_schedules_the_first_revisit(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    clock.advance(12.5)
    sent = record("http://a.test/1", iv=2 * HOUR, last=7)
    f.add([], acks=[Acked("404", write(CREATE, "http://a.test/1", iv=2 * HOUR, rbin_new=5, record=sent))])
    stored = hist(redis_client, f, "http://a.test/1")
    assert stored is not None
    # only 'last' differs from what was sent: the server's clock, in s (bytes 2-5)
    assert stored[:1] + stored[5:] == sent[:1] + sent[5:]
    assert struct.unpack(">I", stored[1:5])[0] == (START_MS + 12_500) // 1000 == unpack(stored).last
    assert due(redis_client, f, "http://a.test/1") == clock.ms() + 2 * HOUR * 1000
    assert redis_client.hgetall(f.keys.rdom("a.test")) == {b"n": b"1", b"lb5": b"1", b"since": b"1"}
    assert redis_client.zscore(f.keys.rdue, "a.test") == clock.ms() + 2 * HOUR * 1000
    s = stats(redis_client, f)
    assert (s["rv_tracked"], s["rv_created"]) == (1, 1)
    assert "rv_visits" not in s  # a first visit is no revisit's outcome


def test_update_replaces_the_record_moves_its_bin_and_counts_the_outcome(redis_client: redis.Redis,
                                                                          clock: ManualClock) -> None:
    f = make(redis_client, clock)
    url = "http://a.test/u"
    f.add([], acks=[Acked("1", write(CREATE, url, iv=HOUR, rbin_new=3))])
    clock.advance(HOUR)
    new = record(url, iv=4 * HOUR, n=2, changes=1, etag=b'"v2"')
    f.add([], acks=[Acked("2", update(redis_client, f, url, iv=4 * HOUR, rbin_old=3, rbin_new=7, outcome=CHANGED,
                                      record=new))])
    clock.advance(HOUR)
    f.add([], acks=[Acked("3", update(redis_client, f, url, iv=4 * HOUR, rbin_old=7, rbin_new=7, outcome=NOT_MODIFIED_304,
                                      saved=5000, record=new))])
    got = unpack(hist(redis_client, f, url) or b"")
    assert (got.iv, got.n, got.changes, got.etag, got.last) == (4 * HOUR, 2, 1, b'"v2"', clock.ms() // 1000)
    assert due(redis_client, f, url) == clock.ms() + 4 * HOUR * 1000
    rdom = redis_client.hgetall(f.keys.rdom("a.test"))
    assert (rdom[b"lb3"], rdom[b"lb7"], rdom[b"n"], rdom[b"since"]) == (b"0", b"1", b"1", b"3")
    s = stats(redis_client, f)
    assert (s["rv_visits"], s["rv_changed"], s["rv_not_modified"], s["rv_bytes_saved"]) == (2, 1, 1, 5000)
    assert (s["rv_tracked"], s["rv_created"]) == (1, 1) and "rv_unchanged" not in s


def test_delete_removes_the_record_its_due_time_and_its_counts(redis_client: redis.Redis,
                                                                clock: ManualClock) -> None:
    f = make(redis_client, clock)
    f.add([], acks=[Acked("1", write(CREATE, "http://a.test/1", iv=HOUR, rbin_new=2)),
                    Acked("2", write(CREATE, "http://a.test/2", iv=3 * HOUR, rbin_new=2))])
    f.add([], acks=[Acked("3", write(DELETE, "http://a.test/1", rbin_old=2))])
    assert hist(redis_client, f, "http://a.test/1") is None and due(redis_client, f, "http://a.test/1") is None
    assert redis_client.hgetall(f.keys.rdom("a.test"))[b"n"] == b"1"
    assert redis_client.hgetall(f.keys.rdom("a.test"))[b"lb2"] == b"1"
    # rdue follows due:<d>'s head: now the other URL's
    assert redis_client.zscore(f.keys.rdue, "a.test") == clock.ms() + 3 * HOUR * 1000
    f.add([], acks=[Acked("4", write(DELETE, "http://a.test/2", rbin_old=2)),
                    Acked("5", write(DELETE, "http://a.test/2", rbin_old=2))])  # the second: already gone
    assert not redis_client.exists(f.keys.hist("a.test"), f.keys.due("a.test"))
    assert redis_client.zscore(f.keys.rdue, "a.test") is None
    s = stats(redis_client, f)
    assert (s["rv_tracked"], s["rv_deleted"], s["rv_created"]) == (0, 2, 2)


def test_create_over_an_existing_record_moves_only_last(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    url = "http://a.test/x"
    f.add([], acks=[Acked("1", write(CREATE, url, iv=5 * HOUR, rbin_new=4,
                                      record=record(url, iv=5 * HOUR, n=9, etag=b"e")))])
    before, due_before = hist(redis_client, f, url) or b"", due(redis_client, f, url)
    rdom_before = redis_client.hgetall(f.keys.rdom("a.test"))
    clock.advance(1800)
    # a dont_filter fetch of a tracked URL writes in create-only mode: a fresh record, other counters
    f.add([], acks=[Acked("2", write(CREATE, url, iv=HOUR, rbin_new=0, record=record(url, iv=HOUR)))])
    after = hist(redis_client, f, url) or b""
    assert after[:1] + after[5:] == before[:1] + before[5:]
    assert unpack(after).last == unpack(before).last + 1800
    assert due(redis_client, f, url) == due_before
    assert redis_client.hgetall(f.keys.rdom("a.test")) == rdom_before
    s = stats(redis_client, f)
    assert (s["rv_tracked"], s["rv_created"], s["rv_refetched"]) == (1, 1, 1)


def test_an_update_of_a_missing_record_is_an_orphan_and_writes_nothing(redis_client: redis.Redis,
                                                                        clock: ManualClock) -> None:
    f = make(redis_client, clock)
    f.add([], acks=[Acked("1", update(redis_client, f, "http://a.test/gone", iv=HOUR, rbin_old=1, rbin_new=2,
                                      outcome=CHANGED))])
    assert not redis_client.exists(f.keys.hist("a.test"), f.keys.due("a.test"), f.keys.rdom("a.test"), f.keys.rdue)
    s = stats(redis_client, f)
    assert s["rv_orphans"] == 1 and "rv_tracked" not in s and "rv_visits" not in s


@pytest.mark.parametrize(("iv", "expected"), [(2 * HOUR, 2 * HOUR), (60, HOUR), (0, HOUR),
                                              (90 * 24 * HOUR, 30 * 24 * HOUR)],
                         ids=["iv", "min-raises", "zero", "max-lowers"])
def test_due_is_now_plus_iv_within_min_and_max(redis_client: redis.Redis, clock: ManualClock, iv: int,
                                               expected: int) -> None:
    f = make(redis_client, clock)
    clock.advance(77.001)
    f.add([], acks=[Acked("1", write(CREATE, "http://a.test/1", iv=iv))])
    assert due(redis_client, f, "http://a.test/1") == clock.ms() + expected * 1000


@pytest.mark.parametrize("cap", ["shard", "domain"])
def test_caps_refuse_count_and_leave_nothing_behind(redis_client: redis.Redis, clock: ManualClock, cap: str) -> None:
    f = make(redis_client, clock, **({"max_tracked": 2} if cap == "shard" else {"domain_max": 2}))
    f.add([], acks=[Acked("1", write(CREATE, "http://a.test/1", iv=HOUR, rbin_new=1)),
                    Acked("2", write(CREATE, "http://b.test/2", "b.test", iv=HOUR, rbin_new=1))])
    reply = f.scripts.enqueue(keys=f.script_keys, args=[
        "exact", 0, "0", "2", *write(CREATE, "http://a.test/3", iv=HOUR, rbin_new=1).wire(),
        *write(CREATE, "http://a.test/4", iv=HOUR, rbin_new=1).wire(), "0", "0"])  # no promotions, no links
    if cap == "shard":  # two tracked already: both refused
        assert reply[7] == 2 and stats(redis_client, f)["rv_untracked"] == 2
        refused = ["http://a.test/3", "http://a.test/4"]
    else:  # a.test holds one: the first fits, the second is refused
        assert reply[7] == 1 and stats(redis_client, f)["rv_untracked"] == 1
        refused = ["http://a.test/4"]
    for url in refused:
        assert hist(redis_client, f, url) is None and due(redis_client, f, url) is None
    tracked = 2 if cap == "shard" else 3
    assert stats(redis_client, f)["rv_tracked"] == tracked
    assert redis_client.hlen(f.keys.hist("a.test")) + redis_client.hlen(f.keys.hist("b.test")) == tracked
    assert int(redis_client.hget(f.keys.rdom("a.test"), "n") or 0) == tracked - 1
    # a slot freed (a URL gone) is taken by the next new URL
    f.add([], acks=[Acked("5", write(DELETE, "http://a.test/1", rbin_old=1)),
                    Acked("6", write(CREATE, "http://a.test/4", iv=HOUR))])
    assert hist(redis_client, f, "http://a.test/4") is not None


def test_a_lie_sets_the_hosts_distrust(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    url, host = "http://a.test/l", "www.a.test"
    f.add([], acks=[Acked("1", write(CREATE, url, iv=HOUR))])
    rhost = f.keys.rhost(host)
    f.add([], acks=[Acked("2", update(redis_client, f, url, iv=HOUR, outcome=CHANGED, host=host, lie="etag"))])
    until = clock.ms() + 10 * 24 * HOUR * 1000
    assert redis_client.hgetall(rhost) == {b"lies_etag": b"1", b"etag": str(until).encode()}
    for i in range(2):  # ignored conditionals: counted, no distrust before the 3rd evidence
        clock.advance(HOUR)
        f.add([], acks=[Acked(f"i{i}", update(redis_client, f, url, iv=HOUR, outcome="u", host=host, lie="ignored"))])
    assert redis_client.hget(rhost, "ignored") == b"2" and redis_client.hget(rhost, "all") is None
    clock.advance(HOUR)
    f.add([], acks=[Acked("i3", update(redis_client, f, url, iv=HOUR, outcome="u", host=host, lie="ignored"))])
    assert redis_client.hget(rhost, "all") == str(clock.ms() + 10 * 24 * HOUR * 1000).encode()
    f.add([], acks=[Acked("m", update(redis_client, f, url, iv=HOUR, outcome=CHANGED, host=host, lie="lm"))])
    assert redis_client.hget(rhost, "lm") == str(clock.ms() + 10 * 24 * HOUR * 1000).encode()
    s = stats(redis_client, f)
    assert (s["rv_lies_etag"], s["rv_lies_ignored"], s["rv_lies_lm"]) == (1, 3, 1)


@pytest.mark.parametrize("path", ["take", "add", "delay"])
def test_the_same_history_writes_ride_on_take_add_and_delay(redis_client: redis.Redis, clock: ManualClock,
                                                            path: str) -> None:
    f = make(redis_client, clock)
    url = "http://a.test/p"
    acks = [Acked(leased(f, url), write(CREATE, url, iv=3 * HOUR, rbin_new=6))]
    clock.advance(5)
    if path == "take":
        f.take(10, acks=acks)
    elif path == "add":
        f.add([], acks=acks)
    else:
        assert f.delay([(30.0, "a.test", 0, encode_url("http://a.test/retry"))], acks=acks) == 1
    assert unpack(hist(redis_client, f, url) or b"").last == clock.ms() // 1000
    assert due(redis_client, f, url) == clock.ms() + 3 * HOUR * 1000
    s = stats(redis_client, f)
    assert (s["acked"], s["end_stored"], s["rv_created"], s["rv_tracked"]) == (1, 1, 1, 1)
    assert redis_client.zcard(f.keys.leases) == 0


def test_a_write_rides_in_its_acks_call_even_for_an_unknown_lease(redis_client: redis.Redis,
                                                                   clock: ManualClock) -> None:
    f = make(redis_client, clock)
    f.add([item("http://a.test/q")])
    calls = redis_client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    # the lease expired meanwhile (or never was): the visit happened, its history is written
    result = f.add([], acks=[Acked("12345", write(CREATE, "http://a.test/1", iv=HOUR))])
    assert result.acked == 0
    assert redis_client.info("commandstats")["cmdstat_evalsha"]["calls"] == calls + 1
    assert hist(redis_client, f, "http://a.test/1") is not None
    # a malformed write list fails the whole call before anything is written: acks included
    lease = leased(f, "http://a.test/q")
    bad = write(UPDATE, "http://a.test/2", iv=HOUR, record=b"short")
    with pytest.raises(redis.ResponseError) as caught:
        f.add([], acks=[Acked(lease, bad)])
    found = re.search(r"_recrawl\.lua:(\d+)", str(caught.value))
    assert found, str(caught.value)
    line = (ROOT / "lua" / "_recrawl.lua").read_text().splitlines()[int(found.group(1)) - 1]
    assert "bytes" in line
    assert redis_client.zscore(f.keys.leases, lease) is not None
    assert hist(redis_client, f, "http://a.test/2") is None


def test_a_write_applies_once_when_its_call_is_sent_again(redis_client: redis.Redis, clock: ManualClock) -> None:
    """A call whose reply was lost is sent again with the same writes: the
    second finds the record moved on (its 'last' is not the one the write was
    made from) and applies nothing: no counter, bin or lie twice."""
    f = make(redis_client, clock)
    url = "http://a.test/r"
    f.add([], acks=[Acked("1", write(CREATE, url, iv=HOUR, rbin_new=3))])
    clock.advance(HOUR)
    once = update(redis_client, f, url, iv=2 * HOUR, rbin_old=3, rbin_new=5, outcome=CHANGED, saved=0,
                  host="a.test", lie="lm")
    f.add([], acks=[Acked("2", once)])
    after = hist(redis_client, f, url)
    rdom = redis_client.hgetall(f.keys.rdom("a.test"))
    clock.advance(5)
    f.add([], acks=[Acked("2", once)])  # the same call again
    assert hist(redis_client, f, url) == after
    assert redis_client.hgetall(f.keys.rdom("a.test")) == rdom
    s = stats(redis_client, f)
    assert (s["rv_visits"], s["rv_changed"], s["rv_lies_lm"], s["rv_stale_writes"]) == (1, 1, 1, 1)
    assert redis_client.hget(f.keys.rhost("a.test"), "lies_lm") == b"1"


def test_every_new_key_hashes_to_the_bases_slot(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    f.add([], acks=[Acked("1", write(CREATE, "http://a.test/1", iv=HOUR, rbin_new=1))])
    f.add([], acks=[Acked("2", update(redis_client, f, "http://a.test/1", iv=HOUR, rbin_old=1, rbin_new=2, outcome="u",
                                      host="a.test", lie="etag"))])
    slot = key_slot(f.keys.base.encode())
    names = [f.keys.hist("a.test"), f.keys.due("a.test"), f.keys.rdom("a.test"), f.keys.rdue,
             f.keys.rhost("a.test")]
    assert all(redis_client.exists(n) for n in names)
    assert {key_slot(n.encode()) for n in names} == {slot}
    written = [k for k in redis_client.keys("*") if k != b"crawler:clock"]
    assert {key_slot(k) for k in written} == {slot}
    # and clearing the frontier (its keys by pattern; clear.lua needs none of them) takes them too
    f.clear()
    assert redis_client.keys("*") == [b"crawler:clock"]


def test_a_link_offered_again_leaves_the_record_byte_identical(redis_client: redis.Redis,
                                                               clock: ManualClock) -> None:
    f = make(redis_client, clock)
    url = "http://a.test/seen"
    f.add([], acks=[Acked(leased(f, url), write(CREATE, url, iv=HOUR, rbin_new=1))])
    before = (hist(redis_client, f, url), due(redis_client, f, url), redis_client.hgetall(f.keys.rdom("a.test")))
    clock.advance(600)
    again = f.add([item(url), item(url)])
    assert again.duplicates == 2
    assert (hist(redis_client, f, url), due(redis_client, f, url),
            redis_client.hgetall(f.keys.rdom("a.test"))) == before


@pytest.mark.parametrize("mode", ["fixed", "off"])
def test_a_domain_with_only_tracked_urls_is_ready_at_its_due_time_when_recrawl_is_on(
        redis_client: redis.Redis, clock: ManualClock, mode: str) -> None:
    f = make(redis_client, clock, mode=mode)
    url = "http://a.test/r"
    lease = leased(f, url)
    assert redis_client.zscore(f.keys.ready, "a.test") is None  # nothing queued left
    f.add([], acks=[Acked(lease, write(CREATE, url, iv=2 * HOUR))])
    due_ms = clock.ms() + 2 * HOUR * 1000
    assert redis_client.zscore(f.keys.rdue, "a.test") == due_ms  # the operator's view, either way
    assert redis_client.zscore(f.keys.ready, "a.test") == (due_ms if mode == "fixed" else None)


def test_an_excluded_domain_loses_its_history(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    # queued first: _lib.lua's push() adds to :ready with NX, so a domain put there at its
    # revisit's due time keeps that later score when a request is queued after (H2's part)
    f.add([item("http://gone.test/queued", "gone.test")])
    f.add([], acks=[Acked(str(i), write(CREATE, f"http://gone.test/{i}", "gone.test", iv=HOUR, rbin_new=1))
                    for i in range(3)] + [Acked("9", write(CREATE, "http://a.test/1", iv=HOUR))])
    redis_client.sadd(f.keys.excluded, "gone.test")
    taken = f.take(10)
    assert taken.items == []
    assert not redis_client.exists(f.keys.hist("gone.test"), f.keys.due("gone.test"), f.keys.rdom("gone.test"))
    assert redis_client.zscore(f.keys.rdue, "gone.test") is None
    assert redis_client.zscore(f.keys.rdue, "a.test") is not None
    s = stats(redis_client, f)
    assert (s["rv_tracked"], s["rv_deleted"], s["excluded_dropped"]) == (1, 3, 1)


def test_open_writes_the_recrawl_meta_in_ms(redis_client: redis.Redis, clock: ManualClock) -> None:
    make(redis_client, clock, mode="adaptive", share=0.25, max_tracked=7, domain_max=3)
    meta = redis_client.hgetall("crawler:{t:0}:meta")
    assert {k: meta[k.encode()].decode() for k in ("recrawl", "rv_min", "rv_max", "rv_share", "rv_cap",
                                                    "rv_domain_cap", "rv_distrust")} == {
        "recrawl": "adaptive", "rv_min": "3600000", "rv_max": "2592000000", "rv_share": "0.25", "rv_cap": "7",
        "rv_domain_cap": "3", "rv_distrust": "864000000"}
    # a frontier opened without a Recrawl (an operator's command) leaves them
    Frontier(redis_client, Keys("crawler", "t", 0), clock=clock).open()
    assert redis_client.hget("crawler:{t:0}:meta", "recrawl") == b"adaptive"


def test_a_redis_restarted_with_aof_keeps_the_history(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "aof", "--appendonly", "yes", "--appendfsync", "always").start()
    try:
        client = server.client()
        f = make(client, ManualClock(client))
        f.add([], acks=[Acked("1", write(CREATE, "http://a.test/1", iv=HOUR, rbin_new=1))])
        kept = [hist(client, f, "http://a.test/1"), due(client, f, "http://a.test/1"),
                client.hgetall(f.keys.rdom("a.test")), client.zscore(f.keys.rdue, "a.test")]
        client.close()
        server.restart()
        client = server.client()
        assert [hist(client, f, "http://a.test/1"), due(client, f, "http://a.test/1"),
                client.hgetall(f.keys.rdom("a.test")), client.zscore(f.keys.rdue, "a.test")] == kept
        assert kept[0] is not None and kept[1] is not None
        client.close()
    finally:
        server.stop()
