"""Settings to Redis client, in one place.

``REDIS_URL`` (setting, else environment variable) accepts ``redis://``,
``rediss://`` (TLS) and ``unix://`` URLs as redis-py does. Without it,
scrapy-redis's ``REDIS_HOST``/``REDIS_PORT``/``REDIS_DB`` settings name the
server, as in scrapy-redis. When none is set, the embedded Redis of this
project is started (or reused) and used instead, unless
``CRAWLER_EMBEDDED_REDIS`` is false.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from scrapy.settings import BaseSettings

from crawler.settings_registry import setting

__all__ = ["RedisUnavailable", "configured_url", "get_redis", "mask_url", "persistence_warning", "redis_url"]


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


def configured_url(settings: BaseSettings) -> str:
    """The Redis the settings or the environment name ("" if none): ``REDIS_URL``,
    else scrapy-redis's ``REDIS_HOST``/``REDIS_PORT``/``REDIS_DB``."""
    url = str(settings.get("REDIS_URL") or os.environ.get("REDIS_URL") or "")
    if url or not (settings.get("REDIS_HOST") or settings.get("REDIS_PORT")):
        return url
    host = str(settings.get("REDIS_HOST") or "localhost")
    try:
        port, db = int(settings.get("REDIS_PORT") or 6379), int(settings.get("REDIS_DB") or 0)
    except (TypeError, ValueError):
        raise RedisUnavailable(f"REDIS_PORT and REDIS_DB must be integers, got "
                               f"{settings.get('REDIS_PORT')!r} and {settings.get('REDIS_DB')!r}") from None
    return f"redis://{f'[{host}]' if ':' in host else host}:{port}/{db}"


def redis_url(settings: BaseSettings) -> str:
    """The URL to connect to, starting the embedded Redis if needed."""
    url = configured_url(settings)
    embedded_on = setting(settings, "CRAWLER_EMBEDDED_REDIS")
    if url:
        if embedded_on and url.startswith("unix://"):
            # the addon may have written the embedded Redis's address: start it if it is that
            from crawler.embedded import EmbeddedRedis

            embedded = EmbeddedRedis.from_settings(settings)
            if url == embedded.url:
                return embedded.ensure_running()
        return url
    if not embedded_on:
        raise RedisUnavailable(
            "REDIS_URL is not set and CRAWLER_EMBEDDED_REDIS is off: "
            "set REDIS_URL=redis://host:port/db"
        )
    from crawler.embedded import EmbeddedRedis

    return EmbeddedRedis.from_settings(settings).ensure_running()


def get_redis(settings: BaseSettings, *, check: bool = True, **params: Any) -> redis.Redis:
    """A client for the configured Redis; ``check`` pings it once.

    ``REDIS_PARAMS`` (a dict) is passed to redis-py as scrapy-redis does.
    ``CRAWLER_REDIS_CLUSTER`` makes it a Redis Cluster client (``REDIS_URL``
    names any one node).
    Raises :class:`RedisUnavailable` with a one-line message naming the URL
    (password masked) when the URL is malformed or the server unreachable.
    """
    url = redis_url(settings)
    kwargs: dict[str, Any] = {
        "socket_timeout": 10,
        "socket_connect_timeout": 3,
        "health_check_interval": 30,
        # a few quick retries only: longer outages are the scheduler's to ride
        # out, without blocking the reactor for seconds at a time
        "retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), 2),
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
    if check:
        try:
            client.ping()
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
