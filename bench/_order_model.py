"""The crawl-order model of ``bench/bench_order.py`` (docs/crawl-order.md):
a generated web graph, its PageRank, and a polite crawl with a fixed number
of fetch slots simulated under each order. numpy only, vectorised where it
counts; the per-host queues are Python heaps (a few million pushes a run).

Nothing here knows Redis: the orders are what a Redis frontier could keep
(each one's state is named where it is kept, and its cost is in the docs)."""

from __future__ import annotations

import heapq
import re
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]

#: page states in the simulation
UNKNOWN, QUEUED, FETCHED = 0, 1, 2


# --------------------------------------------------------------------- graph

@dataclass(frozen=True)
class Graph:
    """Pages ``0..n-1`` grouped by host: host ``h`` holds pages
    ``start[h] .. start[h+1]-1`` and ``start[h]`` is its home page. Out-links
    in CSR form: page ``p`` links to ``dst[indptr[p]:indptr[p+1]]``."""

    start: Ints  # hosts + 1
    host_of: Ints  # n
    indptr: Ints  # n + 1
    dst: Ints  # links

    @property
    def n(self) -> int:
        return int(self.host_of.size)

    @property
    def hosts(self) -> int:
        return int(self.start.size - 1)

    @property
    def links(self) -> int:
        return int(self.dst.size)

    @property
    def sizes(self) -> Ints:
        return np.diff(self.start)

    @property
    def outdeg(self) -> Ints:
        return np.diff(self.indptr)

    def src(self) -> Ints:
        """The source of every link (the CSR expanded)."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.outdeg)

    def homes(self) -> Ints:
        return self.start[:-1].copy()

    def internal_share(self) -> float:
        src = self.src()
        return float(np.mean(self.host_of[src] == self.host_of[self.dst])) if self.links else 0.0


@dataclass(frozen=True)
class GraphSpec:
    """How a graph is generated (the docs' section "The web graph")."""

    pages: int = 2_000_000
    hosts: int = 0  # 0: pages // 20
    zipf: float = 1.0  # host sizes: the r-th largest host's share of pages ~ r^-zipf
    links: float = 10.0  # mean out-links of a page (geometric; a page with none is dangling)
    internal: float = 0.85  # share of links to a page of the same host
    fitness: float = 1.1  # page fitness Pareto tail index: in-degree ~ k^-(1 + fitness)
    home: float = 0.25  # a home page's weight among its host's internal links, against the rest together
    home_external: float = 0.5  # share of links from other hosts that go to the home page
    host_spread: float = 1.0  # sigma of the log-normal factor on a host's pull for other hosts' links
    copy: float = 0.5  # share of internal links copied from the host's template (its menus), not drawn anew
    template: int = 20  # links in a host's template

    def host_count(self) -> int:
        return max(1, min(self.pages, self.hosts or self.pages // 20))


def generate(spec: GraphSpec, seed: int) -> Graph:
    """A web graph by a static fitness model (Chung-Lu style: a link's target
    drawn in proportion to a Pareto fitness gives a power-law in-degree, as
    preferential attachment does, in one vectorised draw):

    - host sizes Zipf-like: one page each, the rest multinomial over
      ``r^-zipf`` weights, host ids shuffled (an id says nothing of size);
    - each page's out-degree geometric with mean ``links``;
    - a link is internal with probability ``internal`` (never from a host of
      one page): its target a page of the same host in proportion to
      fitness, the home page weighted ``home`` times the rest of its host;
    - of the internal links, a share ``copy`` is copied from the host's
      template instead (a copying model: every page of a host copies from
      one prototype, as pages share a site's menus): ``template`` links
      drawn once per host by the same fitness;
    - an external link picks a host in proportion to its size times a
      log-normal pull, then its home page (``home_external``) or one of its
      pages by fitness;
    - self-links dropped; repeated links kept (a page may link twice)."""
    rng = np.random.default_rng(seed)
    n, h = spec.pages, spec.host_count()
    w = np.arange(1, h + 1, dtype=np.float64) ** -spec.zipf
    sizes = 1 + rng.multinomial(n - h, w / w.sum()).astype(np.int64)
    rng.shuffle(sizes)
    start = np.zeros(h + 1, dtype=np.int64)
    np.cumsum(sizes, out=start[1:])
    host_of = np.repeat(np.arange(h, dtype=np.int64), sizes)
    homes = start[:-1]

    fit = rng.pareto(spec.fitness, n) + 1.0
    rest = np.bincount(host_of, weights=fit, minlength=h) - fit[homes]
    fit[homes] = np.where(sizes > 1, spec.home * rest, fit[homes])
    cum = np.zeros(n + 1)
    np.cumsum(fit, out=cum[1:])

    outdeg = rng.geometric(1.0 / (spec.links + 1.0), n).astype(np.int64) - 1
    src = np.repeat(np.arange(n, dtype=np.int64), outdeg)
    e = src.size
    hsrc = host_of[src]
    internal = (rng.random(e) < spec.internal) & (sizes[hsrc] > 1)
    dst = np.empty(e, dtype=np.int64)

    # internal: a page of the source's host by fitness (the home page weighted)
    hi = hsrc[internal]
    lo_c, hi_c = cum[start[hi]], cum[start[hi + 1]]
    u = lo_c + rng.random(hi.size) * (hi_c - lo_c)
    drawn = np.clip(np.searchsorted(cum, u, side="right") - 1, start[hi], start[hi + 1] - 1)
    if spec.copy > 0 and spec.template > 0:
        t = spec.template
        th_all = np.repeat(np.arange(h, dtype=np.int64), t)
        u = cum[start[th_all]] + rng.random(h * t) * (cum[start[th_all + 1]] - cum[start[th_all]])
        tmpl = np.clip(np.searchsorted(cum, u, side="right") - 1, start[th_all], start[th_all + 1] - 1)
        copied = rng.random(hi.size) < spec.copy
        j = rng.integers(0, t, size=hi.size)
        drawn = np.where(copied, tmpl[hi * t + j], drawn)
    dst[internal] = drawn

    # external: a host by size x log-normal pull, then its home page or a page by fitness
    ext = ~internal
    k = int(ext.sum())
    pull = sizes * np.exp(spec.host_spread * rng.standard_normal(h))
    pcum = np.cumsum(pull)
    th = np.minimum(np.searchsorted(pcum, rng.random(k) * pcum[-1], side="right"), h - 1)
    to_home = rng.random(k) < spec.home_external
    u = cum[start[th]] + rng.random(k) * (cum[start[th + 1]] - cum[start[th]])
    page = np.clip(np.searchsorted(cum, u, side="right") - 1, start[th], start[th + 1] - 1)
    dst[ext] = np.where(to_home, start[th], page)

    keep = dst != src
    src, dst = src[keep], dst[keep]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return Graph(start=start, host_of=host_of, indptr=indptr, dst=dst)


def from_edges(n: int, edges: list[tuple[int, int]], start: list[int] | None = None) -> Graph:
    """A small graph by hand (tests): ``edges`` as (src, dst); ``start`` the
    hosts' first pages (default: one host per page)."""
    st = np.asarray(start if start is not None else list(range(n)), dtype=np.int64)
    st = np.append(st, n)
    host_of = np.repeat(np.arange(st.size - 1, dtype=np.int64), np.diff(st))
    e = np.asarray(sorted(edges, key=lambda x: x[0]), dtype=np.int64).reshape(-1, 2)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(e[:, 0], minlength=n), out=indptr[1:])
    return Graph(start=st, host_of=host_of, indptr=indptr, dst=e[:, 1].copy())


def indegree_exponent(g: Graph, kmin: int = 20) -> float:
    """The in-degree tail's exponent gamma (P(k) ~ k^-gamma) by the discrete
    Hill estimator over pages with at least ``kmin`` in-links."""
    k = np.bincount(g.dst, minlength=g.n)
    k = k[k >= kmin].astype(np.float64)
    if k.size < 10:
        return float("nan")
    return float(1.0 + k.size / np.log(k / (kmin - 0.5)).sum())


# ------------------------------------------------------------------ pagerank

def pagerank(g: Graph, damping: float = 0.85, tol: float = 1e-9, max_iter: int = 300) -> tuple[Floats, int]:
    """PageRank by power iteration: a dangling page's rank spread over all
    pages, teleport uniform; stops when the L1 change is under ``tol``.
    Returns the ranks (summing to 1) and the iterations taken."""
    n = g.n
    outdeg = g.outdeg
    src = g.src()
    inv = np.zeros(n)
    np.divide(1.0, outdeg, out=inv, where=outdeg > 0)
    dangling = outdeg == 0
    pr = np.full(n, 1.0 / n)
    it = 0
    for it in range(1, max_iter + 1):
        new = np.bincount(g.dst, weights=(pr * inv)[src], minlength=n)
        new *= damping
        new += (1.0 - damping + damping * pr[dangling].sum()) / n
        err = float(np.abs(new - pr).sum())
        pr = new
        if err < tol:
            break
    return pr / pr.sum(), it


# ---------------------------------------------------------------- the orders

#: across hosts: which due hosts get the slots
HOST_KEYS = ("due", "rank", "decay", "budget", "file", "file-decay", "omniscient")
#: within a host: which of its queued pages goes first
WITHIN = ("fifo", "inlinks", "external", "share", "weighted", "opic", "pagerank")
#: ``decay<alpha>``: rank / (1 + pages fetched)^alpha (``decay`` is alpha 1)
DECAY_ALPHA = re.compile(r"decay(\d+(?:\.\d+)?)$")
#: the skip set's default size: promoted URLs still in the FIFO (see ``Frontier``)
SKIP_CAP = 64


@dataclass(frozen=True)
class Frontier:
    """A within-host order the production frontier can carry: no state per
    queued URL, only per domain and bounded. Named by ``+``-joined parts
    (``Frontier.parse``):

    - ``sketch<K>t<T>[m]``: a Space-Saving sketch of at most K counters per
      host over the links seen to URLs the dedup has already seen (it cannot
      tell queued from fetched): a URL seen again is counted (+1) if held,
      else takes a free counter at 1, else replaces the minimum counter and
      inherits its count + 1. When the host is served, the held URL of the
      highest count >= T is fetched first (the sketch keeps the request);
      else the FIFO. Plain: a fetched URL is dropped from the sketch (it comes
      back on its next sighting, and may be fetched again: a double fetch).
      ``m``: a fetched URL stays as a tombstone (counted, never promoted,
      replaced like any counter when it is the minimum).
    - ``g``: promote on a counter's guaranteed count (its count less what it
      inherited when it replaced another: Space-Saving's error), not its count.
    - ``r<R>``: a per-host memory of the R URLs fetched last (LRU: a sighting
      of one refreshes it): a sighting of a URL it holds is not counted, so a
      fetched page linked from every page (a menu) is not promoted again.
    - ``q``: the production frontier's exact guard instead: a promotion of a
      URL no longer queued (fetched) is refused, costing no slot (the next
      candidate is tried), and the URL is dropped from the sketch and never
      counted again; a URL promoted is never counted again either (promoted
      once); a promotion while the skip set is full is refused the same way
      (none forgotten: no double fetch at all). (Not ``x``: that is a lane.)
    - ``i``: count only links from pages of the URL's own host (a worker sees
      only the links its own pages hold; links from other hosts' pages are
      not counted).
    - ``c<N>``: a cap on promotions per host (share 1/N): a host may have
      had at most ``1 + (pages fetched from it) / N`` promotions sent. When
      the host is served and the cap allows one, the held URL of the highest
      (guaranteed) count >= T is promoted as without the cap; while capped,
      the host is served from the FIFO and its counters keep counting. A
      promotion refused by ``q`` was sent too and counts against the cap
      (the next candidate is tried only while the cap still allows one).
    - ``p<N>``: the skip set's size (default ``SKIP_CAP``; 0 unbounded): a
      promoted URL is still in the FIFO (its compressed blocks cannot drop
      it), so it is remembered, and skipped when the FIFO reaches it; one
      evicted from a full skip set (oldest first) is fetched again there.
    - lanes at discovery, FIFO within each, no per-URL state: ``x`` a URL
      first found on another host's page; ``e<N>`` one first found on a page
      of its own host fetched among that host's first N fetches (``e1``: the
      home page); ``xe<N>`` either in one lane; ``x+e<N>`` three lanes, x
      above e above the rest."""

    k: int = 0  # 0: no sketch
    t: int = 1
    memory: bool = False
    guaranteed: bool = False
    recent: int = 0
    exact: bool = False  # ``q``: refuse a promotion of a URL fetched; never count it again
    internal: bool = False  # ``i``: count links from the URL's own host only
    cap: int = 0  # ``c<N>``: at most 1 + fetched / N promotions sent per host (0: no cap)
    skip: int = SKIP_CAP
    x: bool = False
    early: int = 0
    joint: bool = False  # x and early in one lane

    @classmethod
    def parse(cls, name: str) -> Frontier | None:
        kw: dict[str, object] = {}
        for part in name.split("+"):
            if m := re.fullmatch(r"sketch(\d+)t(\d+)(m?)", part):
                kw.update(k=int(m[1]), t=int(m[2]), memory=bool(m[3]))
            elif part == "g":
                kw["guaranteed"] = True
            elif m := re.fullmatch(r"r(\d+)", part):
                kw["recent"] = int(m[1])
            elif m := re.fullmatch(r"p(\d+)", part):
                kw["skip"] = int(m[1])
            elif part == "q":
                kw["exact"] = True
            elif part == "i":
                kw["internal"] = True
            elif m := re.fullmatch(r"c(\d+)", part):
                kw["cap"] = int(m[1])
            elif part == "x":
                kw["x"] = True
            elif m := re.fullmatch(r"xe(\d+)", part):
                kw.update(x=True, early=int(m[1]), joint=True)
            elif m := re.fullmatch(r"e(\d+)", part):
                kw["early"] = int(m[1])
            else:
                return None
        f = cls(**kw)  # type: ignore[arg-type]
        if (f.k and f.k < 1) or f.t < 1 or (f.cap and not f.k) or ("cap" in kw and f.cap < 1) or (f.early and f.early < 1) or not (f.k or f.x or f.early):
            return None
        return f

    @property
    def lanes(self) -> int:
        return 1 + (1 if self.joint else int(self.x) + int(self.early > 0))


def host_alpha(host: str) -> float | None:
    """The decay exponent of a ``decay``/``decay<alpha>`` host order, else None."""
    if host == "decay":
        return 1.0
    m = DECAY_ALPHA.fullmatch(host)
    return float(m[1]) if m else None


@dataclass(frozen=True)
class Order:
    """One order: ``host`` decides which due hosts get the slots, ``within``
    which page of a served host is fetched.

    Across hosts (higher first; ties to the host due earliest):
    - ``due``: the host due earliest (today's frontier);
    - ``rank``: 1 + distinct other hosts seen linking to it;
    - ``decay``: that rank / (1 + pages fetched from it): the value of a
      host's next page falling as its best pages are taken;
    - ``budget``: hosts under their budget first (the crawl's pages shared
      by rank: ``until × rank / sum of ranks``), by rank within each tier;
    - ``file``, ``file-decay``: a ranking given up front (``ranks``) instead
      of the crawl's own, plain or decayed;
    - ``omniscient``: the true PageRank of the host's best queued page.

    Within a host: ``fifo`` (discovery order: breadth-first), ``inlinks``
    (links seen so far from fetched pages, ties FIFO), ``opic`` (OPIC cash:
    a fetched page's cash split over its links), ``pagerank`` (the truth).

    ``decay<alpha>`` (``decay1.25``) decays by (1 + pages fetched)^alpha; a
    ``Frontier`` name within (``sketch16t2m``, ``x``, ``sketch16t2m+x``) is an
    order the production frontier can keep, with double fetches modelled."""

    @property
    def frontier(self) -> Frontier | None:
        return None if self.within in WITHIN else Frontier.parse(self.within)

    name: str
    host: str
    within: str

    def __post_init__(self) -> None:
        if (self.host not in HOST_KEYS and host_alpha(self.host) is None) or (
                self.within not in WITHIN and Frontier.parse(self.within) is None):
            raise ValueError(f"unknown order {self.host}/{self.within}")
        if self.host == "omniscient" and self.within != "pagerank":
            raise ValueError("the omniscient order takes pages by their true PageRank")


@dataclass
class Crawl:
    """What one simulated crawl did."""

    order: Order
    fetched: Ints  # pages in fetch order
    fetch_tick: Ints  # per page; -1 never
    discover_tick: Ints  # per page; -1 a seed, -2 never known
    ticks: int
    due_hosts: list[int] = field(default_factory=list)  # hosts due with work, per tick
    seconds: float = 0.0
    #: per entry of ``fetched``: a slot spent fetching a page already fetched (a ``Frontier``
    #: order's double fetch: it takes the slot and the host's turn, counts as a page fetched from
    #: the host, and its links are followed again; the page's ``fetch_tick`` is its first fetch)
    #: None for the other orders (they fetch a page once)
    double: npt.NDArray[np.bool_] | None = None
    #: per entry of ``fetched``: a page the sketch served (a promotion); None for the other orders
    promoted: npt.NDArray[np.bool_] | None = None
    #: what a Redis frontier would do for these pages, summed (the docs' cost per page):
    #: ``pfadd`` one per (fetched page, other host it links to), ``new_pairs`` those that
    #: raised a host's count, ``rank_updates`` (tick, host) whose count rose, ``increments``
    #: links to a page already queued (its in-link score raised), ``links`` all links followed;
    #: a ``Frontier`` order's too: ``double`` fetches, ``sightings`` sketch updates, ``recent_hits``
    #: links to a page its host fetched last (not counted), ``promotions`` pages the sketch served,
    #: ``replaced`` counters, ``skip_evicted``, ``skipped`` FIFO entries; at the end ``sketch_held``,
    #: ``sketch_hosts``, ``recent_held``, ``skip_held`` entries and ``skip_max`` (one host's most);
    #: ``q``: ``refused`` promotions (fetched), ``refused_full`` (skip set full), ``ignored_hits``
    #: sightings not counted, ``ignored_held`` at the end; ``i``: ``cross_unseen`` links not counted;
    #: ``due``: sightings that made a counter promotable (what a frontier promoting on sighting would
    #: send, uncapped); ``c<N>``: ``capped`` serves the cap held a promotable counter back
    costs: dict[str, int] = field(default_factory=dict)


def _pick(elig: Ints, primary: Floats | None, secondary: Floats, slots: int) -> Ints:
    """The ``slots`` hosts of ``elig`` with the highest ``primary`` (None:
    all equal), ties to the lowest ``secondary``; O(len(elig))."""
    if elig.size <= slots:
        return elig
    if primary is None:
        return elig[np.argpartition(secondary[elig], slots - 1)[:slots]]
    p = primary[elig]
    thr = p[np.argpartition(-p, slots - 1)[slots - 1]]
    above = elig[p > thr]
    at = elig[p == thr]
    need = slots - above.size
    if at.size > need:
        at = at[np.argpartition(secondary[at], need - 1)[:need]]
    return np.concatenate([above, at])


def simulate(g: Graph, order: Order, *, seeds: Ints, slots: int, delay: int, until: int,
             pr: Floats | None = None, ranks: Floats | None = None, tie_seed: int = 0) -> Crawl:
    """A polite crawl with ``slots`` fetches per tick, a host fetched at
    most once per ``delay`` ticks, until ``until`` pages are fetched or
    nothing is left. A page is known once a fetched page links to it (its
    links are followed at the end of the tick that fetched it, so it can be
    fetched from the next tick on). ``pr``: the true PageRank (for
    ``pagerank`` within, ``omniscient``); ``ranks``: per host, for ``file``."""
    import time

    t0 = time.perf_counter()
    n, nh = g.n, g.hosts
    host_of, indptr, dst = g.host_of, g.indptr, g.dst
    outdeg = g.outdeg
    if order.within == "pagerank" or order.host == "omniscient":
        if pr is None:
            raise ValueError("this order needs the true PageRank")
    if order.host in ("file", "file-decay") and ranks is None:
        raise ValueError("this order needs a ranking")

    state = np.zeros(n, dtype=np.int8)
    disc = np.full(n, -2, dtype=np.int64)
    ftick = np.full(n, -1, dtype=np.int64)
    seq = np.zeros(n, dtype=np.int64)  # discovery order
    qlen = np.zeros(nh, dtype=np.int64)
    ready = np.zeros(nh)  # when a host with work is next due (tick)
    tie = np.random.default_rng(tie_seed).random(nh) * 0.5  # the due order's ties: a fixed hash
    fetched_h = np.zeros(nh)
    linkers = np.zeros(nh)  # distinct other hosts seen linking to the host
    pairs: set[int] = set()  # (linking host, host) seen: the exact sets
    inl = np.zeros(n)  # links seen into a page from fetched pages
    cash = np.zeros(n)  # OPIC
    top = np.zeros(nh)  # omniscient: the best queued page's PageRank per host
    heaps: list[list[tuple[float, int, int]]] = [[] for _ in range(nh)]
    score = np.zeros(n)  # the within-host score of external, share, weighted
    score_of = {"fifo": None, "inlinks": inl, "opic": cash, "pagerank": pr}.get(order.within, score)
    seqno = 0
    alpha = host_alpha(order.host)
    fr = order.frontier
    # a Frontier order's per-host state (made on first use): its FIFO lanes (lowest first), the
    # sketch (page -> count), its tombstones (fetched, kept counted), the skip set (promoted,
    # still in the FIFO; insertion-ordered). ``qlen`` counts the FIFO's entries not in the skip set.
    lanes_of: dict[int, list[deque[int]]] = {}
    sketch: dict[int, dict[int, int]] = {}
    tombs: dict[int, set[int]] = {}
    skips: dict[int, dict[int, None]] = {}
    errs: dict[int, dict[int, int]] = {}  # ``g``: what a counter inherited
    recent: dict[int, dict[int, None]] = {}  # ``r<R>``: the host's R pages fetched last, LRU
    ignored: dict[int, set[int]] = {}  # ``q``: pages refused or promoted, never counted again
    ford = np.zeros(n, dtype=np.int64)  # a page's fetch ordinal within its host (the e<N> lane)
    fcost = dict.fromkeys(("double", "sightings", "recent_hits", "promotions", "replaced", "skip_evicted",
                           "skipped", "due"), 0)
    psent = np.zeros(nh, dtype=np.int64)  # ``c<N>``: promotions sent per host (refused ones too)
    if fr is not None and fr.cap:
        fcost["capped"] = 0
    if fr is not None and fr.exact:
        fcost.update(refused=0, refused_full=0, ignored_hits=0)
    if fr is not None and fr.internal:
        fcost["cross_unseen"] = 0

    def push(pages: Ints, tick: int) -> None:
        """Queue pages newly known or whose score changed (duplicates allowed:
        a heap entry is live only while its score is the page's score)."""
        nonlocal seqno
        if pages.size == 0:
            return
        new = pages[state[pages] == UNKNOWN]
        if new.size:
            state[new] = QUEUED
            disc[new] = tick
            seq[new] = np.arange(seqno, seqno + new.size)
            seqno += new.size
            hs = host_of[new]
            was_empty = qlen == 0
            np.add.at(qlen, hs, 1)
            woke = hs[was_empty[hs]]
            ready[woke] = np.maximum(ready[woke], tick + 1)
        if score_of is None or order.within == "pagerank":
            live = new  # a fixed score: queued once
        else:
            live = pages[state[pages] == QUEUED]
        if live.size == 0:
            return
        hs = host_of[live]
        sc = -score_of[live] if score_of is not None else np.zeros(live.size)
        for h, s, q, p in zip(hs.tolist(), sc.tolist(), seq[live].tolist(), live.tolist()):
            heapq.heappush(heaps[h], (s, q, p))
        if order.host == "omniscient":
            assert pr is not None
            np.maximum.at(top, hs, pr[live])

    def fpush(pages: Ints, lanes: Ints, tick: int) -> None:
        """A Frontier order: pages newly known, each into its lane's FIFO."""
        nonlocal seqno
        state[pages] = QUEUED
        disc[pages] = tick
        seq[pages] = np.arange(seqno, seqno + pages.size)
        seqno += pages.size
        nl = fr.lanes if fr else 1
        for h, p, lane in zip(host_of[pages].tolist(), pages.tolist(), lanes.tolist()):
            qs = lanes_of.get(h)
            if qs is None:
                qs = lanes_of[h] = [deque() for _ in range(nl)]
            qs[lane].append(p)
            if qlen[h] == 0:
                ready[h] = max(ready[h], tick + 1)
            qlen[h] += 1

    def sight(pages: list[int]) -> None:
        """A Frontier order's sketch: links to URLs the dedup has seen (queued or fetched)."""
        assert fr is not None
        k, rc = fr.k, fr.recent
        for p in pages:
            h = int(host_of[p])
            if fr.exact:
                ig = ignored.get(h)
                if ig is not None and p in ig:
                    fcost["ignored_hits"] += 1
                    continue
            if rc:
                rs = recent.get(h)
                if rs is not None and p in rs:
                    del rs[p]
                    rs[p] = None  # refreshed
                    fcost["recent_hits"] += 1
                    continue
            fcost["sightings"] += 1
            d = sketch.get(h)
            if d is None:
                d = sketch[h] = {}
            if p in d:
                d[p] += 1
                if d[p] - (errs.get(h, {}).get(p, 0) if fr.guaranteed else 0) == fr.t:
                    fcost["due"] += 1
            elif len(d) < k:
                d[p] = 1
                if fr.t == 1:
                    fcost["due"] += 1
            else:
                q = min(d, key=d.__getitem__)
                c = d.pop(q)
                if fr.memory:
                    tombs.get(h, set()).discard(q)
                if fr.guaranteed:
                    e = errs.setdefault(h, {})
                    e.pop(q, None)
                    e[p] = c
                d[p] = c + 1
                if (1 if fr.guaranteed else c + 1) >= fr.t:
                    fcost["due"] += 1
                fcost["replaced"] += 1

    def remember(h: int, p: int) -> None:
        assert fr is not None
        if fr.recent:
            rs = recent.setdefault(h, {})
            rs.pop(p, None)
            rs[p] = None
            if len(rs) > fr.recent:
                del rs[next(iter(rs))]

    def fpop(h: int) -> tuple[int, bool, bool]:
        """A Frontier order's next page of host ``h``, whether it was fetched already, and whether
        the sketch served it (a promotion)."""
        assert fr is not None
        d = sketch.get(h)
        if d:
            tb = tombs.get(h) if fr.memory else None
            er = errs.get(h, {}) if fr.guaranteed else {}
            while True:
                best, bc = -1, fr.t - 1
                for q, c in d.items():
                    c -= er.get(q, 0)
                    if c > bc and (tb is None or q not in tb):
                        best, bc = q, c
                if best >= 0 and fr.cap and fr.cap * psent[h] > fetched_h[h]:
                    # capped (sent > fetched / N: one more would pass 1 + fetched / N): the FIFO's
                    # turn; the counters keep counting
                    fcost["capped"] += 1
                    best = -1
                    break
                if best >= 0:
                    psent[h] += 1
                if best < 0 or not fr.exact:
                    break
                late = bool(state[best] == FETCHED)
                full = bool(fr.skip) and len(skips.get(h, ())) >= fr.skip
                if not (late or full):
                    ignored.setdefault(h, set()).add(best)  # promoted once: never counted again
                    break
                # refused (late: fetched already; full: the skip set): no slot spent, the URL
                # dropped from the sketch and never counted again; the next candidate is tried
                del d[best]
                er.pop(best, None)
                if tb is not None:
                    tb.discard(best)
                ignored.setdefault(h, set()).add(best)
                fcost["refused" if late else "refused_full"] += 1
            if best >= 0:
                fcost["promotions"] += 1
                if fr.memory:
                    tombs.setdefault(h, set()).add(best)
                else:
                    del d[best]
                    er.pop(best, None)
                remember(h, best)
                if state[best] == FETCHED:
                    return best, True, True
                sp = skips.setdefault(h, {})
                sp[best] = None  # still in the FIFO: skipped when the FIFO reaches it
                qlen[h] -= 1
                if fr.skip and len(sp) > fr.skip:  # never with ``q`` (refused when full)
                    del sp[next(iter(sp))]  # forgotten: the FIFO will fetch it again
                    qlen[h] += 1
                    fcost["skip_evicted"] += 1
                return best, False, True
        sp = skips.get(h)
        for lane in reversed(lanes_of[h]):
            while lane:
                p = lane.popleft()
                if sp and p in sp:
                    del sp[p]
                    fcost["skipped"] += 1
                    continue
                qlen[h] -= 1
                if d and p in d:
                    if fr.memory:
                        tombs.setdefault(h, set()).add(p)
                    else:
                        del d[p]
                        errs.get(h, {}).pop(p, None)
                remember(h, p)
                return p, bool(state[p] == FETCHED), False
        raise AssertionError(f"host {h} served with nothing queued")

    def pop(h: int) -> int:
        hp = heaps[h]
        while True:
            s, _, p = heapq.heappop(hp)
            if state[p] == QUEUED and (score_of is None or order.within == "pagerank" or -score_of[p] == s):
                break
        if order.host == "omniscient":
            while hp and state[hp[0][2]] != QUEUED:
                heapq.heappop(hp)
            top[h] = -hp[0][0] if hp else 0.0
        return p

    seeds = np.asarray(seeds, dtype=np.int64)
    cash[seeds] = 1.0 / max(1, seeds.size)
    if fr is None:
        push(seeds, -1)
    else:
        fpush(np.unique(seeds), np.zeros(np.unique(seeds).size, dtype=np.int64), -1)
    fetched: list[Ints] = []
    doubles: list[npt.NDArray[np.bool_]] = []
    promos: list[npt.NDArray[np.bool_]] = []
    total = 0
    due_hosts: list[int] = []
    costs = dict.fromkeys(("pfadd", "new_pairs", "rank_updates", "increments", "links"), 0)
    tick = 0
    while total < until:
        elig = np.flatnonzero((qlen > 0) & (ready <= tick))
        if elig.size == 0:
            if not (qlen > 0).any():
                break
            tick = int(ready[qlen > 0].min())
            continue
        due_hosts.append(int(elig.size))
        secondary = ready + tie
        primary: Floats | None
        if order.host == "due":
            primary = None
        elif order.host == "rank":
            primary = 1.0 + linkers
        elif alpha is not None:
            primary = (1.0 + linkers) / ((1.0 + fetched_h) if alpha == 1.0 else (1.0 + fetched_h) ** alpha)
        elif order.host == "budget":
            rank = 1.0 + linkers
            known = qlen > 0
            share = until * rank / rank[known | (fetched_h > 0)].sum()
            primary = np.where(fetched_h < share, 1e12, 0.0) + rank
        elif order.host == "file":
            assert ranks is not None
            primary = ranks
        elif order.host == "file-decay":
            assert ranks is not None
            primary = ranks / (1.0 + fetched_h)
        else:
            primary = top
        pick = _pick(elig, primary, secondary, min(slots, until - total))
        if fr is None:
            f = np.fromiter((pop(h) for h in pick.tolist()), dtype=np.int64, count=pick.size)
            dbl = np.zeros(f.size, dtype=bool)
            qlen[pick] -= 1
        else:
            got = [fpop(h) for h in pick.tolist()]
            f = np.fromiter((p for p, _, _ in got), dtype=np.int64, count=pick.size)
            dbl = np.fromiter((d for _, d, _ in got), dtype=bool, count=pick.size)
            promos.append(np.fromiter((s for _, _, s in got), dtype=bool, count=pick.size))
            fcost["double"] += int(dbl.sum())
        fresh = f[~dbl]
        state[fresh] = FETCHED
        ftick[fresh] = tick
        ford[fresh] = fetched_h[pick[~dbl]]
        fetched_h[pick] += 1
        ready[pick] = tick + delay
        fetched.append(f)
        doubles.append(dbl)
        total += f.size

        # follow the fetched pages' links
        deg = outdeg[f]
        m = int(deg.sum())
        if m:
            offs = np.repeat(indptr[f] - np.concatenate([[0], np.cumsum(deg)[:-1]]), deg)
            targets = dst[offs + np.arange(m)]
            sources = np.repeat(f, deg)
            hs, hd = host_of[sources], host_of[targets]
            cross = hs != hd
            costs["links"] += m
            costs["increments"] += int((state[targets] == QUEUED).sum())
            if cross.any():
                costs["pfadd"] += int(np.unique(sources[cross] * nh + hd[cross]).size)
                raised: set[int] = set()
                for pair in np.unique(hs[cross] * nh + hd[cross]).tolist():
                    if pair not in pairs:
                        pairs.add(pair)
                        linkers[pair % nh] += 1
                        raised.add(pair % nh)
                costs["rank_updates"] += len(raised)
            np.add.at(inl, targets, 1.0)
            if order.within == "external":
                np.add.at(score, targets[cross], 1.0)
            elif order.within == "share":
                np.add.at(score, targets, np.repeat(1.0 / deg.clip(1), deg))
            elif order.within == "weighted":
                np.add.at(score, targets[cross], 1.0 + linkers[hs[cross]])
            if order.within == "opic":
                np.add.at(cash, targets, np.repeat(cash[f] / deg.clip(1), deg))
            cash[f] = 0.0
            uniq, first = np.unique(targets, return_index=True)
            by_first = np.argsort(first, kind="stable")
            if fr is None:
                push(uniq[by_first], tick)
            else:
                pages, firsts = uniq[by_first], first[by_first]
                isnew = state[pages] == UNKNOWN
                new, at = pages[isnew], firsts[isnew]
                srcs = sources[at]
                ext = host_of[srcs] != host_of[new]
                early = ~ext & (ford[srcs] < fr.early)
                if fr.joint:
                    lane = (ext | early).astype(np.int64)
                else:
                    lane = (ext if fr.x else np.zeros(new.size, dtype=bool)).astype(np.int64) * (1 + int(fr.early > 0))
                    lane += early.astype(np.int64)
                if fr.k:
                    seen = np.ones(m, dtype=bool)
                    seen[at] = False  # every link but the one that found a page new this tick
                    if fr.internal:
                        fcost["cross_unseen"] += int((seen & cross).sum())
                        seen &= ~cross  # a worker sees only the links its own host's pages hold
                    sight(targets[seen].tolist())
                fpush(new, lane, tick)
        else:
            cash[f] = 0.0
        tick += 1
    if fr is not None:
        costs.update(fcost)
        costs["skip_held"] = sum(len(v) for v in skips.values())
        costs["skip_max"] = max((len(v) for v in skips.values()), default=0)
        costs["sketch_held"] = sum(len(v) for v in sketch.values())
        costs["sketch_hosts"] = sum(1 for v in sketch.values() if v)
        costs["recent_held"] = sum(len(v) for v in recent.values())
        if fr.exact:
            costs["ignored_held"] = sum(len(v) for v in ignored.values())
    return Crawl(order=order, fetched=np.concatenate(fetched) if fetched else np.zeros(0, dtype=np.int64),
                 fetch_tick=ftick, discover_tick=disc, ticks=tick, due_hosts=due_hosts,
                 seconds=time.perf_counter() - t0, costs={**costs, "new_pairs": len(pairs)},
                 double=np.concatenate(doubles) if fr is not None and doubles else None,
                 promoted=np.concatenate(promos) if fr is not None and promos else None)


# --------------------------------------------------------------- measurement

@dataclass(frozen=True)
class Curve:
    """PageRank mass and top pages fetched after each page of a crawl."""

    mass: Floats  # mass[k-1]: after k pages
    top: Ints  # top[k-1]: top pages fetched after k pages
    top_count: int

    def mass_at(self, k: int) -> float:
        if k <= 0 or self.mass.size == 0:
            return 0.0
        return float(self.mass[min(k, self.mass.size) - 1])

    def top_at(self, k: int) -> float:
        if k <= 0 or self.top.size == 0 or self.top_count == 0:
            return 0.0
        return float(self.top[min(k, self.top.size) - 1]) / self.top_count


def top_pages(pr: Floats, share: float = 0.001) -> Ints:
    """The ``share`` of pages with the highest PageRank (at least one)."""
    k = max(1, int(round(pr.size * share)))
    return np.argpartition(-pr, k - 1)[:k]


def curve(crawl: Crawl, pr: Floats, top: Ints) -> Curve:
    """After each fetch (a double fetch a slot spent for nothing)."""
    is_top = np.zeros(pr.size, dtype=bool)
    is_top[top] = True
    gain, hit = pr[crawl.fetched], is_top[crawl.fetched]
    if crawl.double is not None:
        gain, hit = np.where(crawl.double, 0.0, gain), hit & ~crawl.double
    return Curve(mass=np.cumsum(gain), top=np.cumsum(hit), top_count=int(top.size))


def gap_closed(ours: float, due: float, omniscient: float) -> float:
    """The share of the gap between due-time and omniscient that ``ours``
    closes (1: as good as omniscient; 0: no better than due-time)."""
    gap = omniscient - due
    return float("nan") if gap <= 0 else (ours - due) / gap


def host_ranks(g: Graph, pr: Floats) -> Floats:
    """Each host's PageRank summed over its pages (the ranking file's stand-in)."""
    return np.bincount(g.host_of, weights=pr, minlength=g.hosts)


def pick_seeds(g: Graph, share: float, seed: int) -> Ints:
    """The home pages of a uniform sample of ``share`` of the hosts (at least one)."""
    rng = np.random.default_rng(seed + 7919)
    k = max(1, int(round(g.hosts * share)))
    hosts = np.sort(rng.choice(g.hosts, size=k, replace=False))
    return g.start[hosts]
