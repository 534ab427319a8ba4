"""bench/_recrawl_log.py (the recrawl bench's analysis) on synthetic logs whose
answers are computed here by hand from the test web's real schedules, and
the pieces of bench/bench_recrawl.py that need no crawl (design/recrawl.md
C.8). No crawl, no server: fast."""

from __future__ import annotations

import argparse
import io
import math
from pathlib import Path

import pytest
from scrapy.settings import Settings
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from bench import _recrawl_model as model
from bench._recrawl_log import analyse, audit, fetch_ratio_for, optimum_freshness, uniform_freshness
from bench.bench_recrawl import (
    command,
    lying_domains,
    recrawl_settings,
    revisit_records,
    scale_of,
    web_config,
)
from crawler.settings_registry import BY_NAME, setting
from devkit.testweb.changes import LIES, Schedule
from devkit.testweb.config import WebConfig
from devkit.testweb.control import LogEntry
from devkit.testweb.site import Site

#: the log's epoch ms of schedule time 0 (any number: the analysis reads ``at``)
EPOCH_MS = 1_800_000_000_000.0


def answer(at: float, status: int, current: int, *, path: str = "/p/1.html", host: str = "d0.test:443",
           version: int | None = None, conditionals: str = "-", done: bool = True) -> LogEntry:
    """A log line for a page answered at schedule time ``at`` (the body's
    version: ``current`` for a 200, none for a 304)."""
    ms = EPOCH_MS + at * 1000
    body = (current if version is None else version) if status == 200 else None
    return LogEntry(ms, host, path, status, ms + 20 if done else 0.0, "127.0.0.1", 0.0, body, current,
                    conditionals, at)


def changing(**fields: object) -> WebConfig:
    return WebConfig(**{**dict(domains=1, pages=3, change_share=1, change_mean_min_s=100, change_mean_max_s=100,
                               size_fixed=3000), **fields})  # type: ignore[arg-type]


def times(config: WebConfig, d: int = 0, k: int = 1, n: int = 3) -> list[float]:
    found = Schedule.of(config).changes(d, k, 0, 100_000)
    assert len(found) >= n
    return found[:n]


def test_freshness_is_exact_from_the_change_times() -> None:
    config = changing()
    c1, c2, c3 = times(config)
    t0, t1 = 0.75 * c1, c3 + 1.0
    a1 = c2 - 0.25 * (c2 - c1)  # between the first and second change: version 1, fresh until c2
    log = [
        answer(0.5 * c1, 200, 0),  # the copy at t0: version 0, fresh until c1
        answer(a1, 200, 1),
        answer(t0 + 1.0, 200, 0, path="/p/2.html"),  # first fetched inside the window: not tracked
    ]
    result = analyse(log, config, t0, t1)
    expected = ((c1 - t0) + (c2 - a1)) / (t1 - t0)
    assert result.tracked == 1
    assert result.freshness == pytest.approx(expected, abs=1e-9)
    # a fetch answered after the window's end changes nothing; one exactly at a change is current
    later = analyse([*log, answer(t1 + 5, 200, 3)], config, t0, t1)
    assert later.freshness == pytest.approx(expected, abs=1e-9)
    at_change = analyse([answer(0.5 * c1, 200, 0), answer(c2, 200, 2)], config, t0, t1)
    assert at_change.freshness == pytest.approx(((c1 - t0) + (c3 - c2)) / (t1 - t0), abs=1e-9)


def test_a_page_that_never_changes_is_always_fresh() -> None:
    config = WebConfig(domains=1, pages=50, change_share=0.5, size_fixed=3000)
    schedule = Schedule.of(config)
    still = next(k for k in range(1, 50) if schedule.mean_s(0, k) is None)
    log = [answer(1.0, 200, 0, path=f"/p/{still}.html")]
    result = analyse(log, config, 2.0, 500.0)
    assert result.tracked == 1 and result.freshness == 1.0
    assert result.rates_by_domain == {0: [0.0]}


