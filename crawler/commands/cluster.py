"""``scrapy cluster``: deploy the project to Scrapyd nodes and run a sharded
crawl across them.

    scrapy cluster deploy                                   # every [deploy:*] target of scrapy.cfg
    scrapy cluster schedule billion --shards 12 --seeds /data/top-1m.csv \\
        --redis redis://10.0.0.1:6379/0,redis://10.0.0.2:6379/0 [-s NAME=VALUE ...]
    scrapy cluster status billion --shards 12
    scrapy cluster cancel billion --shards 12

Shard i of N runs on node i mod (number of nodes), with ``shard``, ``shards``
and ``seeds`` as spider arguments and that node's ``REDIS_URL`` (``--redis``,
in node order) as a setting; its job id is ``<spider>-<i>-of-<N>``. Nodes
come from ``--nodes URL,URL`` or the ``[deploy:*]`` targets of scrapy.cfg.
A node that cannot be reached, a failed deploy or a refused job is an error
naming the node, and nothing stays half-submitted: jobs already scheduled
are cancelled before the command exits non-zero.
"""

from __future__ import annotations

import argparse
import time
from configparser import ConfigParser
from pathlib import Path

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.utils.conf import closest_scrapy_cfg

from crawler.commands._scrapyd import NodeError, build_egg, call

ACTIONS = ("deploy", "schedule", "status", "cancel")


def deploy_targets(cfg: Path) -> tuple[list[str], str]:
    parser = ConfigParser()
    parser.read(cfg)
    nodes = [parser.get(s, "url") for s in parser.sections()
             if (s == "deploy" or s.startswith("deploy:")) and parser.has_option(s, "url")]
    project = next((parser.get(s, "project") for s in parser.sections()
                    if s.startswith("deploy") and parser.has_option(s, "project")), "crawler")
    return list(dict.fromkeys(nodes)), project


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return f"{{{'|'.join(ACTIONS)}}} [spider] [options]"

    def short_desc(self) -> str:
        return "Deploy to Scrapyd nodes and run, watch or cancel a sharded crawl"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--nodes", help="Scrapyd URLs, comma-separated (default: scrapy.cfg [deploy:*] urls)")
        parser.add_argument("--project", help="Scrapyd project name (default: from scrapy.cfg)")
        parser.add_argument("--version", help="egg version to deploy (default: a timestamp)")
        parser.add_argument("--shards", type=int, help="number of shards")
        parser.add_argument("--seeds", default="", help="seeds file path on the nodes, or redis:<key>")
        parser.add_argument("--redis", default="", help="REDIS_URL of each node, comma-separated, in node order")
        parser.add_argument("--setting", action="append", metavar="NAME=VALUE",
                            help="a setting for every job (repeatable)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args or args[0] not in ACTIONS:
            raise UsageError(f"the first argument must be one of {', '.join(ACTIONS)}")
        action = args[0]
        cfg = Path(closest_scrapy_cfg())
        cfg_nodes, cfg_project = deploy_targets(cfg)
        nodes = [n.strip() for n in (opts.nodes.split(",") if opts.nodes else cfg_nodes) if n.strip()]
        if not nodes:
            raise UsageError("no Scrapyd nodes: pass --nodes or add [deploy:<name>] targets to scrapy.cfg",
                             print_help=False)
        self.project = opts.project or cfg_project
        try:
            if action == "deploy":
                self.exitcode = self.deploy(cfg.parent, nodes, opts.version or time.strftime("%Y%m%d%H%M%S"))
                return
            if len(args) != 2:
                raise UsageError(f"cluster {action} needs a spider name", print_help=False)
            if not opts.shards or opts.shards < 1:
                raise UsageError("--shards must be an integer >= 1", print_help=False)
            jobs = {i: (nodes[i % len(nodes)], f"{args[1]}-{i}-of-{opts.shards}") for i in range(opts.shards)}
            if action == "schedule":
                redis_urls = [u.strip() for u in opts.redis.split(",") if u.strip()]
                if redis_urls and len(redis_urls) != len(nodes):
                    raise UsageError(f"--redis names {len(redis_urls)} URLs for {len(nodes)} nodes",
                                     print_help=False)
                self.exitcode = self.schedule(args[1], jobs, nodes, redis_urls, opts)
            elif action == "status":
                self.exitcode = self.status(jobs, nodes)
            else:
                self.exitcode = self.cancel(jobs)
        except NodeError as exc:
            print(f"cluster: error: {exc}")
            self.exitcode = 1

    def deploy(self, project_dir: Path, nodes: list[str], version: str) -> int:
        egg = build_egg(project_dir)
        failed = 0
        for node in nodes:
            try:
                answer = call(node, "addversion.json", {"project": self.project, "version": version},
                              files={"egg": (f"{self.project}.egg", egg)})
                print(f"{node}: deployed {self.project} {version} ({answer.get('spiders', '?')} spiders)")
            except NodeError as exc:
                print(f"cluster: error: {exc}")
                failed += 1
        return 1 if failed else 0

    def schedule(self, spider: str, jobs: dict[int, tuple[str, str]], nodes: list[str],
                 redis_urls: list[str], opts: argparse.Namespace) -> int:
        for node in nodes:  # every node first, so a dead one submits nothing
            call(node, "daemonstatus.json", timeout=10)
        settings = list(opts.setting or [])
        done: list[tuple[str, str]] = []
        for shard, (node, job) in jobs.items():
            data: list[tuple[str, str]] = [("project", self.project), ("spider", spider), ("jobid", job),
                                           ("shard", str(shard)), ("shards", str(opts.shards))]
            if opts.seeds:
                data.append(("seeds", opts.seeds))
            if redis_urls:
                data.append(("setting", f"REDIS_URL={redis_urls[nodes.index(node)]}"))
            data += [("setting", s) for s in settings]
            try:
                call(node, "schedule.json", data)
            except NodeError as exc:
                print(f"cluster: error: shard {shard}: {exc}; cancelling the {len(done)} jobs already scheduled")
                for other_node, other_job in done:
                    try:
                        call(other_node, "cancel.json", {"project": self.project, "job": other_job})
                    except NodeError as cancel_error:
                        print(f"cluster: error: could not cancel {other_job}: {cancel_error}")
                return 1
            done.append((node, job))
            print(f"shard {shard}/{opts.shards}: job {job} on {node}")
        return 0

    def status(self, jobs: dict[int, tuple[str, str]], nodes: list[str]) -> int:
        states: dict[str, str] = {}
        failed = 0
        for node in nodes:
            try:
                answer = call(node, f"listjobs.json?project={self.project}")
            except NodeError as exc:
                print(f"cluster: error: {exc}")
                failed += 1
                continue
            for state in ("pending", "running", "finished"):
                for job in answer.get(state, []):
                    states[f"{node} {job['id']}"] = state
        for shard, (node, job) in jobs.items():
            print(f"shard {shard}: {states.get(f'{node} {job}', 'unknown'):9s} {job} on {node}")
        return 1 if failed else 0

    def cancel(self, jobs: dict[int, tuple[str, str]]) -> int:
        failed = 0
        for shard, (node, job) in jobs.items():
            try:
                answer = call(node, "cancel.json", {"project": self.project, "job": job})
                print(f"shard {shard}: {job} on {node}: was {answer.get('prevstate') or 'not running'}")
            except NodeError as exc:
                print(f"cluster: error: shard {shard}: {exc}")
                failed += 1
        return 1 if failed else 0
