"""What the test web serves: every knob with its default."""

from __future__ import annotations

import ipaddress
import json
import math
import random
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from devkit.testweb.changes import CLOCKS, LIES, VALIDATORS

#: faults a page can answer with instead of its content
PAGE_FAULTS = ("404", "410", "429", "500", "503", "slow", "drop", "redirect", "big", "pdf")
#: robots.txt faults a domain can have: statuses, garbage, redirect chains
#: (same host, http -> https, apex -> www, a loop, six hops), an outage (503
#: or no answer for ``robots_outage_s`` from the domain's first robots.txt
#: request), and hostile files (600 KiB with rules past 500 KiB, 30,000
#: wildcard rules)
#: hostile markup a domain's pages can be made of after their links: 250 KB
#: that a tree builder nests ever deeper (Lexbor's cost grows with the square
#: of the nesting; bench/bench_extract.py measures each)
NESTED_KINDS = ("div", "dl", "ul", "section", "center", "b_div", "adoption")
ROBOTS_FAULTS = ("404", "503", "invalid", "redirect", "https", "www", "loop", "hops6", "outage", "timeout",
                 "big", "wildcards")


@dataclass
class WebConfig:
    domains: int = 20
    pages: int = 100  # per domain: /p/0.html ... /p/<pages-1>.html, "/" is page 0
    domain_template: str = "d{}.test"
    seed: int = 1
    # page sizes: log-normal with this median and mean (the open web of 2025),
    # or every page exactly `size_fixed` bytes when that is set
    size_median: int = 138_000
    size_mean: int = 242_000
    size_min: int = 1_000
    size_max: int = 4_000_000
    size_fixed: int | None = None
    links: int = 60  # <a href> per page
    cross_share: float = 0.1  # links to another domain
    dup_share: float = 0.1  # links that differ from another only by tracking params
    private_share: float = 0.02  # links into /private/, which robots.txt disallows
    trap_share: float = 0.0  # links into calendar traps, redirect chains and loops
    crawl_delay_share: float = 0.1  # domains whose robots.txt has Crawl-delay
    crawl_delay: float = 1.0
    faults: dict[str, float] = field(default_factory=dict)  # page fault -> share of pages
    robots_faults: dict[str, float] = field(default_factory=dict)  # -> share of domains
    # nested kind -> share of domains whose pages (the home page too) are
    # their links followed by nested markup up to `nested_size` bytes
    nested: dict[str, float] = field(default_factory=dict)
    nested_size: int = 250_000
    robots_outage_s: float = 30.0  # "outage"/"timeout" robots.txt: how long, from its first request
    robots_timeout_ms: int = 5_000  # "timeout" robots.txt: answer this late during the outage
    # pages whose links must not be followed: <meta name="robots" content="nofollow">,
    # and X-Robots-Tag: nofollow (home pages excepted)
    meta_nofollow_share: float = 0.0
    header_nofollow_share: float = 0.0
    retry_after: int = 3  # Retry-After seconds sent with 429 and 503
    slow_ms: int = 2_000  # delay of "slow" pages
    big_size: int = 400_000  # size of "big" pages
    pdf_size: int = 1_000_000
    redirect_hops: int = 3
    public_port: int | None = None  # port written into cross-domain links
    # the open web's timing: HTTPS (a certificate for every domain, made at
    # start), a log-normal time to first byte and a rate per connection
    tls: bool = False
    also_plain: bool = False  # with tls: the same site over plain HTTP on a second port
    latency_ms: float = 0.0  # median time to first byte; 0: answer at once
    latency_sigma: float = 0.5  # spread of the log-normal latency
    bandwidth: int = 0  # bytes per second per connection; 0: unlimited
    # sites that exist through their sitemaps (devkit/testweb/sitemaps.py):
    # maps.test, www.maps.test, evil.test (hostile sitemaps), big.test
    sitemaps: bool = False
    sitemap_bomb_mib: int = 1024  # evil.test's gzip bombs, decompressed
    sitemap_big_urls: int = 60_000  # URLs in big.test's sitemap
    # every d<i>.test's robots.txt names /sitemap.xml, listing its pages
    robots_sitemaps: bool = False
    # every d<i>.test serves that /sitemap.xml without naming it in robots.txt
    # (what CRAWLER_SITEMAP_GUESS finds)
    sitemap_unnamed: bool = False
    # the <lastmod> of each page in that /sitemap.xml: "fixed" (one date for
    # all, 2025-06-01), "live" (when the page last changed on its schedule:
    # an honest host), "now" (the time of the request: a host that stamps
    # every URL now)
    sitemap_lastmod: str = "fixed"
    # shared hosting: the domains spread over this many loopback addresses,
    # 127.1.0.1, 127.1.0.2, ... (never 127.0.0.1), all served on one port; the
    # server listens on 127.0.0.1 too (control paths, clients without a host
    # map). 0: every domain on 127.0.0.1 alone, as before. domain_addresses()
    # gives each domain's address.
    addresses: int = 0
    # how unevenly: the exponent of a Zipf law of domains per address (the
    # share of addresses holding at least k domains falls as k**-address_skew;
    # the r-th largest address holds about r**(-1/address_skew) of the top
    # one's count, each at least 1). Lower is more uneven: 1 is Zipf's own
    # law; 0.8 with 3,000 domains on 200 addresses puts 849 on the largest
    # and 1 or 2 on 94 of them. Which domains share an address is a shuffle
    # drawn from `seed`.
    address_skew: float = 0.8
    # instead: domains per address, in domain order ([1000, 1, 1]: d0..d999 on
    # 127.1.0.1, d1000 on 127.1.0.2, d1001 on 127.1.0.3); the sum must be
    # `domains`, and `addresses` 0 or its length
    address_counts: list[int] | None = None
    # pages that change on known schedules (devkit/testweb/changes.py), all
    # off by default: this share of the pages changes, each with a mean time
    # between changes log-uniform in [change_mean_min_s, change_mean_max_s],
    # its changes a Poisson process drawn from `seed`; the page shows its
    # version in its text
    change_share: float = 0.0
    change_mean_min_s: float = 10.0
    change_mean_max_s: float = 10_000.0
    # validator kind -> share of domains whose pages carry it and answer
    # conditional requests (etag, weak_etag, last_modified, both, none; the
    # rest: none, no 304, as before)
    validators: dict[str, float] = field(default_factory=dict)
    # lie -> share of domains whose host lies about its validators
    # (ignore_conditionals, lm_now, lm_frozen, etag_frozen)
    lies: dict[str, float] = field(default_factory=dict)
    # pages with a token that changes on every request in a <script> and a
    # data- attribute, their visible text unchanged
    noisy_share: float = 0.0
    # the schedules' clock: "system" (seconds since the server started) or
    # "manual" (moved only through GET /__testweb__/clock?advance=S, from 0)
    clock: str = "system"

    def __post_init__(self) -> None:
        errors = []
        if self.domains < 1 or self.pages < 1:
            errors.append("domains and pages must be at least 1")
        if not 0 < self.size_median <= self.size_mean:
            errors.append("need 0 < size_median <= size_mean")
        for name in ("cross_share", "dup_share", "private_share", "trap_share", "crawl_delay_share",
                     "meta_nofollow_share", "header_nofollow_share", "change_share", "noisy_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                errors.append(f"{name} must be within 0..1")
        for kind in self.faults:
            if kind not in PAGE_FAULTS:
                errors.append(f"unknown page fault {kind!r} (known: {', '.join(PAGE_FAULTS)})")
        for kind in self.robots_faults:
            if kind not in ROBOTS_FAULTS:
                errors.append(f"unknown robots fault {kind!r} (known: {', '.join(ROBOTS_FAULTS)})")
        for kind in self.nested:
            if kind not in NESTED_KINDS:
                errors.append(f"unknown nested kind {kind!r} (known: {', '.join(NESTED_KINDS)})")
        if sum(self.nested.values()) > 1:
            errors.append("nested shares add up to more than 1")
        if not 1 <= self.sitemap_bomb_mib <= 4096 or self.sitemap_big_urls < 0:
            errors.append("sitemap_bomb_mib must be within 1..4096, sitemap_big_urls >= 0")
        if self.latency_ms < 0 or self.latency_sigma < 0 or self.bandwidth < 0:
            errors.append("latency_ms, latency_sigma and bandwidth must be >= 0")
        if sum(self.faults.values()) > 1 or sum(self.robots_faults.values()) > 1:
            errors.append("fault shares add up to more than 1")
        if self.address_counts is not None:
            if self.addresses not in (0, len(self.address_counts)):
                errors.append("addresses must be 0 or the length of address_counts")
            if any(not isinstance(n, int) or n < 1 for n in self.address_counts):
                errors.append("address_counts must be whole numbers >= 1")
            elif sum(self.address_counts) != self.domains:
                errors.append(f"address_counts add up to {sum(self.address_counts)}, not domains={self.domains}")
            if not 1 <= len(self.address_counts) <= MAX_ADDRESSES:
                errors.append(f"address_counts must have 1..{MAX_ADDRESSES} entries")
        elif not 0 <= self.addresses <= min(self.domains, MAX_ADDRESSES):
            errors.append(f"addresses must be within 0..min(domains, {MAX_ADDRESSES})")
        for name, known in (("validators", VALIDATORS), ("lies", LIES)):
            shares = getattr(self, name)
            for kind in shares:
                if kind not in known:
                    errors.append(f"unknown {name} kind {kind!r} (known: {', '.join(known)})")
            if sum(shares.values()) > 1:
                errors.append(f"{name} shares add up to more than 1")
        if not 0 < self.change_mean_min_s <= self.change_mean_max_s:
            errors.append("need 0 < change_mean_min_s <= change_mean_max_s")
        if self.sitemap_lastmod not in ("fixed", "live", "now"):
            errors.append("sitemap_lastmod must be one of fixed, live, now")
        if self.clock not in CLOCKS:
            errors.append(f"clock must be one of {', '.join(CLOCKS)}")
        if not self.address_skew > 0:
            errors.append("address_skew must be > 0")
        if errors:
            raise ValueError("bad test web config: " + "; ".join(errors))

    @property
    def lognormal(self) -> tuple[float, float]:
        """(mu, sigma) of the page-size distribution."""
        mu = math.log(self.size_median)
        sigma = math.sqrt(2 * math.log(self.size_mean / self.size_median))
        return mu, sigma

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def domain(self, index: int) -> str:
        return self.domain_template.format(index)

    @property
    def spread(self) -> bool:
        """Whether the domains are spread over addresses of their own."""
        return bool(self.addresses or self.address_counts)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WebConfig:
        data: dict[str, Any] = json.loads(text) if text.strip() else {}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"bad test web config: unknown keys {unknown}")
        return cls(**data)


