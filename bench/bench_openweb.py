"""The job users run: the billion spider with its own defaults (WARC on,
robots.txt on) over HTTPS, against thousands of domains whose servers take
time to answer, with a per-domain delay; beside plain Scrapy (Scrapy's
LinkExtractor, in-memory scheduler, no storage) at the same concurrency and
the same per-domain delay. One process each, pinned to CPU 0; the test web
and Redis share CPU 1.

Measured over the steady window (``--warmup`` seconds after the start to
``--seconds - 5``), from the test web's log and /proc:
- pages/s against the politeness bound (domains / delay);
- distinct pages per CPU second of the crawl process;
- CPU ms per page by component, from py-spy samples (TLS, HTTP, parse,
  frontier, WARC, Scrapy engine, other);
- Redis CPU per page, peak RSS of the crawl process.

    python bench/bench_openweb.py [--domains 3000] [--delay 10] [--seconds 90]
        [--concurrency 1000] [--latency-ms 200] [--bandwidth 500000] [--plain-http]
        [--only ours|scrapy] [--crawler-root PATH]

``--plain-http`` serves plain HTTP and ``--latency-ms 0 --bandwidth 0`` an
instant web: figures of such a run are labelled as stripped-down.
``--crawler-root`` runs the billion spider from another checkout (to
measure an older version against the same web).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.testweb.config import WebConfig  # noqa: E402
from devkit.testweb.control import TestWebProcess, consecutive  # noqa: E402
from tests.servers import RedisServer, cpu_seconds  # noqa: E402

#: component -> path fragments of a py-spy frame; the first match from the
#: innermost frame outwards names the component of a sample
COMPONENTS = (
    ("WARC", ("warcfile.py", "extensions/warc.py", "warcio/", "isal/")),
    ("TLS", ("OpenSSL/", "twisted/protocols/tls.py", "_sslverify.py", "crawler/fetch/_tls.py", "/ssl.py",
             "asyncio/sslproto.py",
             "service_identity/", "cryptography/", "contextfactory.py", "downloader/tls.py")),
    ("parse", ("crawler/links.py", "_fastjoin.py", "selectolax", "linkextractors/", "lxml", "parsel/",
               "canonical.py", "ada_url")),
    ("frontier", ("crawler/scheduler/", "redis/", "hiredis", "crawler/deadletters.py", "scrapy_redis/",
                  "scrapy/core/scheduler.py", "pqueues.py", "queuelib/", "dupefilters.py")),
    ("HTTP", ("twisted/web/", "handlers/http11.py", "twisted/internet/tcp.py", "twisted/internet/endpoints.py",
              "scrapy/http/", "scrapy/responsetypes.py", "resolver.py", "crawler/fetch/",
              "asyncio/selector_events.py", "asyncio/base_events.py", "/socket.py")),
    ("middlewares", ("crawler/middlewares/", "downloadermiddlewares/", "spidermiddlewares/")),
    ("Scrapy engine", ("scrapy/core/", "scrapy/utils/", "scrapy/signalmanager.py", "pydispatch/",
                       "scrapy/extensions/", "crawler/extensions/")),
)


def classify(stack: str) -> str:
    for frame in reversed(stack.split(";")):
        for name, fragments in COMPONENTS:
            if any(f in frame for f in fragments):
                return name
    return "other"


def profile(pid: int, seconds: float, out: Path) -> dict[str, float]:
    """Share of the process's samples by component (py-spy, all threads)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    subprocess.run([py_spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200",
                    "--format", "raw", "--output", str(out), "--nonblocking"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    shares: Counter[str] = Counter()
    if not out.exists():
        return {}
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit():
            shares[classify(stack)] += int(count)
    total = sum(shares.values()) or 1
    return {name: n / total for name, n in shares.items()}


