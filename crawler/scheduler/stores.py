"""Small stores beside the frontier, on its keys (``keys.py``): domain locks
and shared robots.txt records. Each method is one round trip."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

    from crawler.scheduler.keys import Keys
    from crawler.scheduler.scripts import Scripts


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
