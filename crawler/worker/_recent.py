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

    The generations are dicts of digests to None, not sets: a set is always
    tracked by the garbage collector, and a full collection visits each of
    its digests, while a dict of bytes to None is not tracked at all."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.new: dict[bytes, None] = {}
        self.old: dict[bytes, None] = {}

    def __contains__(self, digest: bytes) -> bool:
        return digest in self.new or digest in self.old

    def clear(self) -> None:
        self.new.clear()
        self.old.clear()

    def mark(self, items: list[Item], unseen: tuple[int, ...]) -> None:
        skip = set(unseen)
        for place, item in enumerate(items, 1):
            if not item.dont_filter and place not in skip:
                self.new[item.digest] = None
        if len(self.new) >= self.size:
            self.old, self.new = self.new, {}
