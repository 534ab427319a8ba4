"""Nothing lost in silence: WARC storage failures (full disk, read-only folder,
low space) and the frontier's ledger, checked with ``scrapy crawl billion``
against the test web, the WARC files read back with warcio, and the exit
status."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from devkit.testweb.config import PAGE_FAULTS
from crawler.extensions.warc import CHECK_INTERVAL
from tests.servers import ROOT, run_scrapy, scrapy_env, wait_until

ROOT_USER = os.geteuid() == 0
FAST = ("CRAWLER_DOMAIN_DELAY=0", "CRAWLER_PROGRESS_INTERVAL=0", "CRAWLER_ROBOTS_RETRY=1",
        "CRAWLER_ROBOTS_ERROR_TTL=2", "CRAWLER_BACKOFF_BASE=0.2", "CRAWLER_BACKOFF_MAX=1", "CRAWLER_BACKOFF_JITTER=0.1")


def billion(web, seeds_dir: Path, *settings: str, private: bool = False) -> list[str]:
    """``scrapy crawl billion`` arguments for every domain of ``web`` (with
    ``private``, a seed robots.txt refuses on each domain as well)."""
    seeds = seeds_dir / "seeds.txt"
    extra = ("private/seed.html",) if private else ()
    seeds.write_text("".join(web.url(d) + path + "\n" for d in range(web.config.domains) for path in ("", *extra)))
    args = [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}"]
    for s in (*FAST, *((f"CRAWLER_TLS_CA_FILE={web.ca_file}",) if web.ca_file else ()), *settings):
        args += ["-s", s]
    return args


def run(args: list[str], redis_url: str, *, fsize: int | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # a file past `fsize` bytes fails with EFBIG instead of killing the process
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org")
    try:
        return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=limit if fsize else None)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-6000:]
        pytest.fail(f"the crawl did not end in {timeout} s:\n{tail.decode(errors='replace')}")


def ledger(redis_url: str) -> dict:
    shown = run_scrapy(["frontier", "billion", "--json"], scrapy_env(redis_url))
    assert shown.returncode == 0, shown.stderr[-2000:]
    return json.loads(shown.stdout)[0]["ledger"]


def warc_responses(folder: Path) -> list[tuple[str, int]]:
    """(URL, status) of every response record in ``folder``'s WARC files;
    warcio fails on a file cut inside a record."""
    found = []
    for path in sorted(folder.glob("*.warc.gz")):
        with path.open("rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type == "response":
                    found.append((record.rec_headers.get_header("WARC-Target-URI"),
                                  record.http_headers.get_statuscode()))
    return found


@contextmanager
def tmpfs(path: Path, size: str, *options: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "ERROR" in line or line.startswith("crawler: error")]


def test_a_failed_write_stops_the_crawl_and_every_acknowledged_page_is_stored(
        redis_url: str, make_web, tmp_path: Path) -> None:
    # a file past RLIMIT_FSIZE: EFBIG, a failure space returning would not mend
    web = make_web(domains=6, pages=150, size_fixed=40_000, links=8, private_share=0, crawl_delay_share=0,
                   cross_share=0, dup_share=0)
    folder = tmp_path / "warc"
    settings = [f"CRAWLER_WARC_DIR={folder}", "CRAWLER_WARC_MIN_FREE=0"]
    done = run(billion(web, tmp_path, *settings), redis_url, fsize=2_000_000)
    stored = warc_responses(folder)
    assert done.returncode != 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-5000:]
    failures = [line for line in error_lines(done.stderr) if "WARC storage failed" in line]
    assert len(failures) == 2, done.stderr[-3000:]  # said once, and once more as why the crawl failed
    assert "Crawl failed: WARC storage failed" in failures[1] and done.stderr.rstrip().endswith(failures[1])
    assert "too large" in failures[0].lower()
    book = ledger(redis_url)
    assert book["adds_up"], book
    served = {(e.domain, e.path) for e in web.log() if e.path.startswith("/p/") or e.path == "/"}
    assert 0 < book["stored"] == len(stored) <= len(served), (book, len(stored))
    assert book["stored"] < 6 * 150  # the file was too large before the crawl was done...
    assert book["queued"] + book["delayed"] > 0  # ...and the rest waits in the frontier, nothing lost
    assert book["unknown"] == book["lost"] == 0


@pytest.mark.parametrize("thread", [True, False])
def test_a_full_disk_pauses_the_crawl_and_every_acknowledged_page_is_stored(
        thread: bool, redis_url: str, make_web, tmp_path: Path) -> None:
    # full for good: paused (not stopped) until the crawl is closed (CLOSESPIDER_TIMEOUT) while
    # still paused, which did not finish; space returning is tests/test_chaos.py's
    if not ROOT_USER:
        pytest.skip("mounting a tmpfs needs root")
    web = make_web(domains=6, pages=150, size_fixed=40_000, links=8, private_share=0, crawl_delay_share=0,
                   cross_share=0, dup_share=0)
    folder = tmp_path / "warc"
    settings = [f"CRAWLER_WARC_DIR={folder}", "CRAWLER_WARC_MIN_FREE=0", f"CRAWLER_WARC_THREAD={thread}",
                "CLOSESPIDER_TIMEOUT=6"]
    with tmpfs(folder, "2m"):
        done = run(billion(web, tmp_path, *settings), redis_url)
        stored = warc_responses(folder)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-5000:]
    assert done.stderr.count("No space left for WARC files") == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "Crawl failed: closed while fetching was paused for disk space" in last, last
    assert "no space left in" in last and "No space left on device" in last, last
    assert "WARC storage failed" not in done.stderr
    book = ledger(redis_url)
    assert book["adds_up"], book
    served = {(e.domain, e.path) for e in web.log() if e.path.startswith("/p/") or e.path == "/"}
    assert 0 < book["stored"] == len(stored) <= len(served), (book, len(stored))
    assert book["stored"] < 6 * 150  # the disk was full before the crawl was done...
    assert book["leased"] == 0 and book["queued"] + book["delayed"] > 0  # ...the rest waits in the frontier
    assert book["unknown"] == book["lost"] == 0


@pytest.mark.parametrize("where", ["folder", "missing sub-folder"])
def test_an_unwritable_warc_folder_is_one_line_and_a_failed_start(
        where: str, redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=2, pages=5, size_fixed=2000, links=4)
    folder = tmp_path / "ro"
    if ROOT_USER:
        context = tmpfs(folder, "1m", "ro")
    else:
        folder.mkdir()
        folder.chmod(0o555)
        context = contextmanager(lambda: iter([folder]))()
    with context:
        target = folder if where == "folder" else folder / "sub" / "warc"
        done = run(billion(web, tmp_path, f"CRAWLER_WARC_DIR={target}"), redis_url, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = error_lines(done.stderr)
    assert len(lines) >= 1 and str(folder) in lines[0], done.stderr[-3000:]
    assert not [e for e in web.log() if e.path.startswith("/p/")]  # nothing fetched for nothing


def test_low_space_pauses_fetching_until_space_returns(redis_url: str, make_web, tmp_path: Path) -> None:
    if not ROOT_USER:
        pytest.skip("needs a tmpfs (root) to control the free space")
    web = make_web(domains=3, pages=20, size_fixed=3000, links=6, private_share=0, crawl_delay_share=0)
    folder = tmp_path / "warc"
    with tmpfs(folder, "8m"):
        filler = folder / "filler"
        filler.write_bytes(b"\0" * 6_000_000)  # 2 MB left, under the 4 MB asked for
        args = billion(web, tmp_path, f"CRAWLER_WARC_DIR={folder}", "CRAWLER_WARC_MIN_FREE=4000000",
                       "CRAWLER_PROGRESS_INTERVAL=0.25")
        child = subprocess.Popen(args, cwd=ROOT, env=scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"),
                                 stderr=subprocess.PIPE, text=True)
        assert child.stderr is not None
        lines = []
        for line in child.stderr:
            lines.append(line)
            if "fetching paused" in line:
                break
        else:
            pytest.fail("no pause: " + "".join(lines[-30:]))
        # what was in flight when it paused ends; then the site sees nothing while the
        # worker reports on (its progress line, every 0.25 s on its clock) past its
        # next look at the free space (warc.CHECK_INTERVAL)
        wait_until(lambda: all(e.done for e in web.log()), 30, "the pages in flight answered")
        before = len([e for e in web.log() if e.path.startswith("/p/")])
        reports = 0
        for line in child.stderr:
            lines.append(line)
            reports += "pages=" in line
            if reports * 0.25 > 2 * CHECK_INTERVAL:
                break
        else:
            pytest.fail("the paused crawl ended: " + "".join(lines[-30:]))
        assert "fetching resumed" not in "".join(lines)
        assert len([e for e in web.log() if e.path.startswith("/p/")]) == before
        filler.unlink()
        rest = child.stderr.read()
        assert child.wait(timeout=120) == 0, rest[-3000:]
        stored = warc_responses(folder)
    assert "fetching resumed" in rest
    assert len({url.replace("/p/0.html", "/") for url, _ in stored}) == 3 * 20, len(stored)


def test_every_admitted_url_ends_in_exactly_one_state(redis_url: str, make_web, tmp_path: Path) -> None:
    faults = {kind: 0.03 for kind in PAGE_FAULTS}
    web = make_web(domains=12, pages=30, size_fixed=3000, links=10, private_share=0.1, trap_share=0.05,
                   faults=faults, robots_faults={"503": 0.1, "404": 0.1, "redirect": 0.1, "invalid": 0.1},
                   slow_ms=3000, meta_nofollow_share=0.05, crawl_delay_share=0, retry_after=1)
    # Retry-After: 1 (not the test web's 3): a domain drawing ten 429 and 503 answers waits 10 s, not 30,
    # and every answer, so every state reached, is the same
    folder = tmp_path / "warc"
    done = run(billion(web, tmp_path, f"CRAWLER_WARC_DIR={folder}", "DOWNLOAD_TIMEOUT=1", "CRAWLER_MAX_ATTEMPTS=2",
                       "CRAWLER_MAX_DEPTH=4", "CRAWLER_ROBOTS_UNREACHABLE_MAX=3", private=True),
               redis_url, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    book = ledger(redis_url)
    assert book["adds_up"], book
    assert book["queued"] == book["leased"] == book["delayed"] == 0, book
    assert book["unknown"] == book["lost"] == 0, book
    for state in ("stored", "dead", "disallowed", "skipped", "redirected"):
        assert book[state] > 0, (state, book)
    assert f"{book['admitted']} admitted" in done.stderr  # the end-of-crawl line
    stored_urls = {url for url, status in warc_responses(folder) if status == "200"}
    assert book["stored"] <= len(stored_urls), (book["stored"], len(stored_urls))
