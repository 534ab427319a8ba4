"""The rank order of due domains (CRAWLER_DOMAIN_ORDER = "rank",
docs/frontier.md): a domain's priority is (1 + its weight) / (1 + requests it
was given), its weight from a ranking file (crawler/ranks.py) or the domains
seen linking to it (a HyperLogLog the workers add to). Real redis-server
processes, a real billion crawl."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from hashlib import sha256
from pathlib import Path

import pytest
import redis

from crawler.clock import ManualClock
from crawler.ranks import RankingFileError, read_ranks
from crawler.sharding import shard_of
from crawler.store import Frontier, Item, Keys, Politeness
from tests.servers import ROOT, scrapy_env


def make(client: redis.Redis, clock: ManualClock, order: str = "rank") -> Frontier:
    f = Frontier(client, Keys("crawler", "t", 0), politeness=Politeness(delay=0.001), order=order, clock=clock)
    f.open()
    return f


def fill(f: Frontier, domains: list[str], per: int = 30) -> None:
    f.add([Item(sha256(f"{d}/{i}".encode()).digest(), d, 0, f"U0 https://{d}/{i}".encode())
           for d in domains for i in range(per)])


def served(f: Frontier, clock: ManualClock, n: int, batch: int = 1) -> list[str]:
    """The domains of the first ``n`` requests, ``batch`` a take (each acknowledged at once)."""
    got: list[str] = []
    while len(got) < n:
        taken = f.take(batch)
        got += [x.domain for x in taken.items]
        f.add([], acks=[x.lease for x in taken.items])
        clock.advance(0.002)  # the 1 ms delay passes
    return got[:n]


def test_a_ranked_domain_is_served_first_and_its_share_follows_its_weight(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    fill(f, ["a.test", "b.test", "c.test"])
    assert f.load_ranks({"a.test": 1.0, "b.test": 3.0, "c.test": 7.0}) == 3
    first = served(f, clock, 24)
    assert first[0] == "c.test"
    counts = Counter(first)
    assert counts["c.test"] > counts["b.test"] > counts["a.test"] > 0  # decay: no domain starves the rest
    # (1 + w) / (1 + given) stays within one request of the others' at every step
    assert abs(counts["c.test"] / 8 - counts["b.test"] / 4) <= 1


def test_the_due_order_is_unchanged_by_ranks(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock, order="due")
    fill(f, ["a.test", "b.test", "c.test"])
    f.load_ranks({"c.test": 100.0})
    assert Counter(served(f, clock, 30, batch=3)) == Counter({"a.test": 10, "b.test": 10, "c.test": 10})
    assert redis_client.zcard(f.keys.key("front")) == 0


def test_domains_linked_from_more_domains_come_first(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    fill(f, ["a.test", "b.test", "c.test"])
    f.add_links([("b.test", f"s{i}.test") for i in range(5)] + [("a.test", "s0.test")]
                + [("b.test", "s0.test")] * 3)  # a source counted once whatever it is sent
    assert redis_client.pfcount(f.keys.key("inl", "b.test")) == 5
    first = served(f, clock, 9)
    assert first[0] == "b.test" and Counter(first).most_common(1)[0][0] == "b.test"
    assert Counter(first)["c.test"] >= 1  # unlinked, served all the same


def test_the_front_survives_between_calls_and_is_in_the_status(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    fill(f, [f"d{i}.test" for i in range(10)], per=2)
    f.load_ranks({"d9.test": 50.0})
    taken = f.take(3)
    assert [x.domain for x in taken.items][0] == "d9.test"
    status = f.status()
    # the front's 7 are due (the 3 served are parked until acknowledged)
    assert status["domains_due"] == status["domains_queued"] == 7 and status["next_due_ms"] == 0
    assert redis_client.zcard(f.keys.key("front")) == 7
    assert f.due_domains() == 7  # what the concurrency cap follows: the front's are due
    order = f.order_status(top=3)
    assert (order["mode"], order["front"], order["ranked"]) == ("rank", 7, 1)
    assert [d["priority"] for d in order["top"]] == [1.0] * 3 and order["top"][0]["from"] == "links"
    assert len({x.domain for x in f.take(10).items}) == 7


def test_ranking_files(tmp_path: Path) -> None:
    tranco = tmp_path / "tranco.csv"
    tranco.write_text("rank,domain\n1,www.google.com\n2,Example.org\n3,bbc.co.uk\n4,news.bbc.co.uk\n\n# note\n")
    assert read_ranks(tranco) == {"google.com": 3.0, "example.org": 1.5, "bbc.co.uk": 1.0}
    plain = tmp_path / "list.txt"
    plain.write_text("a.test\nb.test\n")
    assert read_ranks(plain) == {"a.test": 2.0, "b.test": 1.0}
    mine = read_ranks(plain, shard=shard_of("a.test", 4), shards=4)
    assert "a.test" in mine and all(shard_of(d, 4) == shard_of("a.test", 4) for d in mine)
    for text, message in [("1,a.test\nx,b.test\n", "list.csv:2: 'x' is not a rank"),
                          ("0,a.test\n", "rank 0 is below 1"), ("1,a b.test\n", "is not a domain"),
                          ("# nothing\n", "names no domain")]:
        bad = tmp_path / "list.csv"
        bad.write_text(text)
        with pytest.raises(RankingFileError, match=message):
            read_ranks(bad)


def test_a_ranking_file_in_the_due_order_is_said_and_left(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=1, pages=3, links=2, size_fixed=2000, private_share=0, crawl_delay_share=0)
    ranks = tmp_path / "r.csv"
    ranks.write_text("1,a.test\n")
    result = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "demo", "-a", f"start_urls={web.url(0)}",
                             "-s", f"CRAWLER_RANKS={ranks}", "-s", "CRAWLER_KEY_PREFIX=unranked",
                             "-s", "CRAWLER_PROGRESS_INTERVAL=0"],
                            cwd=ROOT, env=scrapy_env(redis_url), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("CRAWLER_RANKS is ignored: the due order (CRAWLER_DOMAIN_ORDER = 'due') with a flat budget "
            "(CRAWLER_DOMAIN_BUDGET_MAX not above CRAWLER_DOMAIN_BUDGET) reads no ranking") in result.stderr
    assert redis.Redis.from_url(redis_url).exists("unranked:{demo:0}:rank") == 0


def test_billion_counts_the_domains_linking_to_each_and_loads_its_ranking(redis_url: str, make_web,
                                                                           tmp_path: Path) -> None:
    web = make_web(domains=4, pages=12, links=6, size_fixed=3000, private_share=0, cross_share=0.5, dup_share=0,
                   crawl_delay_share=0)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(web.url(d) for d in range(4)) + "\n")
    ranks = tmp_path / "ranks.csv"
    ranks.write_text("1,d3.test\n2,d2.test\n")
    cmd = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}", "-s", "CRAWLER_DOMAIN_DELAY=0",
           "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", f"CRAWLER_RANKS={ranks}", "-s", "CRAWLER_KEY_PREFIX=ranked"]
    result = subprocess.run(cmd, cwd=ROOT, env=scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"),
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Ranking " in result.stderr and "2 domains of this shard weighed" in result.stderr
    client = redis.Redis.from_url(redis_url)
    base = "ranked:{billion:0}"
    assert {k: float(v) for k, v in client.hgetall(f"{base}:rank").items()} == {b"d3.test": 2.0, b"d2.test": 1.0}
    linked = {d: client.pfcount(f"{base}:inl:{d}") for d in web.domains}
    assert sum(linked.values()) > 0 and all(0 <= n <= 3 for n in linked.values())  # 3 other domains at most
    given = sum(int(client.hget(f"{base}:dom:{d}", "given") or 0) for d in web.domains)
    pages = [e for e in web.log() if e.path != "/robots.txt"]
    assert given >= len({(e.domain, e.path) for e in pages})
    assert "'crawler/frontier/links_between'" in result.stderr
    shown = subprocess.run([sys.executable, "-m", "scrapy", "frontier", "billion", "-s", "CRAWLER_KEY_PREFIX=ranked"],
                           cwd=ROOT, env=scrapy_env(redis_url), capture_output=True, text=True, timeout=60).stdout
    assert "order         rank: 0 due domains waiting in the front, 2 weighed by a ranking file" in shown, shown


def test_a_domain_pushed_back_while_it_waits_in_the_front_is_not_served(redis_client: redis.Redis,
                                                                        clock: ManualClock) -> None:
    """A 429's push-back (push_domain.lua) holds a domain that came due and waits in the front."""
    f = make(redis_client, clock)
    fill(f, ["a.test", "b.test"], per=3)
    f.load_ranks({"a.test": 10.0})
    taken = f.take(1)  # a.test served; b.test moved into the front and left there
    assert [x.domain for x in taken.items] == ["a.test"] and redis_client.zscore(f.keys.key("front"), "b.test")
    f.push_domain("b.test", 60)
    f.add([], acks=[x.lease for x in taken.items])
    clock.advance(0.002)
    assert [x.domain for x in f.take(10).items] == ["a.test"]  # b.test waits its minute
    assert redis_client.zscore(f.keys.ready, "b.test") >= clock.ms() + 59_000
    clock.advance(61)
    assert "b.test" in {x.domain for x in f.take(10).items}


