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
