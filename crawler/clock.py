"""The crawl's one clock, so that tests can drive time instead of sleeping.

**Who reads it.** Every component that measures time takes the crawl's
:class:`Clock` from :func:`clock_of` (built once per crawler from
``CRAWLER_CLOCK`` and kept on the crawler, so the scheduler, the middlewares
and the extensions share one instance), or a ``clock=`` argument
(:data:`SYSTEM` by default) where it has no crawler:

- the frontier (``crawler/store``): the Lua scripts' ``now_ms()``
  (``lua/_lib.lua``), the acknowledgements' ages, the epoch's last look;
- the worker session (``crawler/worker``): dequeue pacing and the idle close,
  when responses began and ended, the reconnect backoff, the epoch check, the
  acknowledgement interval, the drain pace, and the scheduler's tick (timers);
- the middlewares: robots.txt (the process's cache lifetime, the wait for
  another process's fetch, fetch marks), backoff (a ``Retry-After`` date's
  distance), the domain lock (the refresh of the live lock-domain set);
- the extensions: WARC (low-space pause length; the writer's time blocked on
  a full queue, ``WarcWriter(clock=)``; record dates), concurrency (the
  adjustment interval and its lateness, its timer), loop lag (the probe's
  lateness and its timer), progress (the rate and its timer);
- the billion spider's per-page budget of robots.txt checks.

**The rule.** What *measures* time reads the clock: durations, lifetimes,
deadlines, rates, lateness (``monotonic()``), and what is scheduled
(``timers``). A wall-clock date compared with another date (a
``Retry-After`` date) or written down for people and archives (WARC-Date)
reads :meth:`Clock.time`, the clock's wall-clock face, so a test sees dates
that agree with its clock. Two measurements stay on the real clocks, on
purpose: CPU time (``time.thread_time``/``process_time``, the concurrency
controller's CPU shares: the process's own work, not time passing) and the
length of a garbage-collector pause (``gcpauses.py``: ``time.perf_counter``
between the collector's own start and stop callbacks, inside which no code
can move a clock, so on a :class:`ManualClock` every pause would read 0).
Names of files (``time.strftime`` stamps of WARC files, log lines) are not
measurements either and keep the system's time.

**What a clock gives.** ``monotonic()`` (seconds, this process), ``time()``
(wall-clock seconds since the epoch), ``server_time(client)`` (what Redis
``TIME`` answers: seconds and microseconds) and ``timers``, the
``IReactorTime`` that runs delayed calls (``callLater``,
``LoopingCall.clock``). :data:`SYSTEM` is ``time.monotonic``, ``time.time``,
Redis' own ``TIME`` and Twisted's reactor. A test uses a
:class:`ManualClock`, which moves only with :meth:`ManualClock.advance`,
shows one value as all of ``monotonic()``, ``time()`` and the server's time,
and shows it to the Lua scripts through one Redis key.

What stays on Redis' own clock, whatever the clock: key expiry (``PX``/
``PTTL``: domain locks and their fetch claims, robots.txt records, the
dequeue replies kept for a retry, the metrics exporter's token). A test on a
:class:`ManualClock` that needs one of those to expire waits for it (with
``tests/servers.py`` ``wait_until``), or deletes the key.

``CRAWLER_CLOCK`` (an import path of a :class:`Clock`, or of a callable
returning one; unset: :data:`SYSTEM`) is for tests and simulations only. A
test that builds components on a crawler itself gives them its clock with
:func:`use_clock` before they are made.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis
    from scrapy.crawler import Crawler
    from twisted.internet.interfaces import IReactorTime

__all__ = ["SYSTEM", "Clock", "ManualClock", "check_path", "clock_of", "from_path", "use_clock"]

_SAFE_KEY = re.compile(r"[A-Za-z0-9_:.{}\-]+")


class Clock:
    """The system's clock: ``time.monotonic()``, ``time.time()``, Redis ``TIME``, the reactor."""

    #: the Redis key the Lua scripts read the time from (ms); None: Redis ``TIME``
    script_key: str | None = None

    def monotonic(self) -> float:
        """Seconds on this process's monotonic clock."""
        return time.monotonic()

    def time(self) -> float:
        """Wall-clock seconds since the epoch: for dates (compared with
        another date, or written down), never for a duration."""
        return time.time()

    def server_time(self, client: redis.Redis) -> tuple[int, int]:
        """The frontier's clock as Redis ``TIME`` gives it: (seconds, microseconds)."""
        seconds, micros = client.time()
        return int(seconds), int(micros)

    def server_ms(self, client: redis.Redis) -> int:
        """:meth:`server_time` in ms, as the scripts' ``now_ms()``."""
        seconds, micros = self.server_time(client)
        return seconds * 1000 + micros // 1000

    @property
    def timers(self) -> IReactorTime:
        """What runs delayed calls on this clock: Twisted's reactor."""
        from twisted.internet import reactor

        return reactor  # type: ignore[return-value]

    def __repr__(self) -> str:
        return "SYSTEM" if self is SYSTEM else f"{type(self).__name__}()"


SYSTEM = Clock()


