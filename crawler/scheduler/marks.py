"""Politeness marks: when the response to each leased request began and
ended, on this process's monotonic clock.

A domain with a delay is parked in Redis while one of its requests is out;
the acknowledgement of that request carries the age of its mark (how long
ago, in ms, the response began or ended, per ``CRAWLER_DELAY_FROM``) and how
long the fetch took, so the script sets the domain's next turn on the Redis
server's clock without comparing two machines' clocks:
``"<lease>:<age ms>:<duration ms>"``. Ages are measured when the round trip
leaves, so the network's delay only ever makes a mark late, never early.

Both marks are upper bounds of what the site saw: the response's headers
arrive after the request did, its last byte after the site sent it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

from scrapy import signals

from crawler.meta import LEASE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response



#: how a request ended, as the frontier counts it (``end_<name>`` in its stats)
STORED, DEAD, DISALLOWED, SKIPPED, REDIRECTED, LOST, UNKNOWN = "s", "d", "r", "k", "x", "l", "u"
ENDS = {STORED: "stored", DEAD: "dead", DISALLOWED: "disallowed", SKIPPED: "skipped",
        REDIRECTED: "redirected", LOST: "lost", UNKNOWN: "unknown"}


class Ack(NamedTuple):
    lease: str
    mark: float | None = None  # monotonic seconds; None: now
    duration: float | None = None  # seconds the fetch took, when known
    end: str = ""  # one of ENDS; "" when the request moved on (a retry, a hand-back)

    def wire(self, now: float) -> str:
        age = "" if self.mark is None else str(max(0, int((now - self.mark) * 1000)))
        if self.end:
            duration = "" if self.duration is None else str(int(self.duration * 1000))
            return f"{self.lease}:{age}:{duration}:{self.end}"
        if self.mark is None:
            return self.lease
        if self.duration is None:
            return f"{self.lease}:{age}"
        return f"{self.lease}:{age}:{int(self.duration * 1000)}"


def wire(acks: Iterable[str | Ack]) -> list[str]:
    now = time.monotonic()
    return [a if isinstance(a, str) else a.wire(now) for a in acks]


class Marks:
    """lease -> [response began, response ended, download latency]."""

    def __init__(self, crawler: Crawler, delay_from: str) -> None:
        self.finish = delay_from == "finish"
        self.stats = crawler.stats
        self.times: dict[str, list[float | None]] = {}
        crawler.signals.connect(self.headers_received, signal=signals.headers_received)
        crawler.signals.connect(self.response_downloaded, signal=signals.response_downloaded)

    def headers_received(self, request: Request, **_: object) -> None:
        lease = request.meta.get(LEASE)
        if lease is not None:
            self.times.setdefault(lease, [None, None, None])[0] = time.monotonic()

    def response_downloaded(self, response: Response, request: Request, **_: object) -> None:
        lease = request.meta.get(LEASE)
        if lease is not None:
            times = self.times.setdefault(lease, [None, None, None])
            times[1] = time.monotonic()
            times[2] = request.meta.get("download_latency")

    def note(self, lease: str, began: float, ended: float, latency: float | None = None) -> None:
        """Marks of a fetch made for ``lease`` outside the downloader's
        signals (robots.txt fetched before the request it guards)."""
        self.times[lease] = [began, ended, latency]

    def ack(self, lease: str, end: str = "") -> Ack:
        """The acknowledgement of ``lease``, done now, ended as ``end``."""
        if end:
            self.stats.inc_value(f"crawler/frontier/ended/{ENDS[end]}")
        began, ended, latency = self.times.pop(lease, None) or (None, None, None)
        now = time.monotonic()
        ended = ended or now  # failed or never sent: it ends now
        began = began or ended
        duration = (latency or 0.0) + (ended - began) if latency is not None else None
        return Ack(lease, ended if self.finish else began, duration, end)

    def forget(self, leases: Iterable[str]) -> None:
        for lease in leases:
            self.times.pop(lease, None)
