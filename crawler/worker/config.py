"""The frontier's settings, read once through the registry
(:mod:`crawler.settings_registry`), which checks them.

Recrawl (``CRAWLER_RECRAWL*``, design/recrawl.md C.1, C.5, E) is checked
across settings here, each failure a one-line :class:`SettingsError`:
``CRAWLER_RECRAWL_MIN`` at least ``CRAWLER_DOMAIN_DELAY``,
``CRAWLER_RECRAWL_MAX`` at least ``CRAWLER_RECRAWL_MIN``; an
``CRAWLER_RECRAWL_INTERVAL`` outside [MIN, MAX] is clamped into it with a
warning; ``CRAWLER_RECRAWL_DOMAIN_MAX`` 0 is derived from the delay
(``share × MAX / delay``: what a domain's revisit share can visit within MAX;
0, no cap, without a delay). With ``CRAWLER_RECRAWL`` off nothing is checked
and the record is ``Recrawl()`` (off)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy.settings import BaseSettings
from scrapy.utils.python import global_object_name

from crawler.clock import SYSTEM, Clock
from crawler.settings_registry import SettingsError, lease_seconds, setting
from crawler.worker.visit import Rules
from crawler.store import AddressPoliteness, Dedup, Frontier, Politeness
from crawler.store.records import Recrawl

if TYPE_CHECKING:
    import redis

    from crawler.store import Keys


logger = logging.getLogger(__name__)

__all__ = ["FrontierSettings", "SettingsError", "adopt_scrapy_delays", "on_loss_policy", "warn_ignored"]  # SettingsError: for older imports


def _overrides(settings: BaseSettings) -> dict[str, dict[str, float]]:
    raw = setting(settings, "CRAWLER_DOMAIN_OVERRIDES")  # checked by the registry
    return {str(domain).lower(): {k: float(v) for k, v in policy.items()} for domain, policy in raw.items()}


@dataclass(frozen=True)
class FrontierSettings:
    prefix: str
    shard: int
    dedup: Dedup
    politeness: Politeness
    addresses: AddressPoliteness
    overrides: dict[str, dict[str, float]]
    domain_cap: int
    #: records per block of the compact tier (``crawler/store/tiers.py``)
    block: int
    #: the order of due domains ("due", "rank") and the ranking file (docs/frontier.md)
    order: str
    #: the order of a domain's requests: "fifo", or "inlinks" (crawler/worker/_inlinks.py)
    within: str
    ranks: str | None
    domain_budget: int
    #: a budget by rank: the most a domain's weight raises ``domain_budget`` to (0: a flat budget)
    budget_max: int
    forward: bool
    shard_urls: dict[int, str]
    lease_seconds: float
    prefetch: int
    batch: int
    dedup_local: int
    flush_interval: float
    poll_interval: float
    ack_interval: float
    delay_from: str
    persist: bool
    flush_on_start: bool
    idle_before_close: float
    tracking: list[str]
    #: how the frontier revisits (``Frontier.open()`` writes it into ``:meta``)
    recrawl: Recrawl = Recrawl()
    #: what the worker's history writes follow (``crawler/worker/visit.py``)
    recrawl_rules: Rules = Rules()
    #: ``adaptive``: revisits per day of a domain without a delay (0: no budget)
    recrawl_budget: float = 0.0

    def frontier(self, client: redis.Redis, keys: Keys, clock: Clock = SYSTEM, shards: int = 1) -> Frontier:
        """The frontier at ``keys`` (one of ``shards``) as these settings describe it."""
        return Frontier(client, keys, dedup=self.dedup, politeness=self.politeness, overrides=self.overrides,
                        domain_cap=self.domain_cap, domain_budget=self.domain_budget, budget_max=self.budget_max,
                        block=self.block, order=self.order, within=self.within,
                        lease_seconds=self.lease_seconds, addresses=self.addresses, shards=shards, clock=clock,
                        recrawl=self.recrawl)

    @property
    def weighs(self) -> bool:
        """Domains are weighed (a ranking file loaded, the domains linking to
        each counted): for the rank order, or a budget by rank."""
        return self.order == "rank" or self.budget_max > self.domain_budget > 0

    def revisit_budget(self, domain: str) -> float | None:
        """``adaptive``: the revisits a day ``domain``'s pages share (C.5, E):
        ``SHARE × 86400 / (delay + 1)`` at its delay (its override's, else
        ``CRAWLER_DOMAIN_DELAY``), ``CRAWLER_RECRAWL_BUDGET`` without a delay,
        None when that is 0 too (each page kept ``CRAWLER_RECRAWL_FRESHNESS``
        fresh)."""
        delay = self.overrides.get(domain, {}).get("delay", self.politeness.delay)
        if delay > 0:
            return self.recrawl.share * 86400 / (delay + 1)
        return self.recrawl_budget or None

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FrontierSettings:
        """Read through the registry, which checks each value's form and range."""
        recrawl = recrawl_of(settings)
        prefetch = setting(settings, "CRAWLER_PREFETCH")
        if prefetch is None:
            # 0 is Scrapy's "no limit": the cap then follows the due domains (extensions/concurrency.py)
            concurrent = settings.getint("CONCURRENT_REQUESTS", 16)
            prefetch = concurrent if concurrent > 0 else 128
        return cls(
            prefix=setting(settings, "CRAWLER_KEY_PREFIX"),
            shard=setting(settings, "CRAWLER_SHARD"),
            dedup=Dedup(
                setting(settings, "CRAWLER_DEDUP"),
                setting(settings, "CRAWLER_DEDUP_CAPACITY"),
                setting(settings, "CRAWLER_BLOOM_ERROR_RATE"),
            ),
            politeness=Politeness(
                setting(settings, "CRAWLER_DOMAIN_RATE"),
                setting(settings, "CRAWLER_DOMAIN_BURST"),
                setting(settings, "CRAWLER_DOMAIN_DELAY"),
                setting(settings, "CRAWLER_DELAY_FACTOR"),
                setting(settings, "CRAWLER_DELAY_MAX"),
            ),
            addresses=AddressPoliteness(
                setting(settings, "CRAWLER_IP_DELAY"),
                setting(settings, "CRAWLER_IP_SHARED_DELAY"),
                setting(settings, "CRAWLER_IP_SHARED_CONCURRENCY"),
                setting(settings, "CRAWLER_IP_SHARED_MIN_DOMAINS"),
                setting(settings, "CRAWLER_DNS_TTL"),
                setting(settings, "CRAWLER_DNS_NX_RETRIES"),
                (settings.getfloat("DNS_TIMEOUT") or 60.0) + 5.0,
            ),
            overrides=_overrides(settings),
            domain_cap=setting(settings, "CRAWLER_DOMAIN_QUEUE_CAP"),
            block=setting(settings, "CRAWLER_FRONTIER_BLOCK"),
            order=setting(settings, "CRAWLER_DOMAIN_ORDER"),
            within=setting(settings, "CRAWLER_WITHIN_ORDER"),
            ranks=setting(settings, "CRAWLER_RANKS"),
            domain_budget=setting(settings, "CRAWLER_DOMAIN_BUDGET"),
            budget_max=setting(settings, "CRAWLER_DOMAIN_BUDGET_MAX"),
            forward=setting(settings, "CRAWLER_FORWARD_LINKS"),
            shard_urls={int(k): str(v) for k, v in setting(settings, "CRAWLER_SHARD_REDIS_URLS").items()},
            lease_seconds=lease_seconds(settings),
            prefetch=prefetch,
            batch=setting(settings, "CRAWLER_ENQUEUE_BATCH"),
            dedup_local=setting(settings, "CRAWLER_DEDUP_LOCAL"),
            flush_interval=setting(settings, "CRAWLER_FLUSH_INTERVAL"),
            poll_interval=setting(settings, "CRAWLER_POLL_INTERVAL"),
            ack_interval=setting(settings, "CRAWLER_ACK_INTERVAL"),
            delay_from=setting(settings, "CRAWLER_DELAY_FROM"),
            persist=setting(settings, "SCHEDULER_PERSIST"),
            flush_on_start=setting(settings, "SCHEDULER_FLUSH_ON_START"),
            idle_before_close=setting(settings, "SCHEDULER_IDLE_BEFORE_CLOSE"),
            tracking=setting(settings, "CRAWLER_TRACKING_PARAMS"),
            recrawl=recrawl,
            recrawl_rules=Rules.of(recrawl, setting(settings, "CRAWLER_RECRAWL_ENTRY_MAX"),
                                   setting(settings, "CRAWLER_RECRAWL_FRESHNESS")),
            recrawl_budget=setting(settings, "CRAWLER_RECRAWL_BUDGET"),
        )


