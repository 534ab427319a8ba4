"""Deterministic pages, robots.txt and faults of the test web.

Every answer is a function of (config, host, path): two servers with one
config serve the same bytes. Page bodies are a cached head (title and links)
followed by a slice of one shared filler buffer, so large pages cost no work.
With the opt-in knobs of changes.py, a page's answer is also a function of
the schedule clock's time (its version), of the request's conditional
headers (a 304), and, for a noisy page, of a token drawn per request.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import random
import struct
import time
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

from devkit.testweb.changes import HostRules, Schedule, ScheduleClock, etag, http_date, not_modified, pick, unit
from devkit.testweb.config import NESTED_KINDS, WebConfig
from devkit.testweb.sitemaps import HOSTS as SITEMAP_HOSTS
from devkit.testweb.sitemaps import SitemapSites

_WORDS = (
    "crawl polite frontier redis queue domain token bucket lease shard robots "
    "delay backoff jitter letter batch parse link anchor page index archive "
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod"
).split()
_TRACKING = (
    "?utm_source=newsletter&utm_medium=email",
    "?gclid=EAIaIQobChMI",
    "?utm_campaign=spring&utm_content=banner",
    "?fbclid=IwAR0abc",
    "#comments",
)
_TRAPS = ("/calendar/2026/1", "/fault/loop/0", "/fault/redirect/3/0", "/hostile.html")
#: links a careless parser chokes on, and markup that is not well formed
_HOSTILE = (
    "<!DOCTYPE html><html><head><title>hostile<body><div><p><b><i>unclosed\n"
    '<a href="http://bücher.test/straße">unicode host</a>\n'
    '<a href="/a path/with spaces">spaces</a>\n'
    '<a href="/broken%zz%4">broken escapes</a>\n'
    '<a href="/long/' + "x" * 2500 + '">over-long</a>\n'
    '<a href="ftp://files.test/x">ftp</a><a href="javascript:alert(1)">js</a>\n'
    '<a href="mailto:x@y.test">mail</a><a href="data:text/html,hi">data</a>\n'
    '<a href="http://[::1">bad ipv6</a><a href="http://exa mple.test/">space in host</a>\n'
    '<a href="\x00\x01/control">control</a><a href="//">empty host</a>\n'
    '<a href="/p/1.html">a good one</a>\n'
    "<table><tr><td><a href='/p/2.html'>nested, unclosed"
)
#: the repeated unit of each nested kind (config.NESTED_KINDS)
NESTED_UNITS = {
    "div": "<div>",
    "dl": "<dl><dt>",
    "ul": "<ul><li>",
    "section": "<section>",
    "center": "<center>",
    "b_div": "<b><div>",
    "adoption": "<b><div></b>",  # the adoption agency algorithm at every </b>
}
assert set(NESTED_UNITS) == set(NESTED_KINDS)


#: how a site answers during an outage (Site.start_outage)
OUTAGE_MODES = ("503", "timeout")


@dataclass
class Reply:
    status: int
    parts: list[bytes | memoryview]
    content_type: bytes = b"text/html; charset=utf-8"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    delay: float = 0.0  # seconds to wait before answering
    drop: bool = False  # close the connection without answering
    hold: float = 0.0  # > 0: answer nothing, hang up this many seconds from now (an outage's "timeout")
    entry: list | None = None  # its line of the request log, completed when sent
    # a page's answer: the version in its body (None: a 304, or not a page),
    # the page's version when answered (what a 304 stood for), and when, on
    # the schedule clock (s)
    version: int | None = None
    current: int | None = None
    at: float | None = None

    @property
    def length(self) -> int:
        return sum(len(p) for p in self.parts)




def _make_filler(size: int) -> bytes:
    rng = random.Random(0)
    block = " ".join(rng.choice(_WORDS) for _ in range(12_000)).encode()
    block = block.replace(b" index ", b"</p>\n<p>")
    return (block * (size // len(block) + 1))[:size]


class Site:
    def __init__(self, config: WebConfig, port: int, plain_port: int | None = None,
                 clock: ScheduleClock | None = None) -> None:
        # the pages' schedules run on this clock (the server passes one on its log's clock)
        self.clock = clock or ScheduleClock(manual=config.clock == "manual")
        self.schedule = Schedule.of(config)
        self.tokens = 0  # noisy pages' tokens drawn so far: each answer draws the next
        self.bombs: dict[int, bytes] = {}
        self.config = config
        self.port = config.public_port or port
        self.plain_port = plain_port  # with tls and also_plain: the plain HTTP listener
        # domain -> when its robots.txt was first asked for: an "outage" or
        # "timeout" lasts robots_outage_s from then, so a client sees it
        # however long it took to start
        self.robots_asked: dict[int, float] = {}
        self.hosts = {config.domain(i): i for i in range(config.domains)}
        # a site-wide outage (start_outage): its domains' numbers, mode and end (monotonic)
        self.outage_domains: frozenset[int] = frozenset()
        self.outage_mode = "503"
        self.outage_until = 0.0
        self.hosts.update({"www." + config.domain(i): i for i in range(config.domains)})
        self.robots_bodies: dict[str, bytes] = {}
        self.nested_bodies: dict[str, bytes] = {}
        self.filler = memoryview(
            _make_filler(max(config.size_max, config.big_size, config.pdf_size))
        )
        self.head = lru_cache(maxsize=20_000)(self._head)
        self.sitemaps = SitemapSites(self)

    # --- what exists -----------------------------------------------------

    def page_size(self, d: int, k: int) -> int:
        c = self.config
        if c.size_fixed is not None:
            return c.size_fixed
        mu, sigma = c.lognormal
        size = int(random.Random(f"{c.seed}:size:{d}:{k}").lognormvariate(mu, sigma))
        return max(c.size_min, min(c.size_max, size))

    def page_fault(self, d: int, k: int) -> str | None:
        if k == 0:
            return None  # the home page always works, so every crawl can start
        return pick(self.config.faults, unit(self.config.seed, "fault", d, k))

    def nested_kind(self, d: int) -> str | None:
        """The nested markup of domain ``d``'s pages, if any."""
        return pick(self.config.nested, unit(self.config.seed, "nested", d))

    def robots_fault(self, d: int) -> str | None:
        return pick(self.config.robots_faults, unit(self.config.seed, "robots", d))

    def crawl_delay(self, d: int) -> float | None:
        c = self.config
        if unit(c.seed, "delay", d) < c.crawl_delay_share:
            return c.crawl_delay
        return None

    def url(self, d: int, path: str) -> str:
        return f"{self.config.scheme}://{self.config.domain(d)}:{self.port}{path}"

    def page_links(self, d: int, k: int) -> list[str]:
        """The hrefs of page k of domain d, in document order."""
        c = self.config
        rng = random.Random(f"{c.seed}:links:{d}:{k}")
        links: list[str] = []
        if k + 1 < c.pages:
            links.append(f"/p/{k + 1}.html")  # a chain, so every page is reachable
        while len(links) < c.links:
            r = rng.random()
            if r < c.cross_share and c.domains > 1:
                other = rng.randrange(c.domains - 1)
                other += other >= d
                links.append(self.url(other, f"/p/{rng.randrange(c.pages)}.html"))
                continue
            r -= c.cross_share
            if r < c.dup_share:
                target = rng.randrange(c.pages)
                links.append(f"/p/{target}.html{rng.choice(_TRACKING)}")
                continue
            r -= c.dup_share
            if r < c.private_share:
                links.append(f"/private/{rng.randrange(c.pages)}.html")
                continue
            r -= c.private_share
            if r < c.trap_share:
                links.append(rng.choice(_TRAPS))
                continue
            target = f"/p/{rng.randrange(c.pages)}.html"
            links.append(self.url(d, target) if rng.random() < 0.2 else target)
        return links

    # --- answers ---------------------------------------------------------

    def _head(self, d: int, k: int, version: int | None = None) -> bytes:
        domain = self.config.domain(d)
        items = "".join(
            f'<li><a href="{html.escape(href)}">link {i}</a></li>\n'
            for i, href in enumerate(self.page_links(d, k))
        )
        robots = '<meta name="robots" content="noindex, nofollow">' if self.nofollow(d, k) == "meta" else ""
        return (
            f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">{robots}"
            f"<title>{domain} page {k}</title></head>\n<body><h1>{domain} page {k}</h1>\n"
            f"{self._version_line(d, k, version)}<ul>\n{items}</ul>\n<p>"
        ).encode()

    def _version_line(self, d: int, k: int, version: int | None) -> str:
        """A changing page's visible version: ``version N`` and words drawn by N."""
        if version is None:
            return ""
        words = " ".join(random.Random(f"{self.config.seed}:words:{d}:{k}:{version}").choices(_WORDS, k=4))
        return f'<p class="version">version {version}: {words}</p>\n'

    def nofollow(self, d: int, k: int) -> str | None:
        """"meta" or "header" when page k of domain d says its links are not to be followed."""
        if k == 0:
            return None
        u = unit(self.config.seed, "nofollow", d, k)
        if u < self.config.meta_nofollow_share:
            return "meta"
        if u < self.config.meta_nofollow_share + self.config.header_nofollow_share:
            return "header"
        return None

    def nested_page(self, d: int, k: int, kind: str) -> Reply:
        """Page k of domain d: its head (title, links), then ``kind``'s unit
        repeated up to ``nested_size`` bytes, never closed."""
        head = self.head(d, k)
        filler = self.nested_bodies.get(kind)
        if filler is None:
            unit = NESTED_UNITS[kind].encode()
            filler = self.nested_bodies[kind] = unit * (self.config.nested_size // len(unit) + 1)
        return Reply(200, [head, memoryview(filler)[: max(0, self.config.nested_size - len(head))]])

    def page(self, d: int, k: int, size: int | None = None, version: int | None = None,
             noise: bytes = b"") -> Reply:
        """Page k of domain d; ``version``: a changing page's, shown in its
        head; ``noise``: markup after the head that changes the bytes, not
        the visible text (the page keeps its size)."""
        head = self.head(d, k) if version is None else self.head(d, k, version)
        tail = b"</p>\n</body></html>\n"
        size = self.page_size(d, k) if size is None else size
        fill = max(0, size - len(head) - len(noise) - len(tail))
        reply = Reply(200, [head, noise, self.filler[:fill], tail] if noise else [head, self.filler[:fill], tail])
        if self.nofollow(d, k) == "header":
            reply.headers.append((b"X-Robots-Tag", b"noarchive, nofollow"))
        return reply

    def robots(self, d: int, name: str = "", secure: bool = True, path: str = "/robots.txt") -> Reply:
        """robots.txt of domain ``d`` as host ``name`` serves it at ``path``
        (``/robots.txt``, or a hop of a redirect chain under ``/robots/``)."""
        fault = self.robots_fault(d)
        c = self.config
        apex = c.domain(d)
        if path != "/robots.txt":
            return self._robots_hop(d, path)
        if fault == "404":
            return _small(404, "no robots.txt")
        if fault == "503":
            return _small(503, "robots.txt unavailable")
        if fault == "invalid":
            return Reply(200, [b"\x00\xff<html>this is not robots.txt\n{{{\n"],
                         content_type=b"text/plain")
        if fault == "redirect":
            return _redirect("/robots/hop/1", 301)
        if fault == "hops6":
            return _redirect("/robots/hop/5", 301)
        if fault == "loop":
            return _redirect("/robots/loop", 302)
        if fault == "https" and not secure and c.tls and self.plain_port is not None:
            return _redirect(f"https://{name or apex}:{self.port}/robots.txt", 301)
        if fault == "www" and name == apex:
            return _redirect(f"{'https' if secure else 'http'}://www.{apex}:{self._port(secure)}/robots.txt", 301)
        if fault in ("outage", "timeout") and self._robots_out(d):
            if fault == "outage":
                return _small(503, "robots.txt unavailable for now")
            reply = self._robots_file(d)
            reply.delay = c.robots_timeout_ms / 1000
            return reply
        if fault in ("big", "wildcards"):
            return Reply(200, [self._hostile_robots(fault)], content_type=b"text/plain")
        return self._robots_file(d)

    def _robots_out(self, d: int) -> bool:
        """Whether the robots.txt outage of domain ``d`` lasts: it begins with
        the first request for it, on any of the domain's hosts and schemes."""
        now = time.monotonic()
        return now - self.robots_asked.setdefault(d, now) < self.config.robots_outage_s

    def _port(self, secure: bool) -> int:
        return self.port if secure or self.plain_port is None else self.plain_port

    def _robots_file(self, d: int) -> Reply:
        lines = ["User-agent: *", "Disallow: /private/"]
        delay = self.crawl_delay(d)
        if delay is not None:
            lines.append(f"Crawl-delay: {delay:g}")
        if self.config.robots_sitemaps:
            lines.append(f"Sitemap: {self.url(d, '/sitemap.xml')}")
        return Reply(200, [("\n".join(lines) + "\n").encode()], content_type=b"text/plain")

    def _robots_hop(self, d: int, path: str) -> Reply:
        if path == "/robots/loop":
            return _redirect("/robots.txt", 302)
        rest = path.removeprefix("/robots/hop/")
        if rest.isdigit():
            hop = int(rest)
            return self._robots_file(d) if hop == 0 else _redirect(f"/robots/hop/{hop - 1}", 301)
        return _small(404, "no such robots hop")

    def _hostile_robots(self, kind: str) -> bytes:
        """"big": 600 KiB, its last rule (``Disallow: /p/``) past 500 KiB;
        "wildcards": 30,000 wildcard rules (RFC 9309 parsers read 500 KiB of them)."""
        body = self.robots_bodies.get(kind)
        if body is None:
            head = "User-agent: *\nDisallow: /private/\n"
            if kind == "big":
                filler = "".join(f"Allow: /nothing/{i:06d}/here\n" for i in range(600 * 1024 // 26))
                body = (head + filler[: 600 * 1024 - len(head)] + "\nDisallow: /p/\n").encode()
            else:
                body = (head + "".join(f"Disallow: /*{i:x}q*{_WORDS[i % len(_WORDS)]}\n"
                                       for i in range(30_000))).encode()
            self.robots_bodies[kind] = body
        return body

    def start_outage(self, share: float, seconds: float, mode: str = "503", seed: int = 0) -> list[int]:
        """From now, for ``seconds``, ``share`` of the domains (at least one
        when ``share`` > 0; which ones drawn from ``seed``) answer their pages
        and robots.txt, on every host and scheme, with 503 and the config's
        ``Retry-After`` (``mode="503"``) or nothing at all (``"timeout"``: the
        connection is held without a byte until the client hangs up or the
        outage ends, then closed). Replaces an outage under way (``seconds``
        0 ends it). The domains' numbers, in order."""
        if mode not in OUTAGE_MODES:
            raise ValueError(f"unknown outage mode {mode!r} (known: {', '.join(OUTAGE_MODES)})")
        if not 0.0 <= share <= 1.0 or not seconds >= 0:
            raise ValueError("an outage needs 0 <= share <= 1 and seconds >= 0")
        count = min(self.config.domains, max(1, round(share * self.config.domains))) if share > 0 else 0
        chosen = sorted(random.Random(f"testweb-outage-{seed}").sample(range(self.config.domains), count))
        self.outage_domains = frozenset(chosen)
        self.outage_mode = mode
        self.outage_until = time.monotonic() + seconds
        return chosen

    def outage_left(self, d: int) -> float:
        """Seconds the outage of domain ``d`` still lasts (0: it has none)."""
        if d not in self.outage_domains:
            return 0.0
        return max(0.0, self.outage_until - time.monotonic())

    def _outage_reply(self, d: int) -> Reply | None:
        left = self.outage_left(d)
        if not left:
            return None
        if self.outage_mode == "timeout":
            return Reply(0, [], hold=left)
        reply = _small(503, "site outage")
        reply.headers.append((b"Retry-After", str(self.config.retry_after).encode()))
        return reply

    def answer(self, host: str, target: str, secure: bool | None = None,
               conditionals: tuple[str | None, str | None] = (None, None)) -> Reply:
        """The answer to ``target`` on ``host``; ``secure``: asked over HTTPS
        (None: the scheme of the site); ``conditionals``: the request's
        If-None-Match and If-Modified-Since (None: absent)."""
        name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else host
        path = target.split("?", 1)[0].split("#", 1)[0]
        if self.config.sitemaps and name in SITEMAP_HOSTS:
            return self.sitemaps.answer(name, path)  # type: ignore[return-value]
        d = self.hosts.get(name)
        if d is None:
            return _small(404, f"no such domain {name!r}")
        if self.outage_domains:
            out = self._outage_reply(d)
            if out is not None:
                return out
        if path == "/sitemap.xml" and (self.config.robots_sitemaps or self.config.sitemap_unnamed):
            return Reply(200, [self.sitemaps.domain_sitemap(d)], content_type=b"application/xml")
        if path == "/":
            return self._page_or_fault(d, 0, conditionals)
        if path == "/robots.txt" or path.startswith("/robots/"):
            return self.robots(d, name, self.config.tls if secure is None else secure, path)
        parts = path.strip("/").split("/")
        kind = parts[0]
        if kind in ("p", "moved", "private", "big") and len(parts) == 2:
            k = _index(parts[1], ".html", self.config.pages)
            if k is None:
                return _small(404, "no such page")
            if kind == "p":
                return self._page_or_fault(d, k, conditionals)
            if kind == "big":
                return self.page(d, k, self.config.big_size)
            return self.page(d, k, min(self.page_size(d, k), 20_000))
        if kind == "doc" and len(parts) == 2:
            return Reply(200, [b"%PDF-1.4\n", self.filler[: self.config.pdf_size]],
                         content_type=b"application/pdf")
        if path == "/hostile.html":
            return Reply(200, [_HOSTILE.encode()])
        if kind == "calendar" and len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            return self._calendar(int(parts[1]), int(parts[2]))
        if kind == "fault" and len(parts) >= 2:
            return self._fault_route(d, parts[1:])
        return _small(404, "not found")

    def _page_or_fault(self, d: int, k: int, conditionals: tuple[str | None, str | None] = (None, None)) -> Reply:
        fault = self.page_fault(d, k)
        if fault is None:
            kind = self.nested_kind(d) if self.config.nested else None
            return self.live_page(d, k, conditionals) if kind is None else self.nested_page(d, k, kind)
        if fault in ("404", "410", "500"):
            return _small(int(fault), f"injected {fault}")
        if fault in ("429", "503"):
            reply = _small(int(fault), f"injected {fault}")
            reply.headers.append((b"Retry-After", str(self.config.retry_after).encode()))
            return reply
        if fault == "slow":
            reply = self.live_page(d, k, conditionals)
            reply.delay = self.config.slow_ms / 1000
            return reply
        if fault == "drop":
            return Reply(0, [], drop=True)
        if fault == "redirect":
            return _redirect(f"/fault/redirect/{self.config.redirect_hops}/{k}")
        if fault == "big":
            return self.page(d, k, self.config.big_size)
        return Reply(200, [b"%PDF-1.4\n", self.filler[: self.config.pdf_size]],
                     content_type=b"application/pdf")  # "pdf"

    # --- pages that change, validators, 304s (changes.py) ------------------

    def host_rules(self, d: int) -> HostRules:
        """Domain ``d``'s validators and lie (WebConfig.validators, .lies)."""
        c = self.config
        if not c.validators and not c.lies:
            return _PLAIN
        return HostRules(pick(c.validators, unit(c.seed, "validators", d)) or "none",
                         pick(c.lies, unit(c.seed, "lies", d)))

    def noisy(self, d: int, k: int) -> bool:
        return bool(self.config.noisy_share) and unit(self.config.seed, "noisy", d, k) < self.config.noisy_share

    def live_page(self, d: int, k: int, conditionals: tuple[str | None, str | None] = (None, None)) -> Reply:
        """Page k of domain d as it is now on the schedule clock: its
        version's body with the host's validators, or a 304 (RFC 9110 13.2.2,
        as the host's lie, if any, bends it). A page that never changes, is
        not noisy and whose host sends no validator is today's page."""
        rules = self.host_rules(d)
        changing = self.schedule.mean_s(d, k) is not None
        noisy = self.noisy(d, k)
        t = self.clock.now()
        if not changing and not noisy and rules.plain:
            reply = self.page(d, k)
            reply.version = reply.current = 0
            reply.at = t
            return reply
        version = self.schedule.version_at(d, k, t) if changing else 0
        headers, tag, modified = self._validators(d, k, version, t, rules)
        if rules.lie != "ignore_conditionals" and not_modified(tag, modified, *conditionals):
            return Reply(304, [], headers=headers, current=version, at=t)
        reply = self.page(d, k, version=version if changing else None, noise=self._noise(d, k) if noisy else b"")
        reply.headers[:0] = headers
        reply.version = reply.current = version
        reply.at = t
        return reply

    def _validators(self, d: int, k: int, version: int, t: float,
                    rules: HostRules) -> tuple[list[tuple[bytes, bytes]], str | None, float | None]:
        """The Date, ETag and Last-Modified headers of the page's ``version``
        at ``t``, and the ETag and Last-Modified (wall s) a 304 is judged on."""
        if rules.plain:
            return [], None, None
        wall = self.clock.wall
        headers = [(b"Date", http_date(wall(t)).encode())]
        tag = modified = None
        if rules.sends_etag:
            tag = etag(self.config.seed, d, k, 0 if rules.lie == "etag_frozen" else version, rules.weak)
            headers.append((b"ETag", tag.encode()))
        if rules.sends_last_modified:
            if rules.lie == "lm_now":
                modified = wall(t)
            elif rules.lie == "lm_frozen":
                modified = wall(0.0)
            else:
                modified = wall(self.schedule.version_time(d, k, version))
            headers.append((b"Last-Modified", http_date(modified).encode()))
        return headers, tag, modified

    def _noise(self, d: int, k: int) -> bytes:
        """A token new on every answer, in a script and a data- attribute."""
        self.tokens += 1
        token = hashlib.blake2b(repr((self.config.seed, d, k, self.tokens)).encode(), digest_size=8).hexdigest()
        return f'<script>var token = "{token}";</script><span data-token="{token}"></span>'.encode()

    def _fault_route(self, d: int, args: list[str]) -> Reply:
        kind, rest = args[0], args[1:]
        if kind in ("404", "410", "500"):
            return _small(int(kind), f"fault {kind}")
        if kind in ("429", "503"):
            reply = _small(int(kind), f"fault {kind}")
            seconds = rest[0] if rest and rest[0].isdigit() else str(self.config.retry_after)
            reply.headers.append((b"Retry-After", seconds.encode()))
            return reply
        if kind == "slow":
            ms = int(rest[0]) if rest and rest[0].isdigit() else self.config.slow_ms
            reply = _small(200, f"slow {ms} ms")
            reply.delay = ms / 1000
            return reply
        if kind == "drop":
            return Reply(0, [], drop=True)
        if kind == "redirect" and len(rest) == 2 and rest[0].isdigit() and rest[1].isdigit():
            hops, k = int(rest[0]), int(rest[1])
            if hops <= 0:
                return _redirect(f"/moved/{k}.html")
            return _redirect(f"/fault/redirect/{hops - 1}/{k}")
        if kind == "loop" and rest and rest[0] in ("0", "1"):
            return _redirect(f"/fault/loop/{1 - int(rest[0])}")
        if kind == "scheme" and len(rest) == 1 and rest[0].isalpha():  # a redirect to <scheme>://files.test/x
            return _redirect(f"{rest[0]}://files.test/x")
        if kind == "to" and len(rest) >= 2 and rest[1].isdigit():  # /fault/to/<host>/<port>/<path>
            return _redirect(f"http://{rest[0]}:{rest[1]}/{'/'.join(rest[2:])}")
        size = int(rest[0]) if rest and rest[0].isdigit() else 0
        if kind == "bomb" and 0 < size <= 4096:  # a small gzip body of <size> MiB
            return self._gzipped(self._bomb(size))
        if kind == "gzip" and 0 < size <= 100_000:  # a page of <size> KiB, gzipped
            return self._gzipped(gzip.compress(self.filler_page(size * 1024), 1))
        if kind == "headers" and 0 < size <= 100_000:  # <size> KiB of response headers
            reply = _small(200, f"{size} KiB of headers")
            reply.headers.append((b"X-Filler", b"x" * (size * 1024)))
            return reply
        return _small(404, "no such fault")

    def filler_page(self, size: int) -> bytes:
        head = b"<!DOCTYPE html><html><body><p>"
        filler = bytes(self.filler)
        text = (filler * (size // max(1, len(filler)) + 1))[: max(0, size - len(head))]
        return head + text

    def _bomb(self, mib: int) -> bytes:
        if mib not in self.bombs:
            # each MiB of zeros after a full flush compresses to the same
            # bytes: one MiB is compressed, its bytes repeated
            head, zeros = b"<!DOCTYPE html><html><body><p>", bytes(1 << 20)
            deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
            first = deflate.compress(head) + deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
            again = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
            crc = zlib.crc32(head)
            for _ in range(mib):
                crc = zlib.crc32(zeros, crc)
            size = (len(head) + (mib << 20)) & 0xFFFFFFFF
            self.bombs[mib] = (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + first + again * (mib - 1)
                               + deflate.flush() + struct.pack("<II", crc, size))
        return self.bombs[mib]

    @staticmethod
    def _gzipped(body: bytes) -> Reply:
        return Reply(200, [body], headers=[(b"Content-Encoding", b"gzip")])

    def _calendar(self, year: int, month: int) -> Reply:
        nxt = (year + month // 12, month % 12 + 1)
        prev = (year - (month == 1), (month - 2) % 12 + 1)
        body = (
            f"<!DOCTYPE html><html><body><h1>Calendar {year}-{month:02d}</h1>"
            f'<a href="/calendar/{nxt[0]}/{nxt[1]}">next month</a> '
            f'<a href="/calendar/{prev[0]}/{prev[1]}">previous month</a>'
            f"</body></html>\n"
        )
        return Reply(200, [body.encode()])


_PLAIN = HostRules()


def _index(name: str, suffix: str, limit: int) -> int | None:
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if not stem.isdigit() or (len(stem) > 1 and stem[0] == "0"):
        return None
    k = int(stem)
    return k if k < limit else None


def _small(status: int, text: str) -> Reply:
    return Reply(status, [f"<!DOCTYPE html><html><body><p>{text}</p></body></html>\n".encode()])


def _redirect(location: str, status: int = 302) -> Reply:
    reply = _small(status, f"moved to {location}")
    reply.headers.append((b"Location", location.encode()))
    return reply
