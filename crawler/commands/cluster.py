"""``scrapy cluster``: deploy the project to Scrapyd nodes and run a sharded
crawl across them.

    scrapy cluster deploy                                   # every [deploy:*] target of scrapy.cfg
    scrapy cluster schedule billion --shards 12 --seeds /data/top-1m.csv \\
        --redis redis://10.0.0.1:6379/0,redis://10.0.0.2:6379/0 [--setting NAME=VALUE ...]
    scrapy cluster status billion [--shards 12] [--run 20261204T130500Z]
    scrapy cluster cancel billion [--shards 12] [--run 20261204T130500Z]
    scrapy cluster schedule billion ... --metrics-port 9410 --metrics-sd /etc/prometheus/crawler.json

Each ``schedule`` is a run, named by its start time in UTC; shard i of N runs
on node i mod (number of nodes), with ``shard``, ``shards`` and ``seeds`` as
spider arguments and that node's ``REDIS_URL`` (``--redis``, in node order)
as a setting; its job id is ``<spider>-<i>-of-<N>-<run>``, so every run has
its own jobs and its own job logs. Nodes come from ``--nodes URL,URL`` or the
``[deploy:*]`` targets of scrapy.cfg (the unnamed ``[deploy]`` target only
when it is the only one), with their ``username``/``password`` (Scrapyd's
HTTP basic auth; in ``--nodes``: ``http://user:password@host:6800/``).

With metrics on (``--metrics-port BASE``, or ``CRAWLER_METRICS_ENABLED``)
shard i's job serves them on port BASE + i (BASE: ``--metrics-port``, else
``CRAWLER_METRICS_PORT``), so the jobs of a node never share a port;
``--metrics-sd FILE`` writes their targets (the node's host and the job's
port) as a Prometheus ``file_sd_configs`` file.

Errors (``cluster: error: ...``) and notes go to stderr, what was done to
stdout.

Before anything is submitted, the job's settings are validated and the
spider's arguments and CRAWLER_CONTACT checked as ``scrapy crawl`` checks
them (one line and exit status 2 if not); then every node must answer. A
failed deploy or a refused job is an error naming the node, and nothing stays
half-submitted: jobs already scheduled are cancelled before the command exits
non-zero.

``status`` reads Scrapyd's own job lists and shows the newest run (or
``--run``): per shard pending, running, finished (with the finish reason) or
failed (with the error line), the outcome of an ended job read from the tail
of its log on the node. It exits 1 when a shard failed, its outcome is
unknown or a node could not be asked.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import sys
import tempfile
import time
import urllib.parse
from configparser import ConfigParser
from dataclasses import dataclass
from pathlib import Path

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings
from scrapy.utils.conf import closest_scrapy_cfg

from crawler.commands._fail import fail
from crawler.commands._scrapyd import NodeError, build_egg, call, fetch_tail, shown, with_credentials
from crawler.commands.crawl import check_spider
from crawler.middlewares.useragent import contact_of
from crawler.settings_registry import SettingsError, setting, validate

ACTIONS = ("deploy", "schedule", "status", "cancel")

#: a job id of this command: <spider>-<shard>-of-<shards>-<run>
JOB_ID = re.compile(r"^(?P<spider>.+)-(?P<shard>\d+)-of-(?P<shards>\d+)-(?P<run>\d{8}T\d{6}Z)$")
RUN = re.compile(r"^\d{8}T\d{6}Z$")

#: lines the crawl command ends a failed job's log with (crawler/commands/crawl.py, _fail.py)
FAILURE_MARKERS = ("crawler: error: ", "Crawl failed: ")
SPIDER_CLOSED = re.compile(r"Spider closed \(([^)]*)\)")


def deploy_targets(cfg: Path) -> tuple[list[str], str]:
    """The node URLs of scrapy.cfg: every ``[deploy:<name>]`` target, or the
    unnamed ``[deploy]`` one when there is no other, with its ``username``
    and ``password`` in the URL when it has them; and the project name."""
    parser = ConfigParser(interpolation=None)
    parser.read(cfg)
    named = [s for s in parser.sections() if s.startswith("deploy:") and parser.has_option(s, "url")]
    sections = named or [s for s in parser.sections() if s == "deploy" and parser.has_option(s, "url")]
    nodes = [with_credentials(parser.get(s, "url"), parser.get(s, "username"), parser.get(s, "password", fallback=""))
             if parser.get(s, "username", fallback="") else parser.get(s, "url") for s in sections]
    project = next((parser.get(s, "project") for s in sections if parser.has_option(s, "project")), "crawler")
    return list(dict.fromkeys(nodes)), project


def job_id(spider: str, shard: int, shards: int, run: str) -> str:
    return f"{spider}-{shard}-of-{shards}-{run}"


def run_stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def error(line: str) -> None:
    print(f"cluster: error: {line}", file=sys.stderr, flush=True)


def write_file_sd(path: Path, targets: list[tuple[str, int, str, str]]) -> None:
    """Prometheus's file-based service discovery: one target per job
    (``(host, port, job id, run)``), written whole (renamed into place, so
    Prometheus never reads half a file). The labels name the job and the
    run; the metrics carry ``spider`` and ``shard`` themselves."""
    entries = [{"targets": [f"{host}:{port}"], "labels": {"scrapyd_job": job, "run": run}}
               for host, port, job, run in targets]
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as out:
        json.dump(entries, out, indent=2)
        out.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


@dataclass
class Job:
    """One job of this command, as a node's listjobs.json lists it."""

    node: str
    id: str
    spider: str
    shard: int
    shards: int
    run: str
    state: str  # pending, running or finished (Scrapyd's word)
    log_url: str | None


