"""The frontier on a real 3-primary Redis Cluster; and on 3 masters with a
replica each, one killed mid-crawl (the failover fence, docs/operations.md)."""

from __future__ import annotations

from collections.abc import Iterator
from hashlib import sha256
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster, key_slot

from crawler.store import Dedup, Frontier, Item, Politeness
from crawler.store import REWOUND, VANISHED, FrontierLost, Keys
from tests.servers import RedisClusterServers, RedisServer, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers(tmp_path_factory.mktemp("cluster")).start()
    yield servers
    servers.stop()


@pytest.mark.parametrize("mode", ["exact", "bloom"])
def test_frontier_works_unchanged_on_a_cluster(cluster: RedisClusterServers, mode: str) -> None:
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    frontier = Frontier(client, Keys("crawler", f"c{mode}", 1), dedup=Dedup(mode, capacity=1000),
                        politeness=Politeness(delay=0), lease_seconds=60)
    frontier.open()
    items = [Item(sha256(f"u{i}".encode()).digest(), f"d{i % 7}.test", 0, f"u{i}".encode())
             for i in range(300)]
    assert frontier.add(items).added == 300
    assert frontier.add(items[:10]).duplicates == 10
    taken = frontier.take(1000)
    assert len(taken.items) == 300
    assert frontier.delay([(0, x.domain, x.priority, x.entry) for x in taken.items[:5]],
                          acks=[x.lease for x in taken.items[:5]]) == 5
    assert frontier.release([x.lease for x in taken.items[5:10]]) == 5
    frontier.add([], acks=[x.lease for x in taken.items[10:]])
    assert sorted(x.entry for x in frontier.take(100).items) == sorted(x.entry for x in taken.items[:10])
    keys = list(client.scan_iter(match=frontier.keys.pattern()))
    assert len(keys) > 10
    assert len({key_slot(k) for k in keys}) == 1  # one hash tag, one slot, one node
    assert frontier.clear() == len(keys)


def test_shards_spread_over_the_nodes(cluster: RedisClusterServers) -> None:
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    nodes = {client.get_node_from_key(Keys("crawler", "billion", s).base).port for s in range(12)}
    assert len(nodes) == 3


def test_scrapy_crawl_on_the_cluster(cluster: RedisClusterServers, make_web) -> None:
    from tests.servers import run_scrapy, scrapy_env

    web = make_web(domains=3, pages=8, links=4, size_fixed=3000, private_share=0, crawl_delay_share=0)
    starts = ",".join(web.url(d) for d in range(3))
    result = run_scrapy(["crawl", "demo", "-a", f"start_urls={starts}", "-s", "CRAWLER_REDIS_CLUSTER=True",
                         "-s", "CRAWLER_KEY_PREFIX=clustertest"], scrapy_env(cluster.url))
    assert result.returncode == 0, result.stderr[-3000:]
    pages = [e for e in web.log() if e.path.startswith("/p/")]
    fetched = {(e.domain, e.path) for e in pages}
    assert {(d, f"/p/{k}.html") for d in web.domains for k in range(1, 8)} <= fetched
    assert len(pages) == len({(e.domain, e.path) for e in pages})  # each exactly once


