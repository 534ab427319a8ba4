"""Real `scrapy crawl` runs against the test web, audited from its log."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from tests.servers import ROOT, run_scrapy, scrapy_env


def test_demo_spider_crawls_the_whole_web_and_obeys_robots(redis_url: str, make_web) -> None:
    web = make_web(domains=3, pages=15, links=6, size_fixed=4000, private_share=0.2, crawl_delay_share=0,
                   dup_share=0, cross_share=0.2)
    starts = ",".join(web.url(d) for d in range(3))
    result = run_scrapy(["crawl", "demo", "-a", f"start_urls={starts}",
                         "-s", "CRAWLER_PROGRESS_INTERVAL=0.5"], scrapy_env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    log = web.log()
    fetched = {(e.domain, e.path) for e in log}
    for d in web.domains:
        assert {(d, f"/p/{k}.html") for k in range(1, 15)} <= fetched
    assert not [e for e in log if e.path.startswith("/private/")]
    robots = Counter(e.domain for e in log if e.path == "/robots.txt")
    assert robots == Counter({d: 1 for d in web.domains})
    assert "[crawler.extensions.progress] INFO: pages=" in result.stderr


def test_demo_command_runs_and_summarises(redis_url: str, tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "devkit.demo", "--seconds", "6", "--domains", "4", "--pages", "20",
         "--output", str(tmp_path / "out")],
        cwd=ROOT, env=scrapy_env(redis_url), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "demo summary" in out
    pages = int(out.split("pages fetched")[1].split()[0])
    assert pages > 12  # 4 domains, 1 s apart, for 6 s
    assert "plus 4 robots.txt" in out  # counted apart from the pages
    assert "adds up" in out.split("frontier ledger")[1].splitlines()[0]
    assert "pages=" in out  # progress lines were shown
    assert (tmp_path / "out" / "pages.jsonl").stat().st_size > 0