def list_jobs(node: str, project: str) -> list[Job]:
    """The jobs of ``project`` on ``node`` whose ids are this command's."""
    answer = call(node, "listjobs.json?" + urllib.parse.urlencode({"project": project}))
    jobs = []
    for state in ("pending", "running", "finished"):
        for entry in answer.get(state, []):
            match = JOB_ID.match(str(entry.get("id", "")))
            if match:
                jobs.append(Job(node, match.group(0), match["spider"], int(match["shard"]), int(match["shards"]),
                                match["run"], state, entry.get("log_url")))
    return jobs


def judge_log(text: str) -> tuple[str, str]:
    """The outcome of an ended job from the tail of its log: ``("failed",
    error line)`` or ``("finished", "finish reason ...")``."""
    lines = text.splitlines()
    for line in reversed(lines):
        for marker in FAILURE_MARKERS:
            if marker in line:
                return "failed", line.split(marker, 1)[1].strip()
    closed = SPIDER_CLOSED.findall(text)
    if closed:
        return "finished", f"finish reason {closed[-1]}"
    errors = [line for line in lines if " ERROR: " in line or " CRITICAL: " in line]
    last = (errors or [line for line in lines if line.strip()] or ["(the log is empty)"])[-1].strip()
    return "failed", f"ended without closing the spider (its stderr is in Scrapyd's log); last log line: {last}"


def outcome(job: Job) -> tuple[str, str]:
    """The state of ``job`` and a detail: for an ended job, from its log."""
    if job.state != "finished":
        return job.state, ""
    if not job.log_url:
        return "unknown", "ended; the node keeps no job logs (Scrapyd's logs_dir)"
    text = fetch_tail(job.node, job.log_url)
    if text is None:
        return "unknown", (f"ended; no {job.log_url} on the node: Scrapyd deleted it (jobs_to_keep) "
                           "or the job died before writing it (see Scrapyd's log)")
    return judge_log(text)


