"""The compact tier of the frontier's queues: what a domain has queued beyond
its head, kept as compressed blocks (docs/frontier.md).

A domain's queue at one priority is three Redis lists, served in order: the
head (``q:<d>:<p>``, raw records, what ``dequeue.lua`` pops), the blocks
(``z:<d>:<p>``) and the spill (``s:<d>:<p>``, raw records newer than every
block). The scripts decide where a record goes and when a list moves up
(``lua/_lib.lua``: ``push``, ``tier_refill``); Redis cannot compress, so the
workers do the two jobs the scripts hand out, in their timer:

- *pack*: the first ``block`` records of a spill become one block at the end
  of the blocks;
- *fill*: the first block becomes records at the end of a head run low.

A job is claimed for :data:`CLAIM_SECONDS` (``tier_take.lua``) and its reply
applied only if its list has not moved meanwhile (``tier_done.lua``): a
worker killed between the two leaves the records where they were, and the
job is taken again when its claim runs out. Nothing is deleted before its
copy is in place.

A block is ``b"<count>\\n"``, a framing byte, and the zlib stream of the
records: ``n`` when no record holds a newline (the links' ``U`` entries),
the records joined by newlines; ``l`` else, each record after its length
(4 bytes, big-endian). The count lets the scripts keep their counters
without unpacking; newlines pack 2 B a record smaller than lengths do (14.7
against 16.7 B for a block of 64 links: bench/bench_tiers.py). :func:`pack`
and :func:`unpack` are the one codec; an unpacked block whose count
disagrees is refused, never half-applied.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.store.keys import Keys, Scripts

#: how long a worker holds a job it took; another takes it after that
CLAIM_SECONDS = 30.0
#: zlib's level: 6 packs a block of 128 links in about 0.2 ms on this project's machines
LEVEL = 6
_LENGTH = struct.Struct(">I")


def pack(records: Sequence[bytes]) -> bytes:
    """One block of ``records`` (in their order)."""
    if any(b"\n" in r for r in records):
        framing, body = b"l", b"".join(_LENGTH.pack(len(r)) + r for r in records)
    else:
        framing, body = b"n", b"\n".join(records)
    return b"%d\n%s%s" % (len(records), framing, zlib.compress(body, LEVEL))


def unpack(block: bytes) -> list[bytes]:
    """The records of a block; ``ValueError`` (one line) for one that is not."""
    count, sep, data = block.partition(b"\n")
    if not sep or not count.isdigit() or data[:1] not in (b"n", b"l"):
        raise ValueError(f"not a block of the compact tier: {block[:20]!r}")
    try:
        body = zlib.decompress(data[1:])
    except zlib.error as exc:
        raise ValueError(f"a block of the compact tier does not decompress: {exc}") from None
    records = _split_lines(body, int(count)) if data[:1] == b"n" else _split_framed(body)
    if len(records) != int(count):
        raise ValueError(f"a block of the compact tier says {int(count)} records and holds {len(records)}")
    return records


def _split_lines(body: bytes, count: int) -> list[bytes]:
    return body.split(b"\n") if count else []


def _split_framed(body: bytes) -> list[bytes]:
    records, i = [], 0
    while i < len(body):
        if i + 4 > len(body):
            raise ValueError("a block of the compact tier ends inside a record's length")
        (n,) = _LENGTH.unpack_from(body, i)
        records.append(body[i + 4:i + 4 + n])
        i += 4 + n
        if i > len(body):
            raise ValueError("a block of the compact tier ends inside a record")
    return records


@dataclass(frozen=True)
class TierPass:
    """What one pass did: jobs applied, stale (their list moved: taken again), refused, records moved."""

    applied: int = 0
    stale: int = 0
    refused: int = 0
    packed: int = 0
    unpacked: int = 0
    unreadable: int = 0

    @property
    def jobs(self) -> int:
        return self.applied + self.stale + self.refused


class CompactTier:
    """The workers' half of the compact tier: :meth:`run` takes up to ``jobs``
    jobs, does them and replies, in two round trips."""

    def __init__(self, scripts: Scripts, keys: Keys, block: int) -> None:
        self.scripts = scripts
        self.keys = keys
        self.block = block

    def run(self, jobs: int = 32, blocks_per_job: int = 8) -> TierPass:
        taken = self.scripts.tier_take(keys=[self.keys.base],
                                       args=[jobs, int(CLAIM_SECONDS * 1000), self.block * blocks_per_job])
        if not taken:
            return TierPass()
        args: list[Any] = []
        packed = unpacked = unreadable = 0
        for kind, domain, prio, count, work in taken:
            if kind == b"p":
                values = [pack(work[i:i + self.block]) for i in range(0, len(work), self.block)]
                packed += len(work)
            else:
                try:
                    values = unpack(work)
                except ValueError:
                    # no records: the script refuses the reply and counts it (tier_refused);
                    # the block stays where it is
                    values = []
                    unreadable += 1
                unpacked += len(values)
            args += (kind, domain, prio, count, len(values), *values)
        applied, stale, refused = self.scripts.tier_done(keys=[self.keys.base], args=args) if args else (0, 0, 0)
        return TierPass(int(applied), int(stale), int(refused), packed, unpacked, unreadable)
