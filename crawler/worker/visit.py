"""The history write of one visit (design/recrawl.md C.1, C.3, C.5 and E):
what a lease's end, its request's meta and the settings make of a tracked
URL's record. Pure: no I/O, no clock, no logging; the worker's
``Leases`` calls it when a lease ends (``crawler/worker/_history.py``) and
attaches the :class:`~crawler.store.records.HistoryWrite` to the lease's
acknowledgement, where the frontier's script applies it before the ack.

**The contract** (:func:`history_write`):

- *A first visit* (no ``meta[RECRAWL_STATE]``): ``CREATE`` when the lease
  ends stored or not modified, ``meta[RECRAWL]`` is not False, the answer is
  not a 404/410, and the leased entry (``U...``/``R...``, never ``V...``)
  fits ``CRAWLER_RECRAWL_ENTRY_MAX``; ``k`` is
  :func:`~crawler.recrawl.record.key_of` of the request's dedup digest (the
  one ``Offers`` computes, passed in). Otherwise None; :func:`judge` says why
  (``untracked`` for an entry too large: the caller counts it).
- *A revisit* (``RECRAWL_STATE`` present, and its ``k`` the request's own
  when ``digest`` is given: a redirect's target carries its source's meta,
  and is its own URL's first visit): ``DELETE`` when it ended
  redirected (``x``), disallowed by robots.txt (``r``), ``meta[RECRAWL]`` is
  False, or it answered 404/410 the second time in a row; ``UPDATE`` when it
  ended stored or not modified; else None (a failed revisit leaves the
  record as it is, and the frontier's re-armed due time brings it back).
- An ``UPDATE`` observes the interval since the last visit (changed = not a
  304 and ``chg`` differs from the record's), takes the answer's ETag,
  Last-Modified, length and ``chg`` (a 304 keeps the old ones, except an
  ETag or Last-Modified it sends), the WARC part of a ``response`` capture
  (kept otherwise), and schedules the next interval: ``fixed`` the pinned
  number (``meta[RECRAWL]``) or ``CRAWLER_RECRAWL_INTERVAL``, within
  [MIN, MAX], with a ±5 % jitter fixed by ``k``; ``adaptive``
  :func:`~crawler.recrawl.estimate.adaptive_interval` at the domain's μ (the
  lease's, else the worker's) or, without a budget, the freshness target; a
  pinned URL keeps its interval in either mode.
- ``saved`` is the record's length for a 304 and for an identical-payload
  capture (the body not stored again).
- Rate bins (``rbin_old``/``rbin_new``, -1 none) are
  :func:`~crawler.recrawl.estimate.rate_bin_of` over [1/(SLOW·MAX), 1/MIN]
  of the old and the new record: the bin of its rate posterior's median.

**The interval observed.** ``last`` is the server's clock (the script stamps
it); the visit's end is read on the caller's ``now`` (``Clock.time()``,
which under a ``ManualClock`` is the scripts' clock too). A worker clock a
few seconds off moves an interval by that much, which the estimate's 1 h
log-bins do not see. When the record was never stamped, or ``now`` is not
after ``last`` (a clock behind), the record's own interval ``iv`` stands in.

**Lies** (C.3), judged on revisits only and one per write, in this order:

- ``etag``: a 200 whose strong ETag equals the record's while ``chg`` differs
  (whether or not If-None-Match was sent: an honest server changes a strong
  ETag with the content);
- ``lm``: a 200 whose Last-Modified is at or before the record's while
  ``chg`` differs;
- ``lm_now``: Last-Modified within 5 s of Date and ``chg`` unchanged
  (evidence: the script acts at the third);
- ``ignored``: a 200 to a request that sent validators matching the record
  (its ETag, its Last-Modified) with ``chg`` unchanged (evidence too).

A changed page with a changed ETag (or a later Last-Modified) is never a lie;
a weak ETag is never judged (it promises equivalence, not the same bytes).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from crawler.meta import NOT_MODIFIED as NOT_MODIFIED_KEY
from crawler.meta import RECRAWL, RECRAWL_SEEN, RECRAWL_STATE
from crawler.recrawl.estimate import adaptive_interval, rate_bin_of
from crawler.recrawl.record import ENTRY_KINDS, History, Refers, key_of, kept_etag, observe, pack, unpack
from crawler.store.ledger import DISALLOWED, NOT_MODIFIED, REDIRECTED, STORED, STORED_ENDS
from crawler.store.records import (
    CHANGED,
    CREATE,
    DELETE,
    FIRST,
    NOT_MODIFIED_304,
    UNCHANGED,
    UPDATE,
    HistoryWrite,
    Recrawl,
)

#: a fixed interval is moved by up to this share either way, by ``k``
JITTER = 0.05
#: Last-Modified this close to Date (s) reads "always now"
LM_NOW = 5
#: the capture profiles of the WARC writer (crawler/warcrecords.py)
RESPONSE, SERVER_NOT_MODIFIED, IDENTICAL = "response", "server-not-modified", "identical-payload-digest"
#: answers that say a page is gone; the second in a row deletes its history
GONE_STATUSES = (404, 410)

#: why no write was made (:func:`judge`)
OFF, USER, NO_END, UNTRACKED, GONE, NOT_TRACKABLE = "off", "user", "end", "untracked", "gone", "entry"


@dataclass(frozen=True)
class Rules:
    """What the history writes follow (``CRAWLER_RECRAWL*``; seconds)."""

    mode: str = "off"  # off | fixed | adaptive
    interval: float = 86400.0
    low: float = 3600.0  # MIN
    high: float = 2592000.0  # MAX
    entry_max: int = 2048
    freshness: float = 0.9

    @classmethod
    def of(cls, recrawl: Recrawl, entry_max: int = 2048, freshness: float = 0.9) -> Rules:
        return cls(recrawl.mode, recrawl.interval, recrawl.min, recrawl.max, entry_max, freshness)

    @property
    def on(self) -> bool:
        return self.mode != "off"


@dataclass(frozen=True)
class Judged:
    """:func:`judge`'s answer: the write (None: none) and, when None, why."""

    write: HistoryWrite | None
    why: str = ""


