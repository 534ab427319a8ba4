"""``python -m bench`` answers ``--help`` and ``--list`` without starting a
run; the open-web bench's split of a process's resident memory adds up."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.servers import ROOT


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_help_and_list_start_nothing() -> None:
    shown = bench("--help")
    assert shown.returncode == 0 and "usage: python -m bench" in shown.stdout
    assert "===" not in shown.stdout  # no benchmark started
    listed = bench("--list").stdout.split()
    assert {"openweb", "frontier", "robots"} <= set(listed)
    refused = bench("no_such_bench")
    assert refused.returncode == 2 and "unknown benchmark no_such_bench" in refused.stderr


def test_openweb_memory_split_adds_up_to_the_resident_size() -> None:
    from bench.bench_openweb import memory_split
    from bench.memtrace import rss_mb

    block = b"x" * (64 << 20)  # written, so resident: anonymous memory of this process
    split = memory_split(os.getpid())
    rss = rss_mb(os.getpid())
    assert len(block) and split["anon"] >= 64
    assert split["files"] > 0  # the interpreter's own code
    assert abs(sum(split.values()) - rss) < 0.05 * rss, (split, rss)


def test_options_after_one_name_are_the_benchmarks_own() -> None:
    shown = bench("soak", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "usage: python -m bench soak" in shown.stdout and "--chaos" in shown.stdout


def test_soak_explains_only_repeats_a_fault_accounts_for() -> None:
    """A page served twice is explained by a worker killed between its two
    fetches, or by a first answer that never reached the crawler; a repeat
    with neither is not."""
    from bench.bench_soak import Fault
    from bench.soak_report import duplicate_fetches
    from devkit.testweb.control import LogEntry

    kill = Fault("kill", 60, 0)
    kill.started, kill.ended = 100.0, 100.0  # epoch seconds; the log is in epoch ms
    pages = [
        LogEntry(99_000, "a.test", "/p/1.html", 200, 99_200),  # fetched, its worker killed at 100 s,
        LogEntry(260_000, "a.test", "/p/1.html", 200, 260_200),  # fetched again once its lease expired
        LogEntry(150_000, "b.test", "/p/1.html", 200, 0, "", 150_500),  # the crawler hung up: never arrived
        LogEntry(170_000, "b.test", "/p/1.html", 200, 170_200),
        LogEntry(180_000, "c.test", "/p/1.html", 200, 180_200),  # after the kill, answered: no excuse
        LogEntry(190_000, "c.test", "/p/1.html", 200, 190_200),
    ]
    assert duplicate_fetches(pages, [kill]) == (3, 2)
    assert duplicate_fetches(pages, []) == (3, 1)  # without the kill, only the hang-up explains


def test_soak_schedule_is_in_the_run_and_refuses_unknown_faults() -> None:
    import argparse

    import pytest

    from bench.bench_soak import SCHEDULE, Soak

    args = argparse.Namespace(minutes=30.0, warmup=8.0, chaos=True, seed=None, schedule=None, cluster=False,
                              workers=2)
    soak = Soak.__new__(Soak)
    soak.args = args
    faults = soak.schedule()
    assert [f.kind for f in faults] == [kind for kind, _, _ in SCHEDULE]
    assert all(8 * 60 < f.at < 30 * 60 - f.seconds for f in faults)  # after the warm-up, over before the end
    args.seed = 7
    seeded = soak.schedule()
    assert sorted(f.kind for f in seeded) == sorted(f.kind for f in faults) and seeded == soak.schedule()
    args.schedule = "kill@9,network@12.5"
    assert [(f.kind, f.at) for f in soak.schedule()] == [("kill", 540.0), ("network", 750.0)]
    args.schedule = "meteor@3"
    with pytest.raises(SystemExit, match="unknown fault 'meteor'"):
        soak.schedule()


def test_soak_per_worker_options_reach_only_their_worker() -> None:
    import pytest

    from bench.bench_soak import per_worker

    items = ["1:LD_PRELOAD=/x.so", "0:MALLOC_ARENA_MAX=2", "1:A=b=c"]
    assert per_worker(items, 1) == ["LD_PRELOAD=/x.so", "A=b=c"]
    assert per_worker(items, 0) == ["MALLOC_ARENA_MAX=2"] and per_worker(items, 2) == []
    for bad in ("LD_PRELOAD=/x.so", "w1:A=b", "1:A"):
        with pytest.raises(SystemExit, match="INDEX:NAME=VALUE"):
            per_worker([bad], 0)


def test_soak_counts_apart_a_hang_up_the_site_could_not_see() -> None:
    """A request the site held (an outage, status 0) that the crawler gave
    up on while the network was cut: the site logged it open, the next one
    came; only a cut between the two explains it."""
    from bench.soak_report import partitioned
    from devkit.testweb.control import LogEntry

    held = LogEntry(1_000, "a.test", "/p/1.html", 0, 50_000)  # held, then closed by the outage's end
    after = LogEntry(41_000, "a.test", "/p/2.html", 200, 41_200)
    assert partitioned(held, after, [(20_000, 40_000)])
    assert not partitioned(held, after, [])  # no cut: a real interval under the delay
    assert not partitioned(held, after, [(45_000, 65_000)])  # the cut came after the next request
    answered = held._replace(status=200)
    assert not partitioned(answered, after, [(20_000, 40_000)])  # an answer the site sent is no excuse
