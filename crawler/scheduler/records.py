"""What travels between the scheduler and the frontier: offered and leased
requests, call results, and the frontier's politeness and dedup layout."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

    from crawler.scheduler.keys import Keys

DEDUP_MODES = ("exact", "bloom")


@dataclass
class Item:
    """A request offered to the frontier."""

    digest: bytes  # SHA-256 of the canonical URL (raw)
    domain: str
    priority: int
    entry: bytes  # the serialized request
    dont_filter: bool = False


@dataclass
class Leased:
    lease: str
    domain: str
    priority: int
    entry: bytes


@dataclass
class AddResult:
    added: int = 0
    duplicates: int = 0
    capped: int = 0
    acked: int = 0
    over_budget: int = 0
    excluded: int = 0


@dataclass
class TakeResult:
    items: list[Leased]
    now_ms: int
    next_due_ms: int | None  # earliest next-fetch time of a queued domain


@dataclass(frozen=True)
class Politeness:
    rate: float = 0.0  # requests per second per domain; 0: no token bucket
    burst: int = 1
    delay: float = 0.0  # minimum seconds between two requests to a domain
    factor: float = 0.0  # delay >= factor x the last fetch's duration; 0: off
    max_delay: float = 0.0  # cap of the stretched delay; 0: none

    def __post_init__(self) -> None:
        if self.rate < 0 or self.delay < 0 or self.burst < 1 or self.factor < 0 or self.max_delay < 0:
            raise ValueError(f"invalid politeness {self}: rate >= 0, burst >= 1, delay, factor, max_delay >= 0")


@dataclass(frozen=True)
class Dedup:
    mode: str = "exact"
    capacity: int = 10_000_000  # expected distinct URLs of the frontier
    error_rate: float = 0.001  # Bloom mode: compound false-positive rate
    bucket_bits: int = field(default=0)

    def __post_init__(self) -> None:
        if self.mode not in DEDUP_MODES:
            raise ValueError(f"dedup mode must be one of {DEDUP_MODES}, got {self.mode!r}")
        if self.capacity < 1 or not 0 < self.error_rate < 1:
            raise ValueError("dedup capacity must be >= 1 and error rate within (0, 1)")
        if not self.bucket_bits:
            # about 256 digests per bucket at capacity: each bucket stays a
            # compact intset (Redis converts past set-max-intset-entries, 512)
            bits = math.ceil(math.log2(max(self.capacity / 256, 1)))
            object.__setattr__(self, "bucket_bits", min(max(bits, 8), 24))

    def args(self, digest: bytes) -> tuple[int, int]:
        if self.mode == "exact":
            bucket = int.from_bytes(digest[:4], "big") >> (32 - self.bucket_bits)
            return bucket, int.from_bytes(digest[4:12], "big", signed=True)
        return int.from_bytes(digest[:4], "big"), int.from_bytes(digest[4:8], "big") | 1


def stored_dedup(client: redis.Redis, keys: Keys, dedup: Dedup) -> Dedup:
    """The dedup layout the frontier at ``keys`` was created with, else ``dedup``."""
    mode, bits = client.hmget(keys.meta, "dedup", "bucket_bits")
    if mode is None or bits is None:
        return dedup
    return Dedup(mode.decode(), dedup.capacity, dedup.error_rate, int(bits))


def bloom_error_rate(meta: dict[str, str]) -> float | None:
    """The compound false-positive rate of the Bloom filters described by
    ``meta`` (the ``:bloom`` hash), at their current fill."""
    if not meta:
        return None
    log_none_false = 0.0  # log of the chance that no filter answers "seen" wrongly
    for i in range(int(meta.get("count", 0))):
        m, k, n = float(meta[f"m{i}"]), float(meta[f"k{i}"]), float(meta[f"n{i}"])
        log_none_false += math.log1p(-((-math.expm1(-k * n / m)) ** k))
    return -math.expm1(log_none_false)