def run(name: str, cmd: list[str], env: dict[str, str], cwd: Path, web: TestWebProcess,
        redis: RedisServer, args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    redis.client().flushall()
    before = len(web.log())
    started = time.time()
    proc = subprocess.Popen(["taskset", "-c", "0", *cmd], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(args.warmup)
    window = args.seconds - args.warmup - 5
    cpu0, redis0 = cpu_seconds(proc.pid), cpu_seconds(redis.proc.pid)  # type: ignore[union-attr]
    t0 = time.time()
    shares = profile(proc.pid, window, (args.profile_dir or tmp) / f"{name.split()[0]}.raw")
    time.sleep(max(0.0, t0 + window - time.time()))
    t1 = time.time()
    cpu1, redis1 = cpu_seconds(proc.pid), cpu_seconds(redis.proc.pid)  # type: ignore[union-attr]
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        print(err[-3000:])
        raise SystemExit(f"{name}: the crawl failed")
    log = web.log(since=before)
    pairs = consecutive(log)  # robots.txt included: the site sees every request
    starts, finishes = [b.ms - a.ms for a, b in pairs], [b.ms - a.done for a, b in pairs]
    pages = [e for e in log if e.path != "/robots.txt" and e.status == 200]
    in_window = [e for e in pages if t0 * 1000 <= e.ms < t1 * 1000]
    distinct = len({(e.domain, e.target) for e in in_window})
    seen_before = {(e.domain, e.target) for e in pages if e.ms < t0 * 1000}
    new = len({(e.domain, e.target) for e in in_window} - seen_before)
    cpu = cpu1 - cpu0
    return {
        "pages_total": len({(e.domain, e.target) for e in pages}),
        "window": t1 - t0, "fetches": len(in_window), "distinct": distinct, "new": new,
        "pages_s": len(in_window) / (t1 - t0), "cpu": cpu, "cpu_ms": cpu / max(new, 1) * 1000,
        "pages_per_cpu_s": new / cpu if cpu else 0.0,
        "redis_ms": (redis1 - redis0) / max(new, 1) * 1000, "rss_mb": usage.ru_maxrss / 1024,
        "shares": shares, "elapsed": time.time() - started,
        "gaps": (starts, finishes),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--domains", type=int, default=3000)
    p.add_argument("--pages", type=int, default=40)
    p.add_argument("--delay", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--warmup", type=float, default=50.0, help="seconds before the window (robots.txt of every domain)")
    p.add_argument("--concurrency", type=int, default=0, help="0: each crawler's own default")
    p.add_argument("--latency-ms", type=float, default=200.0)
    p.add_argument("--bandwidth", type=int, default=500_000, help="bytes/s per connection")
    p.add_argument("--plain-http", action="store_true")
    p.add_argument("--only", choices=("ours", "scrapy"))
    p.add_argument("--crawler-root", type=Path, default=ROOT)
    p.add_argument("--profile-dir", type=Path, help="keep py-spy's raw samples here")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a Scrapy setting for our crawl (e.g. CRAWLER_WARC_DIR= : a stripped-down run)")
    args = p.parse_args()
    stripped = args.plain_http or not args.latency_ms or any(s.startswith("CRAWLER_WARC_DIR=") for s in args.set)
    config = WebConfig(domains=args.domains, pages=args.pages, tls=not args.plain_http,
                       latency_ms=args.latency_ms, bandwidth=args.bandwidth, crawl_delay_share=0.0,
                       private_share=0.02, dup_share=0.1, cross_share=0.1)
    bound = args.domains / args.delay
    concurrency = args.concurrency or 1000
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        redis = RedisServer(tmp / "redis").start()
        subprocess.run(["taskset", "-cp", "1", str(redis.proc.pid)], capture_output=True)  # type: ignore[union-attr]
        web = TestWebProcess(config, cpu=1).start()
        try:
            seeds = tmp / "seeds.txt"
            seeds.write_text("".join(f"{web.url(d)}\n" for d in range(args.domains)))
            common = ["-s", "LOG_LEVEL=WARNING", "-s", f"CLOSESPIDER_TIMEOUT={args.seconds}"]
            if args.concurrency:
                common += ["-s", f"CONCURRENT_REQUESTS={args.concurrency}"]
            ours_root = args.crawler_root.resolve()
            runs = {
                "ours (billion, defaults)": (
                    [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}", *common,
                     "-s", f"CRAWLER_DOMAIN_DELAY={args.delay}", "-s", f"CRAWLER_WARC_DIR={tmp / 'warc'}",
                     "-s", "CRAWLER_PROGRESS_INTERVAL=0", *(a for s in args.set for a in ("-s", s))],
                    dict(os.environ, PYTHONPATH=str(ours_root), REDIS_URL=redis.url,
                         CRAWLER_CONTACT="bench@example.org",
                         # older checkouts map *.test in their own settings
                         **({"SCRAPY_SETTINGS_MODULE": "devkit.settings"}
                            if (ours_root / "devkit" / "settings.py").exists() else {})),
                    ours_root),
                "plain Scrapy (LinkExtractor)": (
                    [sys.executable, "-m", "scrapy", "crawl", "followall", "-a",
                     f"start_urls={','.join(web.url(d) for d in range(args.domains))}", *common,
                     "-s", f"CONCURRENT_REQUESTS={concurrency}", "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=1",
                     "-s", f"DOWNLOAD_DELAY={args.delay}", "-s", "RANDOMIZE_DOWNLOAD_DELAY=False"],
                    dict(os.environ, PYTHONPATH=str(ROOT), SCRAPY_SETTINGS_MODULE="bench.plain_settings"),
                    ROOT),
            }
            if args.only:
                runs = {k: v for k, v in runs.items() if k.startswith(args.only) or
                        (args.only == "scrapy" and k.startswith("plain"))}
            label = "STRIPPED-DOWN (not the job users run): " if stripped else ""
            print(f"{label}open web: {args.domains:,} domains over {config.scheme.upper()}, time to first byte "
                  f"log-normal median {args.latency_ms:g} ms, {args.bandwidth / 1000:g} kB/s per connection, "
                  f"{args.delay:g} s per domain: politeness bound {bound:.0f} pages/s; crawler on CPU 0, "
                  f"test web + Redis on CPU 1; steady window {args.warmup:g}-{args.seconds - 5:g} s")
            results = {}
            for label_, (cmd, env, cwd) in runs.items():
                r = results[label_] = run(label_, cmd, env, cwd, web, redis, args, tmp)
                shares = r["shares"]
                tls = web.counters()
                print(f"\n{label_}: {r['pages_s']:.1f} pages/s in the window = {r['pages_s'] / bound:.0%} of "
                      f"the bound; {r['pages_per_cpu_s']:.1f} new pages per CPU second "
                      f"({r['cpu_ms']:.2f} CPU ms/page, Redis {r['redis_ms']:.2f}); peak RSS {r['rss_mb']:.0f} MB; "
                      f"{r['pages_total']:,} pages in all; test web so far: {tls['tls_handshakes']:,} TLS "
                      f"handshakes, {tls['tls_resumed']:,} resumed")
                starts, finishes = r["gaps"]  # type: ignore[misc]
                limit = args.delay * 1000
                if starts:
                    print(f"  politeness at the site: {len(starts):,} intervals; arrival to arrival min "
                          f"{min(starts) / 1000:.3f} s, {sum(g < limit for g in starts)} under {args.delay:g} s; "
                          f"end of answer to next arrival min {min(finishes) / 1000:.3f} s, "
                          f"{sum(g < limit for g in finishes)} under")
                if shares:
                    print("  CPU ms per page by component: " + ", ".join(
                        f"{k} {v * r['cpu_ms']:.2f} ({v:.0%})"  # type: ignore[operator]
                        for k, v in sorted(shares.items(), key=lambda kv: -kv[1])))  # type: ignore[union-attr]
            if len(results) == 2:
                ours, plain = results.values()
                print(f"\nours vs plain Scrapy: x{ours['pages_per_cpu_s'] / max(plain['pages_per_cpu_s'], 1e-9):.1f} "
                      f"distinct pages per CPU second, x{ours['pages_s'] / max(plain['pages_s'], 1e-9):.1f} pages/s")
        finally:
            web.stop()
            redis.stop()


if __name__ == "__main__":
    main()
