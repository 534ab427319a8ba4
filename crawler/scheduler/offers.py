"""Offers to the frontier: Scrapy requests (``enqueue_request``) and plain
URLs (``add_urls``), made into frontier items (``Item``) for the write
buffer, or for another shard's inbox."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from crawler.meta import DELAY
from crawler.scheduler import codec
from crawler.scheduler._stats import inc
from crawler.scheduler.domains import domain_of
from crawler.scheduler.fingerprint import url_fingerprint
from crawler.scheduler.frontier import Item
from crawler.scheduler.marks import LOST, REDIRECTED
from crawler.sharding import shard_of

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

    from crawler.scheduler.canonical import Canonicalizer
    from crawler.scheduler.leases import Leases
    from crawler.scheduler.writes import WriteBuffer

logger = logging.getLogger(__name__)


class Offers:
    def __init__(self, spider: Spider, shard: int, shards: int, forward: bool, writes: WriteBuffer,
                 leases: Leases, fingerprinter: RequestFingerprinterProtocol, stats: StatsCollector | None,
                 *, canonicalize: Canonicalizer, dedup_start_requests: bool) -> None:
        self.spider = spider
        self.shard = shard
        self.shards = shards
        self.forward = forward
        self.writes = writes
        self.leases = leases
        self.fingerprinter = fingerprinter
        self.stats = stats
        self.canonicalize = canonicalize
        self.dedup_start_requests = dedup_start_requests

    def request(self, request: Request) -> bool:
        """Buffer ``request`` (see ``FrontierScheduler.enqueue_request``)."""
        lease = self.leases.carried(request)
        try:
            entry = codec.encode(request, self.spider)
        except (TypeError, ValueError) as exc:
            logger.error("Cannot store %s in the frontier, dropped: %s", request, exc)
            inc(self.stats, "crawler/frontier/unserializable")
            if lease is not None:
                self.writes.ack(self.leases.marks.ack(lease, LOST))
            return False
        digest = self.fingerprinter.fingerprint(request)
        dont_filter = request.dont_filter and not (
            # Scrapy's start requests skip the dupefilter; in a frontier shared
            # by many workers (and across restarts) that means one fetch each
            self.dedup_start_requests and request.meta.get("is_start_request")
        )
        item = Item(digest, domain_of(request.url), request.priority, entry, dont_filter)
        delay = request.meta.pop(DELAY, None)
        # a copy that waits (a retry, a hand-back) is the same request moving on;
        # one that does not is a redirect: its URL ended there
        ack = self.leases.marks.ack(lease, "" if delay is not None else REDIRECTED) if lease is not None else None
        if delay is not None:
            # the wait happens on the Redis server's clock, not in a worker
            self.writes.delay(float(delay), item, ack)
            inc(self.stats, "crawler/frontier/delayed")
            if ack is not None:
                self.writes.soon()
        else:
            self.writes.add(item)
            if ack is not None:
                self.writes.ack(ack)
        inc(self.stats, "scheduler/enqueued/redis")
        return True

    def urls(self, urls: Iterable[str], depth: int, priority: int, canonical: bool) -> int:
        """Buffer plain URLs (see ``FrontierScheduler.add_urls``); how many were offered."""
        offered = 0
        for url in urls:
            if not canonical:
                try:
                    url = self.canonicalize(url)
                except ValueError:
                    inc(self.stats, "crawler/frontier/invalid_urls")
                    continue
            domain = domain_of(url)
            item = Item(url_fingerprint(url), domain, priority, codec.encode_url(url, depth))
            target = shard_of(domain, self.shards) if self.shards > 1 else self.shard
            if target == self.shard:
                self.writes.add(item)
            elif self.forward:
                self.writes.outbox.add(target, item)
            else:
                inc(self.stats, "crawler/forward/dropped")
                continue
            offered += 1
        return offered
