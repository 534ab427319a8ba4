"""msgpack (de)serialisation of request dicts: what travels through Redis.

Usable as a scrapy-redis ``SCHEDULER_SERIALIZER``. Never pickle: a Redis
shared by many processes must not be able to make one of them run code.

Besides msgpack's own types (None, bool, int, float, str, bytes, list,
dict), these travel as extension types and come back as themselves:
``datetime`` (naive or aware), ``date``, ``time``, ``timedelta``, ``tuple``,
``set``, ``frozenset`` and ``Decimal``. Anything else raises ``TypeError``.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import msgpack

_DATETIME, _DATE, _TIME, _TIMEDELTA, _TUPLE, _SET, _FROZENSET, _DECIMAL = range(1, 9)


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True, strict_types=True, default=_default)


def _default(obj: Any) -> Any:
    # strict_types: subclasses of the native types land here too
    if isinstance(obj, dt.datetime):
        return msgpack.ExtType(_DATETIME, obj.isoformat().encode())
    if isinstance(obj, dt.date):
        return msgpack.ExtType(_DATE, obj.isoformat().encode())
    if isinstance(obj, dt.time):
        return msgpack.ExtType(_TIME, obj.isoformat().encode())
    if isinstance(obj, dt.timedelta):
        return msgpack.ExtType(_TIMEDELTA, _pack([obj.days, obj.seconds, obj.microseconds]))
    if isinstance(obj, tuple):
        return msgpack.ExtType(_TUPLE, _pack(list(obj)))
    if isinstance(obj, frozenset):
        return msgpack.ExtType(_FROZENSET, _pack(list(obj)))
    if isinstance(obj, set):
        return msgpack.ExtType(_SET, _pack(list(obj)))
    if isinstance(obj, Decimal):
        return msgpack.ExtType(_DECIMAL, str(obj).encode())
    for native in (bool, int, float, str, bytes, list, dict):
        if isinstance(obj, native):
            return native(obj)
    raise TypeError(f"{type(obj).__name__} cannot travel through Redis (msgpack)")


def _ext(code: int, data: bytes) -> Any:
    if code == _DATETIME:
        return dt.datetime.fromisoformat(data.decode())
    if code == _DATE:
        return dt.date.fromisoformat(data.decode())
    if code == _TIME:
        return dt.time.fromisoformat(data.decode())
    if code == _TIMEDELTA:
        return dt.timedelta(*loads(data))
    if code == _TUPLE:
        return tuple(loads(data))
    if code == _SET:
        return set(loads(data))
    if code == _FROZENSET:
        return frozenset(loads(data))
    if code == _DECIMAL:
        return Decimal(data.decode())
    return msgpack.ExtType(code, data)


def dumps(obj: Any) -> bytes:
    return _pack(obj)


def loads(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext)