def history_write(meta: dict[str, Any], entry: bytes, domain: str, digest: bytes, end: str, rules: Rules,
                  host: str, now: float, mu: float | None = None) -> HistoryWrite | None:
    """The history write of a lease of ``domain`` leased as ``entry``, whose
    request (its dedup ``digest``, its ``host``) ended as ``end`` with
    ``meta``; ``now``: the caller's Unix time; ``mu``: the domain's μ when the
    lease carries none. None when the visit writes nothing."""
    return judge(meta, entry, domain, digest, end, rules, host, now, mu).write


def judge(meta: dict[str, Any], entry: bytes, domain: str, digest: bytes, end: str, rules: Rules,
          host: str, now: float, mu: float | None = None) -> Judged:
    """:func:`history_write` with the reason when there is none."""
    if not rules.on:
        return Judged(None, OFF)
    state = meta.get(RECRAWL_STATE)
    if state is not None and digest and key_of(digest) != str(state.get("k")):
        state = None  # another URL's state, carried over (a redirect's target): this URL's first visit
    if state is None:
        return _first(meta, entry, domain, digest, end, rules, host)
    return _again(meta, state, domain, end, rules, host, now, mu)


def final_end(meta: dict[str, Any], end: str) -> str:
    """The end a lease is acknowledged with: a revisit stored as an
    identical-payload revisit record (the body as the last stored one)
    ended not modified, like a 304."""
    if end == STORED and RECRAWL_STATE in meta and _capture(meta).get("profile") == IDENTICAL:
        return NOT_MODIFIED
    return end


def host_of_url(url: str) -> str:
    """The host a lie is held against: the request URL's, lower case."""
    return (urlsplit(url).hostname or "").lower()


# --- first visits -----------------------------------------------------------


def _first(meta: dict[str, Any], entry: bytes, domain: str, digest: bytes, end: str, rules: Rules,
           host: str) -> Judged:
    if meta.get(RECRAWL) is False:
        return Judged(None, USER)
    if end not in STORED_ENDS:
        return Judged(None, NO_END)
    seen = meta.get(RECRAWL_SEEN) or {}
    if int(seen.get("status") or 0) in GONE_STATUSES:
        return Judged(None, GONE)
    if entry[:1] not in ENTRY_KINDS:
        return Judged(None, NOT_TRACKABLE)
    if len(entry) > rules.entry_max:
        return Judged(None, UNTRACKED)
    k = key_of(digest)
    pinned = _pinned(meta)
    chg = seen.get("chg")
    etag = kept_etag(bytes(seen.get("etag") or b""))
    history = History(entry=entry, iv=_fixed(k, pinned if pinned is not None else rules.interval, rules),
                      lm=_u32(seen.get("lm")), length=_u32(seen.get("length")),
                      chg=bytes(chg) if chg is not None else bytes(6), etag=etag,
                      weak=bool(seen.get("weak")) and bool(etag), pinned=pinned is not None,
                      refers=_refers(meta))
    return Judged(HistoryWrite(CREATE, domain, k, pack(history), history.iv, -1,
                               rate_bin_of(history, rules.low, rules.high), FIRST, 0, host))


# --- revisits ---------------------------------------------------------------