def test_per_address_politeness_holds_per_shard_on_a_cluster(cluster: RedisClusterServers) -> None:
    """A Cluster's script reaches one slot: each shard keeps its own address
    space (its frontier's), exact within the shard; two shards may each have
    one request at an address, each turn as long as the shards are many, so
    the address's rate stays one a delay (docs/politeness.md says so)."""
    from crawler.store import AddressPoliteness, Lookup
    from crawler.store.codec import encode_url

    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    shards = [Frontier(client, Keys("crawler", "cip", s), addresses=AddressPoliteness(delay=5.0), shards=2)
              for s in (0, 1)]
    for s, f in enumerate(shards):
        f.open()
        assert f.address_base == f.keys.base  # per shard
        assert client.hget(f.keys.meta, "ip_delay") == b"10000"  # 2 shards: each gives the address a turn in 10 s
        domains = [f"s{s}d{i}.test" for i in range(3)]
        f.add([Item(sha256(d.encode()).digest(), d, 0, encode_url(f"http://{d}/")) for d in domains])
        lookups = f.take(10).lookups
        assert sorted(h for h, _ in lookups) == domains
        f.answer([Lookup(h, d, "ok", ("192.0.2.7",)) for h, d in lookups])
    taken = [f.take(10).items for f in shards]
    assert [len(t) for t in taken] == [1, 1]  # one at the address per shard, three domains due in each
    assert all(x.address == "192.0.2.7" for t in taken for x in t)
    keys = [k for f in shards for k in client.scan_iter(match=f.keys.pattern())]
    assert all(len({key_slot(k) for k in client.scan_iter(match=f.keys.pattern())}) == 1 for f in shards)
    assert sum(f.clear() for f in shards) == len(keys)


# --- a failover: a master killed, its replica takes over (docs/operations.md) ---

@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[RedisClusterServers]:
    """Three masters with a replica each, failed over about 2.5 s after a master dies."""
    servers = RedisClusterServers(tmp_path / "cluster", 3, replicas=1, node_timeout_ms=1000).start()
    yield servers
    servers.stop()


def replica_of(cluster: RedisClusterServers, master: RedisServer) -> RedisServer:
    return next(n for n in cluster.replicas() if n.client().info("replication")["master_port"] == master.port)


def readonly(node: RedisServer) -> redis.Redis:
    """A client reading a replica's own data (no MOVED to its master)."""
    client = node.client(single_connection_client=True)
    client.execute_command("READONLY")
    return client


def lag(replica: RedisServer, timeout: float = 30) -> None:
    """The replica stops applying its master's writes (they are lost if the
    master dies now): a replica behind its master, as asynchronous
    replication leaves one, held there for the test."""
    replica.client().execute_command("CLIENT", "PAUSE", int(timeout * 1000), "WRITE")


