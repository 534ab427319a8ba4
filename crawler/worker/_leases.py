"""Leases and how they end: the requests this worker took from the frontier
and lent to the engine, each a :class:`Lease` that holds its own state (lent,
storing its page, its politeness marks) and ends once, through its
:class:`Leases` table, with one acknowledgement, given to the write buffer
(:class:`AckSink`), which decides when it leaves (``_writes.py``).

A lease ends with an acknowledgement (:class:`Ack`)
that carries when its response began and ended, so the frontier can set the
domain's next turn, and how the request ended (stored, dead letter, ...), so
the frontier can count every URL it admitted into one end. A page is
acknowledged as stored (or not modified: every end of ``STORED_ENDS``) only
once its storage (the WARC writer) says it holds it, and with the end it was
given: until then its lease is *storing*; a page that storage failed to keep
is never acknowledged and goes back to the frontier when the worker closes.

With recrawl on, the acknowledgement of a lease that ended carries the URL's
history write (``Ack.write``), built by ``Leases.history`` when it ends, so
after storage has answered (the WARC capture is known): a revisit whose
page storage found identical to the last stored one ends not modified
(``n``), as a 304 does. A retry carries no write.
Nothing here talks to Redis; a lease this worker never acknowledges (it died)
comes back when it expires in Redis.

Politeness marks: when the response to each leased request began and ended,
on this process's monotonic clock (the scheduler's :mod:`crawler.clock`).
A domain with a delay is parked in Redis while one of its requests is out;
the acknowledgement of that request carries the age of its mark (how long
ago, in ms, the response began or ended, per ``CRAWLER_DELAY_FROM``) and how
long the fetch took, so the script sets the domain's next turn on the Redis
server's clock without comparing two machines' clocks:
``"<lease>:<age ms>:<duration ms>"``. Ages are measured when the round trip
leaves, so the network's delay only ever makes a mark late, never early.

Both marks are upper bounds of what the site saw: the response's headers
arrive after the request did, its last byte after the site sent it.

The ends a lease can have, and the ledger that counts them, are the
frontier's (``crawler/store/ledger.py``).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from crawler.clock import Clock
from crawler.meta import DEAD as DEAD_KEY
from crawler.meta import END, LEASE, NON_HTML
from crawler.worker.visit import final_end
from crawler.store import DEAD, ENDS, SKIPPED, STORED, STORED_ENDS, UNKNOWN, Leased
from crawler.worker._stats import inc

if TYPE_CHECKING:
    from crawler.store.records import HistoryWrite

#: builds a lease's history write when it ends (``Leases.history``): ``(lease, end) -> HistoryWrite | None``
HistoryHook = Callable[["Lease", str], "HistoryWrite | None"]

logger = logging.getLogger(__name__)


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated, use {new}", DeprecationWarning, stacklevel=3)


class Ack(NamedTuple):
    lease: str
    mark: float | None = None  # seconds on the scheduler's monotonic clock; None: now
    duration: float | None = None  # seconds the fetch took, when known
    end: str = ""  # one of ENDS; "" when the request moved on (a retry, a hand-back)
    #: the URL's history write (recrawl), sent with the acknowledgement and
    #: applied before it (``crawler/store/records.py`` ``wire_writes``); not in :meth:`wire`
    write: HistoryWrite | None = None

    def wire(self, now: float) -> str:
        """The scripts' form, its age counted at ``now`` (as the round trip
        leaves); the store's one encoder (``Frontier``) calls it."""
        # a mark later than now (a cut answer's, Lease.response_ended) is a negative age: the turn counts from then
        age = "" if self.mark is None else str(math.floor((now - self.mark) * 1000))
        if self.end:
            duration = "" if self.duration is None else str(int(self.duration * 1000))
            return f"{self.lease}:{age}:{duration}:{self.end}"
        if self.mark is None:
            return self.lease
        if self.duration is None:
            return f"{self.lease}:{age}"
        return f"{self.lease}:{age}:{int(self.duration * 1000)}"


class AckSink(Protocol):
    """Where the acknowledgements of ended leases go (the session's write
    buffer, ``_writes.py``, which decides when they leave)."""

    def ack(self, ack: Ack) -> None:
        """Buffer the acknowledgement of a lease that ended."""

    def retry(self, seconds: float, again: Leased, ack: Ack) -> None:
        """Buffer ``again`` (the request moving on) to wait ``seconds`` in the
        frontier, with the acknowledgement of the lease it leaves."""


