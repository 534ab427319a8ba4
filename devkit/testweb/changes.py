"""Pages that change on known schedules, and how each host validates them.

A changing page (``WebConfig.change_share`` of the pages) has a mean time
between changes drawn per page, log-uniform between ``change_mean_min_s`` and
``change_mean_max_s``; its changes are a Poisson process drawn from its own
generator (``random.Random(f"{seed}:change:{d}:{k}")``), on the test web's
schedule clock (:class:`ScheduleClock`: seconds since the site started, or a
manual clock moved through the control path). Its **version** at time ``t``
is the number of changes up to ``t`` (a change at exactly ``t`` counts):
:meth:`Schedule.version_at` and :meth:`Schedule.changes` are pure functions
of the config, which is how a benchmark computes freshness from the log.

Per domain, ``validators`` picks what the pages carry (``etag``,
``weak_etag``, ``last_modified``, ``both``, ``none``: the default, as before)
and ``lies`` how the host lies (``ignore_conditionals``, ``lm_now``,
``lm_frozen``, ``etag_frozen``; a lie adds the validator it lies about when
the domain's own choice lacks it). :func:`not_modified` is RFC 9110's rule
for a conditional GET (13.2.2: If-None-Match first, weak comparison; else
If-Modified-Since).
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devkit.testweb.config import WebConfig

#: what a domain's pages carry
VALIDATORS = ("etag", "weak_etag", "last_modified", "both", "none")
#: how a domain lies about them
LIES = ("ignore_conditionals", "lm_now", "lm_frozen", "etag_frozen")
#: the schedule clock's kinds
CLOCKS = ("system", "manual")


def unit(*key: object) -> float:
    """A deterministic number in [0, 1) for ``key`` (site.py's ``_unit``)."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def pick(shares: dict[str, float], u: float) -> str | None:
    acc = 0.0
    for kind, share in sorted(shares.items()):
        acc += share
        if u < acc:
            return kind
    return None


class ScheduleClock:
    """The time the schedules run on: seconds since ``origin``, read from
    ``source`` (epoch seconds; the request log's clock in the server), or,
    when ``manual``, a value that moves only with :meth:`advance` /
    :meth:`set` (from 0), so that a test drives the pages' changes instead
    of sleeping. :meth:`wall` dates a time (Date, Last-Modified)."""

    def __init__(self, source: Callable[[], float] = time.time, manual: bool = False) -> None:
        self.source = source
        self.manual = manual
        self.origin = source()
        self._manual_now = 0.0

    def now(self) -> float:
        return self._manual_now if self.manual else self.source() - self.origin

    def wall(self, t: float) -> float:
        """Schedule time ``t`` as epoch seconds."""
        return self.origin + t

    def set(self, t: float) -> None:
        """Move a manual clock to ``t`` (never back)."""
        if not self.manual:
            raise ValueError("the schedule clock is not manual (WebConfig.clock)")
        if not t >= self._manual_now:
            raise ValueError(f"the schedule clock does not go back ({t} < {self._manual_now})")
        self._manual_now = t

    def advance(self, seconds: float) -> None:
        self.set(self._manual_now + seconds)


class Schedule:
    """Every page's change times, drawn from the config's ``seed``: the same
    config gives the same times in every process."""

    def __init__(self, seed: int, change_share: float, mean_min_s: float, mean_max_s: float) -> None:
        self.seed = seed
        self.change_share = change_share
        self.mean_min_s = mean_min_s
        self.mean_max_s = mean_max_s
        self._events: dict[tuple[int, int], tuple[random.Random, list[float]]] = {}

    @classmethod
    def of(cls, config: WebConfig) -> Schedule:
        return cls(config.seed, config.change_share, config.change_mean_min_s, config.change_mean_max_s)

    def mean_s(self, d: int, k: int) -> float | None:
        """Page k of domain d's mean time between changes, s; None: it never changes."""
        if not self.change_share or unit(self.seed, "change", d, k) >= self.change_share:
            return None
        low, high = math.log(self.mean_min_s), math.log(self.mean_max_s)
        return math.exp(low + unit(self.seed, "rate", d, k) * (high - low))

    def _upto(self, d: int, k: int, t: float) -> list[float]:
        """The page's change times, drawn at least past ``t`` (gaps drawn lazily)."""
        known = self._events.get((d, k))
        if known is None:
            known = self._events[(d, k)] = (random.Random(f"{self.seed}:change:{d}:{k}"), [])
        rng, events = known
        mean = self.mean_s(d, k)
        assert mean is not None
        while not events or events[-1] <= t:
            events.append((events[-1] if events else 0.0) + rng.expovariate(1 / mean))
        return events

    def version_at(self, d: int, k: int, t: float) -> int:
        """How many times the page changed in (0, t]: its version at ``t``."""
        if self.mean_s(d, k) is None or t <= 0:
            return 0
        return bisect.bisect_right(self._upto(d, k, t), t)

    def changes(self, d: int, k: int, t0: float, t1: float) -> list[float]:
        """The page's change times in [t0, t1], in order."""
        if self.mean_s(d, k) is None or t1 < t0:
            return []
        events = self._upto(d, k, t1)
        return events[bisect.bisect_left(events, t0):bisect.bisect_right(events, t1)]

    def version_time(self, d: int, k: int, version: int) -> float:
        """When the page became ``version`` (0 for version 0: the origin)."""
        if version <= 0:
            return 0.0
        events = self._upto(d, k, 0.0)
        while len(events) < version:
            events = self._upto(d, k, events[-1])
        return events[version - 1]


def etag(seed: int, d: int, k: int, version: int, weak: bool = False) -> str:
    tag = hashlib.blake2b(repr((seed, d, k, version)).encode(), digest_size=8).hexdigest()
    return f'W/"{tag}"' if weak else f'"{tag}"'


def http_date(seconds: float) -> str:
    return formatdate(math.floor(seconds), usegmt=True)


def parse_http_date(text: str) -> float | None:
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _opaque(tag: str) -> str:
    return tag.strip().removeprefix("W/")


def not_modified(current_etag: str | None, last_modified: float | None,
                 if_none_match: str | None, if_modified_since: str | None) -> bool:
    """RFC 9110 13.2.2 for a GET: If-None-Match, when present, decides alone
    (weak comparison: ``W/"x"`` matches ``"x"``; ``*`` matches any current
    representation); otherwise If-Modified-Since: not modified when the
    Last-Modified (whole seconds) is no later than its date. A validator the
    page does not carry never matches."""
    if if_none_match is not None:
        if current_etag is None:
            return False
        tags = [tag.strip() for tag in if_none_match.split(",") if tag.strip()]
        return "*" in tags or _opaque(current_etag) in {_opaque(tag) for tag in tags}
    if if_modified_since is not None and last_modified is not None:
        since = parse_http_date(if_modified_since)
        return since is not None and math.floor(last_modified) <= since
    return False


@dataclass(frozen=True)
class HostRules:
    """What a domain's pages carry and how its host answers conditionals."""

    validators: str = "none"
    lie: str | None = None

    @property
    def sends_etag(self) -> bool:
        return self.validators in ("etag", "weak_etag", "both") or self.lie == "etag_frozen" or self._both

    @property
    def _both(self) -> bool:
        """A host that ignores conditionals sends both validators if it chose none."""
        return self.lie == "ignore_conditionals" and self.validators == "none"

    @property
    def weak(self) -> bool:
        return self.validators == "weak_etag"

    @property
    def sends_last_modified(self) -> bool:
        return self.validators in ("last_modified", "both") or self.lie in ("lm_now", "lm_frozen") or self._both

    @property
    def plain(self) -> bool:
        """Today's answer: no validator, no Date, conditionals ignored."""
        return not self.sends_etag and not self.sends_last_modified and self.lie is None
