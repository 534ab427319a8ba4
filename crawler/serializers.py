"""msgpack (de)serialisation of request dicts: what travels through Redis.

Usable as a scrapy-redis ``SCHEDULER_SERIALIZER``. Never pickle: a Redis
shared by many processes must not be able to make one of them run code.
"""

from __future__ import annotations

from typing import Any

import msgpack


def dumps(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def loads(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)
