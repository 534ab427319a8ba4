"""robots.txt as RFC 9309 asks, fetched once per origin and shared through Redis.

Replaces Scrapy's RobotsTxtMiddleware (on with ``ROBOTSTXT_OBEY``). The first
process that needs an origin's robots.txt takes a short fetch claim in
Redis, downloads it and stores a record under ``<base>:robots:<origin>``;
every other request of any process waits for that fetch and reads the record.
What a fetch can lead to:

- 2xx: the rules, parsed with Protego from the first ``CRAWLER_ROBOTS_MAX_BYTES``
  (500 KiB) whatever the ``Content-Length``; kept ``CRAWLER_ROBOTS_TTL``.
- 3xx: a redirect hop. Each hop is a request the site sees, so it takes the
  domain's turn like a page: the request that found the redirect waits for
  the domain's next turn, which fetches the next hop. Hops may cross hosts
  and schemes (``http`` -> ``https``, apex -> ``www``); the rules found
  apply to the origin that was asked. A loop, more than five hops or a
  redirect to another scheme is "unavailable".
- 4xx but 429, and "unavailable" redirects: no restrictions.
- 5xx, 429, timeouts and network errors: "unreachable". The origin is
  disallowed *for now*: its requests wait in the frontier (counted
  ``crawler/robots/postponed``), the domain is parked, and robots.txt is
  tried again after ``CRAWLER_ROBOTS_RETRY`` seconds, doubling up to
  ``CRAWLER_ROBOTS_ERROR_TTL``. Once it answers, the waiting requests are
  crawled. Requests still waiting after ``CRAWLER_ROBOTS_UNREACHABLE_MAX``
  become dead letters (``robots_unreachable``). A request with a fallback
  URL (``crawler/fallback.py``: billion's seeds) whose robots.txt could not
  even connect goes to that URL instead.

Rules are matched for ``ROBOTSTXT_USER_AGENT``, else the product token of the
User-Agent, through an index when a group has many rules (``crawler/robots``);
a file over 16 KiB is parsed and indexed in a worker process, so neither
parsing nor matching holds the event loop; nor does Redis: the store's
round trips (a read, the fetch claim, the record, the claim's end) are made
on threads of the middleware's own (``_store``). A Crawl-delay, capped
at ``CRAWLER_ROBOTS_MAX_DELAY``, becomes the domain's minimum delay.
Disallowed requests are dropped and counted (``crawler/robots/disallowed``).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import random
import signal
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import urljoin, urlsplit

import redis
from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http.request import NO_CALLBACK

from crawler.clock import clock_of
from crawler.fallback import cannot_connect, fallback_request
from crawler.meta import ADDRESS, DEAD, DELAY, END, LEASE, MAX_PAGE_BYTES, ROBOTS
from crawler.middlewares.useragent import robots_agent
from crawler.robots import Rules, compile_rules
from crawler.worker import DISALLOWED
from crawler.connection import REDIS_ERRORS
from crawler.identity import domain_of
from crawler.worker import uses_frontier
from crawler.worker import session_of
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawler.worker import WorkerSession

logger = logging.getLogger(__name__)

MAX_HOPS = 5  # RFC 9309 2.3.1.2: at least five
_REDIRECTS = (301, 302, 303, 307, 308)
_FETCH_LOCK_MS = 60_000
_REDIS_WAIT = 5.0
_WAIT_STEP = 0.1
_LOCAL = 50_000  # origins whose rules a process keeps
#: and the bytes their indexes may hold together: a big file of wildcard rules
#: makes an index of megabytes (docs/operations.md), and 50,000 of them would not fit
_LOCAL_BYTES = 100 * 2**20
_LOCAL_TTL = 300.0
_WORKER_BYTES = 16_384  # robots.txt bodies from which parsing runs in a worker process
_DAY = 86_400.0
_REFUSED = "refused"
#: threads making the robots.txt store's round trips (``_store``): several
#: origins' records are read at once, each thread on a connection of its own
_STORE_THREADS = 4
_T = TypeVar("_T")

#: Signal: this process fetched ``origin``'s robots.txt and it gave rules
#: (``body``: the text read) or none (a 4xx, unusable redirects: ``body``
#: ""). Sent once per fetch, by the process that made it; the sitemap
#: middleware (``crawler/middlewares/sitemaps.py``) reads its ``Sitemap:`` lines.
robots_txt_read = object()


class Wait(NamedTuple):
    """No verdict yet: the request waits ``seconds`` in the frontier (``park``:
    its domain too), or, ``dead``, it has waited too long."""

    seconds: float = 0.0
    park: bool = False
    dead: bool = False
    connect: bool = False  # the server could not be connected to at all


class SharedRobotsMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not settings.getbool("ROBOTSTXT_OBEY") or not uses_frontier(crawler):
            raise NotConfigured
        self.crawler = crawler
        self.clock = clock_of(crawler)  # the cache's lifetime, the wait for a fetch, the fetch marks
        self.stats = crawler.stats
        self.ttl = setting(settings, "CRAWLER_ROBOTS_TTL")
        self.retry = setting(settings, "CRAWLER_ROBOTS_RETRY")
        self.retry_max = setting(settings, "CRAWLER_ROBOTS_ERROR_TTL")
        self.unreachable_max = setting(settings, "CRAWLER_ROBOTS_UNREACHABLE_MAX")
        self.max_bytes = setting(settings, "CRAWLER_ROBOTS_MAX_BYTES")
        self.max_delay = setting(settings, "CRAWLER_ROBOTS_MAX_DELAY")
        self.agent = robots_agent(settings)
        self.local: dict[str, tuple[Rules, float]] = {}  # origin -> (rules, monotonic expiry)
        self.local_bytes = 0  # the weight of the rules in ``local``
        self.fetching: dict[str, asyncio.Future[Rules | Wait]] = {}
        self.fetched: dict[str, tuple[float, float]] = {}  # origin -> last robots fetch began, ended
        self.pins: dict[str, Any] = {}  # origin -> the address its waiting request was charged to (meta ADDRESS)
        self.random = random.Random()
        self.workers: ProcessPoolExecutor | None = None
        self.io: ThreadPoolExecutor | None = None  # the robots.txt store's calls (_store)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedRobotsMiddleware:
        return cls(crawler)

    async def process_request(self, request: Request) -> Request | None:
        if request.meta.get("dont_obey_robotstxt") or request.meta.get(ROBOTS):
            return None
        parts = urlsplit(request.url)
        if parts.scheme not in ("http", "https"):
            return None
        origin = f"{parts.scheme}://{parts.netloc}"
        if ADDRESS in request.meta:  # the robots.txt this request waits for goes where its turn was charged
            self.pins[origin] = request.meta[ADDRESS]
        asked = self._now()
        try:
            verdict = await self.verdict(origin)
        except REDIS_ERRORS:
            # Redis away: ask again later; the scheduler keeps the request
            # until Redis can store it in the delayed set
            self.stats.inc_value("crawler/robots/redis_unavailable")
            self._turn_taken(request, origin, asked)
            return self._hand_back(request, _REDIS_WAIT)
        except BaseException:
            self.fetched.pop(origin, None)
            raise
        finally:
            self.pins.pop(origin, None)  # used by the fetch, if there was one
        fetched = self._turn_taken(request, origin, asked)
        if isinstance(verdict, Wait):
            fallback = fallback_request(request) if verdict.connect else None
            if fallback is not None:  # e.g. an https:// seed of a site that only speaks http
                self.stats.inc_value(f"crawler/fallback/{fallback.url.split(':', 1)[0]}")
                logger.info("robots.txt of %s cannot connect: trying %s", origin, fallback.url)
                return fallback
            return self._wait(request, verdict)
        if not verdict.allowed(request.url):
            self.stats.inc_value("crawler/robots/disallowed")
            request.meta[END] = DISALLOWED  # the frontier counts it as it acknowledges the lease
            raise IgnoreRequest("Forbidden by robots.txt")
        if fetched is not None and LEASE in request.meta:
            self.stats.inc_value("crawler/robots/handed_back")
            return self._hand_back(request, 0)  # the page waits for the domain's next turn
        return None

    def _turn_taken(self, request: Request, origin: str, asked: float) -> tuple[float, float] | None:
        """When robots.txt (or a hop of it) was fetched for this request, since
        it asked: tell its lease, the fetch was its turn at the domain. The
        mark is taken on every path out of ``process_request`` (a Redis error
        too), so ``fetched`` holds only origins being asked about."""
        fetched = self.fetched.pop(origin, None)
        if fetched is None or fetched[1] < asked:
            return None
        session = session_of(self.crawler)
        lease = session.lease_of(request) if session is not None else None
        if lease is not None:
            lease.fetched(*fetched)
        return fetched

    def _hand_back(self, request: Request, seconds: float) -> Request:
        again = request.replace(dont_filter=True)
        again.meta[DELAY] = seconds
        return again

    def _wait(self, request: Request, wait: Wait) -> Request:
        session = session_of(self.crawler)
        if wait.dead:
            self.stats.inc_value("crawler/robots/unreachable_dead")
            if session is not None:
                request.meta[DEAD] = True
                session.dead_letter(request, "robots_unreachable")
            raise IgnoreRequest("robots.txt unreachable for longer than CRAWLER_ROBOTS_UNREACHABLE_MAX")
        if wait.park and session is not None:
            session.push_domain(request.url, wait.seconds)
            session.count("robots_postponed")
            self.stats.inc_value("crawler/robots/postponed")
        return self._hand_back(request, wait.seconds)

    def known_disallowed(self, url: str) -> bool:
        """True if the host's rules are known here and refuse ``url``: a link
        that need not be queued (it would spend a politeness slot for nothing)."""
        end = url.find("/", url.find("//") + 2)
        cached = self.local.get(url if end == -1 else url[:end])
        return cached is not None and not cached[0].allowed(url)

    async def verdict(self, origin: str) -> Rules | Wait:
        """The rules of ``origin``, or how long its requests wait for them."""
        cached = self.local.get(origin)
        if cached is not None and cached[1] > self.clock.monotonic():
            return cached[0]
        pending = self.fetching.get(origin)
        if pending is not None:  # another request of this process is on it
            return await asyncio.shield(pending)
        future: asyncio.Future[Rules | Wait] = asyncio.get_running_loop().create_future()
        self.fetching[origin] = future
        try:
            try:
                result = await self._shared(origin)
            except redis.exceptions.OutOfMemoryError:
                # Redis is full: fetch for this process alone rather than stop
                self.stats.inc_value("crawler/robots/unshared")
                result = await self._step(origin, None, self.clock.time(), store=None)
            future.set_result(result)
            return result
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            del self.fetching[origin]
            if not future.done():
                future.cancel()
            elif future.exception() is not None:
                future.exception()  # retrieved: no "never retrieved" warning

    def _session(self) -> WorkerSession | None:
        """The worker session; None once the scheduler has closed (a shutdown
        with requests in flight): nothing more is written for them."""
        return session_of(self.crawler)

    async def _shared(self, origin: str) -> Rules | Wait:
        session = self._session()
        if session is None:
            raise IgnoreRequest("the crawl closed while its robots.txt was read")
        store = session.robots
        deadline = self.clock.monotonic() + _FETCH_LOCK_MS / 1000
        token = uuid.uuid4().hex
        while True:
            record, ttl_ms, now = await self._store(store.get, origin)
            found = await self._stored(origin, record, ttl_ms, now)
            if found is not None:
                return found
            if await self._store(store.claim, origin, token, _FETCH_LOCK_MS):
                break
            if self.clock.monotonic() > deadline:
                break  # the fetcher died: fetch it ourselves
            await self._pause(_WAIT_STEP)
        try:
            # another process may have stored it between our read and our claim
            record, ttl_ms, now = await self._store(store.get, origin)
            found = await self._stored(origin, record, ttl_ms, now)
            if found is not None:
                return found
            return await self._step(origin, record, now, store=store)
        finally:
            await self._store(store.done, origin, token)

    async def _stored(self, origin: str, record: dict[str, Any] | None, ttl_ms: int, now: float) -> Rules | Wait | None:
        """What a stored record decides, or None when it is time to fetch."""
        if record is None:
            return None
        mode = record["mode"]
        if mode in ("parse", "allow"):
            self.stats.inc_value("crawler/robots/shared_hits")
            return await self._remember(origin, record, max(ttl_ms, 1000) / 1000)
        if mode == "unreachable":
            if now - record["since"] >= self.unreachable_max:
                return Wait(dead=True)
            if record["retry_at"] > now:
                return Wait(record["retry_at"] - now, park=True, connect=record.get("connect", False))
        return None  # a redirect to follow, or an unreachable one due for a new try

    async def _step(self, origin: str, record: dict[str, Any] | None, now: float, *, store: Any) -> Rules | Wait:
        """Fetch the next URL of ``origin``'s robots.txt: the file itself, or
        the next hop of a redirect; store and return what it leads to."""
        chain: list[str] = record["chain"] if record and record["mode"] == "redirect" else []
        url = record["next"] if record and record["mode"] == "redirect" else f"{origin}/robots.txt"
        previous = record if record and record["mode"] == "unreachable" else None
        response, error, connect = await self._fetch(origin, url)
        if error is _REFUSED:
            # refused by the crawler's own rules (an address it may not reach):
            # the page would be refused as surely, where that is counted
            self.stats.inc_value("crawler/robots/refused")
            return await self._final(origin, {"mode": "allow"}, None)  # this process only: nothing to share
        status = response.status if response is not None else None
        if status is not None:
            self.stats.inc_value(f"crawler/robots/status/{status}")
        if status in _REDIRECTS:
            location = response.headers.get(b"Location")  # type: ignore[union-attr]
            target = urljoin(url, location.decode("latin-1").strip()) if location else ""
            self._note_hop(origin, url)
            if target and not target.startswith(("http://", "https://")):
                target = ""
            if target and len(chain) < MAX_HOPS and target not in chain and target != url:
                self.stats.inc_value("crawler/robots/redirects")
                hop = {"mode": "redirect", "next": target, "chain": [*chain, url]}
                if store is not None:
                    await self._store(store.put, origin, hop, self.ttl)
                    return Wait(0.0)
                return await self._step(origin, hop, now, store=None)
            self.stats.inc_value("crawler/robots/redirects_unavailable")
            logger.info("robots.txt of %s: %s after %d redirects: no restrictions (RFC 9309 2.3.1.3)",
                        origin, "a loop" if target in chain or target == url else "no end" if target
                        else "an unusable Location", len(chain) + 1)
            rules = await self._final(origin, {"mode": "allow", "status": status, "reason": "redirects"}, store)
            self._read(origin, "")
            return rules
        if status is not None and 200 <= status < 300:
            body = response.body[:self.max_bytes].decode("utf-8", errors="replace")  # type: ignore[union-attr]
            if len(response.body) > self.max_bytes or "download_stopped" in response.flags:  # type: ignore[union-attr]
                self.stats.inc_value("crawler/robots/truncated")
            rules = await self._final(origin, {"mode": "parse", "status": status, "body": body}, store)
            self._read(origin, body)
            self._apply_crawl_delay(origin, rules)  # its Redis writes are the session's: never raised here
            return rules
        if status is not None and 400 <= status < 500 and status != 429:
            rules = await self._final(origin, {"mode": "allow", "status": status}, store)
            self._read(origin, "")
            return rules
        return await self._unreachable(origin, previous, now, status, error, connect, store)

    def _read(self, origin: str, body: str) -> None:
        self.crawler.signals.send_catch_log(signal=robots_txt_read, origin=origin, body=body)

    async def _unreachable(self, origin: str, previous: dict[str, Any] | None, now: float, status: int | None,
                     error: str | None, connect: bool, store: Any) -> Wait:
        attempts = previous["attempts"] + 1 if previous else 1
        since = previous["since"] if previous else now
        wait = min(self.retry_max, self.retry * 2 ** (attempts - 1)) * self.random.uniform(0.9, 1.1)
        self.stats.inc_value("crawler/robots/unreachable")
        logger.info("robots.txt of %s unreachable (%s), try %d: its requests wait %.0fs",
                    origin, status or error, attempts, wait)
        if now - since >= self.unreachable_max:
            return Wait(dead=True)
        if store is not None:
            record = {"mode": "unreachable", "status": status, "error": error, "connect": connect,
                      "since": since, "attempts": attempts, "retry_at": now + wait}
            await self._store(store.put, origin, record, max(self.unreachable_max - (now - since), wait) + _DAY)
        return Wait(wait, park=True, connect=connect)

    async def _final(self, origin: str, record: dict[str, Any], store: Any) -> Rules:
        """A verdict for ``CRAWLER_ROBOTS_TTL``: stored for every process
        (unless ``store`` is None) and kept here."""
        if store is not None:
            await self._store(store.put, origin, record, self.ttl)
        return await self._remember(origin, record, self.ttl)

    async def _store(self, call: Callable[..., _T], *args: Any) -> _T:
        """``call(*args)``, one round trip to the robots.txt store, on a
        thread of this middleware's: the loop runs on while Redis answers.
        Each origin met costs four or five of them, and Scrapy's engine starts
        up to 64 requests in one turn of the loop (``TURN_MAX``): made on the
        reactor's thread, the first contacts with a few thousand domains
        held the loop 100-260 ms at a time while Redis answered, longer the
        busier Redis was (docs/benchmarks.md, "The loop's worst stall")."""
        if self.io is None:
            self.io = ThreadPoolExecutor(_STORE_THREADS, thread_name_prefix="robots-store")
        return await asyncio.get_running_loop().run_in_executor(self.io, call, *args)

    async def _fetch(self, origin: str, url: str) -> tuple[Response | None, str | None, bool]:
        """The response, or the error and whether it was one of connecting."""
        request = Request(
            url,
            priority=1000,
            callback=NO_CALLBACK,
            meta={"dont_obey_robotstxt": True, ROBOTS: True, "dont_redirect": True, "dont_retry": True,
                  "handle_httpstatus_all": True, "allow_offsite": True, MAX_PAGE_BYTES: self.max_bytes,
                  # read up to the cap whatever the length says (RFC 9309 2.5)
                  "download_maxsize": 0},
        )
        pin = self.pins.pop(origin, None)
        if pin is not None:
            request.meta[ADDRESS] = pin
        self.stats.inc_value("crawler/robots/fetched")
        began = self._now()
        try:
            response: Response = await self.crawler.engine.download_async(request)  # type: ignore[union-attr]
        except IgnoreRequest:
            return None, _REFUSED, False  # it never left: not the domain's turn
        except Exception as exc:
            self.fetched[origin] = (began, self._now())
            return None, f"{type(exc).__name__}: {exc}", cannot_connect(exc)
        self.fetched[origin] = (began, self._now())
        return response, None, False

    def _now(self) -> float:
        """The crawl's clock (``crawler/clock.py``): what ``note_fetch`` reads ages on."""
        return self.clock.monotonic()

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` on the crawl's clock (its timers: a test's clock
        moves it), while another process fetches robots.txt."""
        from twisted.internet.task import deferLater

        await deferLater(self.clock.timers, seconds).asFuture(asyncio.get_running_loop())

    def _note_hop(self, origin: str, url: str) -> None:
        """A hop to another domain took that domain's turn too."""
        hop_domain = domain_of(url)
        if hop_domain != domain_of(origin + "/"):
            session = self._session()
            if session is not None:
                session.push_domain(url, session.domain_delay)

    async def _remember(self, origin: str, record: dict[str, Any], ttl: float) -> Rules:
        body = record.get("body", "")
        if len(body) > _WORKER_BYTES:
            rules = Rules.from_compiled(await self._compile(body), self.agent)
        else:
            rules = Rules(record, self.agent)
        self._keep(origin, rules, ttl)
        return rules

    async def _compile(self, body: str) -> str:
        """Parse and index a big file in a worker process: 0.1-0.2 s of
        Python that a thread would run against the reactor for the GIL."""
        loop = asyncio.get_running_loop()
        if self.workers is None:
            self.workers = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                               initializer=_ignore_interrupts)
        try:
            return await loop.run_in_executor(self.workers, compile_rules, body, self.agent)
        except BrokenProcessPool:
            self.workers = None
            self.stats.inc_value("crawler/robots/worker_lost")
            return await loop.run_in_executor(None, compile_rules, body, self.agent)

    def spider_closed(self) -> None:
        if self.io is not None:  # the calls under way end as they would have (a claim still ended)
            self.io.shutdown(wait=False)
            self.io = None
        if self.workers is not None:
            self.workers.shutdown(wait=False, cancel_futures=True)
            self.workers = None

    def _keep(self, origin: str, rules: Rules, ttl: float) -> None:
        """Keep ``origin``'s rules here (first in, first out past ``_LOCAL``
        origins or ``_LOCAL_BYTES``; a refresh goes to the back)."""
        old = self.local.pop(origin, None)
        if old is not None:
            self.local_bytes -= old[0].weight
        while self.local and (len(self.local) >= _LOCAL or self.local_bytes + rules.weight > _LOCAL_BYTES):
            self.local_bytes -= self.local.pop(next(iter(self.local)))[0].weight
        self.local[origin] = (rules, self.clock.monotonic() + min(ttl, _LOCAL_TTL))
        self.local_bytes += rules.weight

    def _apply_crawl_delay(self, origin: str, rules: Rules) -> None:
        delay = rules.crawl_delay()
        if delay is None:
            return
        capped = min(delay, self.max_delay)
        session = self._session()
        if session is None:
            return
        domain = domain_of(origin + "/")
        session.set_robots_delay(domain, capped)
        # the request that asked for robots.txt is about to go: the next one waits
        session.push_domain(origin + "/", capped)
        self.stats.inc_value("crawler/robots/crawl_delays")
        logger.info("robots.txt of %s asks a Crawl-delay of %gs (applied: %gs)", origin, delay, capped)


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the crawl process decides when to stop


def shared_robots(crawler: Crawler) -> SharedRobotsMiddleware | None:
    """The crawl's robots.txt middleware, for link filters
    (:meth:`SharedRobotsMiddleware.known_disallowed`); None when it is off."""
    downloader = getattr(crawler.engine, "downloader", None)
    for middleware in getattr(getattr(downloader, "middleware", None), "middlewares", ()):
        if isinstance(middleware, SharedRobotsMiddleware):
            return middleware
    return None
