"""What travels between the worker and the frontier: the requests offered
(``Item``) and leased (``Leased``), the calls' results (``AddResult``,
``TakeResult``, and ``Reply``, the slots of ``dequeue.lua``'s reply), the
politeness and dedup layouts the frontier is opened with, and the lookups'
answers. ``crawler.store.frontier`` makes the calls."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum
from collections.abc import Iterable
from typing import Protocol

import redis

from crawler.store.keys import Keys


class Acknowledgement(Protocol):
    """An acknowledgement as its sender keeps it: made into the scripts'
    form (``"<lease>[:<age ms>[:<duration ms>[:<end>]]]"``) as the round trip leaves."""

    def wire(self, now: float) -> str: ...


@dataclass(frozen=True)
class Recrawl:
    """How the frontier revisits what it fetched (``CRAWLER_RECRAWL*``;
    docs/recrawl.md); ``Frontier.open()`` writes it into ``:meta`` for the
    scripts. Seconds here, ms there."""

    mode: str = "off"  # off | fixed | adaptive
    interval: float = 86400.0
    min: float = 3600.0
    max: float = 2592000.0
    share: float = 0.5
    max_tracked: int = 1_000_000  # per shard; 0: no cap
    domain_max: int = 0  # per domain; 0: no cap (the worker's config derives one from the delay)
    distrust: float = 2592000.0

    @property
    def on(self) -> bool:
        return self.mode != "off"


#: a history write's modes (HistoryWrite.mode)
CREATE, UPDATE, DELETE = "c", "u", "d"
#: a visit's outcome as the history write reports it (HistoryWrite.outcome)
FIRST, CHANGED, UNCHANGED, NOT_MODIFIED_304 = "", "c", "u", "n"
#: the lies a host can be caught in (HistoryWrite.lie; design/recrawl.md C.3)
LIES = ("etag", "lm", "lm_now", "ignored")


@dataclass(frozen=True)
class HistoryWrite:
    """One tracked URL's history, written in the same script call as its
    lease's acknowledgement and before it (``lua/_recrawl.lua``
    ``history_write``; design/recrawl.md E). Built by the worker when the
    lease ends (``crawler/worker/visit.py``); rides on the lease's
    :class:`Acknowledgement` as ``write``.

    ``record`` is the packed history (``crawler/recrawl/record.py``) whose
    ``last`` the script stamps with its own clock; ``iv`` the seconds until
    the URL is due again (the script never puts it sooner than
    ``CRAWLER_RECRAWL_MIN``); ``rbin_old``/``rbin_new`` the domain's rate
    bins the URL leaves and joins (-1: none), for the domain's μ.
    """

    mode: str  # CREATE (a first visit; an existing record only has 'last' moved), UPDATE, DELETE
    domain: str
    k: str  # crawler.recrawl.record.key_of(digest)
    record: bytes = b""  # empty for DELETE
    iv: int = 0
    rbin_old: int = -1
    rbin_new: int = -1
    outcome: str = FIRST
    saved: int = 0  # body bytes a 304 or an identical payload saved
    host: str = ""  # the host whose trust ``lie`` is evidence against
    lie: str = ""  # "" or one of LIES

    def wire(self) -> list[str | bytes]:
        """The scripts' form: 11 values (``lua/_recrawl.lua``)."""
        return [self.mode, self.domain, self.k, str(self.iv), str(self.rbin_old), str(self.rbin_new),
                self.outcome, str(self.saved), self.host, self.lie, self.record]


def wire_writes(acks: Iterable[object]) -> list[str | bytes]:
    """The history writes riding on ``acks`` (their ``write``, when not
    None) as the scripts take them: their count, then 11 values each."""
    writes = [w for w in (getattr(a, "write", None) for a in acks) if w is not None]
    out: list[str | bytes] = [str(len(writes))]
    for w in writes:
        out += w.wire()
    return out


