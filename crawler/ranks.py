"""Ranking files: which domains a crawl serves first when it cannot serve
every due domain at once (``CRAWLER_DOMAIN_ORDER = "rank"``, docs/frontier.md).

A ranking file lists domains best first, one a line: ``<rank>,<domain>``
(Tranco's and Majestic's CSV; other columns after the domain are ignored) or
``<domain>`` alone (its line number is its rank). Blank lines and lines
starting with ``#`` are skipped; a header line whose rank is not a number is
skipped once. Each name is keyed as the frontier keys it (its registered
domain: ``www.bbc.co.uk`` -> ``bbc.co.uk``); a domain named twice keeps its
best rank. The weight of rank ``r`` among ``n`` ranked domains is ``n / r``
(the top domain ``n``, the last 1), on the same scale as the count of
domains seen linking to an unranked domain, which stands in for it.
"""

from __future__ import annotations

from pathlib import Path

from crawler.identity import registered_domain
from crawler.sharding import shard_of


class RankingFileError(ValueError):
    """A ranking file that cannot be read; the message names the file and line."""


def read_ranks(path: str | Path, shard: int = 0, shards: int = 1) -> dict[str, float]:
    """The weights of the domains of ``path`` that belong to ``shard`` of ``shards``."""
    ranks: dict[str, int] = {}
    n = 0
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RankingFileError(f"CRAWLER_RANKS: cannot read {path}: {exc}") from None
    header_seen = False
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 1:
            rank, name = n + 1, parts[0]
        else:
            try:
                rank, name = int(parts[0]), parts[1]
            except ValueError:
                if header_seen or n:
                    raise RankingFileError(f"CRAWLER_RANKS: {path}:{number}: {parts[0]!r} is not a rank "
                                           "(<rank>,<domain> or <domain> a line)") from None
                header_seen = True
                continue
            if rank < 1:
                raise RankingFileError(f"CRAWLER_RANKS: {path}:{number}: rank {rank} is below 1")
        if not name or " " in name:
            raise RankingFileError(f"CRAWLER_RANKS: {path}:{number}: {name!r} is not a domain")
        n += 1
        domain = registered_domain(name)
        if domain not in ranks or rank < ranks[domain]:
            ranks[domain] = rank
    if not ranks:
        raise RankingFileError(f"CRAWLER_RANKS: {path} names no domain")
    total = len(ranks)
    return {d: total / r for d, r in ranks.items() if shards <= 1 or shard_of(d, shards) == shard}
