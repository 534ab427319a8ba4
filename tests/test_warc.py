"""WARC storage: records read back by warcio, the writer's queue bounded,
nothing lost when a crawl is stopped with SIGTERM."""

from __future__ import annotations

import errno
import gzip
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.clock import ManualClock
from crawler.warcfile import Page, WarcWriter
from devkit import chaos
from tests.servers import ROOT, private_tmpfs, scrapy_env, wait_until


def read_warc(paths: list[Path]) -> list:
    records = []
    for path in paths:
        with open(path, "rb") as fh:
            for record in ArchiveIterator(fh):
                body = record.content_stream().read()
                records.append((record.rec_type, record.rec_headers, record.http_headers, body))
    return records


def page(n: int, body: bytes, **kw) -> Page:
    return Page(f"https://d{n}.test/p/{n}.html?q=1", "GET", [(b"User-Agent", b"crawler/0.1")], b"",
                200, [(b"Content-Type", b"text/html"), (b"Content-Encoding", b"gzip")], body, **kw)


@pytest.mark.parametrize(("level", "max_queued"), [(0, 256), (1, 0), (3, 4)])
def test_records_read_back_with_exact_bodies(tmp_path: Path, level: int, max_queued: int) -> None:
    noise = random.Random(0).randbytes  # incompressible, so the files rotate at any level
    bodies = [b"", b"<html>\xff\x00binary</html>", noise(500_000), noise(300_003)]
    writer = WarcWriter(lambda n: tmp_path / f"f{n}.warc.gz", level=level, max_bytes=400_000,
                        max_queued=max_queued)  # 0: written by put() itself
    for n, body in enumerate(bodies):
        writer.put(page(n, body, truncated=n == 2))
    writer.close()
    files = sorted(tmp_path.glob("*.warc.gz"))
    assert len(files) == 2  # rotated after the record that crossed 400,000 bytes
    records = read_warc(files)
    assert [r[0] for r in records] == ["warcinfo", "request", "response", "request", "response",
                                       "request", "response", "warcinfo", "request", "response"]
    responses = [r for r in records if r[0] == "response"]
    assert [r[3] for r in responses] == bodies
    for n, (_, rec, http, body) in enumerate(responses):
        assert rec.get_header("WARC-Target-URI") == f"https://d{n}.test/p/{n}.html?q=1"
        assert rec.get_header("WARC-Truncated") == ("length" if n == 2 else None)
        assert http.get_statuscode() == "200"
        assert http.get_header("Content-Length") == str(len(body))
        assert http.get_header("Content-Encoding") is None  # the body is stored decoded
    requests = [r for r in records if r[0] == "request"]
    assert (requests[1][2].protocol, requests[1][2].statusline) == ("GET", "/p/1.html?q=1 HTTP/1.1")
    assert requests[1][2].get_header("Host") == "d1.test"
    # one gzip member per record: the first member alone is the warcinfo record
    raw = files[0].read_bytes()
    first = gzip.decompress(raw[: _member_end(raw)])
    assert first.startswith(b"WARC/1.1\r\nWARC-Type: warcinfo\r\n")


def _member_end(raw: bytes) -> int:
    import zlib

    d = zlib.decompressobj(31)
    d.decompress(raw)
    return len(raw) - len(d.unused_data)


def test_level_is_checked() -> None:
    with pytest.raises(ValueError, match="WARC compression level must be 0..3"):
        WarcWriter(lambda n: Path("/nonexistent"), level=9)


def test_queue_is_bounded_and_put_waits_for_the_disk(tmp_path: Path) -> None:
    disk_ready = threading.Event()

    def slow_disk(n: int) -> Path:  # the writer thread stalls here, as on a full disk
        disk_ready.wait(30)
        return tmp_path / f"f{n}.warc.gz"

    clock = ManualClock(start=1_700_000_000.0)
    writer = WarcWriter(slow_disk, max_queued=4, clock=clock)
    body = b"y" * 200_000
    for n in range(5):  # one taken by the stalled thread, four queued
        writer.put(page(n, body))
    assert writer.queue.qsize() == 4
    done = threading.Event()

    def producer() -> None:
        writer.put(page(5, body))
        done.set()

    thread = threading.Thread(target=producer)
    thread.start()
    wait_until(lambda: writer.waiting, 10, "put() waiting for room")  # blocked: no fifth page in memory
    assert writer.queue.qsize() == 4 and not done.is_set()
    clock.advance(0.75)  # the disk stalls 0.75 s on the writer's clock
    disk_ready.set()
    assert done.wait(10)
    thread.join()
    writer.close()
    assert writer.blocked == pytest.approx(0.75, abs=1e-6) and writer.waiting == 0  # the clock's, not the real 0
    records = read_warc(sorted(tmp_path.glob("*.warc.gz")))
    assert [r[3] for r in records if r[0] == "response"] == [body] * 6
    # pages without a fetch date are dated as written, on the writer's clock: after the stall
    dates = {r[1].get_header("WARC-Date") for r in records}
    assert dates == {"2023-11-14T22:13:20.750000Z"}


