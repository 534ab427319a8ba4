"""The dead-letter queue of a frontier: JSON records of requests given up on.

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
from typing import Any

import redis

from crawler.scheduler.domains import domain_of, host_of
from crawler.scheduler.keys import Keys


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
