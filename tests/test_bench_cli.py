"""``python -m bench`` answers ``--help`` and ``--list`` without starting a run."""

from __future__ import annotations

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
