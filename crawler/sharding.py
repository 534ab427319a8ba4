"""Which shard a domain belongs to: a stable hash of its registered domain."""

from __future__ import annotations

from hashlib import blake2b


def shard_of(domain: str, shards: int) -> int:
    """``hash(registered domain) mod shards``, the same in every process and
    Python version (not ``hash()``, which is salted per process)."""
    if shards <= 1:
        return 0
    digest = blake2b(domain.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards
