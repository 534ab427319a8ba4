"""Idle connections kept for their host's next request.

Connections are pooled by :data:`Key` (scheme, host, port, local address,
proxy, charged address), each closed after ``idle_timeout`` seconds unused;
at most ``max_idle`` are kept over all keys, the least recently used closed
first (counted in ``crawler/pool/evicted``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.fetch._connection import Connection
    from crawler.fetch._proxy import Proxy

Bind = tuple[str, int] | None
# scheme, host, port, local address, proxy, the address the frontier charged ("": none)
Key = tuple[str, str, int, Bind, "Proxy | None", str]


class Pool:
    def __init__(self, idle_timeout: float, max_idle: int, stats: StatsCollector) -> None:
        self.idle_timeout = idle_timeout  # 0: nothing is kept
        self.max_idle = max_idle
        self.stats = stats
        self.idle: dict[Key, list[Connection]] = {}
        self.lru: OrderedDict[Connection, Key] = OrderedDict()  # every idle connection, oldest first

    def take(self, key: Key) -> Connection | None:
        """An idle connection for ``key`` still open, if there is one."""
        connections = self.idle.get(key)
        if connections is None:
            return None
        found = None
        while connections:
            connection = connections.pop()
            self.lru.pop(connection, None)
            if connection.idle is not None:
                connection.idle.cancel()
            if connection.usable:
                found = connection
                break
        if not connections:
            del self.idle[key]
        return found

    def put(self, key: Key, connection: Connection) -> None:
        self.idle.setdefault(key, []).append(connection)
        self.lru[connection] = key
        connection.idle = asyncio.get_running_loop().call_later(self.idle_timeout, self.expire, key, connection)
        if len(self.lru) > self.max_idle:
            oldest, oldest_key = next(iter(self.lru.items()))
            self.stats.inc_value("crawler/pool/evicted")
            self.expire(oldest_key, oldest)

    def expire(self, key: Key, connection: Connection) -> None:
        self.lru.pop(connection, None)
        if connection.idle is not None:
            connection.idle.cancel()
        connections = self.idle.get(key)
        if connections and connection in connections:
            connections.remove(connection)
            if not connections:
                del self.idle[key]
        connection.close()

    def close(self) -> None:
        for connections in self.idle.values():
            for connection in connections:
                if connection.idle is not None:
                    connection.idle.cancel()
                connection.abort()
        self.idle.clear()
        self.lru.clear()