def urls(domain: str, start: int, n: int) -> list[Item]:
    return [Item(sha256(f"{domain}/{i}".encode()).digest(), domain, 0, f"U0 https://{domain}/{i}".encode())
            for i in range(start, start + n)]


def test_a_budget_by_rank_grows_with_the_domains_weight(redis_client: redis.Redis, clock: ManualClock) -> None:
    """CRAWLER_DOMAIN_BUDGET_MAX: a domain of weight w admits budget x (1 + w)
    URLs, at most the max; past it they are over_budget, not marked seen, and
    taken when offered again once the weight grew."""
    f = Frontier(redis_client, Keys("crawler", "t", 0), politeness=Politeness(delay=0.001), order="rank",
                 domain_budget=2, budget_max=9, clock=clock)
    f.open()
    first = f.add(urls("a.test", 0, 5) + urls("b.test", 0, 5) + urls("c.test", 0, 5))
    assert (first.added, first.over_budget) == (6, 9)  # weight 0: 2 each
    assert redis_client.hget(f.keys.stats, "budgets_spent") == b"3"
    f.add_links([("a.test", "x.test"), ("a.test", "y.test")])  # a.test weighs 2: 2 x 3 = 6
    f.load_ranks({"b.test": 100.0})  # b.test: capped at 9
    again = f.add(urls("a.test", 0, 12) + urls("b.test", 0, 12) + urls("c.test", 0, 12))
    # the over-budget ones were not marked seen: a.test takes 2-5, b.test 2-8;
    # c.test, at its budget, is refused before its dedup
    assert (again.added, again.duplicates) == (4 + 7, 2 + 2)
    assert again.over_budget == (12 - 6) + (12 - 9) + 12
    admitted = {d: int(redis_client.hget(f.keys.key("dom", d), "admitted")) for d in ("a.test", "b.test", "c.test")}
    assert admitted == {"a.test": 6, "b.test": 9, "c.test": 2}
    assert redis_client.hget(f.keys.stats, "budgets_spent") == b"3"  # each domain counted once
    assert redis_client.hget(f.keys.stats, "over_budget") == str(9 + again.over_budget).encode()


