"""The in-link order within a domain (``CRAWLER_WITHIN_ORDER = "inlinks"``,
docs/frontier.md): the links a process finds again to requests it queued
are counted, and a request many lead to is promoted (``Frontier.add``'s
``promotions``: ``lua/_lib.lua``'s ``promote()``), served before its turn.

Per domain a Space-Saving sketch of ``counters`` counters, over the links
found again to requests of that domain whose position in its queue this
process knows (it queued them: ``Recent``): a request counted again gains
one; a new one takes a free counter, else the lowest one, and inherits its
count (plus one). A request is promoted when its *guaranteed* count, the
count less what it inherited, reaches ``threshold``: one promotion a
request. A domain is allowed ``1 + share x (requests its queue gave)``
promotions: when one is allowed, the counter of the highest guaranteed
count goes (a site whose links all lead everywhere, as a uniform test web's,
would otherwise have most of its requests promoted, each a copy more to
queue and drop). The frontier refuses a promotion of a request its queue
gave already ("late"), so none is fetched twice; every reply says how far
the queue has given, and what is at or below that is never counted again
(a site's menu, linked from every page, once fetched costs nothing more).

The memory is bounded whatever the crawl: ``domains`` domains at most (the
least recently sighted forgotten: a domain forgotten loses its counts,
nothing else), each ``counters`` counters and ``PROMOTED_KEPT`` promoted
positions. Measured in a simulation (docs/crawl-order.md,
``decay/sketch8t2+g``): 8 counters, a threshold of 2.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from crawler.store import Promotion
from crawler.store.codec import encode_url

#: the positions a domain's sketch remembers it promoted (the frontier refuses the rest: "again")
PROMOTED_KEPT = 64


class _Kept:
    """The last ``size`` positions added, looked up as a set."""

    __slots__ = ("order", "members")

    def __init__(self, size: int) -> None:
        self.order: deque[int] = deque(maxlen=size)
        self.members: set[int] = set()

    def __contains__(self, position: int) -> bool:
        return position in self.members

    def add(self, position: int) -> None:
        if len(self.order) == self.order.maxlen:
            self.members.discard(self.order[0])
        self.order.append(position)
        self.members.add(position)


@dataclass
class _Domain:
    #: key -> [count, inherited, priority, position, url, depth]
    counters: dict[bytes, list] = field(default_factory=dict)
    #: priority -> how far the queue had given, as the frontier last said
    given: dict[int, int] = field(default_factory=dict)
    promoted: _Kept = field(default_factory=lambda: _Kept(PROMOTED_KEPT))
    promotions: int = 0  # sent for this domain (while it is remembered)


class InlinkSketch:
    def __init__(self, counters: int = 8, threshold: int = 2, domains: int = 4096, share: float = 1 / 3) -> None:
        if counters < 1 or threshold < 1 or domains < 1 or not 0 <= share <= 1:
            raise ValueError("an in-link sketch needs at least one counter, a threshold, a domain and a share in [0, 1]")
        self.counters = counters
        self.threshold = threshold
        self.domains = domains
        self.share = share
        self._by_domain: OrderedDict[str, _Domain] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_domain)

    def _domain(self, domain: str) -> _Domain:
        d = self._by_domain.get(domain)
        if d is None:
            d = self._by_domain[domain] = _Domain()
            if len(self._by_domain) > self.domains:
                self._by_domain.popitem(last=False)
        else:
            self._by_domain.move_to_end(domain)
        return d

    def sighted(self, domain: str, priority: int, key: bytes, position: int, url: str,
                depth: int = 0) -> Promotion | None:
        """A link found again to the request ``key`` (its fingerprint) of
        ``domain``, queued at ``position`` at ``priority``: counted; the
        promotion to send when its guaranteed count reaches the threshold."""
        promotions = self.sighted_all(domain, [(priority, key, position, url)], depth)
        return promotions[0] if promotions else None

    def sighted_all(self, domain: str, sightings: list[tuple[int, bytes, int, str]],
                    depth: int = 0) -> list[Promotion]:
        """Links of one page found again to requests of ``domain``, each
        ``(priority, key, position, url)`` as :meth:`sighted` takes them,
        counted in turn; the promotions they made (the domain looked up once
        a page: a page finds some 25 of its own host's links again)."""
        d = self._domain(domain)
        given, promoted, counters = d.given, d.promoted, d.counters
        out: list[Promotion] = []
        for priority, key, position, url in sightings:
            if position <= given.get(priority, 0) or position in promoted:
                continue
            c = counters.get(key)
            if c is not None:
                c[0] += 1
            elif len(counters) < self.counters:
                c = counters[key] = [1, 0, priority, position, url, depth]
            else:
                low, least = None, 0
                for k, held in counters.items():  # the lowest count (8 counters: no key function's calls)
                    if low is None or held[0] < least:
                        low, least = k, held[0]
                del counters[low]
                c = counters[key] = [least + 1, least, priority, position, url, depth]
            if c[0] - c[1] < self.threshold or d.promotions >= 1 + self.share * sum(given.values()):
                continue
            # allowed one: the counter of the highest guaranteed count (this one, or one held back by the cap)
            best, most = None, -1  # the first of the highest, in the counters' order
            for k, held in counters.items():
                if held[0] - held[1] > most:
                    best, most = k, held[0] - held[1]
            _, _, at_priority, at_position, at_url, at_depth = counters.pop(best)
            promoted.add(at_position)
            d.promotions += 1
            out.append(Promotion(domain, at_priority, encode_url(at_url, at_depth), at_position))
        return out

    def given(self, domain: str, priority: int, upto: int) -> None:
        """The frontier says ``domain``'s queue at ``priority`` gave its
        first ``upto``: what is at or below is not counted again."""
        d = self._by_domain.get(domain)
        if d is None or upto <= d.given.get(priority, 0):
            return
        d.given[priority] = upto
        for key in [k for k, c in d.counters.items() if c[2] == priority and c[3] <= upto]:
            del d.counters[key]
