"""A crawl that ends while fetching is paused for disk space
(``CRAWLER_WARC_MIN_FREE``) did not finish: it says so in its last line and
exits non-zero, and the URLs it did not fetch wait in the frontier.

The WARC folder is a real tmpfs of a few MB, mounted in a private mount
namespace (``unshare -m``) around the ``scrapy crawl`` child: it is gone
with the child, even if the test dies."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import ROOT, run_scrapy, scrapy_env

TMPFS_BYTES = 4 * 1024 * 1024


def can_mount() -> str:
    """Why a tmpfs cannot be mounted in a private namespace here ('' if it can)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare or mount is not installed"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True, text=True)
    return f"cannot mount a tmpfs in a private namespace: {probe.stderr.strip()}" if probe.returncode else ""


def crawl_on_tmpfs(folder: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``scrapy <args>`` with a tmpfs of TMPFS_BYTES mounted at ``folder``,
    in a mount namespace of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    scrapy = shlex.join([sys.executable, "-m", "scrapy", *args])
    script = f"mount -t tmpfs -o size={TMPFS_BYTES} tmpfs {shlex.quote(str(folder))} && exec {scrapy}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180)


def test_a_crawl_closed_while_paused_for_disk_space_fails_and_keeps_its_urls(
        redis_url: str, make_web, tmp_path: Path) -> None:
    why = can_mount()
    if why:
        pytest.skip(why)
    web = make_web(domains=3, pages=10, size_fixed=2000, links=4, private_share=0, crawl_delay_share=0,
                   cross_share=0, dup_share=0)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"{web.url(d)}\n" for d in range(3)))
    folder = tmp_path / "warc"
    args = ["crawl", "billion", "-a", f"seeds={seeds}"]
    for s in ("CRAWLER_DOMAIN_DELAY=0", "CRAWLER_PROGRESS_INTERVAL=0", f"CRAWLER_WARC_DIR={folder}",
              f"CRAWLER_WARC_MIN_FREE={2 * TMPFS_BYTES}", "CLOSESPIDER_TIMEOUT=3"):
        args += ["-s", s]
    done = crawl_on_tmpfs(folder, args, scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))

    assert "fetching paused" in done.stderr, done.stderr[-3000:]  # paused from the start...
    assert done.returncode == 1, done.stderr[-3000:]  # ...and ended so: a failure
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "ERROR: Crawl failed: closed while fetching was paused for disk space" in last, last
    assert str(folder) in last and "CRAWLER_WARC_MIN_FREE" in last, last
    assert not [e for e in web.log() if e.path != "/robots.txt"]  # nothing fetched
    shown = run_scrapy(["frontier", "billion", "--json"], scrapy_env(redis_url))
    assert shown.returncode == 0, shown.stderr[-2000:]
    book = json.loads(shown.stdout)[0]["ledger"]
    assert book["adds_up"], book
    assert book["leased"] == 0, book  # leases handed back
    assert book["queued"] + book["delayed"] == book["admitted"] == 3, book  # every seed waits for the next crawl
    assert book["stored"] == book["lost"] == book["unknown"] == 0, book