class Storage(Protocol):
    def stored(self, request: Any) -> bool:
        """True once the page of ``request`` is kept (or there was nothing to keep)."""

    def flush(self) -> None:
        """Wait for pages on their way to storage."""


def end_of(request: Any, default: str) -> str:
    """How ``request`` ended, from what the middlewares noted on it."""
    meta = request.meta
    if meta.get(DEAD_KEY):
        return DEAD
    if meta.get(END):
        return str(meta[END])
    if meta.get(NON_HTML):
        return SKIPPED
    return default


class Lease:
    """One request this worker leased from the frontier, from
    ``WorkerSession.next_lease()`` to its end.

    The lease alone holds its state: what it was lent as (``payload``, the
    engine's request), whether its page is on its way to storage,
    when its response began and ended, and whether it was given up on. It
    ends once, with :meth:`ack`; later calls do nothing.
    """

    def __init__(self, table: Leases, leased: Leased) -> None:
        self.id = leased.lease
        self.domain = leased.domain
        self.priority = leased.priority
        self.entry = leased.entry  # the serialized request
        self.address = leased.address  # per address: where it is charged and must connect ("": anywhere)
        self.payload: Any = None  # what it is lent as: set by Leases.lend
        self.storing = False  # done, its page on its way to storage (acknowledged once there)
        self.page: Any = None  # the request whose page storage is to hold
        self.end_as = ""  # the end it was given while its page is on its way to storage (one of STORED_ENDS)
        self.given_up: str | None = None  # a dead letter's reason
        self._began: float | None = None
        self._ended: float | None = None
        self._latency: float | None = None
        self._margin = 0.0  # seconds the mark comes after the end (a cut answer's)
        self._table = table

    @property
    def open(self) -> bool:
        """Lent and not ended."""
        return self._table.get(self.id) is self

    def response_began(self) -> None:
        """The response's headers arrived (now, on the session's clock)."""
        self._began = self._table.clock.monotonic()

    def response_ended(self, latency: float | None = None, *, cut: bool = False) -> None:
        """The response's last byte arrived; ``latency``: the download's, when known.
        ``cut``: this end hung up on an answer the site was still sending (a
        size cap, a stopped download): the site's answer ends when it sees the
        hang-up, up to a round trip later, so the mark is placed that much
        later, the time to the headers (``latency``, at least a round trip)
        standing for it. Without it the site could see the next request a few
        ms under the delay."""
        self._ended = self._table.clock.monotonic()
        self._latency = latency
        self._margin = (latency or 0.0) if cut else 0.0

    def began(self) -> None:
        """Deprecated (gone in the next release): :meth:`response_began`."""
        _deprecated("Lease.began()", "Lease.response_began()")
        self.response_began()

    def ended(self, latency: float | None = None, *, cut: bool = False) -> None:
        """Deprecated (gone in the next release): :meth:`response_ended`."""
        _deprecated("Lease.ended()", "Lease.response_ended()")
        self.response_ended(latency, cut=cut)

    def fetched(self, began: float, ended: float) -> None:
        """A fetch made for this lease outside the downloader (its robots.txt)
        is its domain's last request; its start is known only as an upper
        bound: when its answer ended."""
        self._began, self._ended, self._latency = ended, ended, ended - began

    def ack(self, end: str = STORED, page: Any = None) -> None:
        """Done, ended as ``end`` (one of ``ENDS``): released within the ack
        interval, and its domain's next turn set; a stored page's once its
        storage holds ``page`` (the response's request; else the one lent),
        until then it is ``storing``."""
        self._table.end(self, DEAD if self.given_up is not None else end, page)

    def dead(self, reason: str) -> None:
        """Given up on (a dead letter names ``reason``): it ends as dead."""
        self.given_up = reason

    def delay(self, seconds: float, entry: bytes | None = None, *, domain: str | None = None,
              priority: int | None = None) -> None:
        """Back to the frontier ``seconds`` from now (``entry``, ``domain``,
        ``priority``: the request as it goes back, a retry's; else as it
        came): the lease ends, the request moves on, its URL not ended."""
        self._table.delay(self, seconds, Leased(self.id, self.domain if domain is None else domain,
                                                self.priority if priority is None else priority,
                                                self.entry if entry is None else entry))

    def acknowledgement(self, end: str = "") -> Ack:
        """What is sent to the frontier when this lease ends as ``end``
        ("": it moved on), its mark read per ``CRAWLER_DELAY_FROM``."""
        now = self._table.clock.monotonic()
        ended = now if self._ended is None else self._ended  # failed or never sent: it ends now
        began = ended if self._began is None else self._began
        duration = (self._latency or 0.0) + (ended - began) if self._latency is not None else None
        return Ack(self.id, ended + self._margin if self._table.finish else began, duration, end)


