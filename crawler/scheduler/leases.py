"""Leases: the requests this worker took from the frontier and lent to the
engine, until each is acknowledged.

A lease ends with an acknowledgement (:class:`~crawler.scheduler.marks.Ack`)
that carries when its response began and ended, so the frontier can set the
domain's next turn. Nothing here talks to Redis; a lease this worker never
acknowledges (it died) comes back when it expires in Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.meta import LEASE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy import Request

    from crawler.scheduler.marks import Ack, Marks


class Leases:
    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.lent: dict[str, Request] = {}  # lease -> the request it covers

    def __len__(self) -> int:
        return len(self.lent)

    def lend(self, lease: str, request: Request) -> None:
        request.meta[LEASE] = lease
        self.lent[lease] = request

    def carried(self, request: Request) -> str | None:
        """The lease a request being enqueued brings back (a retry or a
        redirect of a leased request), no longer lent; None if it has none."""
        lease = request.meta.pop(LEASE, None)
        if lease is not None:
            self.lent.pop(lease, None)
        return lease

    def done(self, request: Request) -> Ack | None:
        """The acknowledgement of ``request``'s lease, if it is still lent."""
        lease = request.meta.pop(LEASE, None)
        if lease is not None and self.lent.pop(lease, None) is not None:
            return self.marks.ack(lease)
        return None

    def note_fetch(self, request: Request, began: float, ended: float) -> None:
        """A fetch made for ``request`` outside the downloader (its
        robots.txt) is its domain's last request."""
        lease = request.meta.get(LEASE)
        if lease is not None:
            # its start is known only as an upper bound: when its answer ended
            self.marks.note(lease, ended, ended, ended - began)

    def sweep(self, engine: Any) -> list[Ack]:
        """Acknowledgements of lent requests the engine is done with.

        The acknowledging middlewares see how most requests end; a request
        can also end where none of them looks (an ``IgnoreRequest`` raised in
        some ``process_response``, a filter). A lent request that is neither
        downloading nor being scraped is finished. This reads Scrapy's
        private engine state, and finds nothing when that state moves.
        """
        slot = getattr(engine, "_slot", None)
        scraper_slot = getattr(getattr(engine, "scraper", None), "slot", None)
        if not self.lent or slot is None or scraper_slot is None:
            return []
        busy = {id(r) for r in getattr(slot, "inprogress", ())}
        busy.update(id(r) for r in getattr(scraper_slot, "active", ()))
        busy.update(id(entry[1]) for entry in getattr(scraper_slot, "queue", ()))
        done = [lease for lease, request in self.lent.items() if id(request) not in busy]
        for lease in done:
            del self.lent[lease]
        return [self.marks.ack(lease) for lease in done]

    def unfinished(self, buffered: Iterable[str]) -> list[str]:
        """Every lease not done, ``buffered`` ones (never lent) first; their
        marks are dropped, since they are handed back, not acknowledged."""
        leases = [*buffered, *self.lent]
        self.marks.forget(leases)
        return leases

    def clear(self) -> None:
        self.lent.clear()