class ManualClock(Clock):
    """A clock that stands still until :meth:`advance` moves it.

    ``monotonic()``, ``time()`` and the server's time are one value, ``start`` seconds
    plus every advance; kept in whole nanoseconds, so moves by binary
    fractions (0.25, 0.125) add up exactly. The Lua scripts read it from the
    Redis key ``key``, which the clock writes (in ms) on ``client`` when made
    and at each advance; a script that finds the key gone fails with an
    error naming it, rather than falling back to the server's clock. The
    scripts read that key without declaring it, which a standalone Redis
    allows: a ManualClock is for tests on one standalone Redis, not for a
    Redis Cluster.

    Delayed calls made through ``timers`` (a ``twisted.internet.task.Clock``)
    run when an advance reaches their time, in order. Without ``client`` the
    scripts keep Redis' own ``TIME`` (for components that run no script).
    """

    def __init__(self, client: redis.Redis | None = None, start: float = 1_000_000.0,
                 key: str = "crawler:clock") -> None:
        from twisted.internet.task import Clock as TwistedClock

        if not _SAFE_KEY.fullmatch(key):
            raise ValueError(f"a manual clock's key must match {_SAFE_KEY.pattern}, got {key!r}")
        self.client = client
        self.script_key = key if client is not None else None
        self._ns = round(start * 1e9)
        self._timers = TwistedClock()
        self._timers.rightNow = self.monotonic()
        self._write()

    def monotonic(self) -> float:
        return self._ns / 1e9

    def time(self) -> float:
        """The same value as :meth:`monotonic`: one time for everything (give
        ``start`` a date, e.g. ``time.time()``, for dates that look real)."""
        return self._ns / 1e9

    def server_time(self, client: redis.Redis | None = None) -> tuple[int, int]:
        micros = self._ns // 1000
        return micros // 1_000_000, micros % 1_000_000

    def ms(self) -> int:
        """The time in whole ms, as the scripts see it."""
        return self._ns // 1_000_000

    @property
    def timers(self) -> IReactorTime:
        return self._timers  # type: ignore[return-value]

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` (>= 0) forward; run the delayed calls now due."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        self._ns += round(seconds * 1e9)
        self._write()
        self._timers.rightNow = self.monotonic()
        self._timers.advance(0)  # runs every call due by now, in order

    def _write(self) -> None:
        if self.client is not None and self.script_key is not None:
            self.client.set(self.script_key, self.ms())

    def __repr__(self) -> str:
        return f"ManualClock(at {self.monotonic():.3f} s, key {self.script_key!r})"


def _load(path: str) -> Any:
    from scrapy.utils.misc import load_object

    found = load_object(path.replace(":", ".") if ":" in path else path)
    if not isinstance(found, Clock) and not callable(found):
        # ValueError, not TypeError: the registry's check turns it into a SettingsError
        raise ValueError(f"must name a crawler.clock.Clock or a callable making one, got {path!r}")  # noqa: TRY004
    return found


def from_path(path: str | None) -> Clock:
    """The clock an import path (``CRAWLER_CLOCK``) names: a :class:`Clock`,
    or a callable that returns one; :data:`SYSTEM` when unset."""
    if not path:
        return SYSTEM
    found = _load(path)
    clock = found if isinstance(found, Clock) else found()
    if not isinstance(clock, Clock):
        raise ValueError(f"{path!r} returned {clock!r}, not a crawler.clock.Clock")  # noqa: TRY004
    return clock


_ATTRIBUTE = "_crawler_clock"  # where clock_of keeps a crawler's clock


def clock_of(crawler: Crawler) -> Clock:
    """The crawl's clock: made from ``CRAWLER_CLOCK`` on the first call and
    kept on ``crawler``, so that every component of one crawl reads the same
    instance (a callable path is called once). A bad path is a
    ``SettingsError``."""
    clock = crawler.__dict__.get(_ATTRIBUTE)
    if clock is None:
        from crawler.settings_registry import SettingsError, setting

        try:
            clock = from_path(setting(crawler.settings, "CRAWLER_CLOCK"))
        except ValueError as exc:
            raise SettingsError(f"CRAWLER_CLOCK {exc}") from None
        setattr(crawler, _ATTRIBUTE, clock)
    return clock


def use_clock(crawler: Crawler, clock: Clock) -> Clock:
    """Make ``clock`` the crawl's clock (a test's :class:`ManualClock`),
    before any component has asked for one; ``ValueError`` if the crawl
    already reads another clock (two clocks in one crawl disagree)."""
    current = crawler.__dict__.get(_ATTRIBUTE)
    if current is not None and current is not clock:
        raise ValueError(f"the crawl already reads {current!r}, not {clock!r}")
    setattr(crawler, _ATTRIBUTE, clock)
    return clock


def check_path(value: str) -> None:
    """The registry's check of ``CRAWLER_CLOCK``: the path names a clock or
    a callable (not called here); ``ValueError`` if not."""
    if not value:
        return
    try:
        _load(value)
    except (ImportError, AttributeError, NameError) as exc:
        raise ValueError(f"must be an import path of a crawler.clock.Clock, got {value!r} ({exc})") from None