class Leases:
    """The leases this worker holds, by id; the only place one ends. Each end
    gives one acknowledgement to ``sink`` (the write buffer), which decides
    when it leaves; a stored page's waits until ``storage`` holds the page,
    looked at every ``look_every`` seconds while some are on their way."""

    def __init__(self, clock: Clock, delay_from: str, stats: Any, sink: AckSink, look_every: float) -> None:
        self.clock = clock
        self.finish = delay_from == "finish"
        self.stats = stats
        self.storage: Storage | None = None
        self.sink = sink
        self.look_every = look_every
        self._look: Any = None  # the next look at pages on their way to storage
        self._lent: dict[str, Lease] = {}
        #: recrawl: builds the history write an ending lease's acknowledgement
        #: carries (``crawler/worker/_history.py``); None when recrawl is off
        self.history: HistoryHook | None = None

    def __len__(self) -> int:
        return len(self._lent)

    def new(self, leased: Leased) -> Lease:
        return Lease(self, leased)

    def lend(self, lease: Lease, payload: Any) -> None:
        lease.payload = payload
        self._lent[lease.id] = lease

    def get(self, lease_id: str | None) -> Lease | None:
        return self._lent.get(lease_id) if lease_id is not None else None

    def awaiting_storage(self) -> list[Lease]:
        """The leases whose pages are on their way to storage."""
        return [lease for lease in self._lent.values() if lease.storing]

    def end(self, lease: Lease, end: str, page: Any = None) -> None:
        if self._lent.get(lease.id) is not lease:
            return  # ended before
        lease.page = lease.payload if page is None else page
        if end in STORED_ENDS and self.storage is not None and not self.storage.stored(lease.page):
            lease.storing = True
            lease.end_as = end
            self._look_soon()
        else:
            self.sink.ack(self._close(lease, end))

    def _close(self, lease: Lease, end: str = "") -> Ack:
        """``lease`` no longer lent; its acknowledgement (counted when it
        ends), with its history write when recrawl is on and it ended (a
        retry, ``end`` "", carries none: the URL moves on unvisited)."""
        self._lent.pop(lease.id, None)
        if lease.payload is not None:
            lease.payload.meta.pop(LEASE, None)  # the request no longer covers a lease
        write = None
        if end and self.history is not None:
            page = lease.page if lease.page is not None else lease.payload
            if page is not None:
                end = final_end(page.meta, end)  # an identical payload on a revisit: not modified
            write = self.history(lease, end)
        if end:
            inc(self.stats, f"crawler/frontier/ended/{ENDS[end]}")
        return lease.acknowledgement(end)._replace(write=write)

    def delay(self, lease: Lease, seconds: float, again: Leased) -> None:
        if self._lent.get(lease.id) is lease:
            self.sink.retry(seconds, again, self._close(lease))

    def end_stored(self) -> None:
        """End the pages storage holds by now; while some are still on their
        way, look again ``look_every`` seconds later: a parked domain waits
        for its page's acknowledgement, not for the session's next tick."""
        if self.storage is None:
            return
        for lease in self.awaiting_storage():
            if self.storage.stored(lease.page):
                self.sink.ack(self._close(lease, lease.end_as or STORED))
        self._look_soon()

    def _look_soon(self) -> None:
        if self._look is not None and self._look.active():
            return
        if any(lease.storing for lease in self._lent.values()):
            self._look = self.clock.timers.callLater(self.look_every, self.end_stored)

    def sweep(self, busy: set[int]) -> int:
        """End the lent leases whose payload is not in ``busy`` (the ids of
        what the engine is downloading or scraping) and not storing: they ended
        where no acknowledging middleware looked; their end is what the
        middlewares noted on them, else unknown. How many."""
        done = [lease for lease in self._lent.values() if id(lease.payload) not in busy and not lease.storing]
        for lease in done:
            self.sink.ack(self._close(lease, DEAD if lease.given_up is not None else end_of(lease.payload, UNKNOWN)))
        return len(done)

    def unfinished(self) -> list[str]:
        """Every lease not done (to hand back, not acknowledge)."""
        return list(self._lent)

    def cancel(self) -> None:
        """No more looks at storage (the session closes)."""
        if self._look is not None and self._look.active():
            self._look.cancel()

    def clear(self) -> None:
        self._lent.clear()
