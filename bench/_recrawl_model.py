"""Issue 49's scheduling model, in pure Python (design/recrawl.md, section 5):
the expected freshness of a domain's pages revisited at fixed intervals under
a fetch budget, for three ways of spreading it (the same for every page,
proportional to each page's change rate, and the Lagrange optimum of Cho and
Garcia-Molina 2003), and the change-rate estimators on simulated visits.

    python -m bench._recrawl_model

A page whose changes are a Poisson process of rate r, visited every I, is
fresh (its copy still equals the page) a share
F = (1 - e^(-rI)) / (rI) of the time. With f = 1/I, dF/df = g(rI)/r where
g(x) = 1 - (1 + x) e^(-x): the optimum gives every visited page the same
slope mu, so x_i = g^-1(mu r_i) (no visit when mu r_i >= 1), and mu is the
one whose visits add up to the budget (bisection).
"""

from __future__ import annotations

import math
import random


def freshness(rate: float, interval: float) -> float:
    x = rate * interval
    return 1.0 if x <= 0 else (-math.expm1(-x)) / x


def g(x: float) -> float:
    return -math.expm1(-x) - x * math.exp(-x)


def g_inverse(y: float) -> float:
    """x with g(x) = y, 0 <= y < 1: Newton's method (g'(x) = x e^(-x)) from
    sqrt(2y), right for small x, kept above 0 (g is convex then concave)."""
    if y <= 0:
        return 0.0
    x = max(math.sqrt(2 * y), -math.log1p(-y) + 1.0 if y > 0.5 else 0.0)
    for _ in range(50):
        step = (g(x) - y) / (x * math.exp(-x))
        x = max(x - step, x / 2)
        if abs(step) < 1e-10 * x:
            break
    return x


def visits_at(rates: list[float], mu: float, low: float = 0.0, high: float = math.inf) -> list[float]:
    """Visits per unit time of each page where the slope of its freshness is
    ``mu``, each interval within [low, high] (no visit: the interval high)."""
    out = []
    for r in rates:
        f = 0.0 if mu * r >= 1 else r / g_inverse(mu * r)
        out.append(min(max(f, 1 / high if high < math.inf else 0.0), 1 / low if low > 0 else math.inf))
    return out


def optimum(rates: list[float], budget: float, low: float = 0.0, high: float = math.inf) -> list[float]:
    """Visits per unit time of each page: the most expected freshness for
    ``budget`` visits per unit time (bisection on log mu)."""
    lo, hi = 1e-9, 1e9
    for _ in range(70):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if sum(visits_at(rates, mid, low, high)) > budget else (lo, mid)
    return visits_at(rates, math.sqrt(lo * hi), low, high)


def mean_freshness(rates: list[float], visits: list[float]) -> float:
    return sum(freshness(r, 1 / f) if f > 0 else 0.0 for r, f in zip(rates, visits)) / len(rates)


def budget_for(rates: list[float], target: float) -> float:
    """The fewest visits per unit time the optimum needs to reach ``target``."""
    lo, hi = 1e-9, 1e9  # mu: the smaller, the more visits and the fresher
    for _ in range(70):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if mean_freshness(rates, visits_at(rates, mid)) > target else (lo, mid)
    return sum(visits_at(rates, lo))


def estimators(rate: float, interval: float, visits: int, trials: int, rng: random.Random) -> tuple[float, float]:
    """Mean of the naive estimate X/(n I) and of the bias-corrected one
    -log((n - X + 0.5)/(n + 0.5))/I over ``trials`` runs of ``visits`` visits."""
    naive = corrected = 0.0
    p = -math.expm1(-rate * interval)
    for _ in range(trials):
        changed = sum(rng.random() < p for _ in range(visits))
        naive += changed / (visits * interval)
        corrected += -math.log((visits - changed + 0.5) / (visits + 0.5)) / interval
    return naive / trials, corrected / trials


def main() -> None:
    rng = random.Random(49)
    pages = 1000
    # change rates per day, log-uniform over three orders of magnitude: once in 100 days to 10 a day
    rates = [10 ** rng.uniform(-2, 1) for _ in range(pages)]
    print(f"{pages} pages, change rates 0.01-10 a day (log-uniform), mean {sum(rates) / pages:.2f} a day")
    print("visits/page/day  uniform  proportional  optimum  uniform/optimum  optimum's visits for uniform's freshness")
    for per_page in (0.1, 0.25, 0.5, 1.0, 2.0):
        budget = per_page * pages
        uniform = mean_freshness(rates, [per_page] * pages)
        total = sum(rates)
        proportional = mean_freshness(rates, [budget * r / total for r in rates])
        best = mean_freshness(rates, optimum(rates, budget))
        need = budget_for(rates, uniform) / budget
        print(f"{per_page:15.2f}  {uniform:7.3f}  {proportional:12.3f}  {best:7.3f}  "
              f"{uniform / best:15.1%}  {need:.0%}")
    # the same with the interval clamped to [1 h, 30 d] (the minimum and maximum interval issue 49 names)
    budget = 0.5 * pages
    clamped = mean_freshness(rates, optimum(rates, budget, low=1 / 24, high=30))
    print(f"optimum at 0.5 visits/page/day with intervals within [1 h, 30 d]: {clamped:.3f}")
    print("\nestimators (true rate 1 a day, 400 trials): interval, visits, naive mean, corrected mean")
    for interval, visits in ((0.5, 10), (1.0, 10), (2.0, 10), (2.0, 40), (4.0, 40)):
        naive, corrected = estimators(1.0, interval, visits, 400, rng)
        print(f"  {interval:4.1f} d  {visits:3d}  {naive:.3f}  {corrected:.3f}")


if __name__ == "__main__":
    main()
