"""Politeness as the site sees it, audited from the test web's log with zero
tolerance: every request to a domain (robots.txt included) arrives at least
the delay after the previous one arrived (``CRAWLER_DELAY_FROM=start``) or
after the previous answer was all sent (``finish``). Several processes,
slow answers, a saturated downloader, retries and 429 push-backs mixed in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devkit.testweb.control import LogEntry, consecutive
from tests.servers import ROOT, scrapy_env

WEB = dict(links=8, size_fixed=6000, private_share=0.05, crawl_delay_share=0, dup_share=0.1,
           cross_share=0.2, retry_after=1)


def audit(log: list[LogEntry], delay: float, mode: str) -> tuple[list[float], list[tuple]]:
    """Gaps (ms) between consecutive requests to each domain, and those under the delay."""
    gaps, bad = [], []
    for a, b in consecutive(log):
        gap = b.ms - (a.ms if mode == "start" else a.done)
        gaps.append(gap)
        if gap < delay * 1000:
            bad.append((round(gap, 1), a, b))
    return gaps, bad


def crawl(web, redis_url: str, tmp_path: Path, processes: int, *settings: str) -> list[str]:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(web.url(d) for d in range(web.config.domains)))
    cmd = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}",
           "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", "CRAWLER_WARC_DIR=", "-s", "CRAWLER_KEEPALIVE=True",
           "-s", "CRAWLER_BACKOFF_BASE=0.2", "-s", "CRAWLER_BACKOFF_JITTER=0.1",
           *(a for s in settings for a in ("-s", s))]
    env = scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org")
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for _ in range(processes)]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    for p, err in zip(procs, errors):
        assert p.returncode == 0, err[-3000:]
    return errors


@pytest.mark.parametrize(("processes", "delay", "mode", "web", "settings"), [
    # 3 processes, short delay, answers that end long after they start
    (3, 0.1, "finish", dict(domains=6, pages=25, latency_ms=60, bandwidth=40_000,
                            faults={"429": 0.05, "503": 0.05, "drop": 0.03}),
     ("CLOSESPIDER_TIMEOUT=14",)),
    # 2 processes, 1 s, the downloader saturated: requests wait in it
    (2, 1.0, "start", dict(domains=16, pages=10, latency_ms=150, faults={"429": 0.05, "slow": 0.05},
                           slow_ms=1500),
     ("CONCURRENT_REQUESTS=3", "CLOSESPIDER_TIMEOUT=14")),
    # 2 processes, 5 s, start mode with slow answers
    (2, 5.0, "start", dict(domains=30, pages=5, latency_ms=300, faults={"503": 0.25}),
     ("CLOSESPIDER_TIMEOUT=16",)),
], ids=["3proc-0.1s-finish", "2proc-1s-saturated", "2proc-5s"])
def test_no_request_closer_than_the_delay(redis_url: str, make_web, tmp_path: Path, processes: int,
                                          delay: float, mode: str, web: dict, settings: tuple) -> None:
    site = make_web(**{**WEB, **web})
    errors = crawl(site, redis_url, tmp_path, processes, f"CRAWLER_DOMAIN_DELAY={delay}",
                   f"CRAWLER_DELAY_FROM={mode}", *settings)
    log = site.log()
    gaps, bad = audit(log, delay, mode)
    assert len(gaps) >= 40, len(gaps)
    print(f"\n{processes} processes, delay {delay}s from {mode}: {len(gaps)} intervals, min gap "
          f"{min(gaps):.1f} ms, median {sorted(gaps)[len(gaps) // 2]:.0f} ms, {len(bad)} under the delay")
    assert bad == [], f"{len(bad)} of {len(gaps)} intervals under {delay}s: {bad[:5]}"
    # the mix happened: retries after 429/503 and drops, every process fetched
    assert sum(e.status in (0, 429, 503) for e in log) >= 2
    assert all("downloader/response_count" in err for err in errors)
    # and the crawl kept pace: most intervals within twice the delay
    # (3 processes share the domains; their turns come as the acks arrive)
    assert sorted(gaps)[len(gaps) // 2] < 2 * delay * 1000 + 800


def test_adaptive_delay_stretches_for_slow_sites(redis_url: str, make_web, tmp_path: Path) -> None:
    site = make_web(**{**WEB, "domains": 2, "pages": 30, "faults": {}},
                    latency_ms=200, latency_sigma=0)  # every answer takes 200 ms
    # stopped after 16 answers (robots.txt included), not after a time: as
    # many intervals on a loaded machine as on an idle one
    crawl(site, redis_url, tmp_path, 1, "CRAWLER_DOMAIN_DELAY=0.05", "CRAWLER_DELAY_FACTOR=10",
          "CRAWLER_DELAY_MAX=0.5", "CRAWLER_DELAY_FROM=finish", "CLOSESPIDER_PAGECOUNT=16",
          "CLOSESPIDER_TIMEOUT=120")
    gaps, _ = audit(site.log(), 0.5, "finish")  # 10 x 200 ms = 2 s, capped at 0.5 s
    assert len(gaps) >= 14  # 16 answers from 2 domains
    assert min(gaps) >= 500, sorted(gaps)[:5]  # stretched from the configured 50 ms
    assert max(gaps) < 1500, sorted(gaps)[-5:]  # but never beyond the cap
    print(f"\nadaptive: {len(gaps)} intervals, min {min(gaps):.0f} ms, max {max(gaps):.0f} ms")
