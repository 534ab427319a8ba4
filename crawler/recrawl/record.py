"""A tracked URL's fetch history, packed as the value of ``B:hist:<d>``'s
field ``k`` (design/recrawl.md C.1). Big-endian, so that Redis Lua's
``struct`` reads what Python's ``struct`` writes:

====== ======= ===========================================================
bytes  field   meaning
====== ======= ===========================================================
1      flags   0x01 WARC part present, 0x02 ETag weak, 0x04 pinned
               interval, 0x08 last visit hinted by a sitemap, 0x10 verify
               next (no validators), 0x60 consecutive 404/410 (0-3);
               0x80 is unused and refused
4      last    s, server clock (stamped by the Lua script, never a worker)
4      iv      current interval, s
4      lm      Last-Modified, Unix s (0: none)
4      len     payload bytes of the last full answer
6      chg     change key: 48 bits of SHA-1 of the body or of its text
2+2    n, X    visits, changes seen
4      tu      total s of the intervals that ended unchanged
8      bins    16 four-bit counts of the intervals that ended changed,
               bin 0 in the high half of the first byte
30     WARC    only with 0x01: ``wd`` 6 B (48 bits of the last stored
               response's payload SHA-1), ``rdate`` 8 B (its WARC-Date,
               µs), ``rid`` 16 B (its WARC-Record-ID)
1+e    ETag    its length byte, then the ETag as received (at most 255 B)
rest   entry   the queue entry the URL was leased as (``U...``/``R...``)
====== ======= ===========================================================

The fixed part is 39 bytes, 69 with the WARC part; a record is that, plus
``1 + len(etag) + len(entry)``.

A record read back from Redis is input like any other: :func:`unpack`
refuses a short, truncated or malformed one with a one-line
:class:`ValueError`, never an ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field, replace

#: flags, bytes
WARC = 0x01
WEAK = 0x02
PINNED = 0x04
HINTED = 0x08
VERIFY = 0x10
GONE_SHIFT = 5
GONE = 0x60
UNKNOWN = 0x80

_FIXED = struct.Struct(">BIIII6sHHI8s")
_WARC = struct.Struct(">6sQ16s")
FIXED_SIZE = _FIXED.size  # 39
WARC_SIZE = _WARC.size  # 30
ETAG_MAX = 255
#: the kinds of queue entry a record can hold (crawler/store/codec.py)
ENTRY_KINDS = (b"U", b"R")

#: changed intervals are counted in 16 bins, bin b about base * 2**b s, the
#: base being the crawl's CRAWLER_RECRAWL_MIN (no interval is shorter), 1 h
#: unless given: a record's bins are read at the base of the crawl reading
#: it, so a crawl whose MIN changed reads old counts at the new scale
BINS = 16
BIN_BASE = 3600
BIN_FULL = 15  # a four-bit count: at this, the counts are halved

_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True)
class Refers:
    """The last stored response record of the URL, for the next revisit
    record's ``WARC-Refers-To-*`` headers (C.6)."""

    wd: bytes  # the first 6 bytes of its payload SHA-1, as the WARC wrote it
    rdate: int  # its WARC-Date, µs since the epoch
    rid: bytes  # its WARC-Record-ID, 16 bytes (a UUID)

    def __post_init__(self) -> None:
        _exact("Refers.wd", self.wd, 6)
        _within("Refers.rdate", self.rdate, _U64)
        _exact("Refers.rid", self.rid, 16)


@dataclass(frozen=True)
class History:
    """One tracked URL's record, unpacked (field names as in C.1; ``changes``
    is X, ``length`` is ``len``)."""

    entry: bytes
    last: int = 0
    iv: int = 0
    lm: int = 0
    length: int = 0
    chg: bytes = bytes(6)
    n: int = 0
    changes: int = 0
    tu: int = 0
    bins: tuple[int, ...] = (0,) * BINS
    etag: bytes = b""
    weak: bool = False
    pinned: bool = False
    hinted: bool = False
    verify: bool = False
    gone: int = 0  # consecutive 404/410, 0-3
    refers: Refers | None = field(default=None)

    def __post_init__(self) -> None:
        for name, top in (("last", _U32), ("iv", _U32), ("lm", _U32), ("length", _U32),
                          ("n", _U16), ("changes", _U16), ("tu", _U32), ("gone", 3)):
            _within(f"History.{name}", getattr(self, name), top)
        _exact("History.chg", self.chg, 6)
        if len(self.bins) != BINS or any(not 0 <= b <= BIN_FULL for b in self.bins):
            raise ValueError(f"History.bins must be {BINS} counts of 0-{BIN_FULL}: {self.bins!r}")
        if len(self.etag) > ETAG_MAX:
            raise ValueError(f"History.etag is {len(self.etag)} bytes, at most {ETAG_MAX} are kept "
                             "(use kept_etag())")
        _check_entry(self.entry)
        if self.refers is not None and not isinstance(self.refers, Refers):
            raise ValueError(f"History.refers must be a Refers or None: {self.refers!r}")

    @property
    def flags(self) -> int:
        return ((WARC if self.refers else 0) | (WEAK if self.weak else 0) | (PINNED if self.pinned else 0)
                | (HINTED if self.hinted else 0) | (VERIFY if self.verify else 0) | self.gone << GONE_SHIFT)


