"""How late the event loop runs its timers: a probe every
``CRAWLER_LOOP_PROBE_INTERVAL`` seconds (0.1; 0 turns it off).

A timer that fires late measures how long the loop was busy with something
else: a page parsed on the reactor thread, a robots.txt matched, a blocking
call. The worst lateness of the crawl is the stat ``crawler/loop/lag_max_ms``
(also a Prometheus gauge, ``crawler_loop_lag_max_seconds``), the latest one
``crawler/loop/lag_ms``; stalls over 100 ms are counted
(``crawler/loop/stalls``) and the worst is logged when the crawl ends.
:meth:`LoopLagProbe.worst_since` gives the worst lateness since the last
call (the concurrency controller backs off on it: ``concurrency.py``);
:meth:`LoopLagProbe.last_minute` the worst of the probes of the last minute
(the Prometheus gauge ``crawler_loop_lag_minute_max_seconds``: a stall after
the warm-up shows there, where the crawl's worst may be its start).

What held the loop, when it is not known: ``CRAWLER_LOOP_STALL_DUMP`` (a file;
off by default) starts a thread that, while the probe is late, samples the
stack of the loop's thread every few milliseconds and appends each stall
over 100 ms to the file: when it came (seconds from the spider's opening),
how late the probe was, how much of that the loop's thread spent on a CPU
(much less: it waited, for Redis, for a lock, or for a CPU another process
held), and the stacks sampled, the frames they share printed once
(:class:`StallDump`; docs/benchmarks.md, "The loop's worst stall", is what
it found). A debugging aid: each sample takes the interpreter's lock.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from crawler.clock import SYSTEM, clock_of
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

STALL_MS = 100.0
SAMPLE_EVERY = 0.005  # seconds between two looks of the stall dump's thread (StallDump)


class LoopLagProbe:
    def __init__(self, crawler: Crawler) -> None:
        self.interval = setting(crawler.settings, "CRAWLER_LOOP_PROBE_INTERVAL")
        if self.interval <= 0:
            raise NotConfigured
        self.clock = clock_of(crawler)  # lateness is read on it; its timers run the probe
        self.stats = crawler.stats
        self.worst = 0.0
        self.recent = 0.0  # worst since the last worst_since()
        self.minute: deque[float] = deque(maxlen=max(1, round(60 / self.interval)))  # the last minute's probes
        self.expected = 0.0
        self.call: Any = None
        dump = setting(crawler.settings, "CRAWLER_LOOP_STALL_DUMP")
        self.dump = StallDump(Path(dump), self) if dump else None
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LoopLagProbe:
        return cls(crawler)

    def spider_opened(self) -> None:
        self._schedule()
        if self.dump is not None:
            self.dump.start()

    def _schedule(self) -> None:
        self.expected = self.clock.monotonic() + self.interval
        if self.clock is SYSTEM:
            try:
                # the asyncio loop's own timer, on the system clock's time.monotonic
                # too: through Twisted's callLater, each tick would run the reactor's
                # timer pass, and the engine's scheduling with it
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not the asyncio reactor: the reactor's timers
                pass
            else:
                self.call = loop.call_later(self.interval, self._fire)
                return
        self.call = self.clock.timers.callLater(self.interval, self._fire)

    def _fire(self) -> None:
        lag = max(0.0, (self.clock.monotonic() - self.expected) * 1000)
        self.stats.set_value("crawler/loop/lag_ms", round(lag, 1))
        self.recent = max(self.recent, lag)
        self.minute.append(lag)
        if lag > self.worst:
            self.worst = lag
            self.stats.set_value("crawler/loop/lag_max_ms", round(lag, 1))
        if lag > STALL_MS:
            self.stats.inc_value("crawler/loop/stalls")
            logger.debug("Event loop stalled %.0f ms", lag)
        self._schedule()

    def worst_since(self) -> float:
        """The worst lateness, in ms, since the previous call (0.0 at first)."""
        recent, self.recent = self.recent, 0.0
        return recent

    def last_minute(self) -> float:
        """The worst lateness, in ms, of the probes of the last minute (as many
        probes as a minute holds at the interval: longer when the loop stalls)."""
        return max(self.minute, default=0.0)

    def spider_closed(self) -> None:
        active = getattr(self.call, "active", None)  # a Twisted DelayedCall says; a TimerHandle does not mind
        if self.call is not None and (active is None or active()):
            self.call.cancel()
        self.call = None
        if self.dump is not None:
            self.dump.stop()
        logger.info("Worst event-loop stall: %.1f ms (%d over %d ms)", self.worst,
                    self.stats.get_value("crawler/loop/stalls", 0), STALL_MS)


class StallDump:
    """``CRAWLER_LOOP_STALL_DUMP``: what the loop's thread was doing while
    ``probe`` was late, each stall over ``STALL_MS`` appended to ``path``
    (the module's docstring says what a stall's entry holds).

    The loop's thread is the one that calls :meth:`start`. The thread of
    this class reads ``probe.expected`` (when the probe should run next, on
    the crawl's clock) every ``SAMPLE_EVERY`` seconds; while that is past,
    it keeps a sample of the loop thread's stack; once the probe has run
    again, it writes the stall out if it was long enough."""

    def __init__(self, path: Path, probe: LoopLagProbe) -> None:
        self.path = path
        self.probe = probe
        self.stalls = 0  # written to the file
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread = 0
        self._began = 0.0

    def start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._began = self.probe.clock.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="loop-stall-dump", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def _cpu(self) -> float | None:
        """Seconds of CPU the loop's thread has used (None where that cannot be read)."""
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(self._loop_thread))
        except (AttributeError, OSError):
            return None

    def _stack(self) -> list[str]:
        frame = sys._current_frames().get(self._loop_thread)
        frames: list[str] = []
        while frame is not None:
            code = frame.f_code
            frames.append(f"{code.co_filename}:{frame.f_lineno} {code.co_name}")
            frame = frame.f_back
        frames.reverse()  # outermost first
        return frames

    def _run(self) -> None:
        clock = self.probe.clock
        late_for: float | None = None  # the ``expected`` the probe is late for
        samples: list[list[str]] = []
        cpu_before = self._cpu()  # at the last look the loop was on time
        cpu_since: float | None = None
        late = 0.0
        while not self._stop.wait(SAMPLE_EVERY):
            expected = self.probe.expected
            now = clock.monotonic()
            if expected and now > expected:
                if late_for != expected:  # a new stall
                    late_for, samples, cpu_since = expected, [], cpu_before
                late = (now - expected) * 1000
                samples.append(self._stack())
                continue
            if late_for is not None and late > STALL_MS:
                cpu = self._cpu()
                on_cpu = None if cpu is None or cpu_since is None else (cpu - cpu_since) * 1000
                self._write(late_for - self._began, late, on_cpu, samples)
            late_for, samples, late = None, [], 0.0
            cpu_before = self._cpu()

    def _write(self, at: float, late: float, on_cpu: float | None, samples: list[list[str]]) -> None:
        shared = samples[0] if samples else []
        for stack in samples[1:]:  # the frames every sample has, from the outermost
            n = 0
            while n < min(len(shared), len(stack)) and shared[n] == stack[n]:
                n += 1
            shared = shared[:n]
        on = "?" if on_cpu is None else f"{on_cpu:.0f}"
        lines = [f"stall at {at:.3f} s: the probe ran at least {late:.0f} ms late; the loop's thread on a CPU "
                 f"{on} ms since its last look on time; {len(samples)} samples, {SAMPLE_EVERY * 1000:g} ms apart"]
        lines += [f"  under: {frame}" for frame in shared]
        previous: list[str] | None = None
        repeats = 0
        for stack in [*samples, None]:
            if stack == previous:
                repeats += 1
                continue
            if previous is not None:
                lines.append(f"  {repeats}x " + (" > ".join(previous[len(shared):])
                                                 or "(no deeper than the last 'under' frame: in C code it called)"))
            previous, repeats = stack, 1
        with self.path.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n\n")
        self.stalls += 1
