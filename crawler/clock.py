"""The clock the frontier's components read, so that tests can drive time
instead of sleeping.

Every component of the frontier scheduler that measures time takes a
:class:`Clock` (``clock=`` in its constructor, :data:`SYSTEM` by default):

- :class:`~crawler.store.frontier.Frontier`: the Lua scripts' ``now_ms()``
  (``lua/_lib.lua``), the acknowledgements' ages (``Ack.wire``), the epoch's
  last look, ``status()``;
- the scheduler's parts: ``Intake`` (dequeue pacing, idle close), ``Marks``
  (when responses began and ended), ``RedisGuard`` (reconnect backoff),
  ``LossWatch`` (the epoch check every ``CHECK_EVERY`` s), ``WriteBuffer``
  (the acknowledgement interval, the out-of-memory log), ``Inbox`` (the drain
  pace), ``EngineWaker`` and the scheduler's tick (timers).

A clock gives three things: ``monotonic()`` (seconds, this process),
``server_time(client)`` (what Redis ``TIME`` answers: seconds and
microseconds) and ``timers``, the ``IReactorTime`` that runs delayed calls
(``callLater``, ``LoopingCall.clock``). :data:`SYSTEM` is
``time.monotonic``, Redis' own ``TIME`` and Twisted's reactor. A test uses a
:class:`ManualClock`, which moves only with :meth:`ManualClock.advance` and
shows the same time to the Lua scripts through one Redis key.

What stays on Redis' own clock, whatever the clock: key expiry (``PX``/
``PTTL``: domain locks and their fetch claims, robots.txt records, the
dequeue replies kept for a retry, the metrics exporter's token). A test on a
:class:`ManualClock` that needs one of those to expire waits for it, or
deletes the key.

The scheduler takes its clock from ``CRAWLER_CLOCK`` (an import path of a
:class:`Clock`, or of a callable returning one; unset: :data:`SYSTEM`), for
tests and simulations only.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis
    from twisted.internet.interfaces import IReactorTime

__all__ = ["SYSTEM", "Clock", "ManualClock", "check_path", "from_path"]

_SAFE_KEY = re.compile(r"[A-Za-z0-9_:.{}\-]+")


class Clock:
    """The system's clock: ``time.monotonic()``, Redis ``TIME``, the reactor."""

    #: the Redis key the Lua scripts read the time from (ms); None: Redis ``TIME``
    script_key: str | None = None

    def monotonic(self) -> float:
        """Seconds on this process's monotonic clock."""
        return time.monotonic()

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

    ``monotonic()`` and the server's time are one value, ``start`` seconds
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


def check_path(value: str) -> None:
    """The registry's check of ``CRAWLER_CLOCK``: the path names a clock or
    a callable (not called here); ``ValueError`` if not."""
    if not value:
        return
    try:
        _load(value)
    except (ImportError, AttributeError, NameError) as exc:
        raise ValueError(f"must be an import path of a crawler.clock.Clock, got {value!r} ({exc})") from None
