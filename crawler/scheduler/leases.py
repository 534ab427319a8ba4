"""Leases: the requests this worker took from the frontier and lent to the
engine, until each is acknowledged.

A lease ends with an acknowledgement (:class:`~crawler.scheduler.marks.Ack`)
that carries when its response began and ended, so the frontier can set the
domain's next turn, and how the request ended (stored, dead letter, ...), so
the frontier can count every URL it admitted into one end. A page is
acknowledged as stored only once its storage (the WARC writer) says it holds
it: until then its lease is *held*; a page that storage failed to keep is
never acknowledged and goes back to the frontier when the worker closes.
Nothing here talks to Redis; a lease this worker never acknowledges (it died)
comes back when it expires in Redis.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from crawler._compat import engine_busy, missing

from crawler.meta import DEAD, END, LEASE, NON_HTML
from crawler.scheduler.marks import DEAD as ENDED_DEAD
from crawler.scheduler.marks import SKIPPED, STORED, UNKNOWN

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy import Request

    from crawler.scheduler.marks import Ack, Marks

logger = logging.getLogger(__name__)


class Storage(Protocol):
    def stored(self, request: Request) -> bool:
        """True once the page of ``request`` is kept (or there was nothing to keep)."""

    def flush(self) -> None:
        """Wait for pages on their way to storage."""


def end_of(request: Request, default: str) -> str:
    """How ``request`` ended, from what the middlewares noted on it."""
    meta = request.meta
    if meta.get(DEAD):
        return ENDED_DEAD
    if meta.get(END):
        return str(meta[END])
    if meta.get(NON_HTML):
        return SKIPPED
    return default


class Leases:
    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.lent: dict[str, Request] = {}  # lease -> the request it covers
        self.held: dict[str, Request] = {}  # lease -> a page done but not yet stored
        self.storage: Storage | None = None
        self._blind = False  # Scrapy's engine state moved: said once

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
            self.held.pop(lease, None)
        return lease

    def done(self, request: Request, end: str) -> Ack | None:
        """The acknowledgement of ``request``'s lease ended as ``end``, if it is
        still lent and, for a stored page, storage holds it (else it is held)."""
        lease = request.meta.get(LEASE)
        if lease is None:
            return None
        if lease not in self.lent:
            del request.meta[LEASE]
            return None
        if end == STORED and self.storage is not None and not self.storage.stored(request):
            self.held[lease] = request
            return None
        del request.meta[LEASE]
        del self.lent[lease]
        self.held.pop(lease, None)
        return self.marks.ack(lease, end)

    def stored(self) -> list[Ack]:
        """Acknowledgements of held pages that storage now holds."""
        if not self.held or self.storage is None:
            return []
        return [ack for request in [r for r in self.held.values() if self.storage.stored(r)]
                if (ack := self.done(request, STORED)) is not None]

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
        downloading nor being scraped nor held for storage is finished; its
        end is what the middlewares noted on it, else unknown. This reads
        Scrapy's private engine state (``crawler/_compat.py``), and says once
        in the log when that state moved.
        """
        if not self.lent or engine is None or getattr(engine, "_slot", None) is None:
            return []  # not started, or closed
        busy = engine_busy(engine)
        if busy is None:
            if not self._blind:
                self._blind = True
                logger.warning("Scrapy's engine state moved (crawler/_compat.py: %s): requests that end "
                               "where no middleware sees them are acknowledged when their leases expire",
                               ", ".join(missing(engine)))
            return []
        done = [(lease, request) for lease, request in self.lent.items()
                if id(request) not in busy and lease not in self.held]
        for lease, _ in done:
            del self.lent[lease]
        return [self.marks.ack(lease, end_of(request, UNKNOWN)) for lease, request in done]

    def unfinished(self, buffered: Iterable[str]) -> list[str]:
        """Every lease not done, ``buffered`` ones (never lent) first; their
        marks are dropped, since they are handed back, not acknowledged."""
        leases = [*buffered, *self.lent]
        self.marks.forget(leases)
        return leases

    def clear(self) -> None:
        self.lent.clear()
        self.held.clear()
