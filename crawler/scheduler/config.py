"""The frontier's settings, read and checked once."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from scrapy.settings import BaseSettings
from scrapy.utils.python import global_object_name

from crawler.scheduler.frontier import DEDUP_MODES, Dedup, Frontier, Politeness
from crawler.scheduler.marks import DELAY_FROM
from crawler.settings_registry import BY_NAME, setting

if TYPE_CHECKING:
    import redis

    from crawler.scheduler.keys import Keys

logger = logging.getLogger(__name__)


class SettingsError(ValueError):
    """A setting has a value of the wrong form; the message names it."""


def _number(settings: BaseSettings, name: str, default: float | None = None, *, minimum: float = 0.0,
            integer: bool = False) -> Any:
    """``name`` as a number >= ``minimum``; ``default`` only where it is
    computed (else the registry's)."""
    raw = settings.get(name, BY_NAME[name].default if default is None else default)
    try:
        value = int(raw) if integer else float(raw)
    except (TypeError, ValueError):
        kind = "an integer" if integer else "a number"
        raise SettingsError(f"{name} must be {kind} >= {minimum:g}, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name} must be >= {minimum:g}, got {raw!r}")
    return value


def _overrides(settings: BaseSettings) -> dict[str, dict[str, float]]:
    name = "CRAWLER_DOMAIN_OVERRIDES"
    try:
        raw = settings.getdict(name)
    except (TypeError, ValueError):
        raise SettingsError(f"{name} must be a dict of domain -> {{rate, burst, delay}}") from None
    result: dict[str, dict[str, float]] = {}
    for domain, policy in raw.items():
        if not isinstance(policy, dict) or not set(policy) <= {"rate", "burst", "delay"}:
            raise SettingsError(f"{name}[{domain!r}] must be a dict with keys rate, burst, delay")
        try:
            result[str(domain).lower()] = {k: float(v) for k, v in policy.items()}
        except (TypeError, ValueError):
            raise SettingsError(f"{name}[{domain!r}] values must be numbers") from None
    return result


def _shard_urls(settings: BaseSettings) -> dict[int, str]:
    name = "CRAWLER_SHARD_REDIS_URLS"
    try:
        raw = settings.getdict(name)
        return {int(k): str(v) for k, v in raw.items()}
    except (TypeError, ValueError):
        raise SettingsError(f"{name} must be a dict of shard number -> REDIS_URL") from None


@dataclass(frozen=True)
class FrontierSettings:
    prefix: str
    shard: int
    dedup: Dedup
    politeness: Politeness
    overrides: dict[str, dict[str, float]]
    domain_cap: int
    domain_budget: int
    forward: bool
    shard_urls: dict[int, str]
    lease_seconds: float
    prefetch: int
    batch: int
    flush_interval: float
    poll_interval: float
    ack_interval: float
    delay_from: str
    persist: bool
    flush_on_start: bool
    idle_before_close: float
    tracking: list[str]

    def frontier(self, client: redis.Redis, keys: Keys) -> Frontier:
        """The frontier at ``keys`` as these settings describe it."""
        return Frontier(client, keys, dedup=self.dedup, politeness=self.politeness, overrides=self.overrides,
                        domain_cap=self.domain_cap, domain_budget=self.domain_budget,
                        lease_seconds=self.lease_seconds)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FrontierSettings:
        mode = str(setting(settings, "CRAWLER_DEDUP")).lower()
        if mode not in DEDUP_MODES:
            raise SettingsError(f"CRAWLER_DEDUP must be one of {', '.join(DEDUP_MODES)}, got {mode!r}")
        error_rate = _number(settings, "CRAWLER_BLOOM_ERROR_RATE")
        if not 0 < error_rate < 1:
            raise SettingsError(f"CRAWLER_BLOOM_ERROR_RATE must be within (0, 1), got {error_rate!r}")
        prefix = str(setting(settings, "CRAWLER_KEY_PREFIX"))
        if not prefix or any(c in prefix for c in "{}\n "):
            raise SettingsError(f"CRAWLER_KEY_PREFIX must be a non-empty name without braces or spaces, got {prefix!r}")
        timeout = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0)
        lease = _number(settings, "CRAWLER_LEASE_SECONDS", timeout + 120, minimum=1.0)
        if lease <= timeout:
            raise SettingsError(
                f"CRAWLER_LEASE_SECONDS ({lease:g}) must exceed DOWNLOAD_TIMEOUT ({timeout:g}): "
                "a lease must outlive the download it covers"
            )
        delay_from = str(setting(settings, "CRAWLER_DELAY_FROM")).lower()
        if delay_from not in DELAY_FROM:
            raise SettingsError(f"CRAWLER_DELAY_FROM must be one of {', '.join(DELAY_FROM)}, got {delay_from!r}")
        return cls(
            prefix=prefix,
            shard=_number(settings, "CRAWLER_SHARD", integer=True),
            dedup=Dedup(
                mode,
                _number(settings, "CRAWLER_DEDUP_CAPACITY", minimum=1, integer=True),
                error_rate,
            ),
            politeness=Politeness(
                _number(settings, "CRAWLER_DOMAIN_RATE"),
                _number(settings, "CRAWLER_DOMAIN_BURST", minimum=1, integer=True),
                _number(settings, "CRAWLER_DOMAIN_DELAY"),
                _number(settings, "CRAWLER_DELAY_FACTOR"),
                _number(settings, "CRAWLER_DELAY_MAX"),
            ),
            overrides=_overrides(settings),
            domain_cap=_number(settings, "CRAWLER_DOMAIN_QUEUE_CAP", integer=True),
            domain_budget=_number(settings, "CRAWLER_DOMAIN_BUDGET", integer=True),
            forward=setting(settings, "CRAWLER_FORWARD_LINKS"),
            shard_urls=_shard_urls(settings),
            lease_seconds=lease,
            prefetch=_number(settings, "CRAWLER_PREFETCH", settings.getint("CONCURRENT_REQUESTS", 16),
                             minimum=1, integer=True),
            batch=_number(settings, "CRAWLER_ENQUEUE_BATCH", minimum=1, integer=True),
            flush_interval=_number(settings, "CRAWLER_FLUSH_INTERVAL", minimum=0.01),
            poll_interval=_number(settings, "CRAWLER_POLL_INTERVAL"),
            ack_interval=_number(settings, "CRAWLER_ACK_INTERVAL"),
            delay_from=delay_from,
            persist=setting(settings, "SCHEDULER_PERSIST"),
            flush_on_start=setting(settings, "SCHEDULER_FLUSH_ON_START"),
            idle_before_close=_number(settings, "SCHEDULER_IDLE_BEFORE_CLOSE"),
            tracking=setting(settings, "CRAWLER_TRACKING_PARAMS"),
        )


