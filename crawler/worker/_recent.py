"""Links this process has had marked seen in the frontier
(``CRAWLER_DEDUP_LOCAL``), so a link found again is not offered twice."""

from __future__ import annotations

from crawler.store import Item


class Recent:
    """Fingerprints of links this process has had marked seen in the frontier
    (``CRAWLER_DEDUP_LOCAL``): a link found again (a site's menu, on every
    page) is not offered to Redis a second time. Two generations of ``size``
    each: when the newer fills, the older is dropped. Only what the enqueue
    script said it marked seen is remembered, so a link capped, over its
    domain's budget or excluded is offered again, as without this; a frontier
    lost and made anew (``CRAWLER_ON_FRONTIER_LOSS=continue``) clears it.

    In the in-link order each digest keeps its request's position in its
    domain's queue, as the enqueue script gave it (None otherwise).

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

    def position(self, digest: bytes) -> int | None:
        """The position of ``digest``'s request in its queue, if this process queued it (in-link order)."""
        got = self.new.get(digest)
        return got if got is not None else self.old.get(digest)

    def clear(self) -> None:
        self.new.clear()
        self.old.clear()

    def mark(self, items: list[Item], unseen: tuple[int, ...], positions: dict[int, int] | None = None) -> None:
        skip = set(unseen)
        positions = positions or {}
        for place, item in enumerate(items, 1):
            if not item.dont_filter and place not in skip:
                self.new[item.digest] = positions.get(place)
        if len(self.new) >= self.size:
            self.old, self.new = self.new, {}