def test_sigterm_loses_no_page(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=4, pages=400, links=8, crawl_delay_share=0, private_share=0,
                   size_median=100_000, size_mean=150_000, latency_ms=20)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(web.url(d) for d in range(4)))
    warc_dir = tmp_path / "warc"
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}",
         "-s", "CRAWLER_DOMAIN_DELAY=0", "-s", f"CRAWLER_WARC_DIR={warc_dir}", "-s", "CRAWLER_WARC_LEVEL=3",
         "-s", "CRAWLER_PROGRESS_INTERVAL=0"],
        cwd=ROOT, env=scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # pages, not robots.txt: the count asserted below
    wait_until(lambda: sum(e.path != "/robots.txt" and e.status == 200 for e in web.log()) >= 150
               or proc.poll() is not None, 60, "150 pages served")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    served = {web.url(e.domain, e.target) for e in web.log() if e.path != "/robots.txt" and e.status == 200}
    assert len(served) >= 150
    stored = [r for r in read_warc(sorted(warc_dir.glob("*.warc.gz"))) if r[0] == "response"]
    urls = [r[1].get_header("WARC-Target-URI") for r in stored]
    assert len(urls) == len(set(urls))
    assert set(urls) == served  # every page the site served is in the WARC files, whole


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real 1 MB tmpfs, in a mount namespace a holder process keeps; yields
    the folder as this process reaches it (through the holder's mounts)."""
    why = chaos.can_unshare()
    if why:
        pytest.skip(why)
    with private_tmpfs(tmp_path / "disk", 1_000_000) as disk:
        yield disk


@pytest.mark.parametrize("max_queued", [4, 0], ids=["thread", "inline"])
def test_a_full_disk_holds_the_pages_in_order_until_space_returns(small_disk: Path, max_queued: int) -> None:
    told: list[OSError | None] = []
    writer = WarcWriter(lambda n: small_disk / f"f{n}.warc.gz", level=0, max_queued=max_queued,
                        on_space=told.append, retry_seconds=0.05)
    bodies = [random.Random(n).randbytes(30_000) for n in range(6)]  # incompressible: 30 kB a record
    writer.put(page(0, bodies[0]))
    writer.flush()
    with chaos.disk_full(small_disk, leave=8192):  # the next record is cut by ENOSPC part-way
        numbers = [writer.put(page(n, bodies[n])) for n in range(1, 6)]
        assert numbers == [2, 3, 4, 5, 6]  # put() neither raises nor blocks
        wait_until(lambda: told, 10, "the full disk told")
        assert told[0] is not None and told[0].errno == errno.ENOSPC
        assert not writer.retry() if max_queued == 0 else True  # still full
        assert writer.written == 1 and writer.error is None  # nothing counted that is not in the file
        # the record cut part-way was taken back: the file reads back whole
        assert [r[3] for r in read_warc(sorted(small_disk.glob("*.warc.gz"))) if r[0] == "response"] == bodies[:1]
    if max_queued == 0:
        assert writer.retry()  # without a thread, the extension's timer tries again
    writer.flush()
    wait_until(lambda: writer.written == 6, 10, "the pages written once space returned")
    writer.close()
    assert len(told) == 2 and told[1] is None and writer.no_space is None
    records = read_warc(sorted(small_disk.glob("*.warc.gz")))  # no hole where the cut record was
    assert [r[3] for r in records if r[0] == "response"] == bodies  # every page, in order, once


@pytest.mark.parametrize("max_queued", [4, 0], ids=["thread", "inline"])
def test_closing_on_a_full_disk_gives_the_waiting_pages_up(small_disk: Path, max_queued: int) -> None:
    writer = WarcWriter(lambda n: small_disk / f"f{n}.warc.gz", level=0, max_queued=max_queued,
                        retry_seconds=0.05)
    bodies = [random.Random(n).randbytes(30_000) for n in range(3)]
    writer.put(page(0, bodies[0]))
    writer.flush()
    with chaos.disk_full(small_disk):
        writer.put(page(1, bodies[1]))
        writer.put(page(2, bodies[2]))
        wait_until(lambda: writer.no_space is not None, 10, "the full disk met")
        writer.close()  # returns: the pages waiting are given up, never counted
    assert writer.abandoned and writer.written == 1 and writer.error is None
    assert [r[3] for r in read_warc(sorted(small_disk.glob("*.warc.gz"))) if r[0] == "response"] == bodies[:1]
