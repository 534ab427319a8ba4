"""Sitemap ``<lastmod>`` hints (design/recrawl.md C.5; ``lua/recrawl_hint.lua``,
the host's evidence in ``lua/_recrawl.lua``): a hint brings a tracked URL's
visit sooner, never sooner than ``CRAWLER_RECRAWL_MIN`` after the last, once
its host has earned the trust; a host whose hints prove wrong is ignored.
Real Redis, the scripts on a :class:`~crawler.clock.ManualClock`."""

from __future__ import annotations

import time

import pytest
import redis
from scrapy import Request

from crawler.clock import ManualClock
from crawler.meta import LASTMOD
from crawler.recrawl.record import HINTED, unpack
from crawler.sitemaps import lastmod_seconds
from crawler.store import CHANGED, CREATE, NOT_MODIFIED_304, UNCHANGED, Hint
from tests.test_recrawl_store import HOUR, Acked, due, hist, k_of, make, record, stats, update, write

DAY = 24 * HOUR


def tracked(f, clock: ManualClock, urls: list[str], iv: int = 10 * DAY, host: str = "a.test") -> int:
    """``urls`` tracked (first visits now, due in ``iv``); the visit's time, s."""
    f.add([], acks=[Acked(str(i), write(CREATE, url, iv=iv, rbin_new=1, host=host)) for i, url in enumerate(urls)])
    return clock.ms() // 1000


def hint(url: str, lastmod: int, host: str = "a.test") -> Hint:
    return Hint("a.test", k_of(url), lastmod, host)


def trust(client: redis.Redis, f, host: str = "a.test", **fields: int) -> None:
    client.hset(f"{f.keys.base}:rhost:{host}", mapping=fields)


def test_a_trusted_hosts_hint_brings_the_visit_to_min_after_the_last(redis_client: redis.Redis,
                                                                      clock: ManualClock) -> None:
    f = make(redis_client, clock)
    trust(redis_client, f, lastmod_ok=3)
    last = tracked(f, clock, ["http://a.test/1", "http://a.test/2"])
    clock.advance(600)  # modified 10 min after the visit, read at once: MIN (1 h) still holds
    result = f.hint([hint("http://a.test/1", last + 300)])
    assert (result.applied, result.ignored) == (1, 0)
    assert due(redis_client, f, "http://a.test/1") == last * 1000 + HOUR * 1000
    assert unpack(hist(redis_client, f, "http://a.test/1") or b"").hinted
    assert due(redis_client, f, "http://a.test/2") == (last + 10 * DAY) * 1000  # no hint, no change
    assert redis_client.zscore(f.keys.rdue, "a.test") == last * 1000 + HOUR * 1000  # the domain's head follows
    # a day later a hint for the other: due now
    clock.advance(DAY)
    f.hint([hint("http://a.test/2", last + 2 * HOUR)])
    assert due(redis_client, f, "http://a.test/2") == clock.ms()
    assert stats(redis_client, f)["rv_hints_applied"] == 2