def test_links_sent_with_an_enqueue_count_before_its_budgets(redis_client: redis.Redis, clock: ManualClock) -> None:
    """The links between domains ride on the enqueue (one call a flush), their
    weights counted before the same call reads its budgets."""
    f = Frontier(redis_client, Keys("crawler", "t", 0), politeness=Politeness(delay=0.001), order="rank",
                 domain_budget=2, budget_max=100, clock=clock)
    f.open()
    links = [("a.test", "x.test"), ("a.test", "y.test"), ("a.test", "x.test"), ("b.test", "x.test")]
    result = f.add(urls("a.test", 0, 8) + urls("c.test", 0, 8), links=links)
    assert redis_client.pfcount(f.keys.key("inl", "a.test")) == 2  # a source counted once
    assert redis_client.pfcount(f.keys.key("inl", "b.test")) == 1
    assert (result.added, result.over_budget) == (6 + 2, 2 + 6)  # a.test weighs 2: 2 x 3; c.test 2
    plain = f.add(urls("d.test", 0, 3))  # no links: the call reads as before
    assert (plain.added, plain.over_budget) == (2, 1)


def test_a_flat_budget_is_the_same_for_every_weight(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = Frontier(redis_client, Keys("crawler", "t", 0), politeness=Politeness(delay=0.001), order="rank",
                 domain_budget=3, clock=clock)
    f.open()
    f.load_ranks({"a.test": 1000.0})
    f.add_links([("b.test", "x.test")])
    result = f.add(urls("a.test", 0, 5) + urls("b.test", 0, 5))
    assert (result.added, result.over_budget) == (6, 4)


def test_the_weights_are_counted_by_decade_as_they_change(redis_client: redis.Redis, clock: ManualClock) -> None:
    f = make(redis_client, clock)
    fill(f, ["a.test", "b.test", "c.test"], per=4)
    f.add_links([("b.test", f"s{i}.test") for i in range(5)] + [("c.test", f"s{i}.test") for i in range(12)])
    served(f, clock, 3, batch=3)  # each weighed as it came due
    assert f.order_status()["weights"] == {"0": 1, "1-9": 1, "10-99": 1}
    f.add_links([("b.test", f"t{i}.test") for i in range(7)])  # b.test: 12 linking domains
    served(f, clock, 3, batch=3)
    assert f.order_status()["weights"] == {"0": 1, "10-99": 2}