def recrawl_of(settings: BaseSettings) -> Recrawl:
    """The ``Recrawl`` record of ``CRAWLER_RECRAWL*``, checked across
    settings (see the module's docstring); ``Recrawl()`` when off."""
    mode = setting(settings, "CRAWLER_RECRAWL")
    if mode == "off":
        return Recrawl()
    delay = setting(settings, "CRAWLER_DOMAIN_DELAY")
    low, high = setting(settings, "CRAWLER_RECRAWL_MIN"), setting(settings, "CRAWLER_RECRAWL_MAX")
    interval, share = setting(settings, "CRAWLER_RECRAWL_INTERVAL"), setting(settings, "CRAWLER_RECRAWL_SHARE")
    if low < delay:
        raise SettingsError(f"CRAWLER_RECRAWL_MIN ({low:g} s) must be at least CRAWLER_DOMAIN_DELAY ({delay:g} s)")
    if high < low:
        raise SettingsError(f"CRAWLER_RECRAWL_MAX ({high:g} s) must be at least CRAWLER_RECRAWL_MIN ({low:g} s)")
    if not low <= interval <= high:
        clamped = min(max(interval, low), high)
        logger.warning("CRAWLER_RECRAWL_INTERVAL (%g s) is outside [CRAWLER_RECRAWL_MIN, CRAWLER_RECRAWL_MAX] = "
                       "[%g, %g]: %g s is used", interval, low, high, clamped)
        interval = clamped
    domain_max = setting(settings, "CRAWLER_RECRAWL_DOMAIN_MAX")
    if not domain_max and delay > 0:
        domain_max = max(1, int(share * high / delay))  # share × 86400 / delay × MAX in days
    return Recrawl(mode=mode, interval=float(interval), min=float(low), max=float(high), share=float(share),
                   max_tracked=setting(settings, "CRAWLER_RECRAWL_MAX_TRACKED"), domain_max=domain_max,
                   distrust=float(setting(settings, "CRAWLER_RECRAWL_DISTRUST")))


