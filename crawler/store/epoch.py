"""The frontier's epoch: which life of the frontier in Redis a worker works in.

The frontier keeps an epoch record, ``<base>:epoch`` (an id and when it was
made, on the server's clock), written by ``epoch.lua`` when a worker opens a
frontier that has none. A worker remembers the id and the highest value of
the lease id counter (``<base>:seq``, which only grows) it has seen. Every
dequeue sends both and the script refuses to do anything, acknowledgements
included, when the record is gone (Redis restarted without persistence, was
flushed, failed over to an empty replica), holds another id (another worker
made a new epoch), or the counter is lower (Redis restarted from an older
snapshot: the frontier went back in time): :class:`FrontierLost`.

On a Redis Cluster, a replica promoted after its master died is not a loss,
though it may miss the master's last writes (replication is asynchronous):
the scripts fence the frontier first (``lua/_lib.lua``'s ``fence()``: its
lease id counter jumps a million, and every domain waits one full delay), and
every reply says when it was last fenced; a worker counts the fences it sees
(:attr:`Epoch.fences`) and says so (``crawler/worker/_outage.py``).
:class:`Epoch` is the worker's memory of it, kept by the
:class:`~crawler.store.frontier.Frontier`; what a worker does on a loss is
the worker session's (``crawler/worker/_outage.py``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from crawler.clock import SYSTEM, Clock

VANISHED, REPLACED, REWOUND = "vanished", "replaced", "rewound"


class FrontierLost(Exception):
    """The frontier is not the one this worker opened (see the module doc)."""

    def __init__(self, kind: str, known: Epoch, found_id: str, found_seq: int, found_queued: int) -> None:
        self.kind = kind
        self.known_id = known.id
        self.seen_seq = known.seq
        self.queued = known.queued  # at the last look
        self.looked_ago = known.clock.monotonic() - known.looked_at
        self.found_id = found_id
        self.found_seq = found_seq
        self.found_queued = found_queued
        super().__init__(f"frontier epoch {kind}")

    def what(self) -> str:
        """What happened, in a few words."""
        if self.kind == VANISHED:
            return ("it is gone (Redis restarted without persistence, was flushed, "
                    "or failed over to an empty replica)")
        if self.kind == REPLACED:
            return f"another epoch ({self.found_id}) replaced it (a worker went on after a loss)"
        return (f"it went back in time (Redis restarted from an older snapshot or failed over to a "
                f"lagging replica): lease counter {self.found_seq}, {self.seen_seq} seen before")


@dataclass
class Epoch:
    """What this worker knows of its frontier's epoch."""

    id: str = ""  # "": not opened, no check
    created_ms: int = 0
    seq: int = 0  # highest lease id counter seen
    queued: int = 0  # requests queued at the last look
    looked_at: float = 0.0  # the clock's monotonic() at the last look
    fenced_ms: int = 0  # the latest failover fence seen (server ms; 0: none)
    fences: int = 0  # fences seen since the frontier was opened here
    clock: Clock = field(default=SYSTEM, repr=False, compare=False)

    def args(self) -> list[Any]:
        """The dequeue's epoch arguments."""
        return [self.id, self.seq]

    def observe(self, found_id: str, seq: int, queued: int, fenced_ms: int = 0) -> None:
        """Remember a look at the frontier; :class:`FrontierLost` if it is not this epoch's.
        ``fenced_ms``: the frontier's latest failover fence (a newer one counts in :attr:`fences`)."""
        if self.id:
            if not found_id:
                raise FrontierLost(VANISHED, self, found_id, seq, queued)
            if found_id != self.id:
                raise FrontierLost(REPLACED, self, found_id, seq, queued)
            if seq < self.seq:
                raise FrontierLost(REWOUND, self, found_id, seq, queued)
        self.seq = max(self.seq, seq)
        self.queued = queued
        self.looked_at = self.clock.monotonic()
        if fenced_ms > self.fenced_ms:
            self.fenced_ms = fenced_ms
            self.fences += 1

    def adopt(self, reply: list[Any]) -> None:
        """The reply of ``epoch.lua``: the epoch this worker works in from now on."""
        self.id = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        self.created_ms = int(reply[1])
        self.seq = int(reply[3])
        self.queued = int(reply[4])
        self.looked_at = self.clock.monotonic()
        self.fenced_ms = max(self.fenced_ms, int(reply[5]) if len(reply) > 5 else 0)

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex
