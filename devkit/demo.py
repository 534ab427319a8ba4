"""``make demo``: a 60-second crawl of the local test web on the embedded Redis.

Starts (or reuses) the embedded Redis unless ``REDIS_URL`` is set, serves a
multi-domain test web on 127.0.0.1 over HTTPS with the open web's timing
(100 ms median time to first byte, 2 MB/s per connection) and injected
faults, runs the ``billion`` spider against it (1 s between two requests to
one domain instead of 70 s) with a progress line every few seconds, and
ends with a summary.

    python -m devkit.demo [--seconds 60] [--domains 200] [--pages 200] [--plain-http]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from scrapy.utils.project import get_project_settings

from crawler.connection import RedisUnavailable, get_redis, mask_url, redis_url
from crawler.extensions.progress import duplicates
from crawler.store import describe
from devkit.testweb.config import WebConfig
from devkit.testweb.control import TestWebProcess

SPIDER = "billion"
PREFIX = "demo"
DEMO_FAULTS = {"404": 0.01, "410": 0.005, "429": 0.005, "503": 0.005, "slow": 0.005,
               "drop": 0.002, "big": 0.02, "pdf": 0.01}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m devkit.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--domains", type=int, default=200)
    p.add_argument("--pages", type=int, default=200)
    p.add_argument("--delay", type=float, default=1.0, help="seconds between two requests to one domain")
    p.add_argument("--plain-http", action="store_true", help="an instant plain-HTTP test web instead")
    p.add_argument("--output", type=Path, default=Path("output/demo"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # the project's settings plus the test web's `*.test` host map
    os.environ.setdefault("SCRAPY_SETTINGS_MODULE", "devkit.settings")
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    settings = get_project_settings()
    try:
        url = redis_url(settings)
        settings.set("REDIS_URL", url)
        client = get_redis(settings)
    except (RedisUnavailable, FileNotFoundError, RuntimeError) as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 1
    print(f"demo: Redis at {mask_url(url)}", flush=True)
    client.close()
    args.output.mkdir(parents=True, exist_ok=True)
    stats_file = args.output / "stats.json"
    stats_file.unlink(missing_ok=True)
    timing = {} if args.plain_http else {"tls": True, "latency_ms": 100, "bandwidth": 2_000_000}
    config = WebConfig(domains=args.domains, pages=args.pages, faults=DEMO_FAULTS, **timing)
    with TestWebProcess(config) as web:
        seeds = args.output / "seeds.txt"
        seeds.write_text("".join(f"{web.url(d)}\n" for d in range(config.domains)))
        print(f"demo: test web on {config.scheme}://127.0.0.1:{web.port}, {config.domains} domains "
              f"x {config.pages} pages; crawling for {args.seconds}s", flush=True)
        cmd = [
            sys.executable, "-m", "scrapy", "crawl", SPIDER, "-a", f"seeds={seeds}",
            "-s", f"CRAWLER_DOMAIN_DELAY={args.delay}",
            "-s", f"CRAWLER_WARC_DIR={args.output / 'warc'}",
            "-s", f"CLOSESPIDER_TIMEOUT={args.seconds}",
            "-s", "CRAWLER_PROGRESS_INTERVAL=5",
            # a fresh frontier each run, under a prefix of its own: a real `scrapy crawl billion`
            # in this checkout never resumes the demo's leftovers, nor the demo a real crawl's
            "-s", f"CRAWLER_KEY_PREFIX={PREFIX}",
            "-s", "SCHEDULER_FLUSH_ON_START=True",
            "-s", "CRAWLER_BACKOFF_BASE=0.5",
            "-s", "CRAWLER_MAX_DEPTH=0",
            "-s", f"CRAWLER_STATS_FILE={stats_file}",
            "-s", f"LOG_FILE={args.output / 'crawl.log'}",
            "-s", "LOG_FILE_APPEND=False",
            "-s", f"FEEDS={json.dumps({str(args.output / 'pages.jsonl'): {'format': 'jsonlines', 'overwrite': True}})}",
        ]
        env = dict(os.environ, REDIS_URL=url)
        env.setdefault("CRAWLER_CONTACT", "make-demo@localhost")
        started = time.monotonic()
        code = _run_showing_progress(cmd, env, args.output / "crawl.log")
        elapsed = time.monotonic() - started
        served = len(web.log())
    if code != 0 or not stats_file.exists():
        print(f"demo: the crawl failed (exit {code}); see {args.output / 'crawl.log'}", file=sys.stderr)
        return code or 1
    stats = json.loads(stats_file.read_text())
    _summary(stats, elapsed, served, args.output)
    return 0


def _run_showing_progress(cmd: list[str], env: dict[str, str], log: Path) -> int:
    """Run the crawl; echo its progress lines (and errors) from its log file."""
    log.unlink(missing_ok=True)
    proc = subprocess.Popen(cmd, env=env)
    position = 0
    while True:
        done = proc.poll() is not None
        if log.exists():
            with open(log, encoding="utf-8", errors="replace") as fh:
                fh.seek(position)
                for line in fh:
                    if "[crawler." in line or "ERROR" in line or "CRITICAL" in line:
                        print("  " + line.rstrip().split("] ", 1)[-1], flush=True)
                position = fh.tell()
        if done:
            return proc.returncode
        time.sleep(0.5)


def _summary(stats: dict[str, object], elapsed: float, served: int, output: Path) -> None:
    def get(key: str) -> int:
        value = stats.get(key, 0)
        return value if isinstance(value, int) else 0

    robots = get("crawler/robots/fetched")
    pages = get("response_received_count") - robots
    statuses = {k.rsplit("/", 1)[1]: v for k, v in stats.items()
                if k.startswith("downloader/response_status_count/")}
    http_errors = sum(v for s, v in statuses.items() if isinstance(v, int) and s >= "400")
    failures = get("downloader/exception_count") - get(
        "downloader/exception_type_count/scrapy.exceptions.IgnoreRequest")
    print("\ndemo summary")
    print(f"  pages fetched        {pages} in {elapsed:.0f}s ({pages / max(elapsed, 1e-9):.1f} pages/s), "
          f"plus {robots} robots.txt")
    print(f"  domains              {get('crawler/domains_seen')}")
    print(f"  duplicates skipped   {duplicates(stats)}")  # type: ignore[arg-type]
    print(f"  robots.txt forbidden {get('crawler/robots/disallowed') + get('crawler/links/robots_disallowed')} "
          f"links and requests (robots.txt fetched {get('crawler/robots/fetched')} times)")
    print(f"  retries              {get('crawler/backoff/retries')} "
          f"(gave up {get('crawler/backoff/exhausted')})")
    dead = sum(v for k, v in stats.items() if k.startswith("crawler/dlq/") and isinstance(v, int))
    print(f"  dead letters         {dead} (scrapy dlq {SPIDER} -s CRAWLER_KEY_PREFIX={PREFIX} --counts)")
    print(f"  truncated at 250 KB  {get('crawler/truncated')}; non-HTML skipped {get('crawler/skipped/non_html')}")
    print(f"  errors               {get('log_count/ERROR') + failures} (as the progress line counts them: "
          f"{failures} download failures, {get('log_count/ERROR')} error log lines); "
          f"{http_errors} answers of HTTP >= 400")
    if "crawler/ledger/admitted" in stats:
        ledger = {k.removeprefix("crawler/ledger/"): v for k, v in stats.items() if k.startswith("crawler/ledger/")}
        print(f"  frontier ledger      {describe(ledger)}")
    print(f"  requests served      {served} (test web's own log)")
    print(f"  finish reason        {stats.get('finish_reason')}")
    print(f"  output               {output / 'pages.jsonl'} (one item per page), "
          f"{output / 'warc'}/*.warc.gz (pages), {output / 'stats.json'}, {output / 'crawl.log'}")


if __name__ == "__main__":
    sys.exit(main())
