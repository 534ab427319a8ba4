"""The frontier on a real 3-primary Redis Cluster."""

from __future__ import annotations

from collections.abc import Iterator
from hashlib import sha256

import pytest
from redis.cluster import RedisCluster, key_slot

from crawler.store import Dedup, Frontier, Item, Politeness
from crawler.store import Keys
from tests.servers import RedisClusterServers


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