def test_a_failover_holds_the_shard_one_full_delay(replicated: RedisClusterServers) -> None:
    """The replica missed the master's last dequeue: by what it holds, the
    domain is due at once, under its delay after the site saw the request the
    lost lease sent. The fence holds it one full delay from the first script
    that ran on the new master, is counted, and is not taken for a lost
    frontier (the lease counter went back: it jumps a million instead)."""
    from crawler.store.codec import encode_url

    delay = 2.0
    client = RedisCluster(host="127.0.0.1", port=replicated.nodes[0].port)
    frontier = Frontier(client, Keys("crawler", "fo", 0), politeness=Politeness(delay=delay), lease_seconds=60)
    frontier.open()
    keys = frontier.keys
    urls = ["http://a.test/1", "http://a.test/2", "http://b.test/1"]
    frontier.add([Item(sha256(u.encode()).digest(), u.split("/")[2], 0, encode_url(u)) for u in urls])
    first = frontier.take(10)
    assert sorted(x.entry for x in first.items) == [encode_url(urls[0]), encode_url(urls[2])]
    # both answered a full delay ago: their domains are due now
    frontier.add([], acks=[f"{x.lease}:{int(delay * 1000)}" for x in first.items])
    master = replicated.master_of(keys.base)
    replica = replica_of(replicated, master)
    assert master.client().execute_command("WAIT", 1, 5000) == 1  # the replica has all of it
    lag(replica)
    second = frontier.take(10)  # the site sees a.test/2 now; the replica does not see this lease
    assert [x.entry for x in second.items] == [encode_url(urls[1])]
    seen_seq = frontier.epoch.seq
    assert int(readonly(replica).get(keys.key("seq"))) < seen_seq
    replicated.kill_master(key=keys.base)
    replica.client().execute_command("CLIENT", "UNPAUSE")
    assert replicated.wait_failover(30).port == replica.port

    # what the new master holds: a.test not parked, due at once (no fence: fetched again at once)
    new = readonly(replica)
    now = frontier.clock.server_ms(new)
    assert new.hget(keys.dom("a.test"), "busy") is None
    assert float(new.zscore(keys.ready, "a.test")) <= now
    assert new.hget(keys.key("epoch"), "fenced") is None

    taken = frontier.take(10)  # the cluster client finds the new master (connection refused, then a refresh)
    assert taken.items == []  # held
    assert taken.fenced_ms >= now
    assert taken.next_due_ms is not None and taken.next_due_ms >= taken.fenced_ms + delay * 1000
    assert frontier.epoch.fences == 1 and frontier.epoch.seq > seen_seq  # jumped a million: no FrontierLost
    assert frontier.status()["counters"]["failover_fences"] == 1
    frontier.check_epoch()  # an idle worker's look: quiet too, and no second fence
    assert frontier.epoch.fences == 1

    # the hold ends one full delay after the fence, then a.test/2 goes again (its lease was lost)
    again = wait_until(lambda: frontier.take(10).items, 3 * delay, "a.test after the hold")
    assert [x.entry for x in again] == [encode_url(urls[1])]
    assert int(again[0].lease) > 1_000_000 > int(second.items[0].lease)  # the lost lease id names no new one
    assert frontier.clock.server_ms(new) >= taken.fenced_ms + delay * 1000
    assert frontier.status()["counters"]["failover_fences"] == 1

    # a real loss on the new master is still one: back in time without a failover, or gone
    seq = frontier.epoch.seq
    client.set(keys.key("seq"), seq - 1)
    with pytest.raises(FrontierLost) as rewound:
        frontier.take(10)
    assert rewound.value.kind == REWOUND
    client.set(keys.key("seq"), seq)
    client.delete(keys.key("epoch"))
    with pytest.raises(FrontierLost) as vanished:
        frontier.check_epoch()
    assert vanished.value.kind == VANISHED
    assert not client.exists(keys.key("epoch"))  # a look makes nothing
    assert frontier.status()["counters"]["failover_fences"] == 1


