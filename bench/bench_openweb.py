"""The job users run: the billion spider with its own defaults (WARC on,
robots.txt on) over HTTPS, against thousands of domains whose servers take
time to answer, with a per-domain delay; beside plain Scrapy (Scrapy's
LinkExtractor, in-memory scheduler, no storage) at the same concurrency and
the same per-domain delay. One process each, pinned to CPU 0; the test web
and Redis share CPU 1.

Measured over the steady window (``--warmup`` seconds after the start to
``--seconds - 5``), from the test web's log and /proc:
- pages/s against the politeness bound (domains / delay), and, for a delay
  counted from the end of each answer, against domains / (delay + the mean
  time from a request's arrival to the end of its answer);
- distinct pages per CPU second of the crawl process;
- CPU ms per page by component, from py-spy samples (TLS, HTTP, parse,
  frontier, WARC, Scrapy engine, other);
- ours only, from its stats file (the whole crawl): the event loop's worst
  stall, and the pages acknowledged stored against those the site served;
- Redis CPU per page, peak RSS of the crawl process, and its resident memory at the window's
  end by kind (glibc's heap, other anonymous memory, files).

    python bench/bench_openweb.py [--domains 3000] [--delay 10] [--seconds 90]
        [--concurrency 1000] [--latency-ms 200] [--bandwidth 500000] [--plain-http]
        [--profile classic|small|big|both] [--only ours|scrapy|bare]... [--crawler-root PATH]
        [--before-root PATH] [--repeat N] [--offenders FILE]
        [--addresses N] [--address-skew 0.8] [--ip-delay SECONDS] [--cdn-domains N] [--shared-min N]

``--profile``: page sizes of the test web: ``classic`` (the default: the test
web's own sizes, median 138 kB, mean 242 kB, at ``--bandwidth``, as the
figures in docs/benchmarks.md before the profiles), ``small`` (log-normal median 30 kB,
mean 70 kB, ``--bandwidth``), ``big`` (median 120 kB, mean 220 kB at 150 kB/s:
a mean transfer of about 1.5 s), ``both`` one after the other, in one table.
``--only bare`` runs bench/bare_crawler.py, a bare asyncio crawler written for
this bench (no storage, no Redis, no crash safety), as a floor of CPU per page.

``--repeat N`` runs the crawls N times in turn on one test web (ours, bare,
bare, ours, ours, bare, ...: the other order every second round, so what
coming second costs falls on each): the machine's speed drifts by more than
the differences measured, so the ratio of CPU per page is taken within each
round and the median of the rounds is printed.

``--offenders FILE`` appends every site-side interval under the delay to
FILE (both requests' targets, statuses, arrival and end of answer): the
audit's count says whether there were any, the file says which.

``--addresses N`` spreads the domains over N loopback addresses shaped like
shared hosting (WebConfig.addresses, ``--address-skew`` its exponent: one
address with hundreds of domains, a few with tens, most with one or two),
and passes each crawler the layout's host map (``CRAWLER_HOST_MAP``, every
``d<i>.test`` to its address, as JSON with ``-s``; the bare crawler takes
none and goes to 127.0.0.1 for every host). ``--ip-delay`` is passed to ours
as ``CRAWLER_IP_DELAY``. Each run then also prints a per-address audit from
the test web's log (each interval from the end of an answer to the next
arrival at that address against the ip delay, and the most requests in
flight at once at one address), and the per-address bound: the sum over
addresses of min(k / (D + t), 1 / (d_ip + t)) pages/s, k the domains the
layout puts on the address (all of them, not only those with pages left),
D the per-domain delay, d_ip the ip delay, t the mean time from a request's
arrival to the end of its answer in the window; it bounds requests (a
robots.txt takes an address's turn as a page does), and the run's
requests/s in the window are set against it. ``--cdn-domains N`` puts N
domains on the first address, a CDN-like front end; ``--shared-min`` is our
crawler's ``CRAWLER_IP_SHARED_MIN_DOMAINS``: under N, that address's bound
is a shared front end's pace (min(4 per s, 4 / t) at the crawler's
defaults) instead of 1 / (d_ip + t).

``--plain-http`` serves plain HTTP and ``--latency-ms 0 --bandwidth 0`` an
instant web: figures of such a run are labelled as stripped-down.
``--crawler-root`` runs the billion spider from another checkout (to
measure an older version against the same web); ``--before-root`` runs it
from a second checkout just before ours, on the same web, in the same table.
The slack line: per domain, the site-side gap between two requests minus the
delay, from the end of the answer (``CRAWLER_DELAY_FROM=finish``, billion's,
and the bare crawler's) or from its arrival (Scrapy's ``DOWNLOAD_DELAY``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crawler.settings_registry import BY_NAME  # noqa: E402
from devkit.testweb.config import LOOPBACK, WebConfig, layout_addresses, layout_counts  # noqa: E402
from devkit.testweb.control import LogEntry, TestWebProcess, consecutive, max_in_flight  # noqa: E402
from tests.servers import RedisServer, cpu_seconds, system_seconds  # noqa: E402

#: component -> path fragments of a py-spy frame; the first match from the
#: innermost frame outwards names the component of a sample
COMPONENTS = (
    ("WARC", ("warcfile.py", "warcrecords.py", "extensions/warc.py", "warcio/", "isal/")),
    ("TLS", ("OpenSSL/", "twisted/protocols/tls.py", "_sslverify.py", "crawler/fetch/_tls.py", "/ssl.py",
             "asyncio/sslproto.py",
             "service_identity/", "cryptography/", "contextfactory.py", "downloader/tls.py")),
    ("parse", ("crawler/links.py", "_fastjoin.py", "selectolax", "linkextractors/", "lxml", "parsel/",
               "crawler/scheduler/identity.py", "ada_url",
               "bare_links (", "bare_clean (")),  # bench/bare_crawler.py (Lexbor is Cython: unseen)
    ("frontier", ("crawler/scheduler/", "redis/", "hiredis", "scrapy_redis/",
                  "scrapy/core/scheduler.py", "pqueues.py", "queuelib/", "dupefilters.py")),
    ("HTTP", ("twisted/web/", "handlers/http11.py", "twisted/internet/tcp.py", "twisted/internet/endpoints.py",
              "scrapy/http/", "scrapy/responsetypes.py", "resolver.py", "crawler/fetch/",
              "asyncio/selector_events.py", "asyncio/base_events.py", "/socket.py", "aiohttp/")),
    ("middlewares", ("crawler/middlewares/", "downloadermiddlewares/", "spidermiddlewares/")),
    ("Scrapy engine", ("scrapy/core/", "scrapy/utils/", "scrapy/signalmanager.py", "pydispatch/",
                       "scrapy/extensions/", "crawler/extensions/")),
)


#: ``--areas``: a finer split, for attributing the gap to the bare crawler
#: (docs/benchmarks.md, "Where the CPU goes"). The collector's CPU shows inside
#: whichever area allocated when a collection started: py-spy cannot see it.
AREAS = (
    ("WARC", ("warcfile.py", "warcrecords.py", "extensions/warc.py", "fetch/received.py", "isal/", "hashlib")),
    ("links", ("crawler/links.py", "_fastjoin.py", "_hrefscan", "selectolax", "ada_url", "bare_links (",
               "bare_clean (")),
    ("frontier", ("crawler/scheduler/", "redis/", "hiredis", "msgpack", "middlewares/acks.py", "crawler/seeds.py")),
    ("our middlewares", ("crawler/middlewares/",)),
    ("TLS", ("fetch/_tls.py", "fetch/_openssl.py", "OpenSSL/", "cryptography/", "ssl.py", "asyncio/sslproto.py",
             "aiohttp/connector.py")),
    ("our fetch handler", ("crawler/fetch/", "crawler/resolver.py")),
    ("logging/stats", ("logging/", "statscollectors.py", "crawler/lean.py", "logformatter.py", "crawler/extensions/")),
    ("signals", ("signalmanager.py", "pydispatch/", "scrapy/utils/signal.py")),
    ("Scrapy scraper/spidermw", ("scrapy/core/scraper.py", "scrapy/core/spidermw.py", "spidermiddlewares/",
                                 "scrapy/utils/asyncgen.py", "scrapy/utils/python.py", "scrapy/pipelines/",
                                 "scrapy/utils/decorators.py", "scrapy/utils/spider.py")),
    ("Scrapy downloader+mw", ("scrapy/core/downloader/", "downloadermiddlewares/", "scrapy/utils/httpobj.py",
                              "scrapy/utils/url.py", "scrapy/utils/response.py")),
    ("Scrapy engine", ("scrapy/core/engine.py", "scrapy/core/scheduler.py", "scrapy/utils/reactor.py",
                       "scrapy/crawler.py")),
    ("Scrapy requests/responses", ("scrapy/http/", "scrapy/item.py", "w3lib/", "scrapy/utils/datatypes.py",
                                   "scrapy/utils/trackref.py")),
    ("Deferreds/coroutines glue", ("scrapy/utils/defer.py", "scrapy/utils/asyncio.py", "twisted/internet/defer.py",
                                   "twisted/python/failure.py", "scrapy/middleware.py", "scrapy/utils/")),
    ("spider", ("crawler/spiders/",)),
    ("HTTP client (aiohttp)", ("aiohttp/", "multidict", "yarl/", "twisted/web/")),
    ("event loop", ("twisted/internet/", "asyncio/", "uvloop", "selectors.py", "socket.py", "bare_crawler.py")),
)


def classify(stack: str, table: tuple[tuple[str, tuple[str, ...]], ...] = COMPONENTS) -> str:
    for frame in reversed(stack.split(";")):
        for name, fragments in table:
            if any(f in frame for f in fragments):
                return name
    return "other"


def profile(pid: int, seconds: float, out: Path, rate: int = 200,
            table: tuple[tuple[str, tuple[str, ...]], ...] = COMPONENTS, native: bool = False) -> dict[str, float]:
    """Share of the process's samples by component (py-spy, all threads;
    ``native``: C frames too, the process paused for each sample, which
    costs the crawl more)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    subprocess.run([py_spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(rate),
                    "--format", "raw", "--output", str(out), *(["--native"] if native else ["--nonblocking"])],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    shares: Counter[str] = Counter()
    if not out.exists():
        return {}
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit():
            shares[classify(stack, table)] += int(count)
    total = sum(shares.values()) or 1
    return {name: n / total for name, n in shares.items()}


def script_times(client: Any) -> dict[str, tuple[int, int, int, int]]:
    """The slow log (every command, ``--script-times``) by script: name ->
    (calls, us, median us a call, the longest call's us). A script is named by its SHA-1 as this checkout's
    ``Scripts`` sends it; another checkout's show as ``evalsha <sha>``."""
    from crawler.store.keys import Scripts

    names = {getattr(Scripts(client), n).script.sha: n for n in Scripts.NAMES}
    out: dict[str, list[int]] = {}  # name -> each call's us
    for entry in client.slowlog_get(2_000_000):
        words = entry["command"].split()
        verb = words[0].decode().lower() if words else "?"
        name = verb
        if verb == "evalsha" and len(words) > 1:
            sha = words[1].decode()
            name = names.get(sha, f"evalsha {sha[:8]}")
        elif verb not in ("eval",):
            continue
        out.setdefault(name, []).append(int(entry["duration"]))
    client.config_set("slowlog-log-slower-than", 10000)
    client.slowlog_reset()
    return {k: (len(v), sum(v), int(statistics.median(v)), max(v)) for k, v in out.items()}


def run(name: str, cmd: list[str], env: dict[str, str], cwd: Path, web: TestWebProcess,
        redis: RedisServer, args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    redis.client().flushall()
    before = len(web.log())
    started = time.time()
    file_name = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)  # its stats, its profile: each crawl's own
    stats_file = None
    if "billion" in cmd:  # ours: its own stats (the loop's worst stall, pages acknowledged and stored)
        stats_file = tmp / f"stats-{file_name}.json"
        cmd = [*cmd, "-s", f"CRAWLER_STATS_FILE={stats_file}"]
    proc = subprocess.Popen(["taskset", "-c", "0", *cmd], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(args.warmup)
    window = args.seconds - args.warmup - 5
    cpu0, redis0 = cpu_seconds(proc.pid), cpu_seconds(redis.proc.pid)  # type: ignore[union-attr]
    sys0 = system_seconds(proc.pid)
    web0 = cpu_seconds(web.proc.pid)  # type: ignore[union-attr]
    calls0 = redis.client().info("commandstats")
    if args.script_times:  # every command's time in the slow log: each script's own (it costs Redis a little)
        redis.client().config_set("slowlog-log-slower-than", 0)
        redis.client().config_set("slowlog-max-len", 2_000_000)
        redis.client().slowlog_reset()
    t0 = time.time()
    shares = profile(proc.pid, window, (args.profile_dir or tmp) / f"{file_name}.raw", args.spy_rate,
                     AREAS if args.areas else COMPONENTS, args.spy_native)
    time.sleep(max(0.0, t0 + window - time.time()))
    t1 = time.time()
    cpu1, redis1 = cpu_seconds(proc.pid), cpu_seconds(redis.proc.pid)  # type: ignore[union-attr]
    sys1 = system_seconds(proc.pid)
    web1 = cpu_seconds(web.proc.pid)  # type: ignore[union-attr]
    calls1 = redis.client().info("commandstats")
    scripts = script_times(redis.client()) if args.script_times else {}
    # Redis's time by command in the window (a script's own commands counted apart, inside evalsha's)
    commands = {name.removeprefix("cmdstat_"): (s["calls"] - calls0.get(name, {}).get("calls", 0),
                                                s["usec"] - calls0.get(name, {}).get("usec", 0))
                for name, s in calls1.items()}
    memory = memory_split(proc.pid)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        print(err[-3000:])
        raise SystemExit(f"{name}: the crawl failed")
    # the crawl's WARC files deleted and the disk's dirty pages written out
    # before the next crawl: its writes would otherwise pay for this one's
    # (a gigabyte of page cache a crawl)
    shutil.rmtree(tmp / "warc", ignore_errors=True)
    os.sync()
    crawl_stats = json.loads(stats_file.read_text()) if stats_file is not None and stats_file.exists() else {}
    if stats_file is not None and args.profile_dir:  # kept beside the profiles
        shutil.copy(stats_file, args.profile_dir / stats_file.name)
    log = web.log(since=before)
    pairs = consecutive(log)  # robots.txt included: the site sees every request
    if args.offenders:
        with args.offenders.open("a") as out:  # every interval under the delay, for a closer look
            for a, b in pairs:
                if b.ms - a.ms < args.delay * 1000 or (a.done and b.ms - a.done < args.delay * 1000):
                    out.write(f"{name}\t{a.domain}\t{a.target}\t{a.status}\t{a.ms:.3f}\t{a.done:.3f}"
                              f"\t{b.target}\t{b.status}\t{b.ms:.3f}\t{b.done:.3f}\t{t0 * 1000:.3f}\n")
    starts, finishes = [b.ms - a.ms for a, b in pairs], [b.ms - a.done for a, b in pairs]
    pages = [e for e in log if e.path != "/robots.txt" and e.status == 200]
    in_window = [e for e in pages if t0 * 1000 <= e.ms < t1 * 1000]
    distinct = len({(e.domain, e.target) for e in in_window})
    seen_before = {(e.domain, e.target) for e in pages if e.ms < t0 * 1000}
    new = len({(e.domain, e.target) for e in in_window} - seen_before)
    cpu = cpu1 - cpu0
    # the crawler's share of the wait (site-side gap minus the delay), of the
    # intervals that ended in the window, from the delay's reference point
    from_end = from_finish(name, args)
    slack = sorted((b.ms - (a.done if from_end else a.ms)) / 1000 - args.delay
                   for a, b in pairs if t0 * 1000 <= b.ms < t1 * 1000 and (a.done or not from_end))
    answers = [(e.done - e.ms) / 1000 for e in log if t0 * 1000 <= e.ms < t1 * 1000 and e.done]
    # a domain's turn as the site sees it: between two of its requests, both in the window
    turns = [(b.ms - a.ms) / 1000 for a, b in pairs if t0 * 1000 <= a.ms and b.ms < t1 * 1000]
    answer_s = sum(answers) / len(answers) if answers else 0.0
    per_address = address_audit(log, web.config, args, answer_s, (t0, t1)) if web.config.spread else None
    return {
        "per_address": per_address,
        # ours only (None for the others): the event loop's worst lateness, and the pages
        # acknowledged stored (a lease ended stored once its page was in the WARC)
        "stats_file": bool(crawl_stats),
        "stall_ms": crawl_stats.get("crawler/loop/lag_max_ms"),
        "acked_stored": crawl_stats.get("crawler/frontier/ended/stored"),
        "pages_total": len({(e.domain, e.target) for e in pages}),
        "domains_active": len({e.domain for e in in_window}),
        "turn_s": statistics.fmean(turns) if turns else 0.0,
        "window": t1 - t0, "fetches": len(in_window), "distinct": distinct, "new": new,
        "pages_s": len(in_window) / (t1 - t0), "cpu": cpu,
        # every request in the window (robots.txt and failures too): each takes an address's turn
        "requests_s": sum(1 for e in log if t0 * 1000 <= e.ms < t1 * 1000) / (t1 - t0), "cpu_ms": cpu / max(new, 1) * 1000,
        "sys_ms": (sys1 - sys0) / max(new, 1) * 1000,
        "pages_per_cpu_s": new / cpu if cpu else 0.0,
        "redis_ms": (redis1 - redis0) / max(new, 1) * 1000, "rss_mb": usage.ru_maxrss / 1024, "memory": memory,
        "redis_commands": commands, "redis_scripts": scripts,
        "shares": shares, "elapsed": time.time() - started,
        "gaps": (starts, finishes), "slack": slack, "slack_from": "end of answer" if from_end else "arrival",
        "web_cpu": (web1 - web0) / (t1 - t0),
        # a delay counted from the end of each answer makes a domain's turn
        # the delay plus the answer's time: the bound is that much lower
        "finish_bound": args.domains / (args.delay + answer_s) if from_end else None, "answer_s": answer_s,
    }


#: the crawler's defaults for a shared front end, passed to ours explicitly (devkit.settings
#: declares the test web's 127.0.0.1 one, with no pace of its own)
SHARED_DELAY = BY_NAME["CRAWLER_IP_SHARED_DELAY"].default
SHARED_CONCURRENCY = BY_NAME["CRAWLER_IP_SHARED_CONCURRENCY"].default


def cdn_layout(args: argparse.Namespace) -> list[int] | None:
    """``--cdn-domains N``: N domains on the first address, the rest spread as ``--address-skew`` says."""
    if not args.cdn_domains:
        return None
    if not args.addresses or args.addresses < 2 or args.cdn_domains >= args.domains:
        raise SystemExit("--cdn-domains needs --addresses 2 or more and fewer domains than --domains")
    from devkit.testweb.config import skewed_counts

    return [args.cdn_domains, *skewed_counts(args.domains - args.cdn_domains, args.addresses - 1,
                                             args.address_skew)]


def address_audit(log: list[LogEntry], config: WebConfig, args: argparse.Namespace,
                  answer_s: float, window: tuple[float, float]) -> dict[str, object]:
    """Politeness per address as the test web saw it (over the whole run, as
    the per-domain audit), and the per-address bound of the window's pages/s."""
    ip_delay = args.ip_delay or 0.0
    limit = ip_delay * 1000
    gaps: list[tuple[float, LogEntry, LogEntry]] = []
    unfinished = 0  # arrived while the previous request to the address was never answered
    cut: list[float] = []  # after an answer its client hung up on (a size cap): from the hang-up
    layout = dict(zip(layout_addresses(config), layout_counts(config)))
    shared_min = args.shared_min if args.shared_min is not None else BY_NAME["CRAWLER_IP_SHARED_MIN_DOMAINS"].default
    # shared front ends have their own pace: audited apart (starts apart, in flight at once)
    shared = {a for a, k in layout.items() if ip_delay and shared_min and k > shared_min}
    starts = [b.ms - a.ms for a, b in consecutive(log, by="address") if a.address in shared]
    for a, b in consecutive([e for e in log if e.address not in shared], by="address"):
        if a.done:
            gaps.append((b.ms - a.done, a, b))
        elif a.hung:
            cut.append(b.ms - a.hung)
        else:
            unfinished += 1
    under = [g for g in gaps if g[0] < limit]
    every = max_in_flight(log)
    flight = {a: n for a, n in every.items() if a not in shared}
    t = answer_s
    caps = {a: (k / (args.delay + t), 1 / (ip_delay + t) if ip_delay + t else float("inf"))
            for a, k in layout.items()}
    for a, k in layout.items():
        if ip_delay and shared_min and k > shared_min:  # a shared front end: its own pace (the crawler's defaults)
            caps[a] = (k / (args.delay + t), min(1 / SHARED_DELAY, SHARED_CONCURRENCY / t if t else float("inf")))
    bound = sum(min(by_domain, by_ip) for by_domain, by_ip in caps.values())
    return {
        "intervals": len(gaps) + len(cut) + unfinished, "under": len(under) + unfinished, "unfinished": unfinished,
        "cut": len(cut), "cut_under": sum(g < limit for g in cut),
        "shared": {a: (every.get(a, 0), min(starts) / 1000 if starts else None) for a in shared},
        # the address with the most domains: its requests a second in the window
        "top_rate": sum(1 for e in log if e.address == max(layout, key=layout.__getitem__)
                        and window[0] * 1000 <= e.ms < window[1] * 1000) / (window[1] - window[0]),
        "worst": min(gaps, key=lambda g: g[0]) if gaps else None,
        "in_flight": flight, "outside": sum(1 for e in log if e.address not in layout),
        "addresses": len(layout), "seen": len(flight), "bound": bound,
        "capped": sum(by_ip < by_domain for by_domain, by_ip in caps.values()),
        "top": max(layout.values()), "small": sum(k <= 2 for k in layout.values()),
    }


def address_lines(r: dict[str, object], args: argparse.Namespace) -> list[str]:
    """The per-address audit and bound of one run (``address_audit``)."""
    a: dict = r["per_address"]  # type: ignore[assignment]
    ip_delay = args.ip_delay or 0.0
    given = "" if args.ip_delay is not None else " (--ip-delay not given: the crawler's own default applies; 0 here)"
    worst = ""
    if a["worst"] is not None:
        gap, first, second = a["worst"]
        worst = (f"; worst {gap / 1000:.3f} s at {second.address} ({first.domain}{first.target} -> "
                 f"{second.domain}{second.target})")
    flight: dict[str, int] = a["in_flight"]
    most = max(flight.items(), key=lambda kv: kv[1]) if flight else ("-", 0)
    lines = [
        f"  per address ({a['addresses']} in the layout, {a['seen']} seen; whole run): {a['intervals']:,} "
        f"intervals from the end of an answer to the next arrival at that address, {a['under']:,} under the "
        f"{ip_delay:g} s ip delay{given}"
        + (f" ({a['unfinished']} after an answer never finished)" if a["unfinished"] else "") + worst
        + (f"; {a['cut']:,} after an answer the crawler hung up on (its size cap), from the hang-up: "
           f"{a['cut_under']:,} under" if a["cut"] else ""),
        *(f"  shared front end {addr} (over {args.shared_min} domains): at most {n} in flight at once (its cap "
          f"{SHARED_CONCURRENCY}), starts at least {gap if gap is not None else float('nan'):.3f} s apart "
          f"({SHARED_DELAY:g} s once it was recognised; 1 request at a time, 1 s after the answer, before)"
          for addr, (n, gap) in a["shared"].items()),
        (f"  the address with the most domains ({a['top']}): {a['top_rate']:.2f} requests/s in the window; "
         f"in flight at once at one address: at most {most[1]} (at {most[0]}), "
         f"{sum(n > 1 for n in flight.values())} addresses ever had more than one; {a['outside']:,} requests "
         f"arrived outside the layout (on {LOOPBACK} or another address)"),
    ]
    if not a["bound"]:
        return [*lines, "  per-address bound: none (no answer in the window)"]
    return [*lines, (
        f"  per-address bound: sum over addresses of min(k / (D + t), 1 / (d_ip + t)), k all the layout's domains "
        f"on the address (the top one holds {a['top']}, {a['small']} hold 1-2; not only those with pages left), "
        f"D {args.delay:g} s, d_ip {ip_delay:g} s, t {r['answer_s']:.2f} s (mean arrival to end of answer in the "
        f"window): {a['bound']:.1f} requests/s, {a['capped']} addresses capped by the ip delay; achieved "
        f"{r['requests_s']:.1f} requests/s in the window (robots.txt included: each is a turn) = "
        f"{r['requests_s'] / a['bound']:.0%} of it")]  # type: ignore[operator]


def memory_split(pid: int) -> dict[str, float]:
    """The process's resident MB by kind of mapping: glibc's heap (C
    allocations: OpenSSL, Lexbor, small buffers), other anonymous memory
    (Python's object arenas, large buffers), and files (code)."""
    split = {"heap": 0.0, "anon": 0.0, "files": 0.0}
    kind = "anon"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(None, 6)
                if head[0].endswith(":"):
                    if head[0] == "Rss:":
                        split[kind] += int(head[1]) / 1024
                    continue
                name = head[5].strip() if len(head) > 5 else ""
                kind = "heap" if name == "[heap]" else "files" if name.startswith("/") else "anon"
    except OSError:
        pass
    return split


def from_finish(name: str, args: argparse.Namespace) -> bool:
    """Whether the crawl counts its delay from the end of the previous answer
    (ours with ``CRAWLER_DELAY_FROM=finish``, billion's default, and the bare
    crawler) rather than from its arrival (Scrapy's ``DOWNLOAD_DELAY``)."""
    if "plain" in name:
        return False
    if "ours" in name:
        return not any(s.replace(" ", "") == "CRAWLER_DELAY_FROM=start" for s in args.set)
    return True


def slack_line(slack: list[float], reference: str, delay: float) -> str:
    """Median, p90 and max of the slack, and how many intervals were under the delay."""
    if not slack:
        return "  slack: no interval in the window"
    def at(q: float) -> float:
        return slack[min(len(slack) - 1, int(q * len(slack)))] * 1000
    return (f"  slack (site-side gap from the {reference} minus the {delay:g} s delay, {len(slack):,} intervals "
            f"ending in the window): median {at(0.5):.0f} ms, p90 {at(0.9):.0f} ms, max {slack[-1] * 1000:.0f} ms; "
            f"{sum(s < 0 for s in slack)} under the delay (answers never finished left out)")


#: page-size profiles: (size_median, size_mean, bytes/s per connection); None: --bandwidth
PROFILES: dict[str, tuple[int, int, int | None]] = {
    # the test web's own sizes (median 138 kB, mean 242 kB) at --bandwidth: the
    # figures in docs/benchmarks.md before the two profiles below
    "classic": (138_000, 242_000, None),
    # HTML of the open web as most pages are: mean about 70 kB (0.14 s at 500 kB/s)
    "small": (30_000, 70_000, None),
    # heavy pages on slow links: mean 220 kB at 150 kB/s, a mean transfer of
    # about 1.5 s (plus the time to first byte)
    "big": (120_000, 220_000, 150_000),
}
BARE = "bare asyncio crawler (no storage, no Redis, no crash safety)"


def crawls(args: argparse.Namespace, web: TestWebProcess, redis: RedisServer, tmp: Path,
           seeds: Path) -> dict[str, tuple[list[str], dict[str, str], Path]]:
    common = ["-s", "LOG_LEVEL=WARNING", "-s", f"CLOSESPIDER_TIMEOUT={args.seconds}"]
    if args.concurrency:
        common += ["-s", f"CONCURRENT_REQUESTS={args.concurrency}"]
    concurrency = args.concurrency or 1000
    ours_root = args.crawler_root.resolve()
    ours_only: list[str] = []  # settings for our crawler alone
    if web.config.spread:  # every crawler's resolver gets the layout (the bare crawler has none)
        host_map = "CRAWLER_HOST_MAP=" + json.dumps(web.host_map(www=False), separators=(",", ":"))
        if len(host_map) >= 128 * 1024:  # Linux's limit on one argument (MAX_ARG_STRLEN)
            raise SystemExit(f"the host map of {args.domains:,} domains is {len(host_map):,} bytes of JSON: "
                             f"over the 128 KiB one argument may have; use fewer domains")
        common += ["-s", host_map]
    if args.ip_delay is not None:
        ours_only += ["-s", f"CRAWLER_IP_DELAY={args.ip_delay}"]
    if args.shared_min is not None:
        ours_only += ["-s", f"CRAWLER_IP_SHARED_MIN_DOMAINS={args.shared_min}"]
    if web.config.spread:
        ours_only += ["-s", f"CRAWLER_IP_SHARED_DELAY={SHARED_DELAY}",
                      "-s", f"CRAWLER_IP_SHARED_CONCURRENCY={SHARED_CONCURRENCY}"]
    runs = {
        "ours (billion, defaults)": (
            [sys.executable, "-m", "scrapy", "crawl", "billion", "-a", f"seeds={seeds}", *common,
             "-s", f"CRAWLER_DOMAIN_DELAY={args.delay}", "-s", f"CRAWLER_WARC_DIR={tmp / 'warc'}",
             "-s", "CRAWLER_PROGRESS_INTERVAL=0", *ours_only, *(a for s in args.set for a in ("-s", s))],
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
        BARE: (
            [sys.executable, str(ROOT / "bench" / "bare_crawler.py"), str(seeds), "--delay", str(args.delay),
             "--seconds", str(args.seconds), "--concurrency", str(concurrency),
             # the User-Agent ours sends (USER_AGENT with CRAWLER_CONTACT): the same robots group
             "--user-agent", "crawler/0.1 (+bench@example.org)",
             *(["--ca-file", web.ca_file] if web.ca_file else [])],
            dict(os.environ), ROOT),
    }
    if args.before_root:  # the same crawl from another checkout first: before and after in one run
        cmd, env, _ = runs["ours (billion, defaults)"]
        root = args.before_root.resolve()
        runs = {f"ours before ({root.name})": (cmd, dict(env, PYTHONPATH=str(root)), root), **runs}
    if args.only:
        prefixes = tuple({"ours": "ours", "scrapy": "plain", "bare": "bare"}[only] for only in args.only)
        runs = {k: v for k, v in runs.items() if k.startswith(prefixes)}
    return runs


def report(label_: str, r: dict[str, object], bound: float, web: TestWebProcess, args: argparse.Namespace) -> None:
    delay = args.delay
    shares = r["shares"]
    tls = web.counters()
    print(f"\n{label_}: {r['pages_s']:.1f} pages/s in the window = {r['pages_s'] / bound:.0%} of "  # type: ignore[operator]
          f"the bound; {r['pages_per_cpu_s']:.1f} new pages per CPU second "
          f"({r['cpu_ms']:.2f} CPU ms/page, {r['sys_ms']:.2f} of it the kernel's, Redis {r['redis_ms']:.2f}); peak RSS {r['rss_mb']:.0f} MB; "
          f"{r['pages_total']:,} pages in all, {r['domains_active']:,} domains fetched in the window, "
          f"{r['turn_s']:.2f} s between a domain's fetches; test web so far: {tls['tls_handshakes']:,} TLS "
          f"handshakes, {tls['tls_resumed']:,} resumed")
    if r.get("redis_commands") and "billion" in label_ or "ours" in label_:
        pages = max(int(r["new"]), 1)  # type: ignore[call-overload]
        top = sorted(r["redis_commands"].items(), key=lambda kv: -kv[1][1])[:8]  # type: ignore[union-attr]
        print("  Redis by command (us a page; calls a page): " + ", ".join(
            f"{name} {usec / pages:.1f} ({calls / pages:.1f})" for name, (calls, usec) in top))
        if r.get("redis_scripts"):
            top = sorted(r["redis_scripts"].items(), key=lambda kv: -kv[1][1])  # type: ignore[union-attr]
            print("  Redis by script (us a page; calls a page; us a call: mean, median, longest): " + ", ".join(
                f"{name} {usec / pages:.1f} ({calls / pages:.2f}; {usec / max(calls, 1):.0f}, {median}, {longest})"
                for name, (calls, usec, median, longest) in top))
    memory = r["memory"]
    print(f"  resident at the window's end: glibc heap {memory['heap']:.0f} MB (C allocations: OpenSSL, "  # type: ignore[index]
          f"Lexbor...), other anonymous {memory['anon']:.0f} MB (Python's objects, large buffers), "  # type: ignore[index]
          f"files {memory['files']:.0f} MB")  # type: ignore[index]
    if r["stats_file"]:
        def shown(value: object) -> str:
            return "not in its stats" if value is None else f"{value:,}"
        print(f"  worst event-loop stall {shown(r['stall_ms'])} ms; pages acknowledged stored "
              f"{shown(r['acked_stored'])} of the {r['pages_total']:,} the site served (the whole crawl)")
    starts, finishes = r["gaps"]  # type: ignore[misc]
    limit = delay * 1000
    if starts:
        print(f"  politeness at the site: {len(starts):,} intervals; arrival to arrival min "
              f"{min(starts) / 1000:.3f} s, {sum(g < limit for g in starts)} under {delay:g} s; "
              f"end of answer to next arrival min {min(finishes) / 1000:.3f} s, "
              f"{sum(g < limit for g in finishes)} under")
    if r["per_address"]:
        print("\n".join(address_lines(r, args)))
    if r["finish_bound"]:
        print(f"  a domain's turn is the delay plus its answer (mean {r['answer_s']:.2f} s from arrival to "
              f"the end of the answer): {r['finish_bound']:.1f} pages/s at most, "  # type: ignore[operator]
              f"{r['pages_s'] / r['finish_bound']:.0%} of that")  # type: ignore[operator]
    print(slack_line(r["slack"], r["slack_from"], delay)  # type: ignore[arg-type]
          + f"; test web CPU {r['web_cpu']:.0%} of a core (saturated: the site's own wait counts as slack)")
    if shares:
        print("  CPU ms per page by component: " + ", ".join(
            f"{k} {v * r['cpu_ms']:.2f} ({v:.0%})"  # type: ignore[operator]
            for k, v in sorted(shares.items(), key=lambda kv: -kv[1])))  # type: ignore[union-attr]


def ip_columns(r: dict[str, object]) -> str:
    """The summary's per-address columns: share of the per-address bound, intervals under the ip delay."""
    a = r["per_address"]
    if not a:
        return f" {'-':>12} {'-':>9}"
    share = f"{r['requests_s'] / a['bound']:.0%}" if a["bound"] else "-"  # type: ignore[index,operator]
    return f" {share:>12} {a['under']:>9,}"  # type: ignore[index]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--domains", type=int, default=3000)
    p.add_argument("--pages", type=int, default=40)
    p.add_argument("--delay", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--warmup", type=float, default=50.0, help="seconds before the window (robots.txt of every domain)")
    p.add_argument("--concurrency", type=int, default=0, help="0: each crawler's own default")
    p.add_argument("--latency-ms", type=float, default=200.0)
    p.add_argument("--bandwidth", type=int, default=500_000, help="bytes/s per connection (classic and small)")
    p.add_argument("--profile", dest="sizes", choices=("classic", "small", "big", "both"), default="classic",
                   help="page sizes: classic (the test web's, mean 242 kB, as before), small (mean 70 kB), "
                        "big (mean 220 kB, ~1.5 s transfers) or both (small and big) in turn")
    p.add_argument("--plain-http", action="store_true")
    p.add_argument("--robots-sitemaps", action="store_true",
                   help="every robots.txt names /sitemap.xml listing the domain's pages (already linked)")
    p.add_argument("--only", choices=("ours", "scrapy", "bare"), action="append",
                   help="run only these crawlers (may be given twice: --only ours --only bare)")
    p.add_argument("--offenders", type=Path,
                   help="append every interval under the delay here (crawl, domain, then target, status, "
                        "arrival and end of answer of both requests, epoch ms; then the window's start)")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of the crawls, in turn on one test web; the CPU ratios are per round, and "
                        "their median is printed")
    p.add_argument("--crawler-root", type=Path, default=ROOT)
    p.add_argument("--before-root", type=Path, help="also run billion from this checkout, just before ours")
    p.add_argument("--profile-dir", type=Path, help="keep py-spy's raw samples here")
    p.add_argument("--spy-rate", type=int, default=200,
                   help="py-spy samples per second (idle threads are not sampled: a run at 70%% CPU "
                        "for 100 s at 300/s keeps about 21,000)")
    p.add_argument("--spy-native", action="store_true",
                   help="py-spy samples C frames too (what an extension module's time is spent on; it costs "
                        "the crawl more CPU: not for the CPU-per-page figure)")
    p.add_argument("--areas", action="store_true",
                   help="split CPU per page into the finer areas of AREAS (docs/benchmarks.md, 'Where the CPU goes')")
    p.add_argument("--addresses", type=int, default=0,
                   help="spread the domains over this many loopback addresses, shaped like shared hosting "
                        "(0: all on 127.0.0.1); each crawler gets the layout as CRAWLER_HOST_MAP")
    p.add_argument("--address-skew", type=float, default=0.8,
                   help="the Zipf exponent of domains per address (WebConfig.address_skew; lower: more uneven)")
    p.add_argument("--ip-delay", type=float,
                   help="seconds from the end of one answer to the next request at one address: our crawler's "
                        "CRAWLER_IP_DELAY, and the per-address audit's and bound's d_ip")
    p.add_argument("--cdn-domains", type=int, default=0,
                   help="with --addresses: put this many domains on the first address (a CDN-like front end); "
                        "with --shared-min under it, the crawler classes it a shared front end")
    p.add_argument("--shared-min", type=int,
                   help="our crawler's CRAWLER_IP_SHARED_MIN_DOMAINS (default: its own, 2000)")
    p.add_argument("--script-times", action="store_true",
                   help="Redis's time by script, from the slow log set to log every command in the window "
                        "(it costs Redis some CPU: not for the Redis-per-page figure)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a Scrapy setting for our crawl, and for --before-root's too: versions compared under the "
                        "same settings (e.g. CRAWLER_WARC_DIR= : a stripped-down run); to compare settings, a "
                        "--before-root checkout whose defaults differ")
    args = p.parse_args()
    if args.profile_dir:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
    stripped = args.plain_http or not args.latency_ms or any(s.startswith("CRAWLER_WARC_DIR=") for s in args.set)
    bound = args.domains / args.delay
    label = "STRIPPED-DOWN (not the job users run): " if stripped else ""
    table: list[tuple[str, str, dict[str, object]]] = []
    for sizes in (("small", "big") if args.sizes == "both" else (args.sizes,)):
        median, mean, bandwidth = PROFILES[sizes]
        bandwidth = bandwidth or args.bandwidth
        config = WebConfig(domains=args.domains, pages=args.pages, tls=not args.plain_http,
                           latency_ms=args.latency_ms, bandwidth=bandwidth, crawl_delay_share=0.0,
                           private_share=0.02, dup_share=0.1, cross_share=0.1,
                           size_median=median, size_mean=mean, robots_sitemaps=args.robots_sitemaps,
                           addresses=args.addresses, address_skew=args.address_skew,
                           address_counts=cdn_layout(args))
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            redis = RedisServer(tmp / "redis").start()
            subprocess.run(["taskset", "-cp", "1", str(redis.proc.pid)], check=False, capture_output=True)  # type: ignore[union-attr]
            web = TestWebProcess(config, cpu=1).start()
            try:
                seeds = tmp / "seeds.txt"
                seeds.write_text("".join(f"{web.url(d)}\n" for d in range(args.domains)))
                transfer = mean / bandwidth if bandwidth else 0.0
                print(f"\n=== {label}{sizes} pages, open web: {args.domains:,} domains over "
                      f"{config.scheme.upper()}, page sizes log-normal median {median / 1000:g} kB mean "
                      f"{mean / 1000:g} kB, time to first byte log-normal median {args.latency_ms:g} ms, "
                      f"{bandwidth / 1000:g} kB/s per connection (mean transfer {transfer:.2f} s), "
                      f"{args.delay:g} s per domain: politeness bound {bound:.0f} pages/s; crawler on CPU 0, "
                      f"test web + Redis on CPU 1; steady window {args.warmup:g}-{args.seconds - 5:g} s")
                if config.spread:
                    counts = layout_counts(config)
                    print(f"    on {len(counts)} addresses {layout_addresses(config)[0]} ... "
                          f"{layout_addresses(config)[-1]} (skew {args.address_skew:g}): domains per address "
                          f"{', '.join(map(str, counts[:5]))}, ... {counts[-1]}; {sum(k >= 10 for k in counts)} "
                          f"with 10 or more, {sum(k <= 2 for k in counts)} with 1-2; ip delay "
                          + (f"{args.ip_delay:g} s" if args.ip_delay is not None else "not given (the crawler's own)")
                          + (f"; the {BARE} resolves every host to {LOOPBACK}: its per-address audit sees one address"
                             if not args.only or "bare" in args.only else ""))
                for round_ in range(1, args.repeat + 1):
                    order = list(crawls(args, web, redis, tmp, seeds).items())
                    if round_ % 2 == 0:  # the crawls in the other order: what a place in the run costs falls on each
                        order.reverse()
                    for label_, (cmd, env, cwd) in order:
                        name_ = f"{sizes}-{label_.split()[0]}" + (f"-{round_}" if args.repeat > 1 else "")
                        r = run(name_ + " " + label_, cmd, env, cwd, web, redis, args, tmp)
                        r["round"] = round_
                        table.append((sizes, label_, r))
                        report(label_ + (f" (round {round_})" if args.repeat > 1 else ""), r, bound, web, args)
            finally:
                web.stop()
                redis.stop()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"\n{label}summary (load average before the end {load}; {BARE} is written for this bench)")
    spread = any(r["per_address"] for _, _, r in table)
    print(f"{'profile':8} {'crawler':62} {'pages/s':>8} {'of bound':>9} {'from end':>9} {'CPU ms/page':>12} "
          f"{'peak RSS MB':>12} {'slack p50 ms':>13}" + (f" {'of ip bound':>12} {'ip under':>9}" if spread else ""))
    for sizes, label_, r in table:
        of_finish = f"{r['pages_s'] / r['finish_bound']:.0%}" if r["finish_bound"] else "-"  # type: ignore[operator]
        label_ += f" #{r['round']}" if args.repeat > 1 else ""
        print(f"{sizes:8} {label_:62} {r['pages_s']:8.1f} {r['pages_s'] / bound:9.0%} {of_finish:>9} "  # type: ignore[operator]
              f"{r['cpu_ms']:12.2f} {r['rss_mb']:12.0f} "
              f"{(r['slack'][len(r['slack']) // 2] * 1000 if r['slack'] else float('nan')):13.0f}"  # type: ignore[index]
              + (ip_columns(r) if spread else ""))
    for sizes in dict.fromkeys(s for s, _, _ in table):
        for key, other in (("bare", "bare"), ("plain", "scrapy")):
            # ours against the other crawler of the same round: the machine's
            # speed drifts by more than the differences measured (docs/benchmarks.md)
            ratios = []
            for round_ in range(1, args.repeat + 1):
                by = {label_.split()[0]: r for s, label_, r in table if s == sizes and r["round"] == round_}
                if "ours" in by and key in by:
                    ratios.append(by["ours"]["cpu_ms"] / max(by[key]["cpu_ms"], 1e-9))  # type: ignore[operator]
            if ratios:
                rounds = f" (median of {len(ratios)} rounds: {', '.join(f'{x:.2f}' for x in ratios)})" \
                    if len(ratios) > 1 else ""
                print(f"{sizes}: CPU per page ours/{other} {statistics.median(ratios):.2f}{rounds}")


if __name__ == "__main__":
    main()
