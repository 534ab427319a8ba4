"""The frontier's ledger: every URL it admitted, in exactly one state.

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
- ``not_modified``: a revisit the server answered 304, or whose payload was
  unchanged: stored as a WARC revisit record;
- ``redirected``: it redirected elsewhere; the target is a URL of its own;
- ``excluded``: its domain was excluded while it waited;
- ``superseded``: a copy of it was served before its turn (the in-link
  order, ``CRAWLER_WITHIN_ORDER``), and the queued one was dropped;
- ``lost``: dropped with an error (an entry that cannot be decoded);
- ``unknown``: it ended where no middleware saw how.

Every counter moves in the same Lua script call as the lease or queue entry
it accounts for, so the sum holds at any moment, across all workers.

A tracked URL (``CRAWLER_RECRAWL``) is admitted again each time it is leased
for a revisit (``revisits``): ``admitted = enqueued + revisits``. A revisit
lease that expires takes its admission back (it returns to its schedule,
not to a queue: ``lua/dequeue.lua``).

In the in-link order a queued URL many links lead to is promoted: a copy
of it is queued to be served first (``promoted``), and whichever copy
comes up second is dropped (``superseded``) or, when the queue had given
the URL already and the promotion was refused, never made:
``admitted = enqueued + revisits + promoted``.

The one-letter codes of the ends are what the scripts read.
"""

from __future__ import annotations

from dataclasses import dataclass

#: how a request ended, as the frontier counts it (``end_<name>`` in its stats)
STORED, DEAD, DISALLOWED, SKIPPED, REDIRECTED, LOST, UNKNOWN = "s", "d", "r", "k", "x", "l", "u"
NOT_MODIFIED = "n"
ENDS = {STORED: "stored", NOT_MODIFIED: "not_modified", DEAD: "dead", DISALLOWED: "disallowed",
        SKIPPED: "skipped", REDIRECTED: "redirected", LOST: "lost", UNKNOWN: "unknown"}
#: the ends whose lease is held until storage holds the page (``Leases.end``)
STORED_ENDS = (STORED, NOT_MODIFIED)


#: the end states, in the order they are shown
END_STATES = (*ENDS.values(), "excluded", "superseded")


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
        ends["superseded"] = counters.get("superseded", 0)
        admitted = counters.get("enqueued", 0) + counters.get("revisits", 0) + counters.get("promoted", 0)
        return cls(admitted, ends, status["queued"], status["leases"], status["delayed"])

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
