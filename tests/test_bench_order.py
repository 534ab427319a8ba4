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


def bench_rows(order: str) -> tuple[str, list[str]]:
    """What ``python -m bench order`` prints at 20,000 pages, seed 1, with ``order``, and its table's rows."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert bench_main(["--pages", "20000", "--seed", "1", "--order", order]) == 0
    text = out.getvalue()
    return text, [line for line in text.splitlines() if line.startswith("| ")]


def test_bench_prints_every_order_and_the_targets() -> None:
    text, rows = bench_rows("ours=decay/inlinks")
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


# ----------------------------------------------------------- what the production frontier can keep

FRONTIER_ORDERS = [("decay", "sketch16t2"), ("decay", "sketch8t1m"), ("decay", "sketch16t2+r32"),
                   ("decay", "sketch16t1+g+r16+p8"), ("decay", "x"), ("decay", "e10"), ("decay", "xe10"),
                   ("decay", "x+e3"), ("decay1.5", "fifo"), ("decay0.75", "sketch16t2+r32"),
                   ("decay", "sketch8t2+g+q"), ("decay", "sketch8t2+g+q+i"), ("decay", "sketch4t1+q+p2"),
                   ("decay", "sketch8t2+g+q+i+c2")]


@pytest.mark.parametrize(("host", "within"), FRONTIER_ORDERS)
def test_frontier_orders_are_polite_and_fetch_twice_only_as_counted_doubles(web: Web, host: str,
                                                                            within: str) -> None:
    g, pr, _, seeds = web
    c = crawl(web, host, within)
    assert c.fetched.size == UNTIL
    dbl = c.double if c.double is not None else np.zeros(c.fetched.size, dtype=bool)
    if model.Order("o", host, within).frontier is None:
        assert c.double is None
    else:
        assert c.double is not None and c.double.size == c.fetched.size
        assert c.costs["double"] == int(dbl.sum())
        if model.Order("o", host, within).frontier.exact:  # type: ignore[union-attr]
            assert not dbl.any() and c.costs["skip_evicted"] == 0  # the exact guard: never twice
    fresh = c.fetched[~dbl]
    assert np.unique(fresh).size == fresh.size  # each page once, but for the doubles
    # a double is a page fetched before, by an earlier entry
    done: set[int] = set()
    for p, d in zip(c.fetched.tolist(), dbl.tolist()):
        assert (p in done) == d
        done.add(p)
    # the crawl curve gains nothing from a double
    cv = model.curve(c, pr, model.top_pages(pr))
    assert cv.mass[-1] == pytest.approx(pr[fresh].sum())
    # slots and politeness over fresh fetches (doubles take slots too: fewer fresh pages a tick)
    assert np.bincount(c.fetch_tick[fresh]).max() <= SLOTS
    hosts = g.host_of[fresh]
    ft = c.fetch_tick[fresh]
    by_host = np.lexsort((ft, hosts))
    same = hosts[by_host][1:] == hosts[by_host][:-1]
    assert np.diff(ft[by_host])[same].min() >= DELAY
    assert np.mean(c.due_hosts) > 10 * SLOTS
    # discovery: a page fetched only after a page fetched on an earlier tick links to it (or it is a seed)
    src = g.src()
    linked = c.fetch_tick[src] >= 0
    first = np.full(g.n, np.iinfo(np.int64).max)
    np.minimum.at(first, g.dst[linked], c.fetch_tick[src[linked]])
    nonseed = fresh[~np.isin(fresh, seeds)]
    assert (c.fetch_tick[nonseed] > first[nonseed]).all()
    assert (c.discover_tick[nonseed] == first[nonseed]).all()


def _small_crawl(within: str, edges: list[tuple[int, int]], n: int, start: list[int], seeds: list[int],
                 until: int, slots: int = 1) -> model.Crawl:
    g = model.from_edges(n, edges, start=start)
    return model.simulate(g, model.Order(within, "due", within), seeds=np.array(seeds), slots=slots, delay=1,
                          until=until)


def _first_fetches(within: str, edges: list[tuple[int, int]], n: int, start: list[int], seeds: list[int],
                   until: int, slots: int = 1) -> tuple[list[int], list[bool]]:
    c = _small_crawl(within, edges, n, start, seeds, until, slots)
    dbl = c.double if c.double is not None else np.zeros(c.fetched.size, dtype=bool)
    return c.fetched.tolist(), dbl.tolist()


def test_the_sketch_promotes_a_url_seen_again_and_the_fifo_skips_it() -> None:
    """One host, pages 0-4: the home page links to 1, 2, 3; page 1 to 3 again
    and to 4. At T=1 the sketch serves page 3 (seen twice) before page 2,
    and the FIFO skips it when it comes to it; at T=2 it is FIFO."""
    edges = [(0, 1), (0, 2), (0, 3), (1, 3), (1, 4)]
    assert _first_fetches("sketch16t1", edges, 5, [0], [0], 5) == ([0, 1, 3, 2, 4], [False] * 5)
    assert _first_fetches("sketch16t2", edges, 5, [0], [0], 5) == ([0, 1, 2, 3, 4], [False] * 5)
    assert _first_fetches("sketch16t1+p0", edges, 5, [0], [0], 5)[0] == [0, 1, 3, 2, 4]


def test_a_url_seen_again_after_its_fetch_is_fetched_twice_unless_remembered() -> None:
    """Page 1 links back to the home page 0, already fetched: the dedup
    cannot tell, so the plain sketch promotes it and fetches it again (a
    double fetch, counted), whose links seen again promote page 1 again
    (a tombstone, ``m``, does not help: page 0 was fetched before it was
    ever counted); a memory of the host's last fetches (r4) holds it back.
    A skip set too small (p1) fetches a promoted page again when the FIFO
    reaches it."""
    edges = [(0, 1), (0, 2), (0, 3), (1, 0)]
    twice = ([0, 1, 0, 1, 2], [False, False, True, True, False])
    assert _first_fetches("sketch16t1", edges, 4, [0], [0], 5) == twice
    assert _first_fetches("sketch16t1m", edges, 4, [0], [0], 5) == twice
    assert _first_fetches("sketch16t1+r4", edges, 4, [0], [0], 5) == ([0, 1, 2, 3], [False] * 4)
    # p1: page 4 (seen twice more) then 3 promoted ahead of the FIFO; the skip set keeps only 3,
    # so the FIFO skips 3 and fetches 4 again
    edges = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 3), (1, 4), (1, 4)]
    fetched, dbl = _first_fetches("sketch16t1+p1", edges, 5, [0], [0], 7)
    assert fetched == [0, 1, 4, 3, 2, 4] and dbl == [False] * 5 + [True]


def test_space_saving_replaces_the_minimum_and_inherits_its_count() -> None:
    """K=1: page 2 seen again takes the only counter (1); page 3 seen again
    replaces it at 2 and is promoted at T=2 while page 2 is not; with ``g``
    its guaranteed count is 1 and nothing is promoted."""
    edges = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (1, 3)]
    assert _first_fetches("sketch1t2", edges, 5, [0], [0], 5)[0] == [0, 1, 3, 2, 4]
    assert _first_fetches("sketch1t2+g", edges, 5, [0], [0], 5)[0] == [0, 1, 2, 3, 4]


def test_the_exact_guard_refuses_a_fetched_url_and_never_counts_it_again() -> None:
    """``q``: page 1 links back to the home page 0, fetched: the promotion
    of 0 is refused (no slot spent: the FIFO's page 2 is fetched in that
    turn), 0 leaves the sketch, and pages 2 and 3 linking to it again are
    not counted (the plain sketch fetches 0 again, whose links seen again
    promote 1 again, and 0 once more after 2)."""
    edges = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (2, 0), (3, 0)]
    plain = _first_fetches("sketch16t1", edges, 5, [0], [0], 8)
    assert plain == ([0, 1, 0, 1, 2, 0, 3, 4], [False, False, True, True, False, True, False, False])
    c = _small_crawl("sketch16t1+q", edges, 5, [0], [0], 8)
    assert c.fetched.tolist() == [0, 1, 2, 3, 4] and c.double is not None and not c.double.any()
    assert c.costs["refused"] == 1 and c.costs["sightings"] == 1 and c.costs["ignored_hits"] == 2
    assert c.costs["promotions"] == 0 and c.costs["ignored_held"] == 1


def test_the_exact_guard_promotes_a_url_once_and_refuses_when_the_skip_set_is_full() -> None:
    """``q``: page 3, seen again on page 1, is promoted; seen again on page
    2 after its fetch it is not counted (the plain sketch promotes it again:
    a double). With a skip set of 1 (``p1``) holding page 4, the promotion of
    page 3 is refused (``full``) instead of forgetting 4 (which the FIFO
    would fetch again)."""
    edges = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 3), (2, 3)]
    assert _first_fetches("sketch16t1", edges, 5, [0], [0], 6) == ([0, 1, 3, 2, 3, 4], [False] * 4 + [True, False])
    c = _small_crawl("sketch16t1+q", edges, 5, [0], [0], 6)
    assert c.fetched.tolist() == [0, 1, 3, 2, 4] and c.double is not None and not c.double.any()
    assert c.costs["promotions"] == 1 and c.costs["ignored_hits"] == 1 and c.costs["refused"] == 0
    edges = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 3), (1, 4), (1, 4)]
    assert _first_fetches("sketch16t1+p1", edges, 5, [0], [0], 7)[1][-1]  # forgotten: fetched twice
    c = _small_crawl("sketch16t1+q+p1", edges, 5, [0], [0], 7)
    assert c.fetched.tolist() == [0, 1, 4, 2, 3] and c.double is not None and not c.double.any()
    assert c.costs["refused_full"] == 1 and c.costs["skip_evicted"] == 0


def test_internal_only_counts_links_from_the_urls_own_host() -> None:
    """Host 0 (pages 0-3), host 1 (pages 4, 5), both home pages seeds: page
    5 (host 1) links to page 3 after host 0 found it. The sketch counts that
    link and serves 3 before 2; ``i`` does not count it (FIFO), but counts
    the same link from host 0's page 1."""
    start, seeds = [0, 4], [0, 4]
    cross = [(0, 1), (0, 2), (0, 3), (4, 5), (5, 3)]
    assert _first_fetches("sketch16t1", cross, 6, start, seeds, 6, slots=2)[0] == [0, 4, 1, 5, 3, 2]
    c = _small_crawl("sketch16t1+i", cross, 6, start, seeds, 6, slots=2)
    assert c.fetched.tolist() == [0, 4, 1, 5, 2, 3]
    assert c.costs["sightings"] == 0 and c.costs["cross_unseen"] == 1
    own = [(0, 1), (0, 2), (0, 3), (4, 5), (1, 3)]
    assert _first_fetches("sketch16t1+i", own, 6, start, seeds, 6, slots=2)[0] == [0, 4, 1, 5, 3, 2]
    assert _first_fetches("sketch16t1+q+i", own, 6, start, seeds, 6, slots=2)[0] == [0, 4, 1, 5, 3, 2]