def test_scrapy_crawl_rides_a_failover(replicated: RedisClusterServers, make_web, tmp_path: Path) -> None:
    """``scrapy crawl`` on 3 masters + 3 replicas; the master of its frontier
    is killed (SIGKILL) mid-crawl while its replica lags (the master's last
    dequeue, and the acknowledgements riding with it, never reach the
    replica). The replica takes over (about 2.5 s) and the crawl goes on:
    exit 0, every page, the ledger adds up; no two requests to a domain closer
    than the delay at the site, from the end of one answer to the next
    arrival (the fence: without it, the request of the lost lease goes again
    as soon as the worker is back, under the delay); pages fetched twice no
    more than the leases out from the replica's last write to the master's
    death."""
    import re
    import subprocess
    import sys
    import time

    from devkit.testweb.control import consecutive
    from tests.servers import ROOT, scrapy_env

    delay = 4.0  # longer than the failover and the worker's way back: without the fence, under it
    web = make_web(domains=3, pages=2, links=4, size_fixed=3000, private_share=0, crawl_delay_share=0,
                   cross_share=0, dup_share=0)
    base = Keys("fo", "demo", 0).base
    master = replicated.master_of(base)
    replica = replica_of(replicated, master)
    starts = ",".join(web.url(d) for d in range(3))
    cmd = [sys.executable, "-m", "scrapy", "crawl", "demo", "-a", f"start_urls={starts}",
           "-s", "CRAWLER_REDIS_CLUSTER=True", "-s", "CRAWLER_KEY_PREFIX=fo", "-s", f"CRAWLER_DOMAIN_DELAY={delay}",
           "-s", "CRAWLER_DELAY_FROM=finish", "-s", "DOWNLOAD_TIMEOUT=3", "-s", "CRAWLER_LEASE_SECONDS=6",
           "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "LOG_LEVEL=INFO"]
    log_file = tmp_path / "crawl.log"
    with log_file.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=scrapy_env(replicated.url), stdout=subprocess.DEVNULL,
                                stderr=out)
    on_master, on_replica = master.client(), readonly(replica)

    def lagging() -> str | None:
        """A domain waiting for its turn (queued, not parked) on the master and
        the replica alike; the replica is made to lag then: the domain's next
        lease is the master's alone."""
        for domain in web.domains:
            busy, due = on_master.hget(f"{base}:dom:{domain}", "busy"), on_master.zscore(f"{base}:ready", domain)
            if busy is None and due is not None and due > frontier_now() + 200:
                on_master.execute_command("WAIT", 1, 1000)
                lag(replica)
                if on_replica.hget(f"{base}:dom:{domain}", "busy") is None:
                    return domain
                replica.client().execute_command("CLIENT", "UNPAUSE")
        return None

    def frontier_now() -> int:
        seconds, micros = on_master.time()
        return seconds * 1000 + micros // 1000

    try:
        wait_until(lambda: len({e.domain for e in web.log()}) == 3, 30, "a request to every domain")
        domain = wait_until(lagging, 30, "a domain waiting its turn")
        leases = set(on_master.zrange(f"{base}:leases", 0, -1))  # out from the replica's last write ...
        replica_seq = int(on_replica.get(f"{base}:seq"))
        wait_until(lambda: on_master.hget(f"{base}:dom:{domain}", "busy"), 30, "its lease, the replica misses")
        leases |= set(on_master.zrange(f"{base}:leases", 0, -1))  # ... to the master's death
        lost = int(on_master.get(f"{base}:seq")) - replica_seq  # lease ids the replica never saw
        killed_at = time.monotonic()
        replicated.kill_master(key=base)
        replica.client().execute_command("CLIENT", "UNPAUSE")
        replicated.wait_failover(30)
        failover = time.monotonic() - killed_at
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log_file.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert "(adds up)" in err and "'crawler/ledger/adds_up': 1" in err, err[-3000:]
    assert "'crawler/ledger/lost': 0" in err and "'crawler/ledger/unknown': 0" in err
    assert "failed over (a Redis Cluster replica took over its master)" in err
    assert "'crawler/frontier/failover_fences': 1" in err
    # back within the reconnect backoff's cap on a Cluster (1 s) of the failover's end
    back = re.search(r"is back after ([\d.]+)s", err)
    assert back and float(back.group(1)) <= failover + 1.5, (back and back.group(0), failover)
    log = web.log()
    fetched = [(e.domain, e.path) for e in log]
    assert {(d, p) for d in web.domains for p in ("/", "/p/0.html", "/p/1.html")} <= set(fetched)
    pairs = consecutive(log)
    under = [(round(b.ms - a.ms), round(b.ms - a.done), a.domain, a.path, b.path) for a, b in pairs
             if min(b.ms - a.ms, b.ms - a.done) < delay * 1000]
    assert under == []
    twice = len(fetched) - len(set(fetched))
    assert lost >= 1 and twice <= len(leases), (twice, leases, lost)


