"""Adaptive revisit intervals (design/recrawl.md C.5): how often a page
changes, how fresh a schedule keeps it, and how a domain spreads its fetch
budget over its pages. Pure arithmetic on floats; any unit of time will do
as long as rates, intervals and budgets share it (the frontier uses
seconds).

**Freshness.** A page whose changes are a Poisson process of rate r, visited
every I, is fresh (the copy equals the page) a share of the time

    F(r, I) = (1 - e^(-rI)) / (rI).

**The optimum** (Cho and Garcia-Molina 2003). Maximising Σ F(r_i, I_i) under
Σ 1/I_i = B (Lagrange, with f = 1/I: dF/df = g(rI)/r) gives every visited
page the same slope μ:

    g(x) = 1 - (1 + x) e^(-x),    g(r_i I_i) = μ r_i,

and no visit (the longest interval) where μ r_i >= 1. Visits fall as μ
grows, so μ is found by bisection on log μ until the visits fit the budget.
The intervals are clamped to [MIN, MAX] inside that sum, so μ is the
optimum of the clamped problem.

**What a page's visits say about its rate** (:func:`posterior`). The
maximum-likelihood rate (:func:`rate`) is what a page's history says at
best, but after a few visits it is a poor guide to a schedule: a page not
yet seen changing reads 0 (so the optimum's interval is MAX), and one seen
changing at its first visit reads one change per interval whatever its real
pace. The schedule therefore reads the history as a **posterior** over the
:data:`RATE_BINS` rates a crawl can tell apart (the rate bins' centres, from
1/(:data:`SLOW` × MAX) to 1/MIN), from a prior that gives each bin the same
weight (log-uniform in the rate: no scale is favoured) and the history's
likelihood, ``Π (1 - e^(-r t_b))^(c_b) × e^(-r tu)``. A page with many
visits has a narrow posterior around its maximum-likelihood rate; a page
with few has a wide one, and its interval weighs every rate it may have.

**The interval rule.** A page's next interval is the one that maximises its
expected freshness under the posterior less μ per visit,
``Σ_b w_b g(r_b I) / r_b = μ`` (:func:`expected_interval`: the optimum's
condition taken in expectation), or, with no budget, the one whose
expected F is the freshness target (:func:`expected_target_interval`),
kept within half and twice the previous interval (the step guard), then
within [MIN, MAX], which is never crossed. A page is counted in the rate bin
that holds the median of its posterior (:func:`rate_bin_of`), so that the
domain's μ is solved on what the pages' visits say, a page with no change
seen included.

``bench/_recrawl_model.py`` is the model this is checked against.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

from crawler.recrawl.record import BIN_BASE, History, bin_centre

#: a domain's tracked pages are counted in this many log-spaced rate bins,
#: from 1/(SLOW × MAX) to 1/MIN (rates outside fall in the end bins)
RATE_BINS = 24
#: the bins reach this factor below 1/MAX: a page changing less than once
#: in MAX may still be worth a visit more often than MAX (the optimum's
#: interval is about √(2μ/r) there), so lumping such pages into one bin at
#: 1/MAX misjudges the visits they take
SLOW = 16
_MU_STEPS = 60
#: at most this many Newton (or bisection) steps on log I for a page's interval
_INTERVAL_STEPS = 60
#: posterior weights below this are left out of a page's interval
_NEGLIGIBLE = 1e-12


def freshness(rate: float, interval: float) -> float:
    """F(r, I) = (1 - e^(-rI)) / (rI), 1 at rI = 0."""
    x = rate * interval
    if not x > 0:
        return 1.0
    return 0.0 if math.isinf(x) else -math.expm1(-x) / x


def g(x: float) -> float:
    """g(x) = 1 - (1 + x) e^(-x): rises from 0 to 1, about x²/2 near 0."""
    return -math.expm1(-x) - x * math.exp(-x)


# g^-1 from a table of 1024 points, log-spaced in x, read by linear
# interpolation of log x against u = log(y / (1 - y)) (about 2 log x for
# small x and about x for large x, so both ends are nearly straight). The
# points are computed from x, so the table holds exact values.
_POINTS = 1024
_X_LOW, _X_HIGH = 1e-4, 36.0
_XS = [math.log(_X_LOW) + math.log(_X_HIGH / _X_LOW) * i / (_POINTS - 1) for i in range(_POINTS)]
_US = [math.log(g(math.exp(lx))) - math.log1p(math.exp(lx)) + math.exp(lx) for lx in _XS]
_Y_LOW = g(_X_LOW)


def g_inverse(y: float) -> float:
    """x with g(x) = y, for 0 <= y < 1 (0 below, infinity at 1 and above).

    Inside the table one Newton step (g'(x) = x e^(-x)) polishes the
    interpolated value; below it x = s (1 + s/3) with s = √(2y) (g ≈ x²/2 -
    x³/3); above it x solves 1 - y = (1 + x) e^(-x) by the fixed point
    x = -log(1 - y) + log(1 + x).
    """
    if not y > 0:
        return 0.0
    if y >= 1:
        return math.inf
    if y < _Y_LOW:
        s = math.sqrt(2 * y)
        return s * (1 + s / 3)
    u = math.log(y) - math.log1p(-y)
    if u >= _US[-1]:
        x = tail = -math.log1p(-y)
        for _ in range(8):
            x = tail + math.log1p(x)
        return x
    i = min(bisect.bisect_right(_US, u), _POINTS - 1) - 1
    share = (u - _US[i]) / (_US[i + 1] - _US[i])
    x = math.exp(_XS[i] + share * (_XS[i + 1] - _XS[i]))
    if x < 25.0:  # beyond, g' is too flat for y's precision
        x -= (g(x) - y) / (x * math.exp(-x))
    return x


def rate(changed: Iterable[tuple[float, int]], unchanged: float, pseudo: float) -> float:
    """The change rate r̂ that best explains the visits: ``changed`` holds
    (interval, count) pairs of intervals that ended with the page changed,
    ``unchanged`` the total time of those that ended unchanged, and
    ``pseudo`` an interval of which half is counted as unchanged.

    Derivation. Under Poisson changes each interval between two visits is
    an independent observation: one of length t ends unchanged with
    probability e^(-rt) and changed with 1 - e^(-rt). The log-likelihood of
    c_b changed intervals of length t_b and of unchanged ones adding up to
    ``unchanged``, plus half an unchanged ``pseudo`` interval, is

        L(r) = Σ c_b log(1 - e^(-r t_b)) - r T,    T = unchanged + pseudo / 2,

    whose derivative Σ c_b t_b / (e^(r t_b) - 1) - T falls from +∞ to -T, so
    its one root is the estimate. With regular visits (every t_b = I, X
    changes in n visits, T = (n - X) I + I/2) L is, in q = e^(-rI),
    X log(1 - q) + (n - X + 0.5) log q, largest at q = (n - X + 0.5)/(n +
    0.5): Cho and Garcia-Molina's bias-corrected

        r̂ = -log((n - X + 0.5) / (n + 0.5)) / I;

    with irregular intervals it is the irregular-interval MLE, the half
    pseudo-interval playing the part of Cho's 0.5 (it keeps the estimate
    finite when every interval changed). No change seen gives 0, and no
    unchanged time at all gives infinity.

    Solved by Newton's method on log r inside the bracket
    [X / (T + S/2), X / T] (S = Σ c_b t_b, from 1/x - 1/2 <= 1/(e^x - 1) <=
    1/x), bisecting when a step leaves it.
    """
    terms = [(float(t), c) for t, c in changed if c > 0 and t > 0]
    if not terms:
        return 0.0
    total = unchanged + pseudo / 2
    if not total > 0:
        return math.inf
    count = sum(c for _, c in terms)
    lo = math.log(count / (total + sum(c * t for t, c in terms) / 2))
    hi = math.log(count / total)
    s = (lo + hi) / 2
    for _ in range(60):
        r = math.exp(s)
        value = slope = 0.0
        for t, c in terms:
            x = r * t
            if x < 700:
                value += c * t / math.expm1(x)
                slope -= c * t * x / (math.expm1(x) * -math.expm1(-x))
        value -= total
        if value > 0:
            lo = s
        else:
            hi = s
        nxt = s - value / slope if slope < 0 else (lo + hi) / 2
        if not lo <= nxt <= hi:
            nxt = (lo + hi) / 2
        if abs(nxt - s) < 1e-14 or hi - lo < 1e-14:
            return math.exp(nxt)
        s = nxt
    return math.exp(s)


def rate_of(history: History, pseudo: float | None = None, base: float = BIN_BASE) -> float:
    """:func:`rate` from a record's counts: its changed intervals at their
    bins' centres (``base`` × 2^b: the crawl's MIN, as they were counted),
    ``tu`` unchanged, and its current interval ``iv`` as the pseudo-interval
    unless given."""
    return rate(((bin_centre(b, base), c) for b, c in enumerate(history.bins)), history.tu,
                history.iv if pseudo is None else pseudo)


def rate_bin(rate: float, low: float, high: float) -> int:
    """The bin of a page's rate among :data:`RATE_BINS` log-spaced bins from
    1/(:data:`SLOW` × ``high``) to 1/``low`` (``low`` and ``high`` are the
    interval clamps); a rate outside falls in the end bin, 0 (no change
    seen) in bin 0."""
    span = SLOW * high
    if not rate * span > 1 or not high > low:
        return 0
    return min(RATE_BINS - 1, math.floor(RATE_BINS * math.log(rate * span) / math.log(span / low)))


def rate_bin_centre(i: int, low: float, high: float) -> float:
    """The rate bin ``i`` stands for: its geometric centre."""
    span = SLOW * high
    return (span / low) ** ((i + 0.5) / RATE_BINS) / span


def domain_mu(counts: Sequence[int], budget: float, low: float, high: float) -> float:
    """A domain's slope μ from its :data:`RATE_BINS` counts of tracked pages
    (``rdom lb<i>``): :func:`solve_mu` on the bins' centres."""
    return solve_mu([rate_bin_centre(i, low, high) for i in range(len(counts))], counts, budget, low, high)