def test_an_honest_304_keeps_the_copy_a_lying_one_leaves_it_behind() -> None:
    honest = changing(validators={"etag": 1})
    lying = changing(validators={"etag": 1}, lies={"etag_frozen": 1})
    c1, c2, _ = times(honest)
    assert times(lying) == times(honest)[:3]  # the same seed: the same schedule
    t0, t1 = 0.5 * c1, c2
    first = answer(0.25 * c1, 200, 0)
    # honest: a 304 before the change stands for version 0, the copy's: still fresh until c1
    kept = analyse([first, answer(0.75 * c1, 304, 0, conditionals="n")], honest, t0, t1)
    assert kept.freshness == pytest.approx((c1 - t0) / (t1 - t0), abs=1e-9)
    assert (kept.honest_unchanged, kept.honest_304, kept.not_modified) == (1, 1, 1)
    # lying: a 304 after the change (the page is at version 1): the copy stays 0, stale from c1
    middle = (c1 + c2) / 2
    lied = analyse([first, answer(middle, 304, 1, conditionals="n")], lying, t0, t1)
    assert lied.freshness == pytest.approx((c1 - t0) / (t1 - t0), abs=1e-9)
    assert (lied.honest_unchanged, lied.honest_304) == (0, 0)  # a lying host is not an honest one
    # had it answered 200, the copy would have caught up at `middle`
    caught = analyse([first, answer(middle, 200, 1)], lying, t0, t1)
    assert caught.freshness == pytest.approx(((c1 - t0) + (c2 - middle)) / (t1 - t0), abs=1e-9)
    assert lied.freshness < caught.freshness


def test_304_share_bytes_and_revisit_records() -> None:
    config = WebConfig(domains=10, pages=3, change_share=1, change_mean_min_s=100, change_mean_max_s=100,
                       size_fixed=3000, validators={"etag": 0.5, "none": 0.5})
    site = Site(config, 0)
    honest = next(d for d in range(10) if site.host_rules(d).validators == "etag")
    plain = next(d for d in range(10) if site.host_rules(d).validators == "none")
    c1, c2, _ = times(config, honest)
    host = f"{config.domain(honest)}:443"
    other = f"{config.domain(plain)}:443"
    step = c1 / 10
    log = [
        answer(step, 200, 0, host=host),  # first fetch: not a revisit
        answer(2 * step, 304, 0, host=host, conditionals="n"),  # unchanged, 304
        answer(3 * step, 304, 0, host=host, conditionals="n"),  # unchanged, 304
        answer(4 * step, 200, 0, host=host),  # unchanged, a verification without validators: identical bytes
        answer((c1 + c2) / 2, 200, 1, host=host, conditionals="n"),  # changed: not in the share
        answer(step, 200, 0, host=other),
        answer(2 * step, 200, 0, host=other),  # unchanged, but no validators: not in the share
    ]
    result = analyse(log, config, 0.0, c2)
    assert (result.honest_unchanged, result.honest_304) == (3, 2)
    assert result.share_304 == pytest.approx(2 / 3)
    assert result.fetches == 7 and result.not_modified == 2
    assert result.bytes_unconditional == 7 * 3000 and result.bytes_sent == 5 * 3000
    assert result.bytes_saved == 2 * 3000
    # revisit records the WARC should hold: 2 server-not-modified, 2 identical payloads (one per host)
    assert (result.revisits_304, result.revisits_identical) == (2, 2)
    # a noisy page's bytes differ on every answer: never an identical payload
    noisy = WebConfig(**{**config.__dict__, "noisy_share": 1.0})
    assert analyse(log, noisy, 0.0, c2).revisits_identical == 0
    # a page over the crawler's page cap is stored cut: never an identical payload either
    assert analyse(log, config, 0.0, c2, page_cap=2999).revisits_identical == 0
    assert analyse(log, config, 0.0, c2, page_cap=3000).revisits_identical == 2


def test_the_optimum_and_uniform_are_the_models_for_the_same_rates_and_budget() -> None:
    config = WebConfig(domains=1, pages=20, change_share=1, change_mean_min_s=10, change_mean_max_s=10_000,
                       size_fixed=3000)
    schedule = Schedule.of(config)
    t0, t1 = 100.0, 400.0
    log = [answer(1.0 + k / 100, 200, schedule.version_at(0, k, 1.0 + k / 100), path=f"/p/{k}.html")
           for k in range(20)]
    # 60 visits in the window (200s with the page's version), spread over the pages
    for i in range(60):
        k, at = i % 20, t0 + 1 + i * 4.5
        log.append(answer(at, 200, schedule.version_at(0, k, at), path=f"/p/{k}.html"))
    result = analyse(log, config, t0, t1)
    rates = [1 / schedule.mean_s(0, k) for k in range(20)]  # type: ignore[operator]
    budget = 60 / (t1 - t0)
    assert result.fetches == 60 and result.tracked == 20
    assert sorted(result.rates_by_domain[0]) == pytest.approx(sorted(rates))
    assert result.optimum == pytest.approx(model.mean_freshness(rates, model.optimum(rates, budget)), abs=1e-12)
    assert result.uniform == pytest.approx(model.mean_freshness(rates, [budget / 20] * 20), abs=1e-12)
    assert result.optimum > result.uniform
    # held within [MIN, MAX] as the crawl is
    held = analyse(log, config, t0, t1, low=20.0, high=2000.0)
    assert held.optimum == pytest.approx(
        model.mean_freshness(rates, model.optimum(rates, budget, low=20.0, high=2000.0)), abs=1e-12)
    # pages that never change take no visit and count fresh
    assert optimum_freshness([*rates, 0.0, 0.0], budget) == pytest.approx(
        (model.mean_freshness(rates, model.optimum(rates, budget)) * 20 + 2) / 22, abs=1e-12)
    assert uniform_freshness([0.01, 0.0], 0.0) == 0.5
    # the optimum's fetches for uniform's freshness: the model's budget_for
    assert fetch_ratio_for(rates, budget, result.uniform) == pytest.approx(
        model.budget_for(rates, result.uniform) / budget, rel=1e-9)
    assert fetch_ratio_for(rates, budget, result.uniform) < 1


