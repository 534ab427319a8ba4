"""Recrawl on the worker: the history write each ending lease carries, and
the domains' μ (design/recrawl.md C.3, C.5, E).

:class:`HistoryBook` is ``Leases.history`` when ``CRAWLER_RECRAWL`` is on: a
lease that ended is judged by :func:`crawler.worker.visit.judge` from its
request's meta (``RECRAWL_STATE``, ``RECRAWL_SEEN``, ``RECRAWL``), its
leased entry, its domain, its dedup digest (the request fingerprint the
offer path computes: ``crawler/worker/_offers.py``), its host and the
settings; the write rides on the acknowledgement. It counts what it sees:

- ``crawler/recrawl/writes/<mode>`` (``create``, ``update``, ``delete``);
- ``crawler/recrawl/untracked``: a first visit whose request is too large
  to keep (``CRAWLER_RECRAWL_ENTRY_MAX``), fetched once; logged at WARNING
  at most once an hour with the running count (the caps the frontier
  refuses at are its own count, ``rv_untracked``);
- ``crawler/recrawl/unreadable``: a revisit whose record or state could not
  be read (logged at ERROR; the lease ends as it would, its history left
  as it was);
- ``crawler/recrawl/lies/<kind>`` (``etag``, ``last_modified``,
  ``last_modified_now``, ``ignored``): the evidence a host gave; a frozen
  ETag or Last-Modified is logged at WARNING once per host per process.

**μ** (``adaptive`` with a budget): the book keeps the μ of the domains it
writes for. A domain is due for a solve after 32 writes, or at a write when
neither the lease nor the book knows its μ. :meth:`HistoryBook.solve` (the
session's tick) reads every due domain's ``<base>:rdom:<d>`` in one pipeline
(``HGETALL``), solves μ from the 24 rate bins ``lb0..lb23``
(:func:`crawler.recrawl.estimate.domain_mu`, at the budget
``FrontierSettings.revisit_budget``) and writes ``mu`` back in a second
pipeline (``HSET``); counted ``crawler/recrawl/mu_solved``. A domain with no
page seen changing has no finite μ: nothing is written (its pages go to MAX
either way) and the book remembers it until its next 32 writes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crawler.meta import RECRAWL_STATE
from crawler.recrawl.estimate import RATE_BINS, domain_mu
from crawler.worker.visit import UNTRACKED, Rules, host_of_url, judge
from crawler.store.records import CREATE, DELETE, UPDATE, HistoryWrite
from crawler.worker._stats import inc

if TYPE_CHECKING:
    import redis
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

    from crawler.clock import Clock
    from crawler.worker._leases import Lease

logger = logging.getLogger(__name__)

#: writes of a domain between two solves of its μ (E)
SOLVE_EVERY = 32
#: seconds between two warnings about requests too large to track
UNTRACKED_LOG_EVERY = 3600.0
_MODES = {CREATE: "create", UPDATE: "update", DELETE: "delete"}
_LIES = {"etag": "etag", "lm": "last_modified", "lm_now": "last_modified_now", "ignored": "ignored"}


class HistoryBook:
    """``Leases.history``: ``book(lease, end)`` is the lease's history write, or None."""

    def __init__(self, rules: Rules, fingerprinter: RequestFingerprinterProtocol, stats: StatsCollector | None,
                 clock: Clock, budget: Callable[[str], float | None]) -> None:
        self.rules = rules
        self.fingerprinter = fingerprinter
        self.stats = stats
        self.clock = clock
        self.budget = budget  # revisits a day of a domain, None: no budget
        self.mu: dict[str, float] = {}  # the μ this worker solved, by domain
        self.since: dict[str, int] = {}  # writes since, by domain
        self.due: set[str] = set()  # domains whose μ is to be solved at the next tick
        self._liars: set[str] = set()
        self._untracked = 0
        self._untracked_logged = -math.inf

    def __call__(self, lease: Lease, end: str) -> HistoryWrite | None:
        request = lease.payload
        if request is None:
            return None  # never lent: no request, no visit
        page = lease.page if lease.page is not None else request
        meta = page.meta
        state = meta.get(RECRAWL_STATE)
        digest = self.fingerprinter.fingerprint(request)  # a revisit's too: its state must be its own URL's
        try:
            judged = judge(meta, lease.entry, lease.domain, digest, end, self.rules, host_of_url(request.url),
                           self.clock.time(), self.mu.get(lease.domain))
        except (KeyError, TypeError, ValueError) as exc:  # a record or state that is not one: the lease still ends
            inc(self.stats, "crawler/recrawl/unreadable")
            logger.error("No history write for %s (its history is left as it was; crawler/recrawl/unreadable): %s",
                         request.url, exc)
            return None
        write = judged.write
        if write is None:
            if judged.why == UNTRACKED:
                self._count_untracked(len(lease.entry))
            return None
        inc(self.stats, f"crawler/recrawl/writes/{_MODES[write.mode]}")
        if write.lie:
            inc(self.stats, f"crawler/recrawl/lies/{_LIES[write.lie]}")
            if write.lie in ("etag", "lm") and write.host not in self._liars:
                self._liars.add(write.host)
                logger.warning("%s answered %s with a %s it had given for other content: that validator is "
                               "not sent to it for a while (crawler/recrawl/lies)", write.host, request.url,
                               "ETag" if write.lie == "etag" else "Last-Modified")
        if self.rules.mode == "adaptive" and write.mode != DELETE:
            self._wrote(write.domain, None if state is None else state.get("mu"))
        return write

    def _wrote(self, domain: str, leased_mu: float | None) -> None:
        if self.budget(domain) is None:
            return  # no budget: no μ (each page kept CRAWLER_RECRAWL_FRESHNESS fresh)
        since = self.since[domain] = self.since.get(domain, 0) + 1
        if since >= SOLVE_EVERY or (leased_mu is None and domain not in self.mu):
            self.due.add(domain)

    def _count_untracked(self, size: int) -> None:
        self._untracked += 1
        inc(self.stats, "crawler/recrawl/untracked")
        now = self.clock.monotonic()
        if now - self._untracked_logged >= UNTRACKED_LOG_EVERY:
            self._untracked_logged = now
            logger.warning("A request of %d bytes is larger than CRAWLER_RECRAWL_ENTRY_MAX (%d): fetched once, "
                           "never revisited (%d so far, crawler/recrawl/untracked)", size, self.rules.entry_max,
                           self._untracked)

    def solve(self, client: redis.Redis, base: str) -> int:
        """Solve and write the μ of the domains due (see the module's
        docstring): two pipelines, none when no domain is due. How many
        were solved."""
        if not self.due:
            return 0
        domains = sorted(self.due)
        read = client.pipeline(transaction=False)
        for domain in domains:
            read.hgetall(rdom_key(base, domain))
        found = read.execute()
        write = client.pipeline(transaction=False)
        writes = 0
        for domain, fields in zip(domains, found):
            budget = self.budget(domain)
            if budget is None:
                continue
            mu = domain_mu(rate_counts(fields), budget / 86400, self.rules.low, self.rules.high)
            self.mu[domain] = mu
            self.since[domain] = 0
            if math.isfinite(mu):
                write.hset(rdom_key(base, domain), "mu", repr(mu))
                writes += 1
        if writes:
            write.execute()
        self.due.difference_update(domains)
        inc(self.stats, "crawler/recrawl/mu_solved", len(domains))
        return len(domains)


def rdom_key(base: str, domain: str) -> str:
    """A domain's revisit hash (E): ``<base>:rdom:<domain>``."""
    return f"{base}:rdom:{domain}"


def rate_counts(fields: dict[Any, Any]) -> list[int]:
    """The 24 counts ``lb0..lb23`` of an ``rdom`` hash (absent: 0; a count
    below 0, which a lost write can leave, as 0)."""
    def get(name: str) -> int:
        value = fields.get(name.encode(), fields.get(name))
        return max(0, int(value)) if value is not None else 0

    return [get(f"lb{i}") for i in range(RATE_BINS)]
