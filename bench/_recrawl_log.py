"""The recrawl benchmark's analysis (design/recrawl.md C.8): what a crawl's
revisits achieved, read from the test web's request log and its config (the
pages' known change schedules), for a window [t0, t1] of the schedule clock.
Pure: no process, no network; ``bench/bench_recrawl.py`` runs the crawls and
feeds this.

**A URL's copy.** A page URL (``/`` or ``/p/<k>.html`` on ``d<i>.test`` or
``www.d<i>.test``, with any query; each URL is a copy of its own, as the
crawler keys them) holds, from the schedule time ``at`` of its last full
answer (a 200 answered to its end), the version that answer's body showed. A 304 leaves
the copy as it was: after an honest one the copy equals the page's version
then, after a lying one (a frozen ETag or Last-Modified) the copy stays the
older version while the page moved. A URL is *tracked* from its first full
answer; the window's pages are those tracked at ``t0``.

**Freshness** is the time-average over those URLs of ``[copy == version(t)]``
on [t0, t1], computed exactly from the change times: a copy of version c is
current on [τ_c, τ_{c+1}) (τ_0 = 0, τ_c the c-th change, τ_{c+1} infinite for
a page that never changes), so each stretch between two updates of the copy
adds its overlap with that interval.

**Against the model** (``bench/_recrawl_model.py``): per domain, ``B_d`` =
the visits (page answers, 200 or 304) whose ``at`` falls in the window, as a
rate per second; the optimum is the model's ``optimum`` over the true rates
(1 / the page's mean time between changes) of the domain's tracked URLs for
that budget, pages that never change taking no visit and staying fresh; the
uniform policy visits each of the ``N_d`` tracked URLs every ``N_d / B_d``
and is expected fresh ``F(r, N_d / B_d)``. Both may be held within the
crawl's [MIN, MAX]. Domain figures are pooled weighted by tracked URLs.

**The rest.** The 304 share of revisits to unchanged pages on hosts with
honest validators (``validators`` other than ``none``, no lie); body bytes
sent against unconditional refetching (every visit a 200 of the page's
size); revisits the WARC should hold as revisit records (304s, and 200s whose
body is byte-identical to the URL's previous 200: same version, not a noisy
page, not over the crawler's page cap, which stores it cut); and the politeness audit: same-domain intervals from the end of an
answer to the next arrival under the delay, and same-URL gaps (arrival to
arrival) under ``CRAWLER_RECRAWL_MIN``, a request whose previous one failed
(no answer, 429, 5xx, the client hung up) being a retry of the same visit
and skipped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench import _recrawl_model as model
from devkit.testweb.changes import Schedule
from devkit.testweb.config import WebConfig
from devkit.testweb.control import LogEntry, consecutive
from devkit.testweb.site import Site

#: (host name without port, lowercased; target without fragment): one copy
URL = tuple[str, str]


@dataclass(frozen=True)
class Visit:
    """One answered request for a page (a 200 or a 304)."""

    url: URL
    d: int
    k: int
    at: float  # schedule clock, s
    ms: float  # arrival, epoch ms (the log's clock)
    status: int
    version: int | None  # the body's (None: a 304)
    current: int  # the page's version when answered
    full: bool  # a 200 answered to its end: the crawler's copy moved


@dataclass
class Pages:
    """Which log entries are pages of the config's domains."""

    config: WebConfig
    hosts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        c = self.config
        self.hosts = {c.domain(i).lower(): i for i in range(c.domains)}
        self.hosts.update({"www." + c.domain(i).lower(): i for i in range(c.domains)})

    def page_of(self, host: str, path: str) -> tuple[int, int] | None:
        """(domain, page) of a page URL, None for anything else (robots.txt, faults, sitemaps)."""
        d = self.hosts.get(host.rsplit(":", 1)[0].lower())
        if d is None:
            return None
        path = path.split("#", 1)[0]
        if path == "/":
            return d, 0
        if path.startswith("/p/") and path.endswith(".html"):
            stem = path[3:-5]
            if stem.isdigit() and (stem == "0" or stem[0] != "0") and int(stem) < self.config.pages:
                return d, int(stem)
        return None

    def url(self, entry: LogEntry) -> URL:
        """The crawler's URL: the query kept (a tracking parameter it did not strip makes a copy of its own)."""
        return entry.domain.lower(), entry.target.split("#", 1)[0]


