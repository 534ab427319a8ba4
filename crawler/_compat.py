"""Every private internal of Scrapy the crawler reads, in one place, with the
versions it was checked against.

Scrapy has no public way to ask which requests its engine still holds, or to
wake its loop; both are read from its private state here. When a release
moves them, these functions answer ``None``/``False`` instead of raising, the
caller says so once in the log, and ``tests/test_compat.py`` fails naming
what moved. Two other packages' private names are read beside the code
that uses them, each with its own contract, and are listed and checked here
through their package's public surface: pyOpenSSL's and cryptography's
bindings (``crawler.fetch.tls_private()``; ``_openssl.py`` refuses to import
instead) and Protego's rule internals (``crawler.robots.protego_private()``).
:func:`private_names` lists every private name the crawler uses with the
version range it was read from; :func:`missing` reports what moved.

Checked against: Scrapy ``SCRAPY`` (``ExecutionEngine._slot.inprogress`` and
``.nextcall``, ``Scraper.slot.active``/``.queue``, the stats collector's
``__getattribute__`` wrapper that :class:`crawler.lean.MemoryStats` undoes,
and the downloader's ``active`` set and ``total_concurrency`` cap, which its
``needs_backout`` reads before each request: not private, but not documented
as settable while the crawl runs).
"""

from __future__ import annotations

import inspect
from typing import Any

SCRAPY = ">=2.13,<2.20"


def engine_running(engine: Any) -> bool:
    """Whether ``engine`` (None: none yet) has a crawl open: its private
    slot exists from the spider's opening to its closing."""
    return getattr(engine, "_slot", None) is not None


def engine_busy(engine: Any) -> set[int] | None:
    """``id()`` of every request the engine is downloading or scraping;
    None when Scrapy's private state is not where it was."""
    slot = getattr(engine, "_slot", None)
    scraper_slot = getattr(getattr(engine, "scraper", None), "slot", None)
    inprogress = getattr(slot, "inprogress", None)
    active = getattr(scraper_slot, "active", None)
    queue = getattr(scraper_slot, "queue", None)
    if inprogress is None or active is None or queue is None:
        return None
    busy = {id(r) for r in inprogress}
    busy.update(id(r) for r in active)
    busy.update(id(entry[1]) for entry in queue)
    return busy


def wake_engine(engine: Any) -> bool | None:
    """Run the engine's loop soon (it would otherwise wait for its 5 s
    heartbeat); None when it is not running, False when Scrapy's private
    state is not where it was."""
    slot = getattr(engine, "_slot", None)
    if slot is None:
        return None
    schedule = getattr(getattr(slot, "nextcall", None), "schedule", None)
    if schedule is None:
        return False
    schedule()
    return True


def downloader_load(engine: Any) -> tuple[int, int] | None:
    """(requests in the downloader, its cap; 0: no cap); None when the
    downloader is not there or its state moved."""
    downloader = getattr(engine, "downloader", None)
    active = getattr(downloader, "active", None)
    cap = getattr(downloader, "total_concurrency", None)
    if active is None or not isinstance(cap, int):
        return None
    return len(active), cap


def set_downloader_cap(engine: Any, cap: int) -> bool:
    """Let the downloader hold at most ``cap`` requests from now on (0: no
    cap); False when its state moved."""
    downloader = getattr(engine, "downloader", None)
    if not isinstance(getattr(downloader, "total_concurrency", None), int):
        return False
    downloader.total_concurrency = cap
    return True


#: Scrapy's private or unsettled names the functions above read
SCRAPY_NAMES = ("ExecutionEngine._slot.inprogress", "ExecutionEngine._slot.nextcall", "Scraper.slot.active",
                "Scraper.slot.queue", "StatsCollector.__getattribute__", "Downloader.active",
                "Downloader.total_concurrency")


def private_names() -> dict[str, tuple[dict[str, str], list[str]]]:
    """Every private name of another package the crawler reads, by package:
    ``{package: (the version ranges it was read from, names)}``."""
    from crawler.fetch import tls_private
    from crawler.robots import protego_private

    tls_ranges, tls_names, _ = tls_private()
    protego_ranges, protego_names, _ = protego_private()
    return {"scrapy": ({"scrapy": SCRAPY}, list(SCRAPY_NAMES)),
            "pyOpenSSL": (tls_ranges, tls_names),
            "protego": (protego_ranges, protego_names)}


def missing(engine: Any = None) -> list[str]:
    """The private names the crawler uses that the installed Scrapy (with a
    running ``engine``, when given), pyOpenSSL and Protego lack."""
    from crawler.fetch import tls_private
    from crawler.robots import protego_private

    gone = tls_private()[2] + protego_private()[2]
    from scrapy.statscollectors import StatsCollector

    if "__getattribute__" not in vars(StatsCollector):
        gone.append("StatsCollector.__getattribute__ (crawler.lean.MemoryStats has nothing to undo)")
    if engine is not None:
        slot = getattr(engine, "_slot", None)
        scraper_slot = getattr(getattr(engine, "scraper", None), "slot", None)
        gone += [f"ExecutionEngine._slot.{name}" for name in ("inprogress", "nextcall")
                 if not hasattr(slot, name)]
        gone += [f"Scraper.slot.{name}" for name in ("active", "queue") if not hasattr(scraper_slot, name)]
    from scrapy.core.downloader import Downloader

    if "total_concurrency" not in inspect.getsource(Downloader.needs_backout):
        gone.append("Downloader.needs_backout reading total_concurrency (the concurrency cap is not obeyed)")
    return gone
