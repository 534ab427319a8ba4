"""Names the frontier asked this worker to look up (per-address politeness,
``CRAWLER_IP_DELAY``).

A dequeue that meets a host with no known addresses claims its lookup for
the calling worker and names it in its reply. The lookups run here, off
the event loop (``crawler.fetch.Addresses``: ``CRAWLER_HOST_MAP``, then
the system's resolver in a thread pool), and their answers go back in
batches (``dns_done.lua``): the host's addresses are kept beside the queues
for the whole crawl, and the domains that waited on the name are due again.
An answer that cannot be written (Redis away) is dropped: the claim runs
out and the name is looked up again, by whichever worker meets it first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from crawler.connection import REDIS_ERRORS
from crawler.store import Lookup
from crawler.worker._stats import inc

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.fetch import Answer
    from crawler.store import Frontier


logger = logging.getLogger(__name__)


class Names:
    def __init__(self, frontier: Frontier, lookup: Callable[[str], Awaitable[Answer]],
                 answered: Callable[[], None], stats: StatsCollector | None) -> None:
        self.frontier = frontier
        self.lookup = lookup  # host -> its answer; never raises for the name's sake
        self.answered = answered  # the answers are in the frontier: dequeue again
        self.stats = stats
        self.asking: set[str] = set()
        self.answers: list[Lookup] = []
        self._sending = False
        self._tasks: set[asyncio.Future[None]] = set()

    def ask(self, lookups: Sequence[tuple[str, str]]) -> None:
        """Look up each ``(host, registered domain)``, once at a time per host."""
        for host, domain in lookups:
            if host in self.asking:
                continue
            self.asking.add(host)
            task = asyncio.ensure_future(self._one(host, domain))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(self, host: str, domain: str) -> None:
        try:
            answer = await self.lookup(host)
            status, addresses, shared = answer.status, answer.addresses, answer.shared
        except Exception:  # a fault of the lookup itself: try again later, lose nothing
            logger.exception("Looking up %s failed", host)
            status, addresses, shared = "retry", (), ()
        finally:
            self.asking.discard(host)
        inc(self.stats, f"crawler/dns/{status}")
        self.answers.append(Lookup(host, domain, status, addresses, shared))
        if not self._sending:  # the answers that arrive in one turn of the loop go in one call
            self._sending = True
            asyncio.get_running_loop().call_soon(self.send)

    def send(self) -> None:
        self._sending = False
        answers, self.answers = self.answers, []
        if not answers:
            return
        try:
            flips = self.frontier.answer(answers)
        except REDIS_ERRORS as exc:
            inc(self.stats, "crawler/dns/unsaved", len(answers))
            logger.warning("Could not keep %d name lookups in Redis (%s): they are looked up again "
                           "when their claims run out", len(answers), exc)
            return
        for address, why, domains in flips:
            inc(self.stats, "crawler/ip/shared")
            because = ("it lies in CRAWLER_IP_SHARED or CRAWLER_IP_SHARED_RANGES" if why == "range" else
                       f"it serves {domains} registered domains, over CRAWLER_IP_SHARED_MIN_DOMAINS")
            logger.info("Address %s is a shared front end (%s): CRAWLER_IP_SHARED_DELAY and "
                        "CRAWLER_IP_SHARED_CONCURRENCY apply to it from now", address, because)
        self.answered()

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