def visits(log: Iterable[LogEntry], config: WebConfig) -> list[Visit]:
    """The log's page answers (200 or 304 with a schedule time), in arrival order."""
    pages = Pages(config)
    out = []
    for e in log:
        if e.status not in (200, 304) or e.at is None or e.current is None:
            continue
        page = pages.page_of(e.host, e.path)
        if page is None:
            continue
        full = e.status == 200 and e.version is not None and bool(e.done) and not e.hung
        out.append(Visit(pages.url(e), page[0], page[1], e.at, e.ms, e.status, e.version, e.current, full))
    out.sort(key=lambda v: (v.at, v.ms))
    return out


def fresh_time(schedule: Schedule, d: int, k: int, updates: Sequence[tuple[float, int]],
               t0: float, t1: float) -> float | None:
    """Seconds of [t0, t1] during which the copy built by ``updates`` ((at,
    version) of each full answer, in time order) equals page (d, k)'s
    version; None when the URL has no copy at ``t0`` (not tracked then)."""
    before = [u for u in updates if u[0] <= t0]
    if not before:
        return None
    changing = schedule.mean_s(d, k) is not None
    steps = [(t0, before[-1][1])] + [u for u in updates if t0 < u[0] < t1]
    fresh = 0.0
    for i, (start, copy) in enumerate(steps):
        end = steps[i + 1][0] if i + 1 < len(steps) else t1
        if not changing:
            current_from, current_to = (0.0, math.inf) if copy == 0 else (0.0, 0.0)
        else:
            current_from = schedule.version_time(d, k, copy)
            current_to = schedule.version_time(d, k, copy + 1)
        fresh += max(0.0, min(end, current_to) - max(start, current_from))
    return fresh


def rate_of(schedule: Schedule, d: int, k: int) -> float:
    """A page's true change rate, per s (0: it never changes)."""
    mean = schedule.mean_s(d, k)
    return 0.0 if mean is None else 1.0 / mean


def optimum_freshness(rates: Sequence[float], budget: float, low: float = 0.0, high: float = math.inf) -> float:
    """The model's optimum's expected freshness of pages of ``rates`` (per s)
    for ``budget`` visits per s, intervals within [low, high]; pages that
    never change take no visit and are always fresh."""
    if not rates:
        return math.nan
    changing = [r for r in rates if r > 0]
    still = len(rates) - len(changing)
    if not changing:
        return 1.0
    if not budget > 0:
        return still / len(rates)
    best = model.mean_freshness(changing, model.optimum(changing, budget, low, high))
    return (best * len(changing) + still) / len(rates)


def uniform_freshness(rates: Sequence[float], budget: float, low: float = 0.0, high: float = math.inf) -> float:
    """Expected freshness of every page visited every ``len(rates) / budget`` s
    (held within [low, high])."""
    if not rates:
        return math.nan
    if not budget > 0:
        return sum(r == 0 for r in rates) / len(rates)
    interval = min(max(len(rates) / budget, low), high)
    return sum(model.freshness(r, interval) for r in rates) / len(rates)


@dataclass
class Audit:
    """Politeness as the site saw it (the whole log)."""

    domain_intervals: int = 0
    domain_under: int = 0  # end of an answer to the next arrival at the domain, under the delay
    domain_min_s: float = math.inf
    domain_unfinished: int = 0  # arrived while the domain's previous request was never answered
    url_gaps: int = 0
    url_under: int = 0  # same-URL arrival to arrival, under MIN
    url_after_failure: int = 0  # skipped: the previous request failed (a retry of the same visit)
    url_min_s: float = math.inf
    url_offenders: list[tuple[URL, float, float]] = field(default_factory=list)  # (url, arrival a, arrival b) ms