@dataclass(frozen=True)
class Hint:
    """A sitemap's ``<lastmod>`` for a URL the frontier may track
    (``lua/recrawl_hint.lua``; design/recrawl.md C.5): its visit comes
    sooner (never sooner than ``CRAWLER_RECRAWL_MIN`` after the last) when
    the page was modified after it and ``host`` has earned the trust."""

    domain: str
    k: str  # crawler.recrawl.record.key_of(digest)
    lastmod: int  # Unix s
    host: str

    def wire(self) -> list[str]:
        """The script's form: 4 values."""
        return [self.domain, self.k, str(self.lastmod), self.host]


@dataclass
class HintResult:
    """What :meth:`Frontier.hint` made of a batch of hints."""

    applied: int = 0  # due sooner
    ignored: int = 0  # their host has not earned the trust (not sampled)
    untracked: int = 0  # no history, or leased now
    stale: int = 0  # not modified since the last visit, hinted already, or due sooner anyway


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
    #: per-address politeness: the address the request is charged to and
    #: must connect to; "" when not charged; "!nx" / "!refused": its host
    #: has no address to go to (it ends as a dead letter, unsent)
    address: str = ""


@dataclass(frozen=True)
class Promotion:
    """A queued request a worker found many links to, to be served before its
    turn (the in-link order: ``lua/_lib.lua``'s ``promote()``): a copy of its
    entry, and its position in its domain's queue at its priority."""

    domain: str
    priority: int
    entry: bytes
    position: int


@dataclass
class AddResult:
    added: int = 0
    duplicates: int = 0
    spilled: int = 0  # added past their domain's head, to the compact tier (never dropped)
    acked: int = 0
    over_budget: int = 0
    excluded: int = 0
    unseen: tuple[int, ...] = ()  # enqueue: 1-based places of items to dedup not marked seen
    #: the in-link order: 1-based place of an item added -> its position in its domain's queue
    positions: dict[int, int] = field(default_factory=dict)
    #: the in-link order: per promotion sent, its outcome ("promoted", "late", ...) and the
    #: requests its queue had given so far (lua/_lib.lua's promote())
    promoted: tuple[tuple[str, int], ...] = ()


class Reply(IntEnum):
    """The slots of ``dequeue.lua``'s reply, 0-based: the mirror of the
    script's ``REPLY`` table (1-based), which its header documents;
    ``tests/test_lua_reply.py`` checks the two agree."""

    NOW = 0  # the server's ms, this call's clock
    NEXT_DUE = 1  # when to ask again, ms; -1: nothing queued or delayed
    EPOCH = 2  # the epoch id ("" if none)
    SEQ = 3  # the lease id counter
    QUEUED = 4  # requests queued
    LOOKUPS = 5  # [host, domain, ...]: names this worker is to look up
    FENCED = 6  # the latest failover fence, ms (0: never fenced)
    FILLS = 7  # fill jobs of the compact tier the call made: the tier's jobs are run soon
    LEASES = 8  # from here on, three per lease: id, record, address


@dataclass
class TakeResult:
    items: list[Leased]
    now_ms: int
    next_due_ms: int | None  # earliest next-fetch time of a queued domain, or of a delayed request
    lookups: list[tuple[str, str]] = field(default_factory=list)  # (host, domain) this worker is to resolve
    fenced_ms: int = 0  # the frontier's latest failover fence (server ms; 0: never fenced)
    fills: int = 0  # fill jobs of the compact tier the call made (heads run low, a block next)


@dataclass(frozen=True)
class AddressPoliteness:
    """Per-address politeness (``CRAWLER_IP_*``, ``CRAWLER_DNS_*``); ``delay`` 0: off."""

    delay: float = 0.0  # seconds from an answer's mark to the address's next request
    shared_delay: float = 0.25  # seconds between request starts at a shared front end
    shared_cap: int = 4  # requests in flight at a shared front end
    shared_min: int = 2000  # registered domains that make an address a shared front end; 0: never by count
    ttl: float = 300.0  # seconds a name's addresses are kept
    nx_retries: int = 3  # lookups of a missing name before its URLs end as dead letters
    claim: float = 65.0  # seconds a lookup may take before another worker tries


@dataclass(frozen=True)
class Lookup:
    """A lookup's answer, as ``dns_done.lua`` takes it."""

    host: str
    domain: str
    status: str  # ok, nx, retry, refused
    addresses: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()  # those of the addresses inside CRAWLER_IP_SHARED


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

