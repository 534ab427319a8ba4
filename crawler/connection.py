"""Settings to Redis client, in one place.

``REDIS_URL`` (setting, else environment variable) accepts ``redis://``,
``rediss://`` (TLS) and ``unix://`` URLs as redis-py does. Without it,
scrapy-redis's ``REDIS_HOST``/``REDIS_PORT``/``REDIS_DB`` settings name the
server, as in scrapy-redis. When none is set, a project with scrapy-redis
parts (:func:`scrapy_redis_parts`) uses the Redis scrapy-redis would use,
``localhost:6379`` db 0 (``REDIS_PARAMS``' host, port and db count, as
there), unless ``CRAWLER_EMBEDDED_REDIS`` is true; any other project starts
(or reuses) the embedded Redis, unless ``CRAWLER_EMBEDDED_REDIS`` is false.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, RedisClusterException, SlotNotCoveredError, TryAgainError
from redis.retry import Retry
from scrapy.settings import BaseSettings

from crawler._breaker import guarded, wait_answering
from crawler.clock import SYSTEM
from crawler.settings_registry import setting

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds a worker starting waits for a Redis that accepts its connection
#: but does not answer, before it gives up
START_WAIT = 60.0

#: the Redis errors of an outage (Redis away, not answering, loading; a
#: Redis Cluster failing over: down, a slot without a master, a slot moving):
#: the worker pauses and retries; any other Redis error is a fault, raised or
#: logged with what it cost, never dropped
_CLUSTER_OUTAGE = (ClusterDownError, TryAgainError, SlotNotCoveredError)
REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, OSError, *_CLUSTER_OUTAGE)

__all__ = ["RedisUnavailable", "configured_url", "get_redis", "mask_url", "persistence_warning", "redis_url",
           "scrapy_redis_parts", "wait_at_start"]


class RedisUnavailable(RuntimeError):
    """Redis cannot be used; the message is one line fit for a user."""


def mask_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{user}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def scrapy_redis_parts(settings: BaseSettings, spidercls: type | None = None) -> list[str]:
    """What of scrapy-redis the project uses, one short name each ([] for
    nothing): ``REDIS_HOST``/``REDIS_PORT``, scrapy-redis's scheduler or
    dupefilter lines, its pipeline (or a subclass) in ``ITEM_PIPELINES``,
    its spiders (``RedisSpider``, ``RedisCrawlSpider`` or any subclass of
    ``RedisMixin``): ``spidercls`` when given, and every spider of the
    project's ``SPIDER_MODULES``, so that ``scrapy crawl``, ``scrapy
    frontier`` and the spiders all settle on the same Redis."""
    parts = [name for name in ("REDIS_HOST", "REDIS_PORT") if settings.get(name)]
    for name in ("SCHEDULER", "DUPEFILTER_CLASS"):
        if _from_scrapy_redis(settings.get(name)):
            parts.append(f"{name} {_dotted(settings.get(name))}")
    for component in settings.getdict("ITEM_PIPELINES"):
        if _from_scrapy_redis(component):
            parts.append(f"pipeline {_dotted(component)}")
    spiders = [spidercls] if spidercls is not None else []
    spiders += [s for s in _project_spiders(settings) if s is not spidercls]
    parts += [f"spider {s.__name__}" for s in spiders if _from_scrapy_redis(s)]
    return parts


def _dotted(value: object) -> str:
    return f"{value.__module__}.{value.__qualname__}" if isinstance(value, type) else str(value)


def _from_scrapy_redis(value: object) -> bool:
    """A class (or dotted path) of scrapy-redis, or a subclass of one."""
    if isinstance(value, str):
        if value.startswith("scrapy_redis."):
            return True
        from scrapy.utils.misc import load_object

        try:
            value = load_object(value)
        except (ImportError, AttributeError, NameError, ValueError):
            return False
    return isinstance(value, type) and any(c.__module__.startswith("scrapy_redis.") for c in value.__mro__)


def _project_spiders(settings: BaseSettings) -> list[type]:
    if not settings.getlist("SPIDER_MODULES"):
        return []
    from scrapy.spiderloader import get_spider_loader

    try:  # the spider loader imports the spider modules, as any scrapy command does
        loader = get_spider_loader(settings)
        return [loader.load(name) for name in loader.list()]
    except Exception:  # noqa: BLE001 -- a broken spider module is Scrapy's to report, when it loads it
        return []


def configured_url(settings: BaseSettings, spidercls: type | None = None) -> str:
    """The Redis the settings or the environment name ("" for the embedded
    Redis): ``REDIS_URL``, else scrapy-redis's ``REDIS_HOST``/``REDIS_PORT``/
    ``REDIS_DB``, else, in a project with scrapy-redis parts, scrapy-redis's
    default, ``redis://localhost:6379/0``; ``CRAWLER_EMBEDDED_REDIS`` true
    asks for the embedded Redis instead of that default, false without
    scrapy-redis parts is an error (``RedisUnavailable``)."""
    url = str(settings.get("REDIS_URL") or os.environ.get("REDIS_URL") or "")
    if url:
        return url
    params = settings.getdict("REDIS_PARAMS")
    if not (settings.get("REDIS_HOST") or settings.get("REDIS_PORT") or params.get("host") or params.get("port")):
        embedded = setting(settings, "CRAWLER_EMBEDDED_REDIS")  # None: as the project's parts say
        if embedded or (embedded is None and not scrapy_redis_parts(settings, spidercls)):
            return ""
        if embedded is False and not scrapy_redis_parts(settings, spidercls):
            raise RedisUnavailable("REDIS_URL is not set and CRAWLER_EMBEDDED_REDIS is off: "
                                   "set REDIS_URL=redis://host:port/db (or REDIS_HOST and REDIS_PORT)")
    # as scrapy-redis: REDIS_HOST/PORT/DB, else REDIS_PARAMS', else redis-py's defaults
    host = str(settings.get("REDIS_HOST") or params.get("host") or "localhost")
    raw_port = settings.get("REDIS_PORT") or params.get("port") or 6379
    raw_db = settings.get("REDIS_DB") or params.get("db") or 0
    try:
        port, db = int(raw_port), int(raw_db)
    except (TypeError, ValueError):
        raise RedisUnavailable(f"REDIS_PORT and REDIS_DB must be integers, got "
                               f"{raw_port!r} and {raw_db!r}") from None
    return f"redis://{f'[{host}]' if ':' in host else host}:{port}/{db}"


def redis_url(settings: BaseSettings, spidercls: type | None = None) -> str:
    """The URL to connect to, starting the embedded Redis if it is that one."""
    url = configured_url(settings, spidercls)
    if url:
        if url.startswith("unix://") and setting(settings, "CRAWLER_EMBEDDED_REDIS") is not False:
            # the addon may have written the embedded Redis's address: start it if it is that
            from crawler.embedded import EmbeddedRedis

            embedded = EmbeddedRedis.from_settings(settings)
            if url == embedded.url:
                return embedded.ensure_running()
        return url
    from crawler.embedded import EmbeddedRedis

    return EmbeddedRedis.from_settings(settings).ensure_running()


def get_redis(settings: BaseSettings, *, check: bool = True, **params: Any) -> redis.Redis:
    """A client for the configured Redis; ``check`` pings it once.

    ``REDIS_PARAMS`` (a dict) is passed to redis-py as scrapy-redis does.
    ``CRAWLER_REDIS_CLUSTER`` makes it a Redis Cluster client (``REDIS_URL``
    names any one node). A standalone server that does not answer within
    ``socket_timeout`` makes the client's calls fail at once until it
    answers again (:mod:`crawler._breaker`).
    Raises :class:`RedisUnavailable` with a one-line message naming the URL
    (password masked) when the URL is malformed or the server unreachable.
    """
    url = redis_url(settings)
    kwargs: dict[str, Any] = {
        "socket_timeout": 10,
        "socket_connect_timeout": 3,
        "health_check_interval": 30,
        # a few quick retries of a refused or broken connection only: longer
        # outages are the scheduler's to ride out, and a call that timed out is
        # not sent again (a silent Redis would hold the reactor once more)
        "retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), 2,
                       supported_errors=(redis.ConnectionError,)),
    }
    kwargs.update(settings.getdict("REDIS_PARAMS"))
    kwargs.update(params)
    kwargs.pop("redis_cls", None)
    kwargs.pop("encoding", None)
    cluster = setting(settings, "CRAWLER_REDIS_CLUSTER")
    if cluster:
        kwargs.pop("health_check_interval", None)
    try:
        if cluster:
            client = RedisCluster.from_url(url, **kwargs)
        else:
            client = redis.Redis.from_url(url, **kwargs)
    except (ValueError, TypeError) as exc:
        raise RedisUnavailable(f"invalid REDIS_URL {mask_url(url)}: {exc}") from None
    except (redis.ConnectionError, RedisClusterException, OSError) as exc:  # a cluster connects at once
        raise RedisUnavailable(f"cannot connect to Redis at {mask_url(url)}: {_reason(exc)}") from None
    if not cluster:  # a silent server costs one socket_timeout, not one per call (crawler/_breaker.py)
        pool = client.connection_pool
        pool.connection_class = guarded(pool.connection_class)
    if check:
        try:
            _ping_at_start(client, url)
        except redis.AuthenticationError as exc:
            raise RedisUnavailable(
                f"Redis at {mask_url(url)} refused the credentials: {exc}"
            ) from None
        except (redis.ConnectionError, redis.TimeoutError, RedisClusterException, OSError) as exc:
            raise RedisUnavailable(
                f"cannot connect to Redis at {mask_url(url)}: {_reason(exc)}"
            ) from None
        except redis.ResponseError as exc:
            raise RedisUnavailable(f"Redis at {mask_url(url)} answered: {exc}") from None
    return client


def _ping_at_start(client: redis.Redis | RedisCluster, url: str) -> None:
    """PING; a server that accepts the connection but does not answer
    (paused, a long fork; on a Redis Cluster, a master failing over) is
    waited for (:func:`wait_at_start`). A refused connection fails at once
    (a wrong URL, or a server not started)."""
    cluster = isinstance(client, RedisCluster)
    wait_at_start(client.ping, client, url, (redis.TimeoutError, *(_CLUSTER_OUTAGE if cluster else ())))


def wait_at_start(call: Callable[[], T], client: redis.Redis | RedisCluster, url: str,
                  outage: tuple[type[Exception], ...] = REDIS_ERRORS) -> T:
    """``call``, a worker's first use of Redis (its start check, the
    opening of its frontier), tried again while it fails with an
    ``outage`` error, for up to :data:`START_WAIT` seconds: a worker
    restarted by its supervisor while Redis is paused, or while a Redis
    Cluster master is dead and its replica not yet elected, starts when that
    ends. Raises the last error after that."""
    try:
        return call()
    except outage as exc:
        logger.warning("Redis at %s does not answer (%s): waiting up to %.0fs for it",
                       mask_url(url), _reason(exc), START_WAIT)
        last: Exception = exc
    cluster = isinstance(client, RedisCluster)
    deadline = SYSTEM.monotonic() + START_WAIT
    pause = threading.Event()
    while (left := deadline - SYSTEM.monotonic()) > 0:
        # a standalone server: until its breaker closes (it answers again); then, or on a
        # Cluster (no breaker), shortly (each try waits up to its socket timeout)
        if not cluster and isinstance(last, redis.TimeoutError):
            if not wait_answering(client.connection_pool.connection_class, left):
                break
        else:
            pause.wait(min(0.5, left))
        try:
            return call()
        except outage as exc:
            last = exc
    raise redis.TimeoutError(f"no answer within {START_WAIT:.0f}s") from last


def persistence_warning(client: redis.Redis | RedisCluster, key: str = "") -> str | None:
    """One line when the Redis holding ``key`` saves nothing to disk (no AOF,
    no RDB save points: a restart loses everything), else None. Read from
    ``INFO persistence`` and ``CONFIG GET save``; a server that refuses
    ``CONFIG`` (managed Redis often does) or answers oddly is not warned
    about: what it does is not known."""
    target: dict[str, Any] = {}
    if isinstance(client, RedisCluster):
        target["target_nodes"] = client.get_node_from_key(key or "x")
    try:
        info = client.info("persistence", **target)
        if int(info.get("aof_enabled", 0)):
            return None
        save = client.config_get("save", **target).get("save")
    except (redis.RedisError, RedisClusterException, AttributeError, TypeError, ValueError):
        return None
    if save is None or str(save).strip():
        return None
    return ("saves nothing to disk (appendonly no, save \"\"): a restart loses the frontier of this "
            "persistent crawl (SCHEDULER_PERSIST); turn on appendonly yes (or RDB save points)")


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