def kept_etag(etag: bytes) -> bytes:
    """The ETag as the record keeps it: as received, or none when longer
    than 255 bytes (C.1: not kept)."""
    return etag if len(etag) <= ETAG_MAX else b""


def key_of(digest: bytes) -> str:
    """A URL's field ``k`` in ``hist:<d>`` and ``due:<d>``: the first 52 bits
    of its dedup digest (``Item.digest``) as a decimal string, exact in Lua's
    doubles and an integer to Redis's compact encodings."""
    if len(digest) < 7:
        raise ValueError(f"a digest of {len(digest)} bytes has no 52 bits to key a history by")
    return str(int.from_bytes(digest[:7], "big") >> 4)


def pack(history: History) -> bytes:
    h = history
    bins = bytes(h.bins[i] << 4 | h.bins[i + 1] for i in range(0, BINS, 2))
    out = _FIXED.pack(h.flags, h.last, h.iv, h.lm, h.length, h.chg, h.n, h.changes, h.tu, bins)
    if h.refers:
        out += _WARC.pack(h.refers.wd, h.refers.rdate, h.refers.rid)
    return out + bytes((len(h.etag),)) + h.etag + h.entry


def unpack(data: bytes) -> History:
    """Raises ``ValueError`` (one line) for a record that is not one."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"a history record is bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) < FIXED_SIZE + 1:
        raise ValueError(f"history record too short: {len(data)} bytes, at least {FIXED_SIZE + 1}")
    flags, last, iv, lm, length, chg, n, changes, tu, packed = _FIXED.unpack_from(data)
    if flags & UNKNOWN:
        raise ValueError(f"history record with unknown flags 0x{flags:02x}")
    at = FIXED_SIZE
    refers = None
    if flags & WARC:
        if len(data) < at + WARC_SIZE + 1:
            raise ValueError(f"history record too short for its WARC part: {len(data)} bytes")
        refers = Refers(*_WARC.unpack_from(data, at))
        at += WARC_SIZE
    size = data[at]
    at += 1
    if len(data) < at + size:
        raise ValueError(f"history record cut inside its ETag: {size} bytes announced, {len(data) - at} left")
    etag, entry = data[at:at + size], data[at + size:]
    return History(entry=entry, last=last, iv=iv, lm=lm, length=length, chg=chg, n=n, changes=changes,
                   tu=tu, bins=tuple(b >> s & 0xF for b in packed for s in (4, 0)), etag=etag,
                   weak=bool(flags & WEAK), pinned=bool(flags & PINNED), hinted=bool(flags & HINTED),
                   verify=bool(flags & VERIFY), gone=(flags & GONE) >> GONE_SHIFT, refers=refers)


def bin_of(interval: float, base: float = BIN_BASE) -> int:
    """The bin of an interval that ended changed:
    ``clamp(round(log2(interval / base)), 0, 15)``, halves rounded up."""
    if not interval > base:  # also 0, negative and NaN
        return 0
    return min(BINS - 1, math.floor(math.log2(interval / base) + 0.5))


def bin_centre(b: int, base: float = BIN_BASE) -> float:
    """The interval, in s, bin ``b`` stands for in the estimate."""
    return base * (1 << b)


def observe(history: History, interval: int, changed: bool, base: float = BIN_BASE) -> History:
    """The counts after one more visit whose interval (s since the previous
    visit) ended ``changed`` or not: n + 1, and X + 1 with one more in the
    interval's bin, or ``interval`` more in ``tu``. When a bin reaches 15 (or
    n or tu would overflow) every bin, tu, n and X is halved (rounded down),
    so that old behaviour fades: about the last 15 changed intervals count.
    """
    interval = max(0, int(interval))
    bins, n, changes, tu = list(history.bins), history.n + 1, history.changes, history.tu
    if changed:
        bins[bin_of(interval, base)] += 1
        changes += 1
    else:
        tu += interval
    if max(bins) >= BIN_FULL or n >= _U16 or tu > _U32:
        bins = [b >> 1 for b in bins]
        n, changes, tu = n >> 1, changes >> 1, min(tu >> 1, _U32)
    return replace(history, n=n, changes=changes, tu=tu, bins=tuple(bins))


def _within(name: str, value: int, top: int) -> None:
    if not isinstance(value, int) or not 0 <= value <= top:
        raise ValueError(f"{name} must be an integer in 0..{top}: {value!r}")


def _exact(name: str, value: bytes, size: int) -> None:
    if not isinstance(value, bytes) or len(value) != size:
        raise ValueError(f"{name} must be {size} bytes: {value!r}")


def _check_entry(entry: bytes) -> None:
    if not isinstance(entry, bytes) or entry[:1] not in ENTRY_KINDS:
        raise ValueError(f"a history record's entry must start with U or R: {entry[:16]!r}")
