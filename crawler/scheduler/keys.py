"""Redis key names of one frontier.

All share the hash tag ``{<spider>:<shard>}``, so every script runs on one
node of a Redis Cluster. The layout is documented in ``lua/_lib.lua``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GLOB = re.compile(r"([*?\[\]\\])")


@dataclass(frozen=True)
class Keys:
    prefix: str
    spider: str
    shard: int = 0

    def __post_init__(self) -> None:
        for part in (self.prefix, self.spider):
            if not part or any(c in part for c in "{}\n "):
                raise ValueError(f"invalid frontier name part {part!r}")

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.spider}:{self.shard}}}"

    def key(self, *parts: str) -> str:
        return ":".join((self.base, *parts))

    @property
    def ready(self) -> str:
        return self.key("ready")

    @property
    def leases(self) -> str:
        return self.key("leases")

    @property
    def lease(self) -> str:
        return self.key("lease")

    @property
    def delayed(self) -> str:
        return self.key("delayed")

    @property
    def stats(self) -> str:
        return self.key("stats")

    @property
    def meta(self) -> str:
        return self.key("meta")

    @property
    def bloom(self) -> str:
        return self.key("bloom")

    @property
    def policy(self) -> str:
        """Per-domain politeness overrides that operators edit while a crawl runs."""
        return self.key("policy")

    @property
    def policy_settings(self) -> str:
        return self.key("policy", "settings")

    @property
    def policy_robots(self) -> str:
        return self.key("policy", "robots")

    def dom(self, domain: str) -> str:
        return self.key("dom", domain)

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this frontier."""
        return _GLOB.sub(r"\\\1", self.base) + ":*"