def exit_with(error: Exception) -> NoReturn:
    """End the process with one error line: a bad setting or an unreachable
    Redis is the user's to fix, and a traceback would bury the reason.
    ``SystemExit`` passes through Scrapy's start-up (it catches ``Exception``)."""
    print(f"crawler: error: {error}", file=sys.stderr, flush=True)
    raise SystemExit(1)


#: settings of scrapy-redis and Scrapy that this scheduler does not read
_IGNORED = {
    "SCHEDULER_QUEUE_CLASS": "the frontier keeps one queue per domain in Redis (CRAWLER_DOMAIN_* settings)",
    "SCHEDULER_QUEUE_KEY": "the frontier's keys are <CRAWLER_KEY_PREFIX>:{<spider>:<shard>}:...",
    "SCHEDULER_SERIALIZER": "requests travel as msgpack (crawler.serializers)",
    "SCHEDULER_DUPEFILTER_KEY": "dedup happens in the frontier (CRAWLER_DEDUP)",
}


def warn_ignored(settings: BaseSettings) -> None:
    for name, instead in _IGNORED.items():
        if settings.get(name) is not None:
            logger.warning("%s is ignored: %s", name, instead)
    dupefilter = settings.get("DUPEFILTER_CLASS")
    name = dupefilter if isinstance(dupefilter, str) else global_object_name(dupefilter)
    if name not in ("scrapy.dupefilters.BaseDupeFilter", "scrapy.dupefilters.RFPDupeFilter"):
        logger.warning("DUPEFILTER_CLASS %s is not used: the frontier dedups in Redis by the SHA-256 "
                       "of canonical URLs (CRAWLER_DEDUP)", name)
