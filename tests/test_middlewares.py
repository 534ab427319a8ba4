"""The downloader middlewares against the test web's injected faults, with a
real Redis, audited from the server's request log where timing matters."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict

import pytest
import redis
from scrapy.settings import Settings

from crawler.clock import ManualClock, clock_of, use_clock
from crawler.middlewares.backoff import BackoffMiddleware, parse_retry_after
from crawler.middlewares.useragent import product_token, user_agent
from crawler.store import Frontier
from crawler.store import Keys
from tests.servers import ROOT, crawler_for, run_scrapy, scrapy_env, wait_until
from tests.test_scheduler import crawl_cmd, page_fetches, start

QUIET = dict(links=6, size_fixed=3000, private_share=0, cross_share=0, dup_share=0, crawl_delay_share=0)
FAST_BACKOFF = ("CRAWLER_BACKOFF_BASE=0.05", "CRAWLER_BACKOFF_JITTER=0.05")


def stats_of(client: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall("crawler:{demo:0}:stats").items()}


def test_retry_after_is_honoured_and_pushes_the_whole_domain_back(redis_url: str, make_web) -> None:
    web = make_web(domains=1, pages=12, faults={"429": 0.2}, retry_after=3, **QUIET)
    result = run_scrapy(crawl_cmd(web, "CRAWLER_DOMAIN_DELAY=0.2", "CRAWLER_MAX_ATTEMPTS=2",
                                  *FAST_BACKOFF)[3:], scrapy_env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    log = [e for e in web.log() if e.path != "/robots.txt"]
    limited = [e for e in log if e.status == 429]
    assert limited
    for hit in limited:
        later = [e for e in log if e.ms > hit.ms]
        same = [e for e in later if e.target == hit.target]
        assert not same or same[0].ms - hit.ms >= 3000  # not retried sooner than Retry-After
        assert all(e.ms - hit.ms >= 3000 - 20 for e in later)  # nor anything else of the domain


def test_retries_exhaust_into_the_dead_letter_queue(redis_url: str, make_web) -> None:
    web = make_web(domains=1, pages=10, faults={"503": 0.3, "404": 0.2, "410": 0.1}, retry_after=0, **QUIET)
    result = run_scrapy(crawl_cmd(web, "CRAWLER_MAX_ATTEMPTS=3", *FAST_BACKOFF)[3:], scrapy_env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    log = page_fetches(web.log())
    statuses = {e.target: e.status for e in web.log()}
    failing = {t for t, s in statuses.items() if s == 503}
    for target in failing:
        assert log[("d0.test", target)] == 3  # three attempts, then given up
    dlq = subprocess.run([sys.executable, "-m", "scrapy", "dlq", "demo", "--counts", "--json"], cwd=ROOT,
                         env=scrapy_env(redis_url), capture_output=True, text=True, timeout=60)
    counts = json.loads(dlq.stdout)
    assert counts.get("retries_exhausted") == len(failing)
    assert counts.get("http_404", 0) == sum(1 for s in statuses.values() if s == 404)
    assert counts.get("http_410", 0) == sum(1 for s in statuses.values() if s == 410)


def test_redirects_given_up_on_are_dead_letters(redis_url: str, make_web, tmp_path) -> None:
    web = make_web(domains=1, pages=4, **QUIET)
    seeds = tmp_path / "seeds.txt"
    given_up = [web.url(0, "/fault/loop/0"), web.url(0, "/fault/redirect/25/1"), web.url(0, "/fault/scheme/ftp")]
    seeds.write_text("\n".join([web.url(0, "/fault/redirect/3/2"), *given_up]) + "\n")
    result = run_scrapy(["crawl", "billion", "-a", f"seeds={seeds}", "-s", "CRAWLER_DOMAIN_DELAY=0",
                         "-s", "CRAWLER_PROGRESS_INTERVAL=0", "-s", f"CRAWLER_WARC_DIR={tmp_path / 'warc'}"],
                        scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))
    assert result.returncode == 0, result.stderr[-3000:]
    letters = [json.loads(x) for x in redis.Redis.from_url(redis_url).lrange("crawler:{billion:0}:dlq", 0, -1)]
    # each letter names the URL the chain ended on
    reasons = Counter(x["reason"] for x in letters)
    assert reasons == Counter({"too_many_redirects": 1, "redirect_unsupported_scheme": 1}), letters
    assert [x["status"] for x in letters if x["reason"] == "redirect_unsupported_scheme"] == [302]
    log = web.log()
    assert any(e.path == "/moved/2.html" for e in log)  # a chain within the limit is followed
    # a loop ends where it comes back to a URL already seen: a duplicate
    # (crawler/frontier/duplicates), as with Scrapy's dupefilter; each URL once
    assert Counter(e.path for e in log if e.path.startswith("/fault/loop/")) == {"/fault/loop/0": 1, "/fault/loop/1": 1}
    requeued = run_scrapy(["dlq", "billion", "--requeue"], scrapy_env(redis_url))
    assert requeued.returncode == 0 and "2" in requeued.stdout, requeued.stdout + requeued.stderr


def test_retry_delays_are_jittered_per_worker() -> None:
    code = (
        "from scrapy.utils.test import get_crawler\n"
        "from crawler.middlewares.backoff import BackoffMiddleware\n"
        "c = get_crawler(settings_dict={'SCHEDULER': 'crawler.scheduler.FrontierScheduler',"
        " 'CRAWLER_BACKOFF_BASE': 1, 'CRAWLER_BACKOFF_MAX': 8, 'CRAWLER_BACKOFF_JITTER': 1})\n"
        "m = BackoffMiddleware(c)\n"
        "print([round(m.delay(a), 4) for a in range(1, 6)])\n"
    )
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                                      text=True, check=True, timeout=60).stdout) for _ in range(2)]
    for delays in runs:
        for attempt, delay in enumerate(delays, start=1):
            floor = min(8, 2**attempt)
            assert floor <= delay <= floor + 1
    assert runs[0] != runs[1]  # two workers never share a retry pattern


def test_retry_after_parsing() -> None:
    assert parse_retry_after(b"3") == 3
    assert parse_retry_after(b"Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470) == 10
    assert parse_retry_after(b"soon") is None and parse_retry_after(None) is None
    # non-ASCII digits are digits to str.isdigit, not to float()
    assert parse_retry_after("²".encode("latin-1")) is None
    assert parse_retry_after(b"Mon, 99 Foo 2015 07:28:00 GMT") is None


def test_a_retry_after_date_is_measured_on_the_crawls_clock(redis_url: str) -> None:
    clock = ManualClock(start=1445412470.0)  # 10 s before the date below
    crawler = crawler_for(redis_url, SCHEDULER="crawler.scheduler.FrontierScheduler")
    use_clock(crawler, clock)
    backoff = BackoffMiddleware(crawler)
    assert backoff.clock is clock is clock_of(crawler)
    date = b"Wed, 21 Oct 2015 07:28:00 GMT"
    assert parse_retry_after(date, clock=backoff.clock) == 10
    clock.advance(4)
    assert parse_retry_after(date, clock=backoff.clock) == 6


def test_locked_domain_is_never_fetched_by_two_processes_at_once(redis_url: str, make_web) -> None:
    web = make_web(domains=2, pages=8, faults={"slow": 1.0}, slow_ms=300, **QUIET)
    client = redis.Redis.from_url(redis_url)
    client.sadd("crawler:{demo:0}:lockdomains", "d1.test")  # live, from an operator
    cmd = crawl_cmd(web, "CRAWLER_LOCK_DOMAINS=d0.test", "CRAWLER_LOCK_WAIT=0.1", "DOWNLOAD_TIMEOUT=5")
    procs = [start(cmd, redis_url) for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs[0][-2000:]
    # a worker started late under load may find everything leased by the other;
    # the audit below needs no second worker: one sends up to 8 requests per
    # domain at once, so without the lock it fails all the same
    assert any("crawler/lock/acquired" in err for err in errs), errs
    by_domain = defaultdict(list)
    for e in web.log():
        if e.path != "/robots.txt":
            by_domain[e.domain].append(e)
    for domain in ("d0.test", "d1.test"):
        hits = sorted(by_domain[domain], key=lambda e: e.ms)
        assert len(hits) >= 8, hits
        for a, b in zip(hits, hits[1:]):
            if a.path not in ("/", "/p/0.html"):  # every page but the home page takes 300 ms
                assert b.ms - a.ms >= 300 - 5, (a, b, [e[-1500:] for e in errs])
    assert "crawler/lock/busy" in errs[0] + errs[1], errs


def test_stale_locks_are_counted(redis_client: redis.Redis, clock: ManualClock) -> None:
    frontier = Frontier(redis_client, Keys("crawler", "demo", 0), clock=clock)
    base = frontier.keys.base
    assert frontier.scripts.lock(keys=[base], args=["a.test", "t1", 100]) == [1, 0]
    assert frontier.scripts.lock(keys=[base], args=["a.test", "t2", 100]) == [0, 0]
    assert frontier.scripts.unlock(keys=[base], args=["a.test", "t2"]) == 0  # not the owner
    clock.advance(0.099)  # t1's owner "died": its lock is not stale yet on the frontier's clock
    assert frontier.scripts.lock(keys=[base], args=["b.test", "tb", 1000]) == [1, 0]
    clock.advance(0.001)  # now it is; the key itself expires on Redis' own clock
    wait_until(lambda: not redis_client.exists(f"{base}:lock:a.test"), 5, "the lock's PX expiry")
    assert frontier.scripts.lock(keys=[base], args=["a.test", "t3", 1000]) == [1, 1]
    assert frontier.scripts.unlock(keys=[base], args=["a.test", "t3"]) == 1
    assert redis_client.hget(frontier.keys.stats, "stale_locks") == b"1"


def test_lock_ttl_shorter_than_download_timeout_is_a_configuration_error(redis_url: str) -> None:
    result = run_scrapy(["crawl", "demo", "-a", "start_urls=http://d0.test/", "-s", "CRAWLER_LOCK_TTL=10",
                         "-s", "DOWNLOAD_TIMEOUT=30"], scrapy_env(redis_url))
    assert result.returncode == 2  # a bad setting
    assert result.stderr.strip().startswith("crawler: error: CRAWLER_LOCK_TTL (10) must exceed DOWNLOAD_TIMEOUT (30)")


def test_robots_txt_is_fetched_once_per_domain_across_processes(redis_url: str, make_web) -> None:
    web = make_web(domains=3, pages=10, **{**QUIET, "private_share": 0.3})
    procs = [start(crawl_cmd(web), redis_url) for _ in range(2)]
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    log = web.log()
    assert Counter(e.domain for e in log if e.path == "/robots.txt") == Counter({d: 1 for d in web.domains})
    assert not [e for e in log if e.path.startswith("/private/")]


def test_robots_status_rules_and_crawl_delay(redis_url: str, make_web) -> None:
    web = make_web(domains=12, pages=6, **{**QUIET, "private_share": 0.5, "crawl_delay_share": 0.25,
                                          "crawl_delay": 1},
                   robots_faults={"404": 0.25, "503": 0.25})
    from devkit.testweb.site import Site

    site = Site(web.config, web.port)
    result = run_scrapy(crawl_cmd(web, "CRAWLER_ROBOTS_RETRY=1", "CRAWLER_ROBOTS_ERROR_TTL=1",
                                  "CRAWLER_ROBOTS_UNREACHABLE_MAX=2")[3:], scrapy_env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    log = web.log()
    pages = defaultdict(list)
    for e in log:
        if e.path != "/robots.txt":
            pages[e.domain].append(e)
    client = redis.Redis.from_url(redis_url)
    dead = [json.loads(x) for x in client.lrange("crawler:{demo:0}:dlq", 0, -1)]
    for d in range(12):
        name, fault = web.config.domain(d), site.robots_fault(d)
        private = [e for e in pages[name] if e.path.startswith("/private/")]
        if fault == "503":
            assert pages[name] == []  # 5xx: disallow all, until its requests are dead letters
            assert [x["reason"] for x in dead if name in x["url"]] == ["robots_unreachable"]
        elif fault == "404":
            assert private  # 4xx: allow all
        else:
            assert pages[name] and not private
        if fault is None and site.crawl_delay(d):  # robots.txt included, no tolerance
            times = sorted(e.ms for e in log if e.domain == name)
            assert all(b - a >= 1000 for a, b in zip(times, times[1:])), times
    delays = client.hgetall("crawler:{demo:0}:policy:robots")
    assert {k.decode() for k in delays} == {web.config.domain(d) for d in range(12)
                                             if site.robots_fault(d) is None and site.crawl_delay(d)}


def test_big_pages_are_cut_to_exactly_the_cap(redis_url: str, make_web, tmp_path) -> None:
    web = make_web(domains=1, pages=12, faults={"big": 0.4}, big_size=400_000, **QUIET)
    feed = tmp_path / "items.jsonl"
    result = run_scrapy(crawl_cmd(web, f"FEEDS={json.dumps({str(feed): {'format': 'jsonlines'}})}",
                                  "CRAWLER_MAX_PAGE_BYTES=250000")[3:], scrapy_env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    big = [i for i in items if i["truncated"]]
    assert big and all(i["bytes"] == 250_000 for i in big)
    assert all(i["bytes"] == 3000 for i in items if not i["truncated"])


def test_non_html_is_stopped_at_the_headers(redis_url: str, make_web) -> None:
    web = make_web(domains=1, pages=10, faults={"pdf": 0.5}, pdf_size=1_000_000, **QUIET)
    result = run_scrapy(crawl_cmd(web, "CRAWLER_HTML_ONLY=True")[3:], scrapy_env(redis_url))
    assert result.returncode == 0, result.stderr[-3000:]
    from devkit.testweb.site import Site

    site = Site(web.config, web.port)
    pdfs = sum(1 for e in web.log() if e.path.startswith("/p/")
               and site.page_fault(0, int(e.path[3:-5])) == "pdf")
    skipped = int(result.stderr.split("'crawler/skipped/non_html': ")[1].split(",")[0])
    received = int(result.stderr.split("'crawler/bytes_received': ")[1].split(",")[0])
    assert pdfs >= 1 and skipped == pdfs
    assert received < 1_000_000  # not even one PDF came in whole
    # dropped in process_response, where no process_exception looks: the sweep acknowledged them
    assert redis.Redis.from_url(redis_url).zcard("crawler:{demo:0}:leases") == 0
    assert "crawler/frontier/acked_by_sweep" in result.stderr


def test_parse_errors_are_dead_letters_and_the_dlq_command(redis_url: str, make_web) -> None:
    web = make_web(domains=1, pages=15, faults={"404": 0.2}, **QUIET)
    env = scrapy_env(redis_url)
    result = run_scrapy(crawl_cmd(web, spider="failing")[3:] + ["-a", f"start_urls={web.url(0)}"], env)
    assert result.returncode == 0, result.stderr[-3000:]

    def dlq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "scrapy", "dlq", "failing", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    counts = json.loads(dlq("--counts", "--json").stdout)
    assert counts["parse_error"] >= 1 and counts["http_404"] >= 1
    listed = json.loads(dlq("--reason", "parse_error", "--json").stdout)
    assert all(x["url"].endswith("3.html") and x["exception"] == "ValueError" for x in listed)
    assert "http_404" in dlq().stdout and "d0.test" in dlq("--domain", "d0.test").stdout
    assert dlq("--domain", "other.test", "--json").stdout.strip() == "[]"
    assert dlq("--domain", "other.test").stdout.strip() == "no dead letters with domain other.test in crawler:{failing:0}"
    # the crawl's budget applies to requeued URLs too: refused, and the letters kept
    over = json.loads(dlq("--reason", "parse_error", "--requeue", "--json", "-s", "CRAWLER_DOMAIN_BUDGET=2").stdout)
    assert over == {"requeued": 0, "refused": len(listed)}
    assert json.loads(dlq("--reason", "parse_error", "--requeue", "--json").stdout)["requeued"] == len(listed)
    client = redis.Redis.from_url(redis_url)
    assert int(client.hget("crawler:{failing:0}:stats", "queued")) == len(listed)
    assert json.loads(dlq("--purge", "--all", "--json").stdout)["purged"] == counts["http_404"]
    assert json.loads(dlq("--counts", "--json").stdout) == {}
    bad = dlq("--limit", "-3")
    assert bad.returncode != 0 and "--limit must be >= 0" in bad.stderr and "Traceback" not in bad.stderr
    unknown = subprocess.run([sys.executable, "-m", "scrapy", "dlq", "nosuchspider"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode != 0 and "no frontier crawler:{nosuchspider:0}" in unknown.stderr


def test_user_agent_names_the_contact() -> None:
    assert user_agent(Settings({"USER_AGENT": "crawler/0.1 (+{contact})", "CRAWLER_CONTACT": "ops@x.org"})) \
        == "crawler/0.1 (+ops@x.org)"
    assert user_agent(Settings({"USER_AGENT": "crawler/0.1 (+{contact})"})) == "crawler/0.1"
    assert product_token("crawler/0.1 (+ops@x.org)") == "crawler"


def test_open_web_spiders_refuse_to_start_without_a_contact(redis_url: str) -> None:
    args = ["crawl", "openweb", "-a", "start_urls=http://d0.test/", "-s", "SPIDER_MODULES=tests.spiders"]
    result = run_scrapy(args, scrapy_env(redis_url, CRAWLER_CONTACT=""))
    assert result.returncode == 2  # a setting to set
    assert result.stderr.strip().startswith("crawler: error: the openweb spider crawls the open web: set CRAWLER_CONTACT")


def test_the_contact_may_come_from_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    template = Settings({"USER_AGENT": "crawler/0.1 (+{contact})"})
    monkeypatch.delenv("CRAWLER_CONTACT", raising=False)
    assert user_agent(template) == "crawler/0.1"
    monkeypatch.setenv("CRAWLER_CONTACT", "ops@x.org")  # an addon project's settings do not read it
    assert user_agent(template) == "crawler/0.1 (+ops@x.org)"
    assert user_agent(Settings({**template, "CRAWLER_CONTACT": "web@y.org"})) == "crawler/0.1 (+web@y.org)"