def test_the_promotion_cap_holds_a_host_to_one_plus_a_share_of_its_fetches() -> None:
    """``c<N>``: one host, the home page links to pages 1-6, page 1 to 6, 5,
    4 and page 2 to 6, 5, 4, 3; T=1. Uncapped, the sketch serves 6, 5, 4
    (seen again on page 1) then the FIFO's 2, then 3. With ``c3`` (at most
    1 + fetched / 3 promotions) 6 and 5 are promoted (after 2 and 3
    fetches), then the cap holds (2 sent, 4 fetched): the FIFO serves 2 and
    3 while page 4's counter keeps counting (2, from page 2's link), and
    once 6 pages are fetched 4 is promoted. ``c2`` does not bind here."""
    edges = [(0, i) for i in range(1, 7)] + [(1, 6), (1, 5), (1, 4), (2, 6), (2, 5), (2, 4), (2, 3)]
    free = _small_crawl("sketch16t1+q", edges, 7, [0], [0], 7)
    assert free.fetched.tolist() == [0, 1, 6, 5, 4, 2, 3] and "capped" not in free.costs
    assert free.promoted is not None and free.promoted.tolist() == [False, False, True, True, True, False, True]
    c = _small_crawl("sketch16t1+q+c3", edges, 7, [0], [0], 7)
    assert c.fetched.tolist() == [0, 1, 6, 5, 2, 3, 4]
    assert c.promoted is not None and c.promoted.tolist() == [False, False, True, True, False, False, True]
    assert c.costs["capped"] == 2 and c.costs["promotions"] == 3
    assert _small_crawl("sketch16t1+q+c2", edges, 7, [0], [0], 7).fetched.tolist() == free.fetched.tolist()
    f = model.Frontier.parse("sketch8t2+g+q+i+c3")
    assert f == model.Frontier(k=8, t=2, guaranteed=True, exact=True, internal=True, cap=3)
    for bad in ("sketch8t2+c0", "x+c2", "c2", "sketch8t2+c"):
        assert model.Frontier.parse(bad) is None