def test_the_min_audit_flags_a_gap_under_min_and_skips_a_retry() -> None:
    config = changing()
    log = [
        answer(0.0, 200, 0),
        answer(3.0, 304, 0),  # 3 s after the last visit: under MIN 5 s
        answer(10.0, 503, 0),  # a failed visit ...
        answer(11.0, 200, 0),  # ... retried a second later: the same visit, skipped
        answer(20.0, 200, 0, done=False),  # never answered: the next is skipped too
        answer(21.0, 200, 0),
        answer(30.0, 200, 0, path="/"),  # another URL of the same page
        answer(30.2, 200, 0, path="/robots.txt"),  # not a page: no MIN (but the domain's delay)
    ]
    checks = audit(log, config, delay=0.5, minimum=5.0)
    assert checks.url_under == 1 and checks.url_after_failure == 2
    assert checks.url_offenders == [(("d0.test", "/p/1.html"), EPOCH_MS, EPOCH_MS + 3000)]
    assert checks.url_gaps == 3 and checks.url_min_s == pytest.approx(3.0)
    # the domain: 30.0 answered at +20 ms, robots.txt at 30.2: 0.18 s after its end, under 0.5 s
    assert checks.domain_under == 1 and checks.domain_min_s == pytest.approx(0.18)
    assert checks.domain_unfinished == 1
    assert audit(log, config, delay=0.1, minimum=2.0).url_under == 0
    # a tracking parameter the crawler kept makes a URL (a copy) of its own: no gap with the plain one
    tracked = audit([*log, answer(21.5, 200, 0, path="/p/1.html?utm_source=x")], config, delay=0.1, minimum=5.0)
    assert tracked.url_under == 1 and tracked.url_gaps == 3


# --- the runner's pieces -------------------------------------------------------


def bench_args(**over: object) -> argparse.Namespace:
    fields = dict(share=0.5, delay=0.5, day=0.0, row=2.0, pages=20, domains=20, latency_ms=50.0, noisy=0.1,
                  addresses=20, ip_delay=0.5, seed=1, set=[])
    return argparse.Namespace(**{**fields, **over})


def test_the_scale_puts_the_run_on_the_models_row() -> None:
    scale = scale_of(bench_args())
    assert scale.budget == pytest.approx(0.5 / 1.5)  # E: share x 86400 / (delay + 1) a day
    assert scale.row == pytest.approx(2.0) and scale.day == pytest.approx(120.0)
    assert scale.minimum == pytest.approx(6.0) and scale.maximum == pytest.approx(7200.0)
    assert scale.change_range == pytest.approx((12.0, 12_000.0))  # 0.01-10 changes a model day
    assert scale.interval == pytest.approx(60.0)  # uniform: each of 20 pages once per 60 s
    design = scale_of(bench_args(day=100.0))
    assert design.minimum == pytest.approx(5.0)  # C.8: a 100 s day, MIN 5 s


def test_the_lying_web_has_one_domain_per_lie() -> None:
    args = bench_args()
    scale = scale_of(args)
    config = web_config(args, scale, lying=True)
    assert sorted(lying_domains(config).values()) == sorted(LIES)
    assert lying_domains(web_config(args, scale, lying=False)) == {}
    assert config.change_share == 1 and config.tls and config.noisy_share == 0.1


