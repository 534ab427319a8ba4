"""Which name is a site (#50 item 7): the politeness key and the shard key
are the registered domain by both sections of the Public Suffix List, and a
frontier persisted under the old keys (the ICANN section alone) is still
served, nothing lost or doubled."""

from __future__ import annotations

import pytest
import redis

from crawler.clock import ManualClock
from crawler.identity import _extract, domain_of, registered_domain, url_fingerprint
from crawler.sharding import shard_of
from crawler.store import Frontier, Item, Keys, Politeness
from crawler.store import codec


@pytest.mark.parametrize(("host", "site"), [
    # the private section: each customer of a platform is a site of its own
    ("alice.blogspot.com", "alice.blogspot.com"),
    ("www.alice.blogspot.com", "alice.blogspot.com"),
    ("bob.github.io", "bob.github.io"),
    ("x.herokuapp.com", "x.herokuapp.com"),
    ("foo.netlify.app", "foo.netlify.app"),
    ("a.b.s3.amazonaws.com", "b.s3.amazonaws.com"),
    ("ALICE.Blogspot.COM.", "alice.blogspot.com"),  # case and the root dot do not matter
    # the ICANN section, as before
    ("www.bbc.co.uk", "bbc.co.uk"),
    ("www.github.com", "github.com"),
    ("shop.example.com", "example.com"),
    ("www.xn--bcher-kva.de", "xn--bcher-kva.de"),
    ("city.kawasaki.jp", "city.kawasaki.jp"),  # an exception rule (!city.kawasaki.jp)
    ("a.b.c.kawasaki.jp", "b.c.kawasaki.jp"),  # a wildcard rule (*.kawasaki.jp)
    # a platform not on the list stays one site
    ("user.wordpress.com", "wordpress.com"),
    # names that are a suffix themselves stand for themselves
    ("github.io", "github.io"),
    ("blogspot.com", "blogspot.com"),
    ("co.uk", "co.uk"),
    ("ec2-1-2-3-4.compute-1.amazonaws.com", "ec2-1-2-3-4.compute-1.amazonaws.com"),  # *.compute-1...
    # unknown suffixes: the default rule "*", as before (the test web depends on it)
    ("www.d0.test", "d0.test"),
    ("a.b.d3.test", "d3.test"),
    ("d0.test", "d0.test"),
    ("files.intranet", "files.intranet"),
    ("localhost", "localhost"),
    # addresses stand for themselves
    ("127.0.0.1", "127.0.0.1"),
    ("[::1]", "[::1]"),
    ("[2001:db8::1]", "[2001:db8::1]"),
    ("", ""),
])
def test_the_site_of_a_host(host: str, site: str) -> None:
    assert registered_domain(host) == site


def test_the_private_section_is_on_and_offline() -> None:
    assert _extract.include_psl_private_domains
    assert _extract.suffix_list_urls == ()  # the bundled snapshot: never the network
    assert _extract("alice.blogspot.com").is_private


def test_a_platform_s_sites_are_apart_in_the_frontier_and_over_shards() -> None:
    urls = [f"https://user{i}.blogspot.com/" for i in range(200)]
    assert len({domain_of(u) for u in urls}) == 200
    assert len({shard_of(domain_of(u), 8) for u in urls}) == 8  # no longer all on one shard
    # and one organisation's hosts are still one site
    assert {domain_of(u) for u in ("https://www.bbc.co.uk/", "https://news.bbc.co.uk/x")} == {"bbc.co.uk"}


def item(url: str, domain: str) -> Item:
    return Item(url_fingerprint(url), domain, 0, codec.encode_url(url), False)


def test_a_frontier_queued_under_the_old_keys_is_served_nothing_lost(
        redis_client: redis.Redis, clock: ManualClock) -> None:
    """A frontier persisted before the private section: its requests of
    blogspot.com's sites wait in one queue, ``blogspot.com``. After the
    upgrade that queue is served to its end under its own key and turn
    (a lease carries the key it was taken under, and its acknowledgement and
    its expiry go back to that key), new links go to the new keys, and a URL
    queued under the old key is a duplicate when offered under the new one:
    dedup is by fingerprint, whatever the key."""
    keys = Keys("crawler", "psl", 0)
    old = [f"https://{who}.blogspot.com/{n}" for who in ("alice", "bob") for n in range(3)]
    before = Frontier(redis_client, keys, politeness=Politeness(delay=10.0), clock=clock)
    before.open()
    assert before.add([item(u, "blogspot.com") for u in old]).added == 6  # the old key, as the old code wrote it
    del before

    # the upgraded worker opens the persisted frontier
    after = Frontier(redis_client, keys, politeness=Politeness(delay=10.0), clock=clock)
    after.open()
    assert after.pending() == 6
    new = ["https://alice.blogspot.com/new", "https://carol.blogspot.com/"]
    added = after.add([item(u, domain_of(u)) for u in [*new, old[0], old[4]]])
    assert (added.added, added.duplicates) == (2, 2)  # the old ones were seen under the old key

    served: list[str] = []
    by_key: dict[str, int] = {}
    expired_once = False
    acks: list[str] = []
    for _ in range(200):  # each turn: a call, then 10 s on the server's clock
        taken = after.take(10, acks)
        acks = []
        for leased in taken.items:
            if leased.domain == "blogspot.com" and not expired_once:
                expired_once = True  # its worker dies: the lease expires back to the old key's queue
                continue
            acks.append(leased.lease)
            served.append(leased.entry.split(b" ", 1)[1].decode())  # "U<depth> <url>" (codec.encode_url)
            by_key[leased.domain] = by_key.get(leased.domain, 0) + 1
        if after.pending() == 0 and not acks:
            break
        clock.advance(after.lease_ms / 1000 + 10.001 if not taken.items else 10.001)
    assert after.take(10, acks).items == [] and after.pending() == 0
    assert sorted(served) == sorted([*old, *new])  # every URL once: none lost, none twice
    assert expired_once
    # the old queue kept its one key (one turn for the lot) to its end; new links use the new keys
    assert by_key == {"blogspot.com": 6, "alice.blogspot.com": 1, "carol.blogspot.com": 1}
    assert not list(redis_client.scan_iter(keys.key("q", "*")))  # every queue drained
    assert int(redis_client.hget(keys.dom("blogspot.com"), "n") or 0) == 0
