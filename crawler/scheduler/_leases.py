"""Leases and how they end: the requests this worker took from the frontier
and lent to the engine, the politeness marks of their responses, and the
ledger of ends.

A lease ends with an acknowledgement (:class:`~crawler.scheduler._leases.Ack`)
that carries when its response began and ended, so the frontier can set the
domain's next turn, and how the request ended (stored, dead letter, ...), so
the frontier can count every URL it admitted into one end. A page is
acknowledged as stored only once its storage (the WARC writer) says it holds
it: until then its lease is *held*; a page that storage failed to keep is
never acknowledged and goes back to the frontier when the worker closes.
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

The frontier's ledger: every URL it admitted, in exactly one state.

A URL is admitted when it passes dedup into a domain queue (``enqueued``;
duplicates, and URLs over a domain's cap or budget or of an excluded domain,
are refused at the door and counted apart). From there it is queued, leased
to a worker, or waiting in the delayed set (a retry, a request postponed
while its robots.txt is unreachable), until it ends:

- ``stored``: its page is in a WARC file (or, with WARC off, its callback
  output went to the item pipeline);
- ``dead``: given up on, with a dead letter naming the reason;
- ``disallowed``: refused by robots.txt;
- ``skipped``: refused on purpose by a filter (not HTML, off-site);
- ``redirected``: it redirected elsewhere; the target is a URL of its own;
- ``excluded``: its domain was excluded while it waited;
- ``lost``: dropped with an error (an entry that cannot be decoded);
- ``unknown``: it ended where no middleware saw how.

Every counter moves in the same Lua script call as the lease or queue entry
it accounts for, so the sum holds at any moment, across all workers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from scrapy import signals

from crawler._compat import engine_busy, missing
from crawler.clock import SYSTEM, Clock
from crawler.meta import DEAD as DEAD_KEY
from crawler.meta import END, LEASE, NON_HTML

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response



#: how a request ended, as the frontier counts it (``end_<name>`` in its stats)
STORED, DEAD, DISALLOWED, SKIPPED, REDIRECTED, LOST, UNKNOWN = "s", "d", "r", "k", "x", "l", "u"
ENDS = {STORED: "stored", DEAD: "dead", DISALLOWED: "disallowed", SKIPPED: "skipped",
        REDIRECTED: "redirected", LOST: "lost", UNKNOWN: "unknown"}


class Ack(NamedTuple):
    lease: str
    mark: float | None = None  # seconds on the scheduler's monotonic clock; None: now
    duration: float | None = None  # seconds the fetch took, when known
    end: str = ""  # one of ENDS; "" when the request moved on (a retry, a hand-back)

    def wire(self, now: float) -> str:
        age = "" if self.mark is None else str(max(0, int((now - self.mark) * 1000)))
        if self.end:
            duration = "" if self.duration is None else str(int(self.duration * 1000))
            return f"{self.lease}:{age}:{duration}:{self.end}"
        if self.mark is None:
            return self.lease
        if self.duration is None:
            return f"{self.lease}:{age}"
        return f"{self.lease}:{age}:{int(self.duration * 1000)}"


def wire(acks: Iterable[str | Ack], now: float) -> list[str]:
    """``acks`` as the scripts read them, their ages counted at ``now``
    (the monotonic clock's, as the round trip leaves)."""
    return [a if isinstance(a, str) else a.wire(now) for a in acks]


class Marks:
    """lease -> [response began, response ended, download latency]."""

    def __init__(self, crawler: Crawler, delay_from: str, clock: Clock = SYSTEM) -> None:
        self.finish = delay_from == "finish"
        self.clock = clock
        self.stats = crawler.stats
        self.times: dict[str, list[float | None]] = {}
        crawler.signals.connect(self.headers_received, signal=signals.headers_received)
        crawler.signals.connect(self.response_downloaded, signal=signals.response_downloaded)

    def headers_received(self, request: Request, **_: object) -> None:
        lease = request.meta.get(LEASE)
        if lease is not None:
            self.times.setdefault(lease, [None, None, None])[0] = self.clock.monotonic()

    def response_downloaded(self, response: Response, request: Request, **_: object) -> None:
        lease = request.meta.get(LEASE)
        if lease is not None:
            times = self.times.setdefault(lease, [None, None, None])
            times[1] = self.clock.monotonic()
            times[2] = request.meta.get("download_latency")

    def note(self, lease: str, began: float, ended: float, latency: float | None = None) -> None:
        """Marks of a fetch made for ``lease`` outside the downloader's
        signals (robots.txt fetched before the request it guards)."""
        self.times[lease] = [began, ended, latency]

    def ack(self, lease: str, end: str = "") -> Ack:
        """The acknowledgement of ``lease``, done now, ended as ``end``."""
        if end:
            self.stats.inc_value(f"crawler/frontier/ended/{ENDS[end]}")
        began, ended, latency = self.times.pop(lease, None) or (None, None, None)
        now = self.clock.monotonic()
        ended = now if ended is None else ended  # failed or never sent: it ends now
        began = ended if began is None else began
        duration = (latency or 0.0) + (ended - began) if latency is not None else None
        return Ack(lease, ended if self.finish else began, duration, end)

    def forget(self, leases: Iterable[str]) -> None:
        for lease in leases:
            self.times.pop(lease, None)


logger = logging.getLogger(__name__)


class Storage(Protocol):
    def stored(self, request: Request) -> bool:
        """True once the page of ``request`` is kept (or there was nothing to keep)."""

    def flush(self) -> None:
        """Wait for pages on their way to storage."""


def end_of(request: Request, default: str) -> str:
    """How ``request`` ended, from what the middlewares noted on it."""
    meta = request.meta
    if meta.get(DEAD_KEY):
        return DEAD
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


#: the end states, in the order they are shown
END_STATES = (*ENDS.values(), "excluded")


@dataclass(frozen=True)
class Ledger:
    admitted: int
    ends: dict[str, int]
    queued: int
    leased: int
    delayed: int

    @classmethod
    def from_status(cls, status: dict) -> Ledger:
        counters = status["counters"]
        ends = {name: counters.get(f"end_{name}", 0) for name in ENDS.values()}
        ends["excluded"] = counters.get("excluded_dropped", 0)
        return cls(counters.get("enqueued", 0), ends, status["queued"], status["leases"], status["delayed"])

    @property
    def accounted(self) -> int:
        return sum(self.ends.values()) + self.queued + self.leased + self.delayed

    @property
    def balanced(self) -> bool:
        return self.accounted == self.admitted

    def as_dict(self) -> dict[str, object]:
        return {"admitted": self.admitted, **self.ends, "queued": self.queued, "leased": self.leased,
                "delayed": self.delayed, "accounted": self.accounted, "adds_up": self.balanced}


def describe(ledger: dict) -> str:
    """One line of a ledger (``Ledger.as_dict()``) for the log and ``scrapy frontier``."""
    ends = ", ".join(f"{ledger[name]} {name}" for name in END_STATES if ledger[name])
    verdict = "adds up" if ledger["adds_up"] else f"OFF BY {ledger['admitted'] - ledger['accounted']}"
    return (f"{ledger['admitted']} admitted = {ends or 'none ended'}; {ledger['queued']} queued, "
            f"{ledger['leased']} leased, {ledger['delayed']} delayed ({verdict})")