def test_hints_that_say_nothing_new_change_nothing(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    trust(redis_client, f, lastmod_ok=5)
    last = tracked(f, clock, ["http://a.test/1"])
    clock.advance(DAY)
    before = hist(redis_client, f, "http://a.test/1")
    result = f.hint([hint("http://a.test/1", last - 60),  # modified before the visit
                     hint("http://a.test/1", last),
                     hint("http://a.test/new", last + 60)])  # not tracked
    assert (result.applied, result.stale, result.untracked) == (0, 2, 1)
    assert hist(redis_client, f, "http://a.test/1") == before
    assert due(redis_client, f, "http://a.test/1") == (last + 10 * DAY) * 1000
    f.hint([hint("http://a.test/1", last + 60)])
    again = f.hint([hint("http://a.test/1", last + 120)])  # hinted already
    assert (again.applied, again.stale) == (0, 1)


def test_a_leased_url_is_not_hinted(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    trust(redis_client, f, lastmod_ok=3)
    last = tracked(f, clock, ["http://a.test/1"], iv=HOUR)
    clock.advance(2 * HOUR)
    taken = f.take(10)
    assert [x.entry[:1] for x in taken.items] == [b"V"]  # the revisit is out
    rearmed = due(redis_client, f, "http://a.test/1")  # lease + MIN from now: served twice it is not
    assert rearmed is not None and rearmed > clock.ms() + HOUR * 1000
    result = f.hint([hint("http://a.test/1", last + 60)])
    assert (result.applied, result.untracked) == (0, 1)
    assert due(redis_client, f, "http://a.test/1") == rearmed
    assert f.take(10).items == []


def test_an_unproven_host_has_one_hint_in_four_applied(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    urls = [f"http://a.test/{i}" for i in range(8)]
    last = tracked(f, clock, urls)
    clock.advance(DAY)
    result = f.hint([hint(url, last + 60) for url in urls])
    assert (result.applied, result.ignored) == (2, 6)
    moved = [url for url in urls if due(redis_client, f, url) == clock.ms()]
    assert moved == [urls[0], urls[4]]  # the 1st and the 5th sampled
    assert stats(redis_client, f)["rv_hints_ignored"] == 6


def test_a_host_that_proved_wrong_has_one_hint_in_32(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    trust(redis_client, f, lastmod_ok=1, lastmod_bad=3)
    urls = [f"http://a.test/{i}" for i in range(64)]
    last = tracked(f, clock, urls)
    clock.advance(DAY)
    assert f.hint([hint(url, last + 60) for url in urls]).applied == 2


def test_hinted_visits_are_the_hosts_evidence(redis_client: redis.Redis, clock: ManualClock) -> None:
    """The write of a hinted visit counts lastmod_ok (changed) or lastmod_bad
    (unchanged, 304), clears the flag, and three right make the host trusted."""
    f = make(redis_client, clock)
    urls = [f"http://a.test/{i}" for i in range(4)]
    rhost = f"{f.keys.base}:rhost:a.test"
    for visit in range(3):
        last = tracked(f, clock, urls) if visit == 0 else clock.ms() // 1000
        clock.advance(DAY)
        assert f.hint([hint(url, last + 60) for url in urls]).applied == 1  # unproven: one in four
        (url,) = [u for u in urls if unpack(hist(redis_client, f, u) or b"").hinted]
        f.add([], acks=[Acked(f"v{visit}", update(redis_client, f, url, iv=10 * DAY, rbin_old=1, rbin_new=1,
                                                  outcome=CHANGED, host="a.test"))])
        assert not unpack(hist(redis_client, f, url) or b"").hinted
    assert redis_client.hget(rhost, "lastmod_ok") == b"3"
    clock.advance(DAY)
    last = clock.ms() // 1000 - DAY
    assert f.hint([hint(url, last + 1) for url in urls]).applied >= 3  # trusted: each not visited since
    # wrong ones: unchanged and 304 count against the host
    for i, outcome in enumerate((UNCHANGED, NOT_MODIFIED_304)):
        f.add([], acks=[Acked(f"w{i}", update(redis_client, f, urls[i], iv=10 * DAY, rbin_old=1, rbin_new=1,
                                              outcome=outcome, host="a.test"))])
    s = stats(redis_client, f)
    assert (s["rv_hints_right"], s["rv_hints_wrong"]) == (3, 2)
    assert redis_client.hget(rhost, "lastmod_bad") == b"2"


def test_a_malformed_hint_list_is_refused(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    with pytest.raises(redis.ResponseError, match="recrawl_hint"):
        f.scripts.recrawl_hint(keys=[f.keys.base], args=["a.test", "1", "x", "a.test"])
    with pytest.raises(redis.ResponseError, match="not 4 per hint"):
        f.scripts.recrawl_hint(keys=[f.keys.base], args=["a.test", "1", "5"])


def test_lastmod_seconds_reads_the_w3c_forms() -> None:
    assert lastmod_seconds("2025-06-01T12:00:00Z") == 1748779200
    assert lastmod_seconds("2025-06-01T14:00:00+02:00") == 1748779200
    assert lastmod_seconds("2025-06-01T10:30:00-01:30") == 1748779200
    assert lastmod_seconds("2025-06-01") == 1748736000
    assert lastmod_seconds("2025-06") == lastmod_seconds("2025-06-01")
    assert lastmod_seconds("2025-02-30") is None and lastmod_seconds("yesterday") is None
    assert lastmod_seconds("1969-12-31") is None


def test_a_request_with_a_lastmod_is_a_hint_on_the_next_flush(redis_url: str, redis_client: redis.Redis,
                                                               clock: ManualClock) -> None:
    """The worker's half: ``meta[LASTMOD]`` on an offered request (what the
    sitemap middleware makes) is sent as a hint with the flush, with recrawl
    on; with recrawl off it is only the request's meta."""
    from crawler.recrawl.record import key_of
    from crawler.store import HistoryWrite
    from tests.servers import open_on

    for mode, moved, url in (("fixed", True, "http://a.test/p"), ("off", False, "http://a.test/q")):
        scheduler = open_on(redis_url, clock, CRAWLER_RECRAWL=mode, SCHEDULER_PERSIST=False)
        try:
            session = scheduler.session
            k = key_of(session._fingerprinter.fingerprint(Request(url)))
            session.store.add([], acks=[Acked("1", HistoryWrite(CREATE, "a.test", k, record(url, iv=10 * DAY),
                                                                10 * DAY, -1, 1))])
            last = clock.ms() // 1000
            trust(redis_client, session.store, lastmod_ok=3)
            clock.advance(DAY)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last + 60))
            scheduler.enqueue_request(Request(url, meta={LASTMOD: stamp}))
            session.flush()
            score = redis_client.zscore(session.store.keys.due("a.test"), k)
            assert score == (clock.ms() if moved else (last + 10 * DAY) * 1000), mode
            assert scheduler.crawler.stats.get_value("crawler/recrawl/hints/applied") == (1 if moved else None), mode
        finally:
            scheduler.close("finished")


def test_the_flag_is_the_records(redis_client: redis.Redis, clock: ManualClock) -> None:
    """The script sets the record's own flag bit, nothing else of it."""
    f = make(redis_client, clock)
    trust(redis_client, f, lastmod_ok=3)
    last = tracked(f, clock, ["http://a.test/1"])
    before = hist(redis_client, f, "http://a.test/1") or b""
    clock.advance(DAY)
    f.hint([hint("http://a.test/1", last + 60)])
    after = hist(redis_client, f, "http://a.test/1") or b""
    assert after[0] == before[0] | HINTED and after[1:] == before[1:]
