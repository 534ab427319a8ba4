"""Links this process has had marked seen in the frontier
(``CRAWLER_DEDUP_LOCAL``), so a link found again is not offered twice."""

from __future__ import annotations

from crawler.store import Item

#: a position and a priority packed in one int (no tuple per link)
_PRIORITY_BITS = 20
_PRIORITY_OFFSET = 1 << (_PRIORITY_BITS - 1)
_PRIORITY_MASK = (1 << _PRIORITY_BITS) - 1


def unpack_position(packed: int) -> tuple[int, int]:
    """A position and a priority as :meth:`Recent.mark` packed them."""
    return packed >> _PRIORITY_BITS, (packed & _PRIORITY_MASK) - _PRIORITY_OFFSET


class Recent:
    """Fingerprints of links this process has had marked seen in the frontier
    (``CRAWLER_DEDUP_LOCAL``): a link found again (a site's menu, on every
    page) is not offered to Redis a second time. Two generations of ``size``
    each: when the newer fills, the older is dropped. Only what the enqueue
    script said it marked seen is remembered, so a link capped, over its
    domain's budget or excluded is offered again, as without this; a frontier
    lost and made anew (``CRAWLER_ON_FRONTIER_LOSS=continue``) clears it.

    In the in-link order each digest keeps its request's position in its
    domain's queue, as the enqueue script gave it, and the priority it was
    queued at (positions count per priority), packed in one int (None
    otherwise, or for a priority beyond +-2**19).

    The generations are dicts of digests to positions, not sets: a set is
    always tracked by the garbage collector, and a full collection visits
    each of its digests, while a dict of bytes to ints or None is not
    tracked at all."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.new: dict[bytes, int | None] = {}
        self.old: dict[bytes, int | None] = {}

    def __contains__(self, digest: bytes) -> bool:
        return digest in self.new or digest in self.old

    def position(self, digest: bytes) -> tuple[int, int] | None:
        """The position of ``digest``'s request in its queue and the priority
        it was queued at, if this process queued it (in-link order)."""
        got = self.new.get(digest)
        if got is None:
            got = self.old.get(digest)
        return None if got is None else unpack_position(got)

    def clear(self) -> None:
        self.new.clear()
        self.old.clear()

    def mark(self, items: list[Item], unseen: tuple[int, ...], positions: dict[int, int] | None = None) -> None:
        skip = set(unseen)
        positions = positions or {}
        for place, item in enumerate(items, 1):
            if not item.dont_filter and place not in skip:
                position = positions.get(place)
                if position is not None and -_PRIORITY_OFFSET <= item.priority < _PRIORITY_OFFSET:
                    self.new[item.digest] = (position << _PRIORITY_BITS) | (item.priority + _PRIORITY_OFFSET)
                else:
                    self.new[item.digest] = None
        if len(self.new) >= self.size:
            self.old, self.new = self.new, {}