#: settings of scrapy-redis and Scrapy that this scheduler does not read
_IGNORED = {
    "SCHEDULER_QUEUE_CLASS": "the frontier keeps one queue per domain in Redis (CRAWLER_DOMAIN_* settings)",
    "SCHEDULER_QUEUE_KEY": "the frontier's keys are <CRAWLER_KEY_PREFIX>:{<spider>:<shard>}:...",
    "SCHEDULER_SERIALIZER": "requests travel as msgpack (crawler.serializers)",
    "SCHEDULER_DUPEFILTER_KEY": "dedup happens in the frontier (CRAWLER_DEDUP)",
}


def on_loss_policy(settings: BaseSettings) -> str:
    """``CRAWLER_ON_FRONTIER_LOSS`` (``stop`` or ``continue``, the registry checks it)."""
    return str(setting(settings, "CRAWLER_ON_FRONTIER_LOSS"))


def warn_ignored(settings: BaseSettings) -> None:
    for name, instead in _IGNORED.items():
        if settings.get(name) is not None:
            logger.warning("%s is ignored: %s", name, instead)
    dupefilter = settings.get("DUPEFILTER_CLASS")
    name = dupefilter if isinstance(dupefilter, str) else global_object_name(dupefilter)
    if name not in ("scrapy.dupefilters.BaseDupeFilter", "scrapy.dupefilters.RFPDupeFilter"):
        logger.warning("DUPEFILTER_CLASS %s is not used: the frontier dedups in Redis by the SHA-256 "
                       "of canonical URLs (CRAWLER_DEDUP)", name)