def failed(e: LogEntry) -> bool:
    """A request whose visit did not happen: no answer, 429, 5xx, or the client hung up first."""
    return e.status == 0 or e.status == 429 or e.status >= 500 or not e.done or bool(e.hung)


def audit(log: Sequence[LogEntry], config: WebConfig, delay: float, minimum: float) -> Audit:
    """The domain-delay and same-URL MIN audits over ``log`` (every request
    to a domain counts for its delay: robots.txt too; only page URLs for MIN)."""
    a = Audit()
    for first, second in consecutive(log):
        if not first.done:
            a.domain_unfinished += 1
            continue
        gap = second.ms - first.done
        a.domain_intervals += 1
        a.domain_min_s = min(a.domain_min_s, gap / 1000)
        a.domain_under += gap < delay * 1000
    pages = Pages(config)
    by_url: dict[URL, list[LogEntry]] = defaultdict(list)
    for e in log:
        if pages.page_of(e.host, e.path) is not None:
            by_url[pages.url(e)].append(e)
    for url, entries in by_url.items():
        entries.sort(key=lambda e: e.ms)
        for first, second in zip(entries, entries[1:]):
            if failed(first):
                a.url_after_failure += 1
                continue
            gap = second.ms - first.ms
            a.url_gaps += 1
            a.url_min_s = min(a.url_min_s, gap / 1000)
            if gap < minimum * 1000:
                a.url_under += 1
                a.url_offenders.append((url, first.ms, second.ms))
    return a


@dataclass
class Result:
    """What one crawl's revisits achieved in the window (see the module's docstring)."""

    window: tuple[float, float]
    tracked: int  # URLs with a copy at t0
    freshness: float  # measured
    optimum: float  # the model's, for the same fetches per domain
    uniform: float  # uniform's expected, for the same fetches per domain
    fetches: int  # visits in the window (200 + 304)
    fetches_by_domain: dict[int, int]
    tracked_by_domain: dict[int, int]
    not_modified: int  # 304s in the window
    honest_unchanged: int  # revisits in the window to unchanged pages on honest hosts
    honest_304: int  # of those, answered 304
    bytes_sent: int  # body bytes of the window's visits
    bytes_unconditional: int  # had every visit been a 200
    revisits_304: int  # whole log: 304s (server-not-modified records expected)
    revisits_identical: int  # whole log: 200 revisits byte-identical to the URL's previous 200
    by_domain_freshness: dict[int, float]
    by_domain_optimum: dict[int, float]
    rates_by_domain: dict[int, list[float]]  # true change rates (per s) of each domain's tracked URLs

    @property
    def share_304(self) -> float:
        return self.honest_304 / self.honest_unchanged if self.honest_unchanged else math.nan

    @property
    def bytes_saved(self) -> int:
        return self.bytes_unconditional - self.bytes_sent

    @property
    def ratio(self) -> float:
        return self.freshness / self.optimum if self.optimum else math.nan

    def subset(self, domains: Iterable[int]) -> tuple[float, float]:
        """(measured, optimum) freshness pooled over ``domains`` (weighted by tracked URLs)."""
        chosen = [d for d in domains if self.tracked_by_domain.get(d)]
        total = sum(self.tracked_by_domain[d] for d in chosen)
        if not total:
            return math.nan, math.nan
        return (sum(self.by_domain_freshness[d] * self.tracked_by_domain[d] for d in chosen) / total,
                sum(self.by_domain_optimum[d] * self.tracked_by_domain[d] for d in chosen) / total)