def test_a_worker_started_during_a_failover_waits_for_it(tmp_path: Path, make_web) -> None:
    """``scrapy crawl`` started while the master of its frontier is dead and
    its replica not yet elected (4 s ``cluster-node-timeout``: about 8 s with
    no master for those slots): the start neither fails nor loses a page; it
    waits for the new master and crawls everything, exit 0, the ledger adding
    up. A supervisor restarting workers during a failover is the case."""
    import subprocess
    import sys
    import time

    from tests.servers import ROOT, scrapy_env

    servers = RedisClusterServers(tmp_path / "cluster", 3, replicas=1, node_timeout_ms=4000).start()
    try:
        web = make_web(domains=2, pages=2, links=3, size_fixed=2000, private_share=0, crawl_delay_share=0,
                       cross_share=0, dup_share=0)
        base = Keys("fs", "demo", 0).base
        replica = replica_of(servers, servers.master_of(base))
        killed_at = time.monotonic()
        servers.kill_master(key=base)
        cmd = [sys.executable, "-m", "scrapy", "crawl", "demo",
               "-a", f"start_urls={','.join(web.url(d) for d in range(2))}",
               "-s", "CRAWLER_REDIS_CLUSTER=True", "-s", "CRAWLER_KEY_PREFIX=fs", "-s", "CRAWLER_DOMAIN_DELAY=0.2",
               "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "LOG_LEVEL=INFO"]
        log_file = tmp_path / "crawl.log"
        with log_file.open("w") as out:  # started on a live node's URL, before the election
            proc = subprocess.run(cmd, cwd=ROOT, env=scrapy_env(servers.url), stdout=subprocess.DEVNULL,
                                  stderr=out, timeout=120)
        assert servers.wait_failover(30).port == replica.port
        elected = time.monotonic() - killed_at
    finally:
        servers.stop()
    err = log_file.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert "(adds up)" in err and "'crawler/ledger/lost': 0" in err, err[-3000:]
    fetched = {(e.domain, e.path) for e in web.log()}
    assert {(d, p) for d in web.domains for p in ("/", "/p/0.html", "/p/1.html")} <= fetched
    # it did open inside the window: its frontier's master refused it, and it waited once
    assert err.count("does not answer (") == 1 and elected > 4, (elected, err[-3000:])


def test_a_recrawl_on_the_cluster(cluster: RedisClusterServers, make_web) -> None:
    """Recrawling on a real Cluster: the history, the schedule, the hosts'
    trust and the hints stay in the frontier's slot (every script call on one
    node); pages are revisited, conditionally, never sooner than MIN."""
    from collections import defaultdict

    from tests.servers import run_scrapy, scrapy_env

    web = make_web(domains=2, pages=4, links=3, size_fixed=2000, private_share=0, crawl_delay_share=0, cross_share=0,
                   dup_share=0, change_share=0.5, change_mean_min_s=1.0, change_mean_max_s=3.0,
                   validators={"etag": 1.0})
    starts = ",".join(web.url(d) for d in range(2))
    result = run_scrapy(["crawl", "demo", "-a", f"start_urls={starts}", "-s", "CRAWLER_REDIS_CLUSTER=True",
                         "-s", "CRAWLER_KEY_PREFIX=clusterrecrawl", "-s", "CRAWLER_RECRAWL=fixed",
                         "-s", "CRAWLER_RECRAWL_INTERVAL=1.5", "-s", "CRAWLER_RECRAWL_MIN=1.5",
                         "-s", "CRAWLER_DOMAIN_DELAY=0.2", "-s", "CLOSESPIDER_TIMEOUT=8",
                         "-s", "SCHEDULER_IDLE_BEFORE_CLOSE=8"], scrapy_env(cluster.url))
    assert result.returncode == 0, result.stderr[-3000:]
    visits: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in web.log():
        if e.path.startswith("/p/") or e.path == "/":
            visits[(e.domain, e.path)].append(e.ms)
    assert sum(1 for ms in visits.values() if len(ms) >= 3) >= len(visits) // 2, visits
    for ms in visits.values():
        assert all(b - a >= 1500 for a, b in zip(sorted(ms), sorted(ms)[1:]))
    assert any(e.conditionals != "-" for e in web.log()) and any(e.status == 304 for e in web.log())
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    keys = list(client.scan_iter(match="clusterrecrawl:*"))
    assert any(b":hist:" in k for k in keys) and any(b":due:" in k for k in keys)
    assert len({key_slot(k) for k in keys}) == 1


def served(frontier: Frontier, n: int, take: int) -> list[bytes]:
    """The first ``n`` entries served (each acknowledged at once), the compact tier's jobs run between takes."""
    got: list[bytes] = []
    for _ in range(200):
        taken = frontier.take(take)
        got += [x.entry for x in taken.items]
        frontier.add([], acks=[x.lease for x in taken.items])
        if not taken.items and not frontier.tiers.run().jobs and len(got) >= n:
            break
    return got


def test_the_compact_tier_on_the_cluster(cluster: RedisClusterServers) -> None:
    """Blocks, spills and jobs live in the frontier's slot; a domain past its head is served in order."""
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    frontier = Frontier(client, Keys("crawler", "ctier", 2), politeness=Politeness(delay=0), domain_cap=2, block=4)
    frontier.open()
    sent = {f"d{d}.test": [f"U0 https://d{d}.test/p{i}".encode() for i in range(25)] for d in range(3)}
    items = [Item(sha256(e).digest(), d, 0, e) for d, es in sent.items() for e in es]
    assert frontier.add(items).spilled == 69
    keys = set(client.scan_iter(match=frontier.keys.pattern()))  # the jobs wait
    assert frontier.tiers.run().packed == 60
    assert all(client.llen(frontier.keys.key("z", d, "0")) == 5 for d in sent)
    keys |= set(client.scan_iter(match=frontier.keys.pattern()))  # the blocks are in
    assert any(b":z:" in k for k in keys) and any(b":tiers" in k for k in keys)
    assert len({key_slot(k) for k in keys}) == 1
    got = served(frontier, 75, take=50)
    for d, es in sent.items():
        assert [e for e in got if e.split(b"/")[2].decode() == d] == es
    frontier.clear()


def test_a_budget_by_rank_on_the_cluster(cluster: RedisClusterServers) -> None:
    """The weights a budget by rank reads (:rank, :inl:<d>, :meta) are in the frontier's slot."""
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    frontier = Frontier(client, Keys("crawler", "cbudget", 1), politeness=Politeness(delay=0), order="rank",
                        domain_budget=2, budget_max=5)
    frontier.open()
    frontier.load_ranks({"a.test": 1.0})
    frontier.add_links([("b.test", "x.test"), ("b.test", "y.test"), ("b.test", "z.test")])
    items = [Item(sha256(f"{d}/{i}".encode()).digest(), d, 0, f"U0 https://{d}/{i}".encode())
             for d in ("a.test", "b.test", "c.test") for i in range(8)]
    result = frontier.add(items)
    assert (result.added, result.over_budget) == (4 + 5 + 2, 24 - 11)
    assert client.hget(frontier.keys.stats, "budgets_spent") == b"3"
    keys = set(client.scan_iter(match=frontier.keys.pattern()))
    assert len({key_slot(k) for k in keys}) == 1
    frontier.clear()


def test_the_in_link_order_on_the_cluster(cluster: RedisClusterServers) -> None:
    """Positions, promoted copies and skip sets live in the frontier's slot."""
    from crawler.store import Promotion

    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    frontier = Frontier(client, Keys("crawler", "cinl", 1), politeness=Politeness(delay=0), within="inlinks")
    frontier.open()
    entries = [f"U0 https://a.test/{i}".encode() for i in range(5)]
    result = frontier.add([Item(sha256(e).digest(), "a.test", 0, e) for e in entries])
    assert result.positions == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}
    assert frontier.add([], promotions=[Promotion("a.test", 0, entries[3], 4)]).promoted == (("promoted", 0),)
    keys = set(client.scan_iter(match=frontier.keys.pattern()))
    assert any(b":pq:" in k for k in keys) and any(b":sp:" in k for k in keys)
    assert len({key_slot(k) for k in keys}) == 1
    assert served(frontier, 5, take=10) == [entries[3], entries[0], entries[1], entries[2], entries[4]]
    frontier.clear()