def _local(node: str) -> bool:
    host = urllib.parse.urlsplit(node).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
        parser.add_argument("--shards", type=int, help="number of shards (status, cancel: only runs of that many)")
        parser.add_argument("--seeds", default="", help="seeds file: an absolute path on the nodes, or redis:<key>")
        parser.add_argument("--resume", action="store_true",
                            help="schedule without --seeds: the shards continue the frontier they find")
        parser.add_argument("--run", help="status, cancel: the run (its start, e.g. 20261204T130500Z); "
                                          "default: the newest")
        parser.add_argument("--redis", default="", help="REDIS_URL of each node, comma-separated, in node order")
        parser.add_argument("--setting", action="append", metavar="NAME=VALUE",
                            help="a setting for every job (repeatable)")
        parser.add_argument("--metrics-port", type=int, metavar="BASE",
                            help="schedule: metrics on, shard i on port BASE + i "
                                 "(default with CRAWLER_METRICS_ENABLED: CRAWLER_METRICS_PORT)")
        parser.add_argument("--metrics-sd", metavar="FILE",
                            help="schedule: write the jobs' metrics targets there (Prometheus file_sd_configs)")

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
            if opts.shards is not None and opts.shards < 1 or action == "schedule" and not opts.shards:
                raise UsageError("--shards must be an integer >= 1", print_help=False)
            if opts.run and not RUN.match(opts.run):
                raise UsageError(f"--run must look like 20261204T130500Z, got {opts.run!r}", print_help=False)
            if action == "schedule":
                redis_urls = [u.strip() for u in opts.redis.split(",") if u.strip()]
                if redis_urls and len(redis_urls) != len(nodes):
                    raise UsageError(f"--redis names {len(redis_urls)} URLs for {len(nodes)} nodes",
                                     print_help=False)
                job_settings, metrics_base = self.check_inputs(args[1], nodes, opts)
                self.exitcode = self.schedule(args[1], nodes, redis_urls, job_settings, metrics_base, opts)
            elif action == "status":
                self.exitcode = self.status(args[1], nodes, opts)
            else:
                self.exitcode = self.cancel(args[1], nodes, opts)
        except NodeError as exc:
            error(str(exc))
            self.exitcode = 1

    def deploy(self, project_dir: Path, nodes: list[str], version: str) -> int:
        egg = build_egg(project_dir)
        failed = 0
        for node in nodes:
            try:
                answer = call(node, "addversion.json", {"project": self.project, "version": version},
                              files={"egg": (f"{self.project}.egg", egg)})
                print(f"{shown(node)}: deployed {self.project} {version} ({answer.get('spiders', '?')} spiders)")
            except NodeError as exc:
                error(str(exc))
                failed += 1
        return 1 if failed else 0

    # --- schedule ----------------------------------------------------------

    def check_inputs(self, spider: str, nodes: list[str],
                     opts: argparse.Namespace) -> tuple[list[tuple[str, str]], int | None]:
        """Check what the jobs will get as ``scrapy crawl`` on a node checks it
        (settings, the spider's arguments, CRAWLER_CONTACT), before anything is
        submitted; a problem ends the command with one line (exit status 2).
        Returns the jobs' settings as (name, value) pairs, and the base of
        their metrics ports (None: metrics off)."""
        assert self.settings is not None
        settings = self.settings.copy()
        job_settings: list[tuple[str, str]] = []
        try:
            for item in opts.setting or []:
                name, eq, value = item.partition("=")
                if not eq or not name.strip():
                    raise SettingsError(f"--setting must be NAME=VALUE, got {item!r}")
                job_settings.append((name.strip(), value))
            settings.setdict(dict(job_settings), priority="cmdline")
            validate(settings)
            metrics_base = self.metrics_base(settings, opts)
            if not opts.seeds and not opts.resume:
                raise SettingsError("cluster schedule needs --seeds (a file path on the nodes, or redis:<key>); "
                                    "pass --resume to continue the frontier without seeds")
            seeds = opts.seeds
            if seeds and not seeds.startswith("redis:"):
                if not Path(seeds).is_absolute():
                    raise SettingsError(f"--seeds {seeds!r}: give an absolute path (the nodes read it from "
                                        "Scrapyd's working directory otherwise), or redis:<key>")
                if not Path(seeds).is_file() and not all(_local(n) for n in nodes):
                    print(f"cluster: note: the seeds file {seeds} is not on this machine; "
                          "it must be on every node", file=sys.stderr)
                    seeds = ""  # what can be checked here: the rest
            check_spider(settings, spider, {"shard": "0", "shards": str(opts.shards), "seeds": seeds})
        except SettingsError as exc:
            fail(None, exc)
        if "CRAWLER_CONTACT" not in dict(job_settings):
            contact = contact_of(settings)
            if contact:  # from this machine (-s or its environment): the nodes may not have it
                job_settings.append(("CRAWLER_CONTACT", contact))
        return job_settings, metrics_base

    @staticmethod
    def metrics_base(settings: BaseSettings, opts: argparse.Namespace) -> int | None:
        """The first job's metrics port (None: metrics off); SettingsError
        when the jobs' ports cannot all be valid or listed."""
        if opts.metrics_port is None and not setting(settings, "CRAWLER_METRICS_ENABLED"):
            if opts.metrics_sd:
                raise SettingsError("--metrics-sd needs metrics on: --metrics-port BASE")
            return None
        base = opts.metrics_port if opts.metrics_port is not None else setting(settings, "CRAWLER_METRICS_PORT")
        if base == 0:
            if opts.metrics_sd:
                raise SettingsError("--metrics-sd needs fixed ports: --metrics-port BASE (not 0)")
            return 0
        if not 0 < base <= 65536 - opts.shards:
            raise SettingsError(f"--metrics-port {base}: the ports {base}..{base + opts.shards - 1} "
                                "of the shards must be between 1 and 65535")
        if opts.metrics_sd and not Path(opts.metrics_sd).parent.is_dir():
            raise SettingsError(f"--metrics-sd {opts.metrics_sd}: no such directory")
        return int(base)

    def schedule(self, spider: str, nodes: list[str], redis_urls: list[str],
                 job_settings: list[tuple[str, str]], metrics_base: int | None, opts: argparse.Namespace) -> int:
        runs: set[str] = set()
        for node in nodes:  # every node first, so a dead one submits nothing
            runs.update(job.run for job in list_jobs(node, self.project) if job.spider == spider)
        shards = opts.shards
        run = run_stamp()
        while run in runs:
            time.sleep(1)  # a run started this very second: the next second names ours
            run = run_stamp()
        print(f"run {run}: {spider}, {shards} shards on {len(nodes)} nodes")
        done: list[tuple[str, str]] = []
        targets: list[tuple[str, int, str, str]] = []
        for shard in range(shards):
            node, job = nodes[shard % len(nodes)], job_id(spider, shard, shards, run)
            data: list[tuple[str, str]] = [("project", self.project), ("spider", spider), ("jobid", job),
                                           ("shard", str(shard)), ("shards", str(shards))]
            if opts.seeds:
                data.append(("seeds", opts.seeds))
            if redis_urls:
                data.append(("setting", f"REDIS_URL={redis_urls[nodes.index(node)]}"))
            data += [("setting", f"{name}={value}") for name, value in job_settings]
            port = None
            if metrics_base is not None:  # after the --setting ones: each job its own port
                port = metrics_base + shard if metrics_base else 0
                data += [("setting", "CRAWLER_METRICS_ENABLED=True"), ("setting", f"CRAWLER_METRICS_PORT={port}")]
            try:
                call(node, "schedule.json", data)
            except NodeError as exc:
                error(f"shard {shard}: {exc}; cancelling the {len(done)} jobs already scheduled")
                for other_node, other_job in done:
                    try:
                        call(other_node, "cancel.json", {"project": self.project, "job": other_job})
                    except NodeError as cancel_error:
                        error(f"could not cancel {other_job}: {cancel_error}")
                return 1
            done.append((node, job))
            if port:
                targets.append((urllib.parse.urlsplit(shown(node)).hostname or "localhost", port, job, run))
            print(f"shard {shard}/{shards}: job {job} on {shown(node)}" + (f", metrics on port {port}" if port else ""))
        if opts.metrics_sd:
            write_file_sd(Path(opts.metrics_sd), targets)
            print(f"metrics targets of run {run} written to {opts.metrics_sd}")
        return 0

    # --- status and cancel -------------------------------------------------

    def _jobs(self, spider: str, nodes: list[str], opts: argparse.Namespace) -> tuple[list[Job], int]:
        """The jobs of ``spider`` on every node that answers (of ``--shards``
        shards when given), and how many nodes did not answer."""
        jobs: list[Job] = []
        failed = 0
        for node in nodes:
            try:
                jobs += [j for j in list_jobs(node, self.project)
                         if j.spider == spider and (opts.shards is None or j.shards == opts.shards)]
            except NodeError as exc:
                error(str(exc))
                failed += 1
        return jobs, failed

    def status(self, spider: str, nodes: list[str], opts: argparse.Namespace) -> int:
        jobs, failed = self._jobs(spider, nodes, opts)
        run = opts.run or max((j.run for j in jobs), default=None)
        jobs = [j for j in jobs if j.run == run]
        if not jobs:
            print(f"no run{' ' + run if run else ''} of {spider} on {len(nodes) - failed} nodes")
            return 1 if failed or opts.run else 0
        shards = max(j.shards for j in jobs)
        print(f"run {run}: {spider}, {shards} shards")
        by_shard = {j.shard: j for j in jobs}
        for shard in range(shards):
            job = by_shard.get(shard)
            if job is None:
                print(f"shard {shard}: {'unknown':9s} {job_id(spider, shard, shards, run or '')}: "
                      "on no node's job lists")
                failed += 1
                continue
            try:
                state, detail = outcome(job)
            except NodeError as exc:
                state, detail = "unknown", f"its log could not be read: {exc}"
            failed += state in ("failed", "unknown")
            print(f"shard {shard}: {state:9s} {job.id} on {shown(job.node)}" + (f": {detail}" if detail else ""))
        return 1 if failed else 0

    def cancel(self, spider: str, nodes: list[str], opts: argparse.Namespace) -> int:
        jobs, failed = self._jobs(spider, nodes, opts)
        jobs = [j for j in jobs if j.state in ("pending", "running") and (not opts.run or j.run == opts.run)]
        if not jobs:
            print(f"no pending or running job of {spider} to cancel")
        for job in sorted(jobs, key=lambda j: (j.run, j.shard)):
            try:
                answer = call(job.node, "cancel.json", {"project": self.project, "job": job.id})
                print(f"shard {job.shard}: {job.id} on {shown(job.node)}: "
                      f"was {answer.get('prevstate') or 'not running'}")
            except NodeError as exc:
                error(f"shard {job.shard}: {exc}")
                failed += 1
        return 1 if failed else 0