def adopt_scrapy_delays(settings: BaseSettings, spidercls: type | None = None) -> list[str]:
    """Scrapy's per-process delays made the frontier's shared ones, in place
    (the addon calls it before any component is built); one line for the log
    per setting taken over.

    ``DOWNLOAD_DELAY`` (or the spider's ``download_delay`` attribute) becomes
    ``CRAWLER_DOMAIN_DELAY``, the minimum between two requests to one domain
    across every process, unless ``CRAWLER_DOMAIN_DELAY`` is set; Scrapy's own
    per-process ``DOWNLOAD_DELAY`` is then set to 0 so that it does not apply
    a second time in each process (the attribute cannot be: it still applies
    per process too). ``RANDOMIZE_DOWNLOAD_DELAY`` is not applied to the
    shared delay: it would shorten it to half. AutoThrottle becomes the
    adaptive delay (``CRAWLER_DELAY_FACTOR`` = 1 / ``AUTOTHROTTLE_TARGET_CONCURRENCY``,
    ``CRAWLER_DELAY_MAX`` = ``AUTOTHROTTLE_MAX_DELAY``, floor ``DOWNLOAD_DELAY``)
    and Scrapy's per-process AutoThrottle is turned off."""
    said = []
    attribute = getattr(spidercls, "download_delay", None) if spidercls is not None else None
    explicit = settings.get("CRAWLER_DOMAIN_DELAY") is not None
    if isinstance(attribute, int | float) and not isinstance(attribute, bool) and attribute > 0 and not explicit:
        settings.set("CRAWLER_DOMAIN_DELAY", float(attribute), "spider")
        said.append(f"the spider's download_delay = {attribute:g} is the delay between two requests to one "
                    "domain across every process (CRAWLER_DOMAIN_DELAY); it also holds per process")
    delay = setting(settings, "DOWNLOAD_DELAY")
    if delay > 0 and settings.get("CRAWLER_DOMAIN_DELAY") is None:
        priority = settings.getpriority("DOWNLOAD_DELAY")
        settings.set("CRAWLER_DOMAIN_DELAY", delay, priority)
        settings.set("DOWNLOAD_DELAY", 0, priority)  # not a second time in each process
        said.append(f"DOWNLOAD_DELAY = {delay:g} is the delay between two requests to one domain across every "
                    "process (CRAWLER_DOMAIN_DELAY), never shortened by RANDOMIZE_DOWNLOAD_DELAY")
    if setting(settings, "AUTOTHROTTLE_ENABLED"):
        priority = settings.getpriority("AUTOTHROTTLE_ENABLED")
        factor = 1 / setting(settings, "AUTOTHROTTLE_TARGET_CONCURRENCY")
        cap = setting(settings, "AUTOTHROTTLE_MAX_DELAY")
        if settings.get("CRAWLER_DELAY_FACTOR") is None:
            settings.set("CRAWLER_DELAY_FACTOR", factor, priority)
        if settings.get("CRAWLER_DELAY_MAX") is None:
            settings.set("CRAWLER_DELAY_MAX", cap, priority)
        settings.set("AUTOTHROTTLE_ENABLED", False, priority)  # Scrapy's per-process one: off
        said.append(f"AutoThrottle is the shared adaptive delay: CRAWLER_DELAY_FACTOR = "
                    f"{setting(settings, 'CRAWLER_DELAY_FACTOR'):g}, CRAWLER_DELAY_MAX = "
                    f"{setting(settings, 'CRAWLER_DELAY_MAX'):g}, floor CRAWLER_DOMAIN_DELAY = "
                    f"{setting(settings, 'CRAWLER_DOMAIN_DELAY'):g} (AUTOTHROTTLE_START_DELAY is not used)")
    return said
