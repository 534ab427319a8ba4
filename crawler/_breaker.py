"""A Redis that does not answer costs the event loop one ``socket_timeout``,
not one per call.

The worker's Redis calls are synchronous on the reactor thread. A Redis
that is away (refused, reset) fails them at once, but one that is there and
silent (SIGSTOP, a long fork, a network that drops packets) holds each
call for the client's ``socket_timeout``, and every component that asks it
something while it is silent (the scheduler, robots.txt, the lock, the
metrics) holds the loop again.

So the first call that times out on a server trips that server's
:class:`Breaker`: from then on every call to it fails at once with
:class:`RedisNotAnswering` (a ``redis.TimeoutError``, an outage to every
caller, never retried by redis-py), and a thread of the breaker's own pings
the server on a connection of its own every :data:`PROBE_EVERY` seconds; the
first answer closes the breaker. Nothing about what a call means changes:
a call refused here was never sent.

:func:`guarded` makes the connection class of a redis-py pool do this.
"""

from __future__ import annotations

import logging
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawler.clock import SYSTEM, Clock

logger = logging.getLogger(__name__)

PROBE_EVERY = 0.5  # seconds between two pings of a server that did not answer
PROBE_TIMEOUT = 1.0  # seconds a ping waits (to connect, and for its answer)
# Connection arguments that tie a connection to its pool or client (redis-py's maintenance
# notifications, a cluster's on-connect hook): a probe's connection goes without them, so it
# holds neither, and a client dropped while its server is away is freed (its probe with it).
_TIES = ("maint_notifications_pool_handler", "himport_registry", "redis_connect_func", "event_dispatcher")


class RedisNotAnswering(redis.TimeoutError):
    """Not sent: the server did not answer a call within its socket timeout
    and has not answered a ping since."""


class Breaker:
    """One server's: closed (calls go through) or open (they fail at once)."""

    def __init__(self, name: str, clock: Clock = SYSTEM) -> None:
        self.name = name
        self.clock = clock
        self.open_since: float | None = None
        self.trips = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._closed.set()
        # the probes' connection, made at the first trip and kept with the breaker: a
        # redis-py connection is a cycle of its own, left to the collector when let go
        self._probe_conn: redis.connection.AbstractConnection | None = None

    def wait_closed(self, timeout: float) -> bool:
        """Block until the server answers a ping (True) or ``timeout`` seconds
        pass (False); True at once when closed."""
        return self._closed.wait(timeout)

    def check(self) -> None:
        if self.open_since is not None:
            raise RedisNotAnswering(f"Redis at {self.name} did not answer within its socket timeout "
                                    "and has not answered a ping since")

    def trip(self, connect: Callable[[], redis.connection.AbstractConnection]) -> None:
        """Open (unless open already) and ping until the server answers, on
        the connection ``connect`` made at the breaker's first trip."""
        with self._lock:
            if self.open_since is not None:
                return
            self.open_since = self.clock.monotonic()
            self.trips += 1
            self._closed.clear()
            if self._probe_conn is None:
                self._probe_conn = connect()
        logger.warning("Redis at %s did not answer within its socket timeout: calls to it fail at once "
                       "until it answers a ping (every %.1fs)", self.name, PROBE_EVERY)
        threading.Thread(target=_probe, args=(weakref.ref(self), self._probe_conn), name=f"redis-probe {self.name}",
                         daemon=True).start()

    def _answered(self) -> None:
        with self._lock:
            since, self.open_since = self.open_since, None
            self._closed.set()
        logger.info("Redis at %s answers again after %.1fs", self.name, self.clock.monotonic() - (since or 0.0))


def _probe(breaker: weakref.ref[Breaker], conn: redis.connection.AbstractConnection) -> None:
    """A probe thread: PING on the breaker's connection every
    :data:`PROBE_EVERY` seconds until the server answers, or until nothing
    holds the breaker any more (its client is gone, so nobody waits for the
    answer).

    The thread holds the breaker only weakly, and clears the frames of each
    failed ping: a server away for hours costs no garbage, and a client
    dropped while its server was away takes its probe with it."""
    pause = threading.Event()
    while breaker() is not None:
        try:
            conn.send_command("PING")
            conn.read_response()
        except (redis.RedisError, OSError) as exc:
            _clear_frames(exc)
            pause.wait(PROBE_EVERY)
            continue
        finally:
            conn.disconnect()
        answered = breaker()
        if answered is not None:
            answered._answered()
        return


def _clear_frames(exc: BaseException | None) -> None:
    """Drop the locals of the finished frames an exception (and those it was
    raised from) went through: redis-py keeps the error it retries in one of
    them, a cycle the collector alone would free."""
    while exc is not None:
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


class _Breakers:
    """The breakers of one client, one per server address."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._by_name: dict[str, Breaker] = {}
        self._lock = threading.Lock()

    def wait_closed(self, timeout: float) -> bool:
        """Every breaker of the client closed within ``timeout`` seconds."""
        with self._lock:
            breakers = list(self._by_name.values())
        deadline = self.clock.monotonic() + timeout
        return all(b.wait_closed(max(0.0, deadline - self.clock.monotonic())) for b in breakers)

    def of(self, name: str) -> Breaker:
        with self._lock:
            if name not in self._by_name:
                self._by_name[name] = Breaker(name, self.clock)
            return self._by_name[name]


class _Guarded:
    """Mixed into a redis-py connection class by :func:`guarded`."""

    _base: type[redis.connection.AbstractConnection]
    _breakers: _Breakers

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kwargs = kwargs
        name = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
        self.breaker = self._breakers.of(str(name))

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self.breaker.check()
        try:
            super().send_packed_command(command, check_health)  # type: ignore[misc]
        except redis.TimeoutError:  # connecting, or a health check's ping
            self.breaker.trip(self._probe_connection)
            raise

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except redis.TimeoutError:
            self.breaker.trip(self._probe_connection)
            raise

    def _probe_connection(self) -> redis.connection.AbstractConnection:
        """A connection of the same kind, unguarded, with the probe's timeouts
        and no retries (the probe thread's one connection)."""
        kwargs = {key: value for key, value in self._kwargs.items() if key not in _TIES}
        return self._base(**{**kwargs, "socket_timeout": PROBE_TIMEOUT,
                             "socket_connect_timeout": PROBE_TIMEOUT, "retry": Retry(NoBackoff(), 0)})


def wait_answering(connection_class: type, timeout: float) -> bool:
    """Whether the servers of a pool whose connections are :func:`guarded`
    answer (their breakers closed) within ``timeout`` seconds."""
    breakers: _Breakers | None = getattr(connection_class, "_breakers", None)
    return breakers is None or breakers.wait_closed(timeout)


def guarded(base: type, clock: Clock = SYSTEM) -> type:
    """A subclass of the connection class ``base`` whose connections share
    one :class:`Breaker` per server."""
    return type(f"Guarded{base.__name__}", (_Guarded, base), {"_base": base, "_breakers": _Breakers(clock)})
