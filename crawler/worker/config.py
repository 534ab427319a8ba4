"""The frontier's settings, read once through the registry
(:mod:`crawler.settings_registry`), which checks them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy.settings import BaseSettings
from scrapy.utils.python import global_object_name

from crawler.clock import SYSTEM, Clock
from crawler.settings_registry import SettingsError, lease_seconds, setting
from crawler.store import AddressPoliteness, Dedup, Frontier, Politeness

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
    domain_budget: int
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

    def frontier(self, client: redis.Redis, keys: Keys, clock: Clock = SYSTEM, shards: int = 1) -> Frontier:
        """The frontier at ``keys`` (one of ``shards``) as these settings describe it."""
        return Frontier(client, keys, dedup=self.dedup, politeness=self.politeness, overrides=self.overrides,
                        domain_cap=self.domain_cap, domain_budget=self.domain_budget,
                        lease_seconds=self.lease_seconds, addresses=self.addresses, shards=shards, clock=clock)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FrontierSettings:
        """Read through the registry, which checks each value's form and range."""
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
            domain_budget=setting(settings, "CRAWLER_DOMAIN_BUDGET"),
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
        )


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