def test_every_crawler_setting_passed_is_in_the_registry(tmp_path: Path) -> None:
    args = bench_args()
    scale = scale_of(args)
    for mode in ("adaptive", "fixed", "adaptive75"):
        recrawl = recrawl_settings(mode, scale, 55.0, 0.3)
        cmd = command(args, scale, tmp_path / "seeds", tmp_path / "warc", 400, recrawl, {"d0.test": "127.1.0.1"})
        pairs = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "-s")
        names = list(pairs)
        crawler = {n: v for n, v in pairs.items() if n.startswith("CRAWLER_")}
        assert crawler and all(n in BY_NAME for n in crawler), crawler
        for name, value in crawler.items():  # each value is one its form accepts
            setting(Settings({name: value}), name)
        assert ("CRAWLER_RECRAWL_BUDGET" in names) is (mode == "adaptive75")
    held = recrawl_settings("adaptive75", scale, 55.0, 0.3)
    assert float(held["CRAWLER_RECRAWL_BUDGET"]) == pytest.approx(0.75 * 0.3 * 86400)
    assert recrawl_settings("fixed", scale, 55.0, 0.3)["CRAWLER_RECRAWL_INTERVAL"] == "55"
    with pytest.raises(SystemExit, match="CRAWLER_NO_SUCH"):
        command(bench_args(set=["CRAWLER_NO_SUCH=1"]), scale, tmp_path, tmp_path, 10, {}, None)


def test_revisit_records_are_counted_by_profile(tmp_path: Path) -> None:
    folder = tmp_path / "warc" / "sub"
    folder.mkdir(parents=True)
    with (folder / "a.warc.gz").open("wb") as f:
        writer = WARCWriter(f, gzip=True)
        head = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
        writer.write_record(writer.create_warc_record("https://d0.test/", "response", payload=io.BytesIO(b"hi"),
                                                      http_headers=head))
        for _ in range(2):
            writer.write_record(writer.create_revisit_record("https://d0.test/", "sha1:AAAA", "https://d0.test/",
                                                             "2026-01-01T00:00:00Z", http_headers=head))
        # a 304's revisit: no payload digest (C.6)
        snm = {"WARC-Profile": "http://netpreserve.org/warc/1.1/revisit/server-not-modified",
               "WARC-Refers-To-Target-URI": "https://d0.test/"}
        writer.write_record(writer.create_warc_record(
            "https://d0.test/", "revisit", http_headers=StatusAndHeaders("304 Not Modified", [], protocol="HTTP/1.1"),
            warc_headers_dict=snm))
    (tmp_path / "warc" / "notes.txt").write_text("not a WARC")
    counts = revisit_records(tmp_path / "warc")
    assert counts["revisit/identical-payload-digest"] == 2
    assert counts["revisit/server-not-modified"] == 1
    assert counts["response"] == 1


def test_nan_is_shown_as_a_dash() -> None:
    from bench.bench_recrawl import pct

    assert pct(math.nan) == "-" and pct(0.5) == "50.0%"


def test_the_real_test_webs_log_reads_as_the_synthetic_one(make_web) -> None:
    """The columns the analysis reads (at, version, current, status) as the
    real test web writes them: real requests on its manual schedule clock."""
    import http.client

    web = make_web(domains=1, pages=3, links=5, size_fixed=3000, clock="manual", change_share=1,
                   change_mean_min_s=100, change_mean_max_s=100, validators={"etag": 1})

    def get(at: float, tag: str | None = None) -> tuple[int, str]:
        web.clock(set_to=at)
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        try:
            conn.request("GET", "/p/1.html", headers={"Host": f"d0.test:{web.port}",
                                                      **({"If-None-Match": tag} if tag else {})})
            resp = conn.getresponse()
            resp.read()
            return resp.status, resp.getheader("ETag") or ""
        finally:
            conn.close()

    c1, c2, _ = times(web.config)
    first = math.floor(c1 / 2 * 1000) / 1000  # times the log writes exactly (ms)
    status, tag = get(first)
    assert status == 200
    assert get(math.floor((c1 + first) / 2 * 1000) / 1000, tag)[0] == 304  # unchanged: an honest 304
    late = math.ceil((c1 + c2) / 2 * 1000) / 1000
    status, _ = get(late, tag)
    assert status == 200  # changed
    t0, t1 = first + 1.0, c2  # the 304 falls inside the window
    result = analyse(web.log(), web.config, t0, t1)
    assert result.tracked == 1 and result.fetches == 2
    assert result.freshness == pytest.approx(((c1 - t0) + (c2 - late)) / (t1 - t0), abs=1e-9)
    assert (result.honest_unchanged, result.honest_304, result.revisits_304) == (1, 1, 1)