#: the loopback addresses of a layout: 127.1.0.1 onwards
FIRST_ADDRESS = ipaddress.IPv4Address("127.1.0.1")
MAX_ADDRESSES = 65_000
#: where everything is without a layout, and the control paths always
LOOPBACK = "127.0.0.1"


def layout_address(index: int) -> str:
    """The ``index``-th address of a layout (0: 127.1.0.1)."""
    return str(FIRST_ADDRESS + index)


def skewed_counts(domains: int, addresses: int, skew: float) -> list[int]:
    """Domains per address, largest first, summing to ``domains``: the r-th
    (from 1) holds ``max(1, c * r ** (-1 / skew))`` rounded, ``c`` chosen so
    that they add up (largest remainders take the units rounding left)."""
    if not 1 <= addresses <= domains or not skew > 0:
        raise ValueError(f"need 1 <= addresses ({addresses}) <= domains ({domains}) and skew > 0")
    power = 1 / skew
    weights = [(r + 1) ** -power for r in range(addresses)]
    low, high = 0.0, float(domains)  # sum(max(1, c * w)) is at most domains at low, at least at high
    for _ in range(200):
        middle = (low + high) / 2
        if sum(max(1.0, middle * w) for w in weights) < domains:
            low = middle
        else:
            high = middle
    shares = [max(1.0, high * w) for w in weights]
    counts = [int(share) for share in shares]
    rest = domains - sum(counts)
    for r in sorted(range(addresses), key=lambda r: (counts[r] - shares[r], r))[:rest]:
        counts[r] += 1
    return counts


def layout_counts(config: WebConfig) -> list[int]:
    """Domains on each address of the layout, in address order; [] without one."""
    if config.address_counts is not None:
        return list(config.address_counts)
    if not config.addresses:
        return []
    return skewed_counts(config.domains, config.addresses, config.address_skew)


def layout_addresses(config: WebConfig) -> list[str]:
    """The addresses of the layout, in order (127.1.0.1, ...); [] without one."""
    return [layout_address(i) for i in range(len(layout_counts(config)))]


def domain_addresses(config: WebConfig) -> list[str]:
    """The address of each domain (index: the domain's number): 127.0.0.1
    for all without a layout; with ``address_counts`` the domains in order,
    a block per address; with ``addresses`` the same after a shuffle of the
    domains drawn from ``seed`` (which domains share an address is chance,
    as on the web)."""
    counts = layout_counts(config)
    if not counts:
        return [LOOPBACK] * config.domains
    order = list(range(config.domains))
    if config.address_counts is None:
        random.Random(f"testweb-addresses-{config.seed}").shuffle(order)
    result = [""] * config.domains
    start = 0
    for index, count in enumerate(counts):
        address = layout_address(index)
        for domain in order[start:start + count]:
            result[domain] = address
        start += count
    return result
