"""Where a crawl process's memory grows: a Scrapy extension for a diagnosis
run, not for production (tracemalloc slows allocation by about half).

    python -m bench soak --minutes 20 --workers 1 \\
        --set 'EXTENSIONS={"bench.memtrace.MemTrace": 0}' --set MEMTRACE_FILE=/tmp/memtrace.txt

From ``MEMTRACE_START`` seconds (300) it traces allocations
(``MEMTRACE_FRAMES`` frames each, 1), takes a snapshot, and every
``MEMTRACE_INTERVAL`` seconds (120) appends to ``MEMTRACE_FILE`` the
allocation sites that grew most since that snapshot and the Python
object types whose count grew most (``gc.get_objects``), with the
process's resident size: what grows with the crawl's age shows at the top.

The other extensions here are experiments for an A/B within one soak
(``--worker-set``): :class:`MallocTrim`, :class:`JemallocDump` and
:class:`GcProbe` (bench/README.md).
"""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from collections import Counter
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def _types() -> Counter[str]:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


def rss_mb(pid: int | str = "self") -> float:
    """The resident size of process ``pid`` (this one by default), MB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def _big_containers(top: int = 12) -> list[str]:
    """The largest lists, dicts, sets and deques, with a sample of what they
    hold and who holds them: the container that grows shows at the top."""
    sized = []
    for o in gc.get_objects():
        if isinstance(o, (list, dict, set, frozenset)) or type(o).__name__ == "deque":
            try:
                n = len(o)
            except TypeError:
                continue
            if n >= 2000:
                sized.append((n, o))
    sized.sort(key=lambda x: -x[0])
    lines = []
    for n, o in sized[:top]:
        sample = next(iter(o.items() if isinstance(o, dict) else o), None)
        holders = []
        for r in gc.get_referrers(o)[:6]:
            if r is sized or isinstance(r, list) and len(r) > 100000:
                continue
            if isinstance(r, dict):
                owner = next((type(x).__qualname__ for x in gc.get_referrers(r)
                              if getattr(x, "__dict__", None) is r), "")
                key = next((k for k, v in r.items() if v is o), "?")
                holders.append(f"{owner or 'dict'}.{key}")
            elif isinstance(getattr(r, "__dict__", None), dict):
                key = next((k for k, v in vars(r).items() if v is o), "?")
                holders.append(f"{type(r).__qualname__}.{key}")
            else:
                holders.append(type(r).__qualname__)
        lines.append(f"{type(o).__qualname__} of {n:,}: e.g. {str(sample)[:100]!r}; held by {holders}")
    return lines


class MemTrace:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        path = settings.get("MEMTRACE_FILE")  # "{pid}" in it: one file per process
        if not path:
            raise NotConfigured
        self.path = path.replace("{pid}", str(os.getpid()))
        self.start = settings.getfloat("MEMTRACE_START", 300)
        self.interval = settings.getfloat("MEMTRACE_INTERVAL", 120)
        self.frames = settings.getint("MEMTRACE_FRAMES", 1)
        self.crawler = crawler
        self.base: Any = None
        self.base_types: Counter[str] = Counter()
        self.started = time.monotonic()
        self.loop = task.LoopingCall(self.tick)
        crawler.signals.connect(self.opened, signal=signals.spider_opened)
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MemTrace:
        return cls(crawler)

    def opened(self) -> None:
        from twisted.internet import reactor

        reactor.callLater(self.start, self.begin)  # type: ignore[attr-defined]

    def begin(self) -> None:
        tracemalloc.start(self.frames)
        self.base = tracemalloc.take_snapshot()
        self.base_types = _types()
        self.write(f"--- tracing from {time.monotonic() - self.started:.0f} s, RSS {rss_mb():.0f} MB, "
                   f"pages {self.pages()}\n")
        self.loop.start(self.interval, now=False)

    def pages(self) -> int:
        stats = self.crawler.stats
        return int(stats.get_value("response_received_count", 0)) if stats else 0

    def tick(self) -> None:
        snap = tracemalloc.take_snapshot()
        lines = [f"--- {time.monotonic() - self.started:.0f} s, RSS {rss_mb():.0f} MB, pages {self.pages()}, "
                 f"traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MB"]
        for stat in snap.compare_to(self.base, "lineno")[:25]:
            lines.append(f"  {stat.size_diff / 1024:+9.0f} kB {stat.count_diff:+8d}  {stat.traceback}")
        types = _types()
        types.subtract(self.base_types)
        lines.append("  object types that grew: " + ", ".join(f"{k} {v:+d}" for k, v in types.most_common(15)))
        lines.extend(f"  {line}" for line in _big_containers())
        self.write("\n".join(lines) + "\n")

    def write(self, text: str) -> None:
        with open(self.path, "a") as f:
            f.write(text)

    def closed(self) -> None:
        if self.loop.running:
            self.loop.stop()
            self.tick()
        tracemalloc.stop()


class _Every:
    """An experiment run every ``<setting>`` seconds from the spider's opening
    (``NotConfigured`` without it)."""

    setting = ""

    def __init__(self, crawler: Crawler) -> None:
        self.interval = crawler.settings.getfloat(self.setting, 0)
        if not self.interval:
            raise NotConfigured
        self.loop = task.LoopingCall(self.tick)
        crawler.signals.connect(self.opened, signal=signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> _Every:
        return cls(crawler)

    def opened(self) -> None:
        self.loop.start(self.interval, now=False)

    def tick(self) -> None:
        raise NotImplementedError


class MallocTrim(_Every):
    """glibc's ``malloc_trim(0)`` every ``MALLOC_TRIM_INTERVAL`` seconds, to
    tell memory glibc holds free from memory in use."""

    setting = "MALLOC_TRIM_INTERVAL"

    def __init__(self, crawler: Crawler) -> None:
        import ctypes

        super().__init__(crawler)
        self.trim = ctypes.CDLL("libc.so.6").malloc_trim

    def tick(self) -> None:
        t = time.perf_counter()
        before = rss_mb()
        self.trim(0)
        print(f"malloc_trim: {before:.1f} -> {rss_mb():.1f} MB in {(time.perf_counter() - t) * 1000:.1f} ms", flush=True)


class JemallocDump(_Every):
    """With jemalloc preloaded and profiling on
    (``LD_PRELOAD=libjemalloc.so.2 MALLOC_CONF=prof:true,prof_prefix:DIR/w``,
    and ``PYTHONMALLOC=malloc`` for Python's objects to show too), a heap
    profile every ``JEMALLOC_DUMP_INTERVAL`` seconds; ``jeprof --base`` on two
    of them shows which native call sites hold the memory that grew."""

    setting = "JEMALLOC_DUMP_INTERVAL"

    def __init__(self, crawler: Crawler) -> None:
        import ctypes

        super().__init__(crawler)
        self.mallctl = ctypes.CDLL(None).mallctl

    def tick(self) -> None:
        code = self.mallctl(b"prof.dump", None, None, None, 0)
        print(f"jemalloc prof.dump: {code}, RSS {rss_mb():.1f} MB", flush=True)


class GcProbe(_Every):
    """Every ``GC_PROBE_INTERVAL`` seconds a census of the objects a full
    collection walks (tracked and not frozen, by type, and the largest
    containers, each of whose items it visits), then one full collection,
    timed, whose garbage is counted by type (what the crawl leaves in
    reference cycles, and how much of the resident size it held)."""

    setting = "GC_PROBE_INTERVAL"

    def tick(self) -> None:
        walked = _types()  # what a full collection walks: the tracked objects not frozen
        big = _big_containers(8)
        before = rss_mb()
        gc.set_debug(gc.DEBUG_SAVEALL)
        t = time.perf_counter()
        try:
            found = gc.collect()
        finally:
            pause = time.perf_counter() - t
            gc.set_debug(0)
        kinds = Counter(type(o).__qualname__ for o in gc.garbage)
        gc.garbage.clear()
        gc.collect()  # frees what the collection above kept in gc.garbage
        print(f"gc census: a full collection of {walked.total()} tracked objects took {pause * 1000:.1f} ms; "
              + ", ".join(f"{k} {v}" for k, v in walked.most_common(25))
              + "".join(f"\n  {line}" for line in big), flush=True)
        print(f"gc probe: {found} objects in cycles, RSS {before:.1f} -> {rss_mb():.1f} MB; "
              + ", ".join(f"{k} {v}" for k, v in kinds.most_common(20)), flush=True)