@pytest.mark.parametrize("share", [2, 3, 4])
def test_the_promotion_cap_binds_on_a_dense_site_and_is_never_passed(share: int) -> None:
    """Three hosts of 40 pages whose every page links to every other page of
    its site: each queued URL is seen again on every fetch, so the uncapped
    sketch serves nearly every page; capped, no host has had more than
    1 + fetched / N promotions sent (refused ones too) at any fetch."""
    size, hosts = 40, 3
    edges = [(h * size + a, h * size + b) for h in range(hosts) for a in range(size) for b in range(size) if a != b]
    start = [h * size for h in range(hosts)]
    n, until = size * hosts, size * hosts
    free = _small_crawl("sketch8t1+q", edges, n, start, start, until, slots=hosts)
    c = _small_crawl(f"sketch8t1+q+c{share}", edges, n, start, start, until, slots=hosts)
    for run in (free, c):
        assert run.fetched.size == n and run.double is not None and not run.double.any()
        assert run.promoted is not None and run.promoted.size == n
    g = model.from_edges(n, edges, start=start)
    binds = False
    for h in range(hosts):
        mine = g.host_of[c.fetched] == h
        before = np.arange(int(mine.sum()))  # pages fetched from the host before each of its fetches
        sent = np.cumsum(c.promoted[mine])  # promotions up to and including each fetch
        assert (share * sent <= share + before).all()  # sent <= 1 + before / N
        free_sent = np.cumsum(free.promoted[g.host_of[free.fetched] == h])
        binds |= bool((share * free_sent > share + before).any())
    assert binds  # the uncapped sketch passes the cap somewhere
    assert c.costs["capped"] > 0 and c.costs["promotions"] < free.costs["promotions"]
    # refusals count too: every promotion sent, summed over the hosts, fits their final caps
    assert share * (c.costs["promotions"] + c.costs["refused"] + c.costs["refused_full"]) <= share * hosts + n


