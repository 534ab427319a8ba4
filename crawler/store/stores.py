"""Stores beside the frontier's queues, on its keys: domain locks, shared
robots.txt records, and the dead-letter queue. Each method is one round trip.

The dead-letter queue of a frontier: JSON records of requests given up on.

A record: url, reason, status, exception, attempts, time, spider, shard.
Reasons: ``http_<status>`` (404, 410, other 4xx), ``retries_exhausted``,
``download_error``, ``too_many_redirects``, ``parse_error``, or whatever a
spider reports. Newest first; the list is capped at ``CRAWLER_DLQ_MAX``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from crawler.store.keys import Keys
from crawler.identity import domain_of, host_of

if TYPE_CHECKING:
    from crawler.store.keys import Scripts


class DomainLocks:
    """Per-domain locks: ``lua/lock.lua`` and ``lua/unlock.lua``."""

    def __init__(self, client: redis.Redis, keys: Keys, scripts: Scripts) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts

    def live_domains(self) -> set[str]:
        """Domains an operator put under the lock while the crawl runs."""
        return {m.decode().lower() for m in self.client.smembers(self.keys.lock_domains)}

    def acquire(self, domain: str, token: str, ttl_ms: int) -> tuple[bool, int]:
        """Whether ``domain``'s lock was taken for ``token``, and how many
        stale locks (expired unreleased) were found on the way."""
        taken, stale = self.scripts.lock(keys=[self.keys.base], args=[domain, token, ttl_ms])
        return bool(taken), int(stale)

    def release(self, domain: str, token: str) -> bool:
        """Release ``domain``'s lock if ``token`` still holds it."""
        return bool(self.scripts.unlock(keys=[self.keys.base], args=[domain, token]))


class RobotsStore:
    """robots.txt records shared by every worker, with a fetch claim so one
    worker fetches each origin's file."""

    def __init__(self, client: redis.Redis, keys: Keys, scripts: Scripts) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts

    def get(self, origin: str) -> tuple[dict[str, Any] | None, int, float]:
        """The stored record of ``origin``, its remaining life in ms, and the
        Redis server's clock (epoch seconds): robots.txt's retry times are
        kept on that clock, as the frontier's schedule is."""
        raw, ttl_ms, now_ms = self.scripts.robots_get(keys=[self.keys.base], args=[origin])
        now = int(now_ms) / 1000
        return (None, 0, now) if not raw else (json.loads(raw), int(ttl_ms), now)

    def put(self, origin: str, record: dict[str, Any], ttl: float) -> None:
        self.client.set(self.keys.robots(origin), json.dumps(record), px=int(ttl * 1000))

    def claim(self, origin: str, token: str, ttl_ms: int) -> bool:
        """Claim the fetch of ``origin``'s robots.txt; false while another holds it."""
        return bool(self.client.set(self.keys.robots(origin) + ":fetching", token, nx=True, px=ttl_ms))

    def done(self, origin: str, token: str) -> bool:
        """End the claim ``token`` holds (atomically: an expired claim that
        another worker took over is left alone)."""
        return bool(self.scripts.robots_done(keys=[self.keys.base], args=[origin, token]))


@dataclass
class DeadLetter:
    url: str
    reason: str
    status: int | None = None
    exception: str | None = None
    attempts: int = 1
    time: float = field(default_factory=time.time)
    spider: str = ""
    shard: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: bytes | str) -> DeadLetter:
        data: dict[str, Any] = json.loads(raw)
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__ if k in data})


class DeadLetters:
    def __init__(self, client: redis.Redis, keys: Keys, max_len: int = 100_000) -> None:
        self.client = client
        self.keys = keys
        self.key = keys.dead_letters
        self.max_len = max_len

    def add(self, letters: Iterable[DeadLetter]) -> None:
        raw = [letter.to_json() for letter in letters]
        if not raw:
            return
        pipe = self.client.pipeline(transaction=False)
        pipe.lpush(self.key, *raw)
        pipe.ltrim(self.key, 0, self.max_len - 1)
        pipe.execute()

    def _raw(self) -> list[bytes]:
        return list(self.client.lrange(self.key, 0, -1))

    def select(self, reason: str | None = None, domain: str | None = None) -> list[tuple[bytes, DeadLetter]]:
        """``(raw, letter)`` pairs matching the filters, newest first."""
        out = []
        for raw in self._raw():
            letter = DeadLetter.from_json(raw)
            if reason and letter.reason != reason:
                continue
            if domain and domain.lower() not in (host_of(letter.url), domain_of(letter.url)):
                continue
            out.append((raw, letter))
        return out

    def counts(self) -> Counter[str]:
        return Counter(DeadLetter.from_json(raw).reason for raw in self._raw())

    def remove(self, raws: Iterable[bytes]) -> int:
        pipe = self.client.pipeline(transaction=False)
        for raw in raws:
            pipe.lrem(self.key, 1, raw)
        return sum(pipe.execute())

    def __len__(self) -> int:
        return int(self.client.llen(self.key))
