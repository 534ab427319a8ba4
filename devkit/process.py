"""Child processes of the demo, the tests and the benchmarks."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen | None) -> None:
    """Terminate ``proc`` if it runs; kill it if it has not gone in 10 s."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
