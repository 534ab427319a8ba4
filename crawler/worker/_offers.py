"""Offers: Scrapy requests and plain URLs made into frontier items, into the
write buffer (this shard's) or the outbox (another shard's); a request that
carries a lease (a retry, a redirect) ends that lease here."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from crawler.identity import domain_of, url_fingerprint
from crawler.meta import DELAY, LASTMOD, LEASE
from crawler.recrawl.record import key_of
from crawler.sharding import shard_of
from crawler.sitemaps import lastmod_seconds
from crawler.store import LOST, REDIRECTED, Hint, Item, codec
from crawler.worker._recent import unpack_position
from crawler.worker._stats import inc
from crawler.worker.visit import host_of_url

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

    from crawler.identity import Canonicalizer
    from crawler.worker._inlinks import InlinkSketch
    from crawler.worker._leases import Leases
    from crawler.worker._writes import WriteBuffer

logger = logging.getLogger(__name__)

_UNKNOWN = object()  # not in Recent


class Offers:
    def __init__(self, spider: Spider, shard: int, shards: int, forward: bool, writes: WriteBuffer,
                 leases: Leases, fingerprinter: RequestFingerprinterProtocol, stats: StatsCollector | None,
                 *, canonicalize: Canonicalizer, dedup_start_requests: bool, hints: bool = False,
                 links_between: int = 0, inlinks: InlinkSketch | None = None) -> None:
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
        #: recrawl on: a request's sitemap <lastmod> (meta[LASTMOD]) goes to the frontier as a hint
        self.hints = hints
        #: CRAWLER_DOMAIN_ORDER = "rank": which domains link to which go to the frontier
        #: (each pair once per process while this many are remembered: docs/frontier.md)
        self.links_between = links_between
        self._pairs: set[tuple[str, str]] = set()
        #: CRAWLER_WITHIN_ORDER = "inlinks": links found again counted, promotions to the write buffer
        self.inlinks = inlinks

    def request(self, request: Request) -> bool:
        """Buffer ``request`` (see ``FrontierScheduler.enqueue_request``); a
        lease it carries (a retry or redirect of a leased request) ends here."""
        lease = self.leases.get(request.meta.pop(LEASE, None))
        try:
            entry = codec.encode(request, self.spider)
        except (TypeError, ValueError) as exc:
            logger.error("Cannot store %s in the frontier, dropped: %s", request, exc)
            inc(self.stats, "crawler/frontier/unserializable")
            if lease is not None:
                lease.ack(LOST)
            return False
        delay = request.meta.pop(DELAY, None)
        inc(self.stats, "scheduler/enqueued/redis")
        if delay is not None and lease is not None:
            # a copy that waits (a retry, a hand-back) is the same request moving on
            lease.delay(float(delay), entry, domain=domain_of(request.url), priority=request.priority)
            inc(self.stats, "crawler/frontier/delayed")
            return True
        digest = self.fingerprinter.fingerprint(request)
        dont_filter = request.dont_filter and not (
            # Scrapy's start requests skip the dupefilter; in a frontier shared
            # by many workers (and across restarts) that means one fetch each
            self.dedup_start_requests and request.meta.get("is_start_request")
        )
        item = Item(digest, domain_of(request.url), request.priority, entry, dont_filter)
        if self.hints and request.meta.get(LASTMOD):
            seconds = lastmod_seconds(str(request.meta[LASTMOD]))
            if seconds is not None:
                self.writes.hint(Hint(item.domain, key_of(digest), seconds, host_of_url(request.url)))
        if delay is not None:
            # the wait happens on the Redis server's clock, not in a worker
            self.writes.delay(float(delay), item)
            inc(self.stats, "crawler/frontier/delayed")
        else:
            self.writes.add(item)
            if lease is not None:
                lease.ack(REDIRECTED)  # one that does not wait is a redirect: its URL ended there
        return True

    def urls(self, urls: Iterable[str], depth: int, priority: int, canonical: bool) -> int:
        """Buffer plain URLs (see ``FrontierScheduler.add_urls``); how many were
        offered, those already seen in the frontier (:class:`Recent`) included."""
        offered = known = 0
        recent = self.writes.recent
        for url in urls:
            if not canonical:
                try:
                    url = self.canonicalize(url)
                except ValueError:
                    inc(self.stats, "crawler/frontier/invalid_urls")
                    continue
            digest = url_fingerprint(url)
            if recent is not None and digest in recent:
                known += 1
                if self.inlinks is not None:
                    self._sighted(url, digest, depth)
                continue
            domain = domain_of(url)
            item = Item(digest, domain, priority, codec.encode_url(url, depth))
            target = self._shard_of(domain)
            if target == self.shard:
                self.writes.add(item)
            elif self.forward:
                self.writes.outbox.add(target, item)
            else:
                inc(self.stats, "crawler/forward/dropped")
                continue
            offered += 1
        if known:
            inc(self.stats, "crawler/frontier/duplicates_local", known)
        return offered + known

    def _shard_of(self, domain: str) -> int:
        return shard_of(domain, self.shards) if self.shards > 1 else self.shard

    def links_from(self, source: str, urls: Iterable[str]) -> int:
        """The rank order's in-links: the page of registered domain ``source``
        links to ``urls`` (absolute): each other domain they name counts
        ``source`` among its linking domains, sent once while this process
        remembers the pair (its HyperLogLog counts a source once whatever it
        is sent). Returns the pairs sent; 0 when the order is not ``rank``."""
        if not self.links_between:
            return 0
        sent = 0
        for target in {domain_of(url) for url in urls}:
            if target == source or (source, target) in self._pairs:
                continue
            if len(self._pairs) >= self.links_between:
                self._pairs.clear()
            self._pairs.add((source, target))
            self.writes.link(self._shard_of(target), target, source)
            sent += 1
        return sent

    def unknown(self, urls: list[str], depth: int = 0, origin: str = "") -> list[str]:
        """``urls`` (canonical) less those :class:`Recent` knows, counted as
        offered duplicates: a caller can skip its own checks of those. In
        the in-link order each one known is a link found again (offered at
        ``depth`` if it is promoted); given the linking page's ``origin``
        (``scheme://host/``), only links to that host count, as the
        simulation's ``+i`` (docs/crawl-order.md)."""
        recent = self.writes.recent
        if recent is None or not urls:
            return urls
        if self.inlinks is None:
            fresh = [url for url in urls if url_fingerprint(url) not in recent]
        else:
            # Recent's two generations read here, once a link: this runs for every link of every page
            fresh, again, new, old = [], [], recent.new, recent.old
            for url in urls:
                digest = url_fingerprint(url)
                packed = new.get(digest, _UNKNOWN)
                if packed is _UNKNOWN:
                    packed = old.get(digest, _UNKNOWN)
                    if packed is _UNKNOWN:
                        fresh.append(url)
                        continue
                if packed is not None and url.startswith(origin):  # this process queued it, in this shard
                    position, priority = unpack_position(packed)
                    again.append((priority, digest, position, url))
            if again and origin:  # one host's links: one domain's
                self.writes.promotions.extend(self.inlinks.sighted_all(domain_of(origin), again, depth))
            elif again:
                for sighting in again:
                    self.writes.promotions.extend(self.inlinks.sighted_all(domain_of(sighting[3]), [sighting], depth))
        if len(fresh) < len(urls):
            inc(self.stats, "crawler/frontier/duplicates_local", len(urls) - len(fresh))
        return fresh

    def _sighted(self, url: str, digest: bytes, depth: int) -> None:
        """A link found again to ``url``: counted if this process queued it
        in this shard (its position and priority known), a promotion
        buffered when it is due."""
        assert self.inlinks is not None
        queued = self.writes.recent.position(digest) if self.writes.recent is not None else None
        if queued is None:
            return
        position, priority = queued
        promotion = self.inlinks.sighted(domain_of(url), priority, digest, position, url, depth)
        if promotion is not None:
            self.writes.promotions.append(promotion)
