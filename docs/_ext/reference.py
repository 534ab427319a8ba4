"""The docs' reference pages, generated from the code as Sphinx reads them:
one source of truth, no table copied by hand.

A page holds a marker line ``<!-- reference: NAME -->``; the ``source-read``
event replaces it with Markdown made from the code:

- ``settings``: ``crawler/settings_registry.toml`` (through
  ``crawler.settings_registry``): every setting, its default and its form;
- ``stats``: ``crawler/stats_registry.toml`` (``crawler.stats_registry``);
- ``meta``: ``crawler/meta.py``, its constants and its docstring;
- ``metrics``: the metric families ``crawler/extensions/metrics.py``
  registers, collected from a real ``MetricsExtension``;
- ``commands``: the commands in ``crawler/commands/``, with the help
  ``scrapy <command> -h`` prints.

What cannot be documented (a setting or stat without a ``doc``, a meta key
without its line in ``meta.py``'s docstring, a metric without help text) is
a Sphinx warning: the build runs with warnings as errors (``make test``), so
it fails.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import pkgutil
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sphinx.util import logging

logger = logging.getLogger(__name__)

MARKER = re.compile(r"^<!-- reference: ([a-z]+) -->$", re.MULTILINE)
ROOT = Path(__file__).resolve().parents[2]


def _code(text: str) -> str:
    return f"`{text}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# --- settings ---------------------------------------------------------------


def settings_markdown(settings: Iterable[Any]) -> tuple[str, list[str]]:
    """One entry per setting: a target (``{setting}`` role), its name, its
    default (``shown``, else the value) and form, and what it does."""
    out, problems = [], []
    for s in settings:
        if not str(s.doc or "").strip():
            problems.append(f"setting {s.name} has no doc in crawler/settings_registry.toml")
        expects = s.expects()
        if not expects:
            problems.append(f"setting {s.name} has no form (or an unknown one: {s.form!r})")
        default = s.shown or _code(_literal_of(s.default))
        out += [f"```{{setting}} {s.name}", "```", "", f"### `{s.name}`", "",
                f"- default: {default}", f"- value: {expects}", "", s.doc or "", ""]
    return "\n".join(out), problems


def settings_table(settings: Iterable[Any]) -> str:
    rows = ["| setting | default | value |", "| --- | --- | --- |"]
    for s in settings:
        default = s.shown or _code(_literal_of(s.default))
        rows.append(f"| {{setting}}`{s.name}` | {_cell(default)} | {_cell(s.expects())} |")
    return "\n".join(rows) + "\n"


def _literal_of(value: Any) -> str:
    from crawler.settings_registry import _literal

    return _literal(value)


# --- stats ------------------------------------------------------------------


def stats_markdown(stats: Iterable[Any]) -> tuple[str, list[str]]:
    rows, problems = ["| stats | what they count |", "| --- | --- |"], []
    for entry in stats:
        if not entry.doc.strip():
            problems.append(f"stats {', '.join(entry.names)}: no doc in crawler/stats_registry.toml")
        rows.append(f"| {', '.join(_code(n) for n in entry.names)} | {_cell(entry.doc)} |")
    return "\n".join(rows) + "\n", problems


# --- request.meta keys --------------------------------------------------------


def meta_markdown(module: Any) -> tuple[str, list[str]]:
    """Each constant of ``crawler.meta`` with its line of the module's
    docstring (``- ``NAME``: ...``, under "Set by the crawler" or "Set by
    users")."""
    doc = module.__doc__ or ""
    described: dict[str, tuple[str, str]] = {}
    who = ""
    for block in re.split(r"\n(?=- ``|\S)", doc):
        line = " ".join(block.split())
        if line.lower().startswith("set by"):
            who = "the crawler" if "crawler" in line.lower() else "users, per request"
            continue
        found = re.match(r"- ``([A-Z_]+)``: (.*)", line)
        if found:
            described[found.group(1)] = (who, found.group(2))
    constants = {name: value for name, value in vars(module).items()
                 if name.isupper() and isinstance(value, str)}
    rows, problems = ["| key | constant | set by | what it holds |", "| --- | --- | --- | --- |"], []
    for name, value in constants.items():
        if name not in described:
            problems.append(f"crawler/meta.py: {name} is not described in the module's docstring")
            continue
        who, text = described[name]
        rows.append(f"| `{value}` | `crawler.meta.{name}` | {who} | {_cell(_rst_to_md(text))} |")
    for name in described.keys() - constants.keys():
        problems.append(f"crawler/meta.py's docstring describes {name}, which is not a key there")
    return "\n".join(rows) + "\n", problems


def _rst_to_md(text: str) -> str:
    return re.sub(r"``([^`]+)``", r"`\1`", text)


# --- Prometheus metrics -------------------------------------------------------


def metric_families() -> list[Any]:
    """The crawler_* families a crawl process exports, collected from a
    real ``MetricsExtension``: its stats, exporter lease and frontier stood in
    for (every series present: a dead letter reason, the frontier's gauges)."""
    from scrapy.utils.test import get_crawler

    from crawler.extensions import metrics

    crawler = get_crawler(settings_dict={"CRAWLER_METRICS_ENABLED": True})
    ext = metrics.MetricsExtension(crawler)
    stats = {"start_time": datetime.now(timezone.utc), f"{metrics.DEAD_LETTER_STATS}http_404": 1}
    ext.collector.crawler = SimpleNamespace(stats=SimpleNamespace(get_stats=lambda: stats))
    ext.collector.exporter = SimpleNamespace(held=True)
    ext.collector.probe = SimpleNamespace(last_minute=lambda: 0.0)
    addresses = {**dict.fromkeys(metrics.ADDRESS_GAUGES, 0), "busiest": [{"address": "192.0.2.1", "waiting": 0}]}
    recrawl = {key: 0 for key, _ in (*metrics.RECRAWL_GAUGES.values(), *metrics.RECRAWL_COUNTERS.values())}
    ext.collector.frontier = SimpleNamespace(status=lambda: dict.fromkeys(metrics.FRONTIER_GAUGES, 0),
                                             recrawl_status=lambda **_: recrawl,
                                             scan_hosts=lambda *_: (0, {}),
                                             addresses_status=lambda: addresses)
    ext.fetch_seconds.labels("spider", "0")
    return [f for f in ext.registry.collect() if f.name.startswith("crawler_")]


def metrics_markdown(families: Iterable[Any]) -> tuple[str, list[str]]:
    rows, problems = ["| metric | type | labels | what it measures |", "| --- | --- | --- | --- |"], []
    for family in families:
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = sorted({k for s in family.samples for k in s.labels} - {"le", "quantile"})
        if not family.documentation.strip():
            problems.append(f"metric {name} has no help text (crawler/extensions/metrics.py)")
        rows.append(f"| `{name}` | {family.type} | {', '.join(_code(k) for k in labels)} | "
                    f"{_cell(family.documentation)} |")
    return "\n".join(rows) + "\n", problems


# --- commands -------------------------------------------------------------------


def commands_markdown() -> tuple[str, list[str]]:
    from scrapy.cmdline import ScrapyArgumentParser
    from scrapy.commands import ScrapyHelpFormatter
    from scrapy.settings import Settings

    import crawler.commands as package

    everywhere = {ep.name for ep in entry_points(group="scrapy.commands")
                  if ep.value.startswith("crawler.commands.")}
    out, problems = [], []
    os.environ["COLUMNS"] = "100"  # argparse's width: the same help on every machine
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        cmd = importlib.import_module(f"crawler.commands.{info.name}").Command()
        cmd.settings = Settings()  # as scrapy.cmdline sets it up before add_options
        cmd.settings.setdict(cmd.default_settings, priority="command")
        parser = ScrapyArgumentParser(formatter_class=ScrapyHelpFormatter, conflict_handler="resolve",
                                      usage=f"scrapy {info.name} {cmd.syntax()}", description=cmd.long_desc())
        cmd.add_options(parser)
        where = ("in every Scrapy project where the package is installed (entry point `scrapy.commands`)"
                 if info.name in everywhere else
                 'with `COMMANDS_MODULE = "crawler.commands"` in the project\'s settings')
        if not cmd.short_desc().strip():
            problems.append(f"command {info.name} has no short_desc()")
        out += [f"## `scrapy {info.name}`", "", f"{cmd.short_desc()}.", "",
                f"Module `crawler/commands/{info.name}.py`; available {where}.", "",
                "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(out), problems


# --- Sphinx -------------------------------------------------------------------


def generate(kind: str) -> tuple[str, list[str]]:
    if kind == "settings":
        from crawler.settings_registry import SETTINGS

        return settings_markdown(SETTINGS)
    if kind == "settings-table":
        from crawler.settings_registry import SETTINGS

        return settings_table(SETTINGS), []
    if kind == "stats":
        from crawler.stats_registry import STATS

        return stats_markdown(STATS)
    if kind == "meta":
        return meta_markdown(importlib.import_module("crawler.meta"))
    if kind == "metrics":
        return metrics_markdown(metric_families())
    if kind == "commands":
        return commands_markdown()
    return "", [f"unknown reference {kind!r}"]


def source_read(app: Any, docname: str, source: list[str]) -> None:
    def replace(found: re.Match[str]) -> str:
        text, problems = generate(found.group(1))
        for problem in problems:
            logger.warning(problem, location=docname, type="reference", subtype=found.group(1))
        return text

    source[0] = MARKER.sub(replace, source[0])


def setup(app: Any) -> dict[str, Any]:
    app.add_crossref_type(directivename="setting", rolename="setting", indextemplate="pair: %s; setting")
    app.connect("source-read", source_read)
    # the reference follows the code: read those pages again on every build
    app.connect("env-get-outdated", lambda app, env, added, changed, removed: [
        d for d in env.found_docs if d.startswith("reference/")])
    return {"parallel_read_safe": True, "parallel_write_safe": True}