def optimal_interval(rate: float, mu: float, low: float = 0.0, high: float = math.inf) -> float:
    """The optimum's interval for a page of rate ``rate`` at slope ``mu``:
    g^-1(μ r) / r within [low, high], and ``high`` (no visit) where μ r >= 1
    or the page was never seen changing."""
    if not rate > 0 or not mu * rate < 1:
        return high
    return min(max(g_inverse(mu * rate) / rate, low), high)


def solve_mu(rates: Sequence[float], counts: Sequence[int], budget: float,
             low: float = 0.0, high: float = math.inf) -> float:
    """The slope μ at which ``counts[i]`` pages of rate ``rates[i]`` each at
    its :func:`optimal_interval` make at most ``budget`` visits per unit of
    time: 60 bisection steps on log μ between 10^-12 / r_max (every page at
    its fastest) and 1 / r_min (every page at ``high``). For the exact
    optimum pass each page's rate with a count of 1; for a domain's
    :data:`RATE_BINS` counts, the bins' centres. Infinity when no page has a
    positive rate (every page at ``high`` whatever μ)."""
    pages = [(r, c) for r, c in zip(rates, counts) if c > 0 and r > 0]
    if not pages:
        return math.inf

    def visits(mu: float) -> float:
        return sum(c / i if (i := optimal_interval(r, mu, low, high)) > 0 else math.inf for r, c in pages)

    lo = math.log(1e-12 / max(r for r, _ in pages))
    hi = -math.log(min(r for r, _ in pages))
    for _ in range(_MU_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if visits(math.exp(mid)) > budget else (lo, mid)
    return math.exp(hi)


@lru_cache(maxsize=16)
def _fresh_x(target: float) -> float:
    lo, hi = 0.0, 1 / target  # F(x) <= 1/x
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if freshness(1.0, mid) > target else (lo, mid)
    return (lo + hi) / 2


def target_interval(rate: float, target: float, low: float = 0.0, high: float = math.inf) -> float:
    """With no budget: the interval whose expected freshness F(r, I) is
    ``target`` (r I = 0.2146 at 0.9), within [low, high]."""
    if not 0 < target < 1:
        raise ValueError(f"a freshness target is between 0 and 1, not {target!r}")
    if not rate > 0:
        return high
    return min(max(_fresh_x(target) / rate, low), high)


def next_interval(previous: int, proposed: float, low: int, high: int) -> int:
    """The interval to schedule, s: ``proposed`` kept within
    [previous / 2, 2 × previous] (the step guard; none when there is no
    previous interval), then within [low, high], which wins over the guard
    (MIN and MAX are never crossed, even after they were changed). NaN counts
    as no change."""
    low, high = math.ceil(low), math.floor(high)
    if not 0 < low <= high:
        raise ValueError(f"interval clamps must be 0 < MIN <= MAX: {low!r}, {high!r}")
    if proposed != proposed:
        proposed = previous
    if previous > 0:
        proposed = min(max(proposed, math.ceil(previous / 2)), 2 * previous)
    return round(min(max(proposed, low), high))


def posterior(history: History, low: float, high: float) -> list[float]:
    """The weights of a page's change rate over the :data:`RATE_BINS` rate
    bins' centres (:func:`rate_bin_centre`, ``low`` and ``high`` the interval
    clamps MIN and MAX), adding up to 1: a prior of equal weights times the
    likelihood of the record's counts (its changed intervals at their bins'
    centres, read at base ``low`` as they were counted, and ``tu``
    unchanged). A record with no visit has the prior's."""
    rates = [rate_bin_centre(i, low, high) for i in range(RATE_BINS)]
    terms = [(bin_centre(b, low), c) for b, c in enumerate(history.bins) if c > 0]
    logs = []
    for r in rates:
        value = -r * history.tu
        for t, c in terms:
            value += c * math.log(-math.expm1(-r * t))
        logs.append(value)
    top = max(logs)
    weights = [math.exp(v - top) for v in logs]
    total = sum(weights)
    return [w / total for w in weights]


def rate_bin_of(history: History, low: float, high: float) -> int:
    """The rate bin a page is counted in for its domain's μ (``rdom
    lb<i>``): the bin that holds the median of its :func:`posterior` (the
    middle bin for a page with no visit yet)."""
    seen = 0.0
    for i, w in enumerate(posterior(history, low, high)):
        seen += w
        if seen >= 0.5:
            return i
    return RATE_BINS - 1


def _solve_interval(value: Callable[[float], tuple[float, float]], low: float, high: float) -> float:
    """I within [low, high] where ``value(I)`` crosses 0, ``value`` returning
    a non-decreasing function of I and its slope in log I: ``low`` when it
    is there already, ``high`` when it never gets there; else Newton's
    method on log I inside the bracket, bisecting when a step leaves it."""
    if value(low)[0] >= 0:
        return low
    if not high > low or value(high)[0] <= 0:
        return high
    lo, hi = math.log(low), math.log(high)
    s = (lo + hi) / 2
    for _ in range(_INTERVAL_STEPS):
        v, slope = value(math.exp(s))
        if v < 0:
            lo = s
        else:
            hi = s
        step = v / slope if slope > 0 else math.inf
        if abs(step) < 1e-12:
            return math.exp(s - step)
        s = s - step if lo < s - step < hi else (lo + hi) / 2
        if hi - lo < 1e-12:
            return math.exp(s)
    return math.exp(s)


def expected_interval(weights: Sequence[float], rates: Sequence[float], mu: float,
                      low: float = 0.0, high: float = math.inf) -> float:
    """The interval within [low, high] that maximises a page's expected
    freshness less ``mu`` per visit when its rate is ``rates[i]`` with
    probability ``weights[i]``: E[F] is concave in the visit rate 1/I, with
    slope ``Σ w_i g(r_i I) / r_i``, which rises with I, so its one root of
    ``= μ`` is the optimum (the optimum's condition, g(r I) = μ r, taken in
    expectation). ``high`` when μ is not finite or no rate is positive."""
    pages = [(w, r) for w, r in zip(weights, rates) if w > _NEGLIGIBLE and r > 0]
    if not pages or not math.isfinite(mu):
        return high

    def value(i: float) -> tuple[float, float]:  # Σ w g(rI)/r - μ, and its slope in log I: Σ w (rI)² e^(-rI) / r
        total = slope = 0.0
        for w, r in pages:
            x = r * i
            e = math.exp(-x)
            total += w * (-math.expm1(-x) - x * e) / r
            slope += w * x * x * e / r
        return total - mu, slope

    return _solve_interval(value, max(low, 1e-9), high)


def expected_target_interval(weights: Sequence[float], rates: Sequence[float], target: float,
                             low: float = 0.0, high: float = math.inf) -> float:
    """With no budget: the interval within [low, high] whose expected
    freshness ``Σ w_i F(r_i, I)`` is ``target`` (it falls as I grows)."""
    if not 0 < target < 1:
        raise ValueError(f"a freshness target is between 0 and 1, not {target!r}")
    pages = [(w, r) for w, r in zip(weights, rates) if w > _NEGLIGIBLE and r > 0]
    if not pages:
        return high

    def value(i: float) -> tuple[float, float]:  # target - Σ w F(r, I), and its slope in log I: Σ w g(rI)/(rI)
        total = slope = 0.0
        for w, r in pages:
            x = r * i
            total += w * freshness(r, i)
            slope += w * g(x) / x
        return target - total, slope

    return _solve_interval(value, max(low, 1e-9), high)


def adaptive_interval(history: History, low: int, high: int, mu: float | None,
                      target: float = 0.9) -> int:
    """A page's next interval from its record (its counts already include
    the visit being written): a pinned interval within [low, high]; else,
    on the record's :func:`posterior`, the domain optimum's at slope ``mu``
    (:func:`expected_interval`) or, with ``mu`` None (no budget), the
    freshness ``target``'s (:func:`expected_target_interval`), through
    :func:`next_interval`. The record's bins are read at base ``low`` (MIN),
    as they were counted."""
    if history.pinned:
        return min(max(history.iv, math.ceil(low)), math.floor(high))
    weights = posterior(history, low, high)
    rates = [rate_bin_centre(i, low, high) for i in range(RATE_BINS)]
    proposed = (expected_target_interval(weights, rates, target, low, high) if mu is None
                else expected_interval(weights, rates, mu, low, high))
    return next_interval(history.iv, proposed, low, high)
