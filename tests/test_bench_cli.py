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

    block = b"x" * (64 << 20)  # written, so resident: anonymous memory of this process
    split = memory_split(os.getpid())
    with open(f"/proc/{os.getpid()}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    assert len(block) and split["anon"] >= 64
    assert split["files"] > 0  # the interpreter's own code
    assert abs(sum(split.values()) - rss) < 0.05 * rss, (split, rss)