def test_lanes_at_discovery() -> None:
    """Host 0 (pages 0-3), host 1 (page 4), both home pages seeds: page 0
    links to 1, page 4 to 3, page 1 to 2. FIFO serves page 1 next, the
    ``x`` lane page 3 (found on another host); ``e1`` (found on the home
    page) page 1, then page 3 before 2 (2 was found on the host's second
    fetch: the low lane, behind 3 found earlier)."""
    edges = [(0, 1), (4, 3), (1, 2)]
    start = [0, 4]
    assert _first_fetches("x", edges, 5, start, [0, 4], 5, slots=2)[0] == [0, 4, 3, 1, 2]
    assert _first_fetches("e1", edges, 5, start, [0, 4], 5, slots=2)[0] == [0, 4, 1, 3, 2]
    assert _first_fetches("xe1", edges, 5, start, [0, 4], 5, slots=2)[0] == [0, 4, 1, 3, 2]
    assert _first_fetches("x+e1", edges, 5, start, [0, 4], 5, slots=2)[0] == [0, 4, 3, 1, 2]


def test_frontier_names_parse_and_refuse_nonsense() -> None:
    f = model.Frontier.parse("sketch16t2m+g+r32+p8+x+e10")
    assert f == model.Frontier(k=16, t=2, memory=True, guaranteed=True, recent=32, skip=8, x=True, early=10)
    assert f is not None and f.lanes == 3
    assert model.Frontier.parse("xe5") == model.Frontier(x=True, early=5, joint=True)
    assert model.Frontier.parse("sketch8t2+g+q+i") == model.Frontier(k=8, t=2, guaranteed=True, exact=True,
                                                                     internal=True)
    assert model.host_alpha("decay") == 1.0 and model.host_alpha("decay1.25") == 1.25
    for bad in ("sketch", "sketch16", "r32", "sketch16t0", "lanes", "x+y", "q", "i", "sketch8t2+qi"):
        with pytest.raises(ValueError):
            model.Order("x", "decay", bad)
    with pytest.raises(ValueError):
        model.Order("x", "decayx", "fifo")


def test_bench_reports_double_fetches_for_a_frontier_order() -> None:
    text, rows = bench_rows("sk=decay/sketch8t2+g+r64")
    assert rows[0].rstrip(" |").endswith("double@10%")
    assert [r.split(" | ")[0].strip("| ") for r in rows[1:]] == ["due-time", "sk", "omniscient"]
    assert "of the first 10% fetches double" in text and "double fetches at most" in text