def analyse(log: Sequence[LogEntry], config: WebConfig, t0: float, t1: float,
            low: float = 0.0, high: float = math.inf, site: Site | None = None,
            page_cap: float = math.inf) -> Result:
    """The window [t0, t1] (schedule clock, s) of a crawl of the test web of
    ``config`` whose request log is ``log``; ``low``/``high``: the crawl's
    MIN and MAX, which the optimum and uniform are held within; ``page_cap``:
    the crawler's page cap (billion's ``CRAWLER_MAX_PAGE_BYTES``): a page
    over it is stored cut, and a cut payload is never an identical one."""
    if not t1 > t0:
        raise ValueError(f"an empty window: [{t0}, {t1}]")
    schedule = Schedule.of(config)
    site = site or Site(config, 0)
    seen = visits(log, config)
    updates: dict[URL, list[tuple[float, int]]] = defaultdict(list)
    page: dict[URL, tuple[int, int]] = {}
    for v in seen:
        page[v.url] = (v.d, v.k)
        if v.full:
            assert v.version is not None
            updates[v.url].append((v.at, v.version))
    fresh_by_domain: dict[int, float] = defaultdict(float)
    rates_by_domain: dict[int, list[float]] = defaultdict(list)
    for url, ups in updates.items():
        d, k = page[url]
        fresh = fresh_time(schedule, d, k, ups, t0, t1)
        if fresh is None:
            continue
        fresh_by_domain[d] += fresh / (t1 - t0)
        rates_by_domain[d].append(rate_of(schedule, d, k))
    tracked_by_domain = {d: len(r) for d, r in rates_by_domain.items()}
    tracked = sum(tracked_by_domain.values())
    inside = [v for v in seen if t0 <= v.at <= t1]
    fetches_by_domain: dict[int, int] = defaultdict(int)
    for v in inside:
        fetches_by_domain[v.d] += 1
    optimum = uniform = 0.0
    by_fresh: dict[int, float] = {}
    by_optimum: dict[int, float] = {}
    for d, rates in rates_by_domain.items():
        budget = fetches_by_domain.get(d, 0) / (t1 - t0)
        by_fresh[d] = fresh_by_domain[d] / len(rates)
        by_optimum[d] = optimum_freshness(rates, budget, low, high)
        optimum += by_optimum[d] * len(rates)
        uniform += uniform_freshness(rates, budget, low, high) * len(rates)
    # 304s, unchanged revisits on honest hosts, bytes: walk each URL's visits in order
    copy: dict[URL, int] = {}
    last_full: dict[URL, int] = {}
    honest_unchanged = honest_304 = sent = unconditional = r304 = identical = not_modified = 0
    for v in seen:
        rules = site.host_rules(v.d)
        in_window = t0 <= v.at <= t1
        known = copy.get(v.url)
        if v.status == 304:
            r304 += 1
        elif (v.full and last_full.get(v.url) == v.version and not site.noisy(v.d, v.k)
              and site.page_size(v.d, v.k) <= page_cap):
            identical += 1
        if in_window:
            size = site.page_size(v.d, v.k)
            unconditional += size
            sent += size if v.status == 200 else 0
            not_modified += v.status == 304
            if known is not None and v.current == known and rules.validators != "none" and rules.lie is None:
                honest_unchanged += 1
                honest_304 += v.status == 304
        if v.full:
            assert v.version is not None
            copy[v.url] = last_full[v.url] = v.version
    return Result(
        window=(t0, t1), tracked=tracked, freshness=sum(fresh_by_domain.values()) / tracked if tracked else math.nan,
        optimum=optimum / tracked if tracked else math.nan, uniform=uniform / tracked if tracked else math.nan,
        fetches=len(inside), fetches_by_domain=dict(fetches_by_domain), tracked_by_domain=tracked_by_domain,
        not_modified=not_modified, honest_unchanged=honest_unchanged, honest_304=honest_304,
        bytes_sent=sent, bytes_unconditional=unconditional, revisits_304=r304, revisits_identical=identical,
        by_domain_freshness=by_fresh, by_domain_optimum=by_optimum, rates_by_domain=dict(rates_by_domain),
    )


def fetch_ratio_for(rates: Sequence[float], budget: float, target: float) -> float:
    """The share of ``budget`` (visits per s) the model's optimum needs to
    reach freshness ``target`` over pages of ``rates`` (those that never
    change are fresh for free): the model's "optimum's visits for uniform's
    freshness"."""
    changing = [r for r in rates if r > 0]
    if not changing or not budget > 0:
        return math.nan
    still = len(rates) - len(changing)
    goal = (target * len(rates) - still) / len(changing)
    if goal <= 0:
        return 0.0
    if goal >= 1:
        return math.inf
    return model.budget_for(changing, goal) / budget
