"""``scrapy cdn-ranges``: fetch the CDN vendors' published address ranges
again and write a new dated ranges file (crawler/cdn_ranges.py).

Each list of :data:`crawler.cdn_ranges.SOURCES` is fetched with one HTTP GET
and parsed in its vendor's layout; the file is written only if every list
was fetched and read (a vendor missing from one refresh would otherwise lose
its ranges), and what changed is printed. ``--offline``, or a list that
cannot be fetched, keeps the file as it is and says so in one line.

The file written is ``--output``, else the one ``CRAWLER_IP_SHARED_RANGES``
names, else the copy shipped with the crawler (the maintainers' refresh
before a release). ``--mirror URL`` fetches ``URL/<host>/<path>`` for each
list instead (a mirror the crawl's network can reach; the tests' server).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler import __version__
from crawler.cdn_ranges import BUILTIN, SOURCES, RangesError, Source, load, network, parse, path_of
from crawler.settings_registry import setting

_LISTED = 8  # changed ranges named per vendor; the rest are counted


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--output FILE] [--offline] [--mirror URL] [--timeout S]"

    def short_desc(self) -> str:
        return "Refresh the CDN address ranges (shared front ends) from the vendors' published lists"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--output", metavar="FILE",
                            help="the ranges file to refresh (default: the file CRAWLER_IP_SHARED_RANGES names, "
                                 "else the copy shipped with the crawler)")
        parser.add_argument("--offline", action="store_true", help="fetch nothing: keep the file as it is")
        parser.add_argument("--mirror", metavar="URL", help="fetch URL/<host>/<path> instead of each vendor's URL")
        parser.add_argument("--timeout", type=float, default=30.0, help="seconds per list (default 30)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError("cdn-ranges takes no arguments")
        if opts.timeout <= 0:
            raise UsageError(f"--timeout must be > 0, got {opts.timeout}", print_help=False)
        assert self.settings is not None
        named = path_of(setting(self.settings, "CRAWLER_IP_SHARED_RANGES"))
        output = Path(opts.output) if opts.output else (named or BUILTIN)
        current = output if output.exists() else BUILTIN
        try:
            old = load(current)
        except RangesError as e:
            raise UsageError(str(e), print_help=False) from None
        kept = f"kept {current} (dated {old.get('date', '?')})"
        if current != output:
            kept += f", {output} not written"
        if opts.offline:
            print(f"cdn-ranges: offline: {kept}")
            return
        fetched: dict[str, list[str]] = {}
        for source in SOURCES:
            try:
                fetched.setdefault(source.vendor, []).extend(parse(source.layout, self._get(source, opts)))
            except (OSError, RangesError) as e:
                print(f"cdn-ranges: could not fetch {self._url(source, opts)} ({_reason(e)}): {kept}")
                self.exitcode = 1
                return
        new = refreshed(old, fetched, dt.datetime.now(dt.timezone.utc).date().isoformat())
        _write(output, new)
        print(f"cdn-ranges: wrote {output} (dated {new['date']})")
        for line in changes(old, new):
            print(f"  {line}")

    @staticmethod
    def _url(source: Source, opts: argparse.Namespace) -> str:
        if not opts.mirror:
            return source.url
        parts = urlsplit(source.url)
        return f"{opts.mirror.rstrip('/')}/{parts.netloc}{parts.path}"

    def _get(self, source: Source, opts: argparse.Namespace) -> bytes:
        request = urllib.request.Request(self._url(source, opts),
                                         headers={"User-Agent": f"polite-crawler/{__version__} cdn-ranges"})
        with urllib.request.urlopen(request, timeout=opts.timeout) as response:  # noqa: S310 (https URLs or --mirror)
            return response.read()


def _reason(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    if isinstance(error, urllib.error.URLError):
        return str(error.reason)
    return str(error)


def refreshed(old: dict[str, Any], fetched: dict[str, list[str]], date: str) -> dict[str, Any]:
    """The new file: each fetched vendor's ranges (sorted, each once), the
    vendors the sources do not cover kept as they were."""
    vendors = {name: entry for name, entry in old["vendors"].items() if name not in fetched}
    for vendor, found in fetched.items():
        unique = sorted({str(network(n)) for n in found}, key=_order)
        vendors[vendor] = {
            "sources": [s.url for s in SOURCES if s.vendor == vendor],
            "taken_from": f"the vendor's published list, fetched by scrapy cdn-ranges on {date}",
            "published": date,
            "ranges": unique,
        }
    return {**old, "date": date, "vendors": dict(sorted(vendors.items()))}


def _order(cidr: str) -> tuple[int, int, int]:
    n = network(cidr)
    return n.version, int(n.network_address), n.prefixlen


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per vendor: its ranges, and those added and removed."""
    lines = []
    for vendor, entry in new["vendors"].items():
        before = set(old["vendors"].get(vendor, {}).get("ranges", []))
        after = set(entry["ranges"])
        added, removed = sorted(after - before, key=_order), sorted(before - after, key=_order)
        if vendor not in old["vendors"]:
            lines.append(f"{vendor}: {len(after)} ranges (new)")
        elif not added and not removed:
            lines.append(f"{vendor}: {len(after)} ranges, unchanged")
        else:
            lines.append(f"{vendor}: {len(after)} ranges, +{len(added)} -{len(removed)}"
                         + _named("+", added) + _named("-", removed))
    return lines


def _named(sign: str, ranges: list[str]) -> str:
    if not ranges:
        return ""
    more = f" and {len(ranges) - _LISTED} more" if len(ranges) > _LISTED else ""
    return f"; {sign} " + ", ".join(ranges[:_LISTED]) + more


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