def _again(meta: dict[str, Any], state: dict[str, Any], domain: str, end: str, rules: Rules, host: str,
           now: float, mu: float | None) -> Judged:
    k = str(state["k"])
    old = unpack(state["record"])
    old_bin = rate_bin_of(old, rules.low, rules.high)
    seen = meta.get(RECRAWL_SEEN) or {}
    status = int(seen.get("status") or 0)

    def delete() -> Judged:
        return Judged(HistoryWrite(DELETE, domain, k, b"", 0, old_bin, -1, FIRST, 0, host))

    if meta.get(RECRAWL) is False or end in (REDIRECTED, DISALLOWED):
        return delete()
    if end not in STORED_ENDS:
        return Judged(None, NO_END)
    if status in GONE_STATUSES:
        if old.gone + 1 >= 2:
            return delete()
        # the first 404/410: counted on the record, which is kept as it was; due again in its interval
        kept = replace(old, gone=old.gone + 1, hinted=False, verify=False)
        return Judged(HistoryWrite(UPDATE, domain, k, pack(kept), old.iv, old_bin, old_bin, FIRST, 0, host))

    not_modified = status == 304 or bool(meta.get(NOT_MODIFIED_KEY))
    chg = seen.get("chg")
    chg = bytes(chg) if chg is not None and not not_modified else None
    changed = chg is not None and chg != old.chg
    lie = "" if not_modified else _lie(old, seen, chg)
    interval = now - old.last if old.last and now > old.last else old.iv
    new = observe(old, int(interval), changed, base=rules.low)
    etag = kept_etag(bytes(seen.get("etag") or b""))
    if not_modified:
        if etag:
            new = replace(new, etag=etag, weak=bool(seen.get("weak")))
        if _u32(seen.get("lm")):
            new = replace(new, lm=_u32(seen.get("lm")))
    else:
        new = replace(new, etag=etag, weak=bool(seen.get("weak")) and bool(etag), lm=_u32(seen.get("lm")),
                      length=_u32(seen.get("length")), chg=chg if chg is not None else old.chg)
    capture = _capture(meta)
    if capture.get("profile") == RESPONSE:
        new = replace(new, refers=_refers(meta))
    pinned = _pinned(meta)
    new = replace(new, gone=0, hinted=False, verify=False, pinned=pinned is not None or old.pinned)
    if pinned is not None:
        iv = _fixed(k, pinned, rules)
    elif new.pinned:
        iv = min(max(old.iv, math.ceil(rules.low)), math.floor(rules.high))  # pinned before: kept
    elif rules.mode == "adaptive":
        mu = state.get("mu") if state.get("mu") is not None else mu
        iv = adaptive_interval(new, math.ceil(rules.low), math.floor(rules.high), mu, rules.freshness)
    else:
        iv = _fixed(k, rules.interval, rules)
    new = replace(new, iv=iv)
    outcome = NOT_MODIFIED_304 if not_modified else CHANGED if changed else UNCHANGED
    saved = old.length if not_modified or capture.get("profile") == IDENTICAL else 0
    return Judged(HistoryWrite(UPDATE, domain, k, pack(new), iv, old_bin,
                               rate_bin_of(new, rules.low, rules.high), outcome, saved, host, lie))


def _lie(old: History, seen: dict[str, Any], chg: bytes | None) -> str:
    """The lie a full answer (a 200) to a revisit shows, "" none (see the module's docstring)."""
    if int(seen.get("status") or 0) != 200 or chg is None:
        return ""
    etag = bytes(seen.get("etag") or b"")
    weak = bool(seen.get("weak")) or old.weak
    lm, date, sent = _u32(seen.get("lm")), _u32(seen.get("date")), str(seen.get("sent") or "")
    same = chg == old.chg
    if not same and etag and not weak and etag == old.etag:
        return "etag"
    if not same and lm and old.lm and lm <= old.lm:
        return "lm"
    if same and lm and date and abs(date - lm) <= LM_NOW:
        return "lm_now"
    if same and sent and ("e" not in sent or (etag and etag == old.etag)) and (
            "m" not in sent or (lm and lm == old.lm)):
        return "ignored"
    return ""


# --- parts ------------------------------------------------------------------


def _fixed(k: str, seconds: float, rules: Rules) -> int:
    """``seconds`` within [MIN, MAX], moved by the jitter ``k`` fixes (±5 %),
    and within [MIN, MAX] again: the same for a URL at every visit, spread
    over URLs, so that URLs found together are not all due together."""
    low, high = math.ceil(rules.low), math.floor(rules.high)
    base = min(max(seconds, low), high)
    u = int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "big") / 2**64
    return int(min(max(round(base * (1 + JITTER * (2 * u - 1))), low), high))


def _pinned(meta: dict[str, Any]) -> float | None:
    """``meta[RECRAWL]`` as a number of seconds (True, False, absent: None)."""
    value = meta.get(RECRAWL)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


def _capture(meta: dict[str, Any]) -> dict[str, Any]:
    seen = meta.get(RECRAWL_SEEN) or {}
    return seen.get("capture") or {}


def _refers(meta: dict[str, Any]) -> Refers | None:
    capture = _capture(meta)
    if capture.get("profile") != RESPONSE:
        return None
    return Refers(bytes(capture["wd"]), int(capture["rdate"]), bytes(capture["rid"]))


def _u32(value: Any) -> int:
    """A header's number as the record keeps it (0 none; clamped to u32)."""
    try:
        number = int(value or 0)
    except (TypeError, ValueError):
        return 0
    return min(max(number, 0), 0xFFFFFFFF)
