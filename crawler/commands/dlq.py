"""``scrapy dlq <spider>``: list, count, requeue and purge dead letters.

``--purge`` deletes the letters ``--reason``/``--domain`` select; with
neither it would delete them all, so it then needs ``--all``. ``--dry-run``
lists what ``--purge`` would delete and deletes nothing."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from typing import Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.spiderloader import get_spider_loader

from crawler.commands._fail import fail
from crawler.commands._frontier import add_frontier_options, open_frontiers
from crawler.store import codec
from crawler.identity import canonicalize
from crawler.worker.config import FrontierSettings
from crawler.store import DeadLetters
from crawler.identity import domain_of
from crawler.identity import url_fingerprint
from crawler.store import Frontier, Item, stored_dedup
from crawler.settings_registry import SettingsError


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return ("<spider> [--reason R] [--domain D] [--limit N] "
                "[--counts | --requeue | --purge [--all] [--dry-run]] [--json]")

    def short_desc(self) -> str:
        return "List, count, requeue or purge a frontier's dead letters"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_frontier_options(parser)
        parser.add_argument("--reason", help="only letters with this reason (e.g. http_404)")
        parser.add_argument("--domain", help="only letters of this registered domain or host")
        parser.add_argument("--limit", type=int, default=50, help="letters to list (default 50, 0: all)")
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--counts", action="store_true", help="count letters by reason")
        action.add_argument("--requeue", action="store_true", help="put the matching URLs back in the frontier")
        action.add_argument("--purge", action="store_true",
                            help="delete the matching letters (no --reason or --domain: needs --all)")
        parser.add_argument("--all", action="store_true", help="with --purge and no filter: every dead letter")
        parser.add_argument("--dry-run", action="store_true",
                            help="with --purge: list what would be deleted, delete nothing")
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give exactly one spider name")
        if opts.limit < 0:
            raise UsageError(f"--limit must be >= 0, got {opts.limit}", print_help=False)
        if (opts.all or opts.dry_run) and not opts.purge:
            raise UsageError("--all and --dry-run go with --purge", print_help=False)
        if opts.purge and not (opts.reason or opts.domain or opts.all):
            raise UsageError("--purge without --reason or --domain deletes every dead letter: "
                             "add --all (and --dry-run to see them first)", print_help=False)
        if opts.all and (opts.reason or opts.domain):
            raise UsageError("--all selects every dead letter: leave out --reason and --domain",
                             print_help=False)
        assert self.settings is not None
        found = open_frontiers(self.settings, args[0], opts.shard)[0]
        letters = DeadLetters(found.client, found.keys)
        if opts.counts:
            counts = letters.counts()
            if opts.json:
                print(json.dumps(dict(counts), sort_keys=True))
            else:
                for reason, count in counts.most_common():
                    print(f"{count:8d}  {reason}")
                print(f"{sum(counts.values()):8d}  total")
            return
        selected = letters.select(opts.reason, opts.domain)
        if opts.purge and opts.dry_run:
            if opts.json:
                print(json.dumps({"would_purge": len(selected)}))
                return
            self._show(selected, selected if opts.limit == 0 else selected[: opts.limit])
            print(f"would purge {len(selected)} dead letters (dry run: nothing deleted)")
            return
        if opts.purge:
            removed = letters.remove(raw for raw, _ in selected)
            print(json.dumps({"purged": removed}) if opts.json else f"purged {removed} dead letters")
            return
        if opts.requeue:
            frontier = self._frontier(found, args[0])
            items = []
            for _, letter in selected:
                url = canonicalize(letter.url)
                items.append(Item(url_fingerprint(url), domain_of(url), 0, codec.encode_url(url), True))
            result = frontier.add(items) if items else None
            added = result.added if result else 0
            refused = len(items) - added
            if not refused:
                letters.remove(raw for raw, _ in selected)
            if opts.json:
                print(json.dumps({"requeued": added, "refused": refused}))
            else:
                print(f"requeued {added} URLs")
                if refused:
                    print(f"{refused} refused by the frontier (over the domain budget or queue cap, or "
                          "excluded): the dead letters are kept")
            return
        shown = selected if opts.limit == 0 else selected[: opts.limit]
        if opts.json:
            print(json.dumps([asdict(letter) for _, letter in shown]))
            return
        if not selected:
            which = " and ".join(f"{k} {v}" for k, v in (("reason", opts.reason), ("domain", opts.domain)) if v)
            print(f"no dead letters{' with ' + which if which else ''} in {found.keys.base}")
            return
        self._show(selected, shown)

    @staticmethod
    def _show(selected: list[Any], shown: list[Any]) -> None:
        for _, letter in shown:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(letter.time))
            status = letter.status if letter.status is not None else "-"
            detail = f" {letter.exception}" if letter.exception else ""
            print(f"{when}  {letter.reason:18s} {status!s:>4}  x{letter.attempts}  {letter.url}{detail}")
        if len(shown) < len(selected):
            print(f"... {len(selected) - len(shown)} more (--limit 0 lists all)")

    def _frontier(self, found: Frontier, spider: str) -> Frontier:
        """The frontier as the crawl has it: the spider's own settings (its
        queue cap and budget) over the project's, the stored dedup layout."""
        assert self.settings is not None
        settings = self.settings.copy()
        try:
            spidercls = get_spider_loader(settings).load(spider)
        except KeyError:
            pass  # no such spider here: the project's settings
        else:
            settings.setdict(spidercls.custom_settings or {}, priority="spider")
        try:
            config = FrontierSettings.from_settings(settings)
        except SettingsError as exc:  # a spider's custom_settings
            fail(settings, exc)
        return Frontier(found.client, found.keys, dedup=stored_dedup(found.client, found.keys, config.dedup),
                        domain_cap=config.domain_cap, domain_budget=config.domain_budget)
