"""The crawl-order bench's model (bench/_order_model.py, docs/crawl-order.md)
kept honest at a small size: PageRank against closed forms, the simulated
crawl's politeness, capacity and discovery, and the omniscient order as the
ceiling. No server: seconds."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import numpy as np
import pytest

from bench import _order_model as model
from bench.bench_order import main as bench_main

PAGES, SEED, DELAY, SLOTS = 20_000, 3, 10, 5
UNTIL = PAGES // 5
D = 0.85
Web = tuple[model.Graph, np.ndarray, np.ndarray, np.ndarray]  # the graph, PageRank, host ranks, seeds


@pytest.fixture(scope="module")
def web() -> Web:
    g = model.generate(model.GraphSpec(pages=PAGES), SEED)
    pr, _ = model.pagerank(g)
    return g, pr, model.host_ranks(g, pr), model.pick_seeds(g, 0.1, SEED)


def crawl(web: Web, host: str, within: str) -> model.Crawl:
    g, pr, ranks, seeds = web
    return model.simulate(g, model.Order(f"{host}/{within}", host, within), seeds=seeds, slots=SLOTS,
                          delay=DELAY, until=UNTIL, pr=pr, ranks=ranks, tie_seed=SEED)


ALL_ORDERS = [("due", "fifo"), ("rank", "inlinks"), ("decay", "fifo"), ("decay", "inlinks"), ("decay", "opic"),
              ("decay", "external"), ("decay", "share"), ("decay", "weighted"), ("budget", "inlinks"),
              ("file", "inlinks"), ("file-decay", "inlinks"), ("omniscient", "pagerank")]


def test_pagerank_matches_closed_forms_and_sums_to_one(web: Web) -> None:
    # a star: k leaves link to the centre, the centre to every leaf
    k = 7
    n = k + 1
    star = model.from_edges(n, [(i, 0) for i in range(1, n)] + [(0, i) for i in range(1, n)])
    pr, _ = model.pagerank(star, tol=1e-14)
    centre = (1 + D * k) / (n * (1 + D))
    assert pr[0] == pytest.approx(centre, rel=1e-9)
    assert pr[1:] == pytest.approx(np.full(k, (1 - centre) / k), rel=1e-9)
    # a dangling page: 0 -> 1, and 1 links nowhere (its rank spread over all pages)
    two = model.from_edges(2, [(0, 1)])
    pr, _ = model.pagerank(two, tol=1e-14)
    assert pr == pytest.approx([1 / (2 + D), (1 + D) / (2 + D)], rel=1e-9)
    # a 3-cycle with a chord 0 -> 2: solved by hand as a linear system
    tri = model.from_edges(3, [(0, 1), (1, 2), (2, 0), (0, 2)])
    m = np.zeros((3, 3))
    for s, t, w in ((0, 1, 0.5), (0, 2, 0.5), (1, 2, 1.0), (2, 0, 1.0)):
        m[t, s] = w
    exact = np.linalg.solve(np.eye(3) - D * m, np.full(3, (1 - D) / 3))
    pr, _ = model.pagerank(tri, tol=1e-14)
    assert pr == pytest.approx(exact, rel=1e-9)
    g, pr, _, _ = web
    assert pr.sum() == pytest.approx(1.0, abs=1e-9) and (pr > 0).all()


def test_the_generated_web_has_the_shape_the_docs_state(web: Web) -> None:
    g, pr, _, _ = web
    assert g.n == PAGES and g.hosts == PAGES // 20
    assert 0.8 <= g.internal_share() <= 0.9
    sizes = np.sort(g.sizes)[::-1]
    assert sizes[0] > 50 * np.median(sizes)  # a few hosts hold many pages: Zipf-like
    assert 1.8 < model.indegree_exponent(g, kmin=10) < 3.0  # a power-law in-degree, web-like
    assert 8 < g.links / g.n < 12
    assert (g.dst != g.src()).all()  # no self-links
    same = model.generate(model.GraphSpec(pages=PAGES), SEED)
    assert np.array_equal(same.dst, g.dst) and np.array_equal(same.start, g.start)  # seeded
    other = model.generate(model.GraphSpec(pages=PAGES), SEED + 1)
    assert not np.array_equal(other.start, g.start)


@pytest.mark.parametrize(("host", "within"), ALL_ORDERS)
def test_crawl_is_polite_capacity_bound_and_follows_links(web: Web, host: str, within: str) -> None:
    g, _, _, seeds = web
    c = crawl(web, host, within)
    assert c.fetched.size == UNTIL and np.unique(c.fetched).size == UNTIL  # each page once
    ticks = c.fetch_tick[c.fetched]
    assert (np.diff(ticks) >= 0).all()  # in fetch order
    assert np.bincount(ticks).max() <= SLOTS  # the slots
    # politeness: a host's fetches at least DELAY ticks apart
    hosts = g.host_of[c.fetched]
    by_host = np.lexsort((ticks, hosts))
    same = hosts[by_host][1:] == hosts[by_host][:-1]
    gaps = np.diff(ticks[by_host])[same]
    assert gaps.size and gaps.min() >= DELAY
    # capacity-bound: many more hosts due with work than slots
    assert np.mean(c.due_hosts) > 10 * SLOTS
    # discovery: a page is fetched only after a page fetched on an earlier tick links to it (or it is a seed)
    src = g.src()
    linked = c.fetch_tick[src] >= 0
    first = np.full(g.n, np.iinfo(np.int64).max)
    np.minimum.at(first, g.dst[linked], c.fetch_tick[src[linked]])
    nonseed = c.fetched[~np.isin(c.fetched, seeds)]
    assert (c.fetch_tick[nonseed] > first[nonseed]).all()
    assert (c.discover_tick[nonseed] == first[nonseed]).all()
    assert (c.fetch_tick[c.fetched] > c.discover_tick[c.fetched]).all()
    assert (c.discover_tick[seeds] == -1).all()


def test_omniscient_is_the_ceiling_and_ranks_beat_due_time(web: Web) -> None:
    g, pr, _, _ = web
    top = model.top_pages(pr)
    due = model.curve(crawl(web, "due", "fifo"), pr, top)
    omni = model.curve(crawl(web, "omniscient", "pagerank"), pr, top)
    ours = model.curve(crawl(web, "decay", "inlinks"), pr, top)
    # never below due-time, at any number of pages fetched
    assert (omni.mass >= due.mass - 1e-12).all()
    assert (omni.mass >= ours.mass - 1e-12).all()
    assert omni.top_at(UNTIL) >= due.top_at(UNTIL)
    k = PAGES // 10
    assert due.mass_at(k) < ours.mass_at(k) < omni.mass_at(k)
    assert model.gap_closed(ours.mass_at(k), due.mass_at(k), omni.mass_at(k)) > 0.3
    assert ours.top_at(k) > due.top_at(k)


def test_pick_serves_the_highest_ranks_then_the_earliest_due() -> None:
    elig = np.arange(6)
    primary = np.array([5.0, 1.0, 5.0, 3.0, 3.0, 3.0])
    secondary = np.array([0.0, 0.0, 0.0, 9.0, 2.0, 4.0])
    assert sorted(model._pick(elig, primary, secondary, 3).tolist()) == [0, 2, 4]
    assert sorted(model._pick(elig, None, secondary, 2).tolist()) == [0, 1]
    assert sorted(model._pick(elig, primary, secondary, 9).tolist()) == list(range(6))


def test_gap_closed_and_orders_refuse_nonsense() -> None:
    assert model.gap_closed(0.5, 0.4, 0.6) == pytest.approx(0.5)
    assert model.gap_closed(0.4, 0.4, 0.6) == 0.0
    with pytest.raises(ValueError):
        model.Order("x", "popularity", "fifo")
    with pytest.raises(ValueError):
        model.Order("x", "omniscient", "fifo")  # the ceiling takes the true PageRank within a host too


def test_bench_prints_every_order_and_the_targets() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert bench_main(["--pages", "20000", "--seed", "1", "--order", "ours=decay/inlinks"]) == 0
    text = out.getvalue()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0].strip("| ") for r in rows[1:]] == ["due-time", "ours", "omniscient"]
    assert "gap closed@10%" in rows[0] and "top0.1%@10%" in rows[0]
    assert "targets at 10% fetched" in text and "ours" in text.split("targets at 10% fetched")[1]


def test_each_within_host_score_picks_its_page() -> None:
    """Host 0 (pages 0-3) and host 1 (pages 4-5), both home pages seeds: page
    0 links to 1, 2, 3 in that order, page 4 to 3 and 5. On the next tick
    host 0 serves page 1 first in FIFO order, page 3 (two links seen, OPIC
    cash from both seeds) by in-links or OPIC."""
    g = model.from_edges(6, [(0, 1), (0, 2), (0, 3), (4, 3), (4, 5), (3, 2)], start=[0, 4])
    pr, _ = model.pagerank(g)
    seeds = np.array([0, 4])
    expect = {"fifo": 1, "inlinks": 3, "opic": 3, "external": 3, "share": 3, "weighted": 3,
              "pagerank": int(np.argmax(np.where(np.isin(np.arange(6), [1, 2, 3]), pr, 0)))}
    for within, page in expect.items():
        c = model.simulate(g, model.Order(within, "due", within), seeds=seeds, slots=2, delay=1, until=6, pr=pr)
        assert c.fetch_tick[page] == 1 and c.fetch_tick[0] == c.fetch_tick[4] == 0, within


def test_rank_serves_the_host_more_hosts_link_to() -> None:
    """Seeds: the home pages of hosts 2 and 3 (pages 2, 3). Host 0 (page 0) is
    linked from both, hosts 1 and 4 (pages 1, 4) from one each; with two
    slots, ``rank`` serves host 0 on the next tick whatever the ties, due-time
    only when its hash says so."""
    g = model.from_edges(5, [(2, 1), (2, 0), (3, 4), (3, 0)])
    seeds = np.array([2, 3])
    ticks = {host: [int(model.simulate(g, model.Order(host, host, "fifo"), seeds=seeds, slots=2, delay=1, until=5,
                                       tie_seed=s).fetch_tick[0]) for s in range(12)]
             for host in ("rank", "due")}
    assert set(ticks["rank"]) == {1}  # tick 0: the seeds; tick 1: host 0 and one of hosts 1 and 4
    assert set(ticks["due"]) == {1, 2}  # by the ties' hash
