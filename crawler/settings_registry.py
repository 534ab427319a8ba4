"""Every setting the crawler reads: name, default, form and what it does.

The README's settings table is generated from this list
(``python -m crawler.settings_registry``; a test fails when they differ),
and :func:`crawler.settings_check.check_settings` checks each setting of a
form before a crawl starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any  # None: unset, or computed (see ``shown``)
    doc: str
    shown: str = ""  # the default as the README shows it, when not the value itself
    form: str = ""  # "int", "float" or "bool": checked before a crawl
    minimum: float = 0

    def row(self) -> str:
        shown = self.shown or f"`{_literal(self.default)}`"
        return f"| `{self.name}` | {shown} | {self.doc} |"


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict | list):
        import json

        return json.dumps(value)
    return repr(value)


SETTINGS: tuple[Setting, ...] = (
    Setting("REDIS_URL", None, "the Redis to use", shown="env `REDIS_URL`, else embedded"),
    Setting("REDIS_PARAMS", {}, "extra keyword arguments for redis-py"),
    Setting(
        "CRAWLER_EMBEDDED_REDIS",
        True,
        "start the embedded Redis when `REDIS_URL` is unset; if false, that is an error",
        form="bool",
        minimum=0,
    ),
    Setting(
        "CRAWLER_STATE_DIR",
        None,
        "where the embedded Redis keeps its data (`<dir>/redis`)",
        shown="`.scrapy` of the project",
    ),
    Setting(
        "CRAWLER_REDIS_CLUSTER", False, "use a Redis Cluster client; `REDIS_URL` names any node", form="bool", minimum=0
    ),
    Setting("CRAWLER_KEY_PREFIX", "crawler", "first part of every key the frontier writes"),
    Setting("CRAWLER_SHARD", 0, "shard number of the frontier (a spider's `shard` attribute wins)"),
    Setting("CRAWLER_DEDUP", "exact", "`exact` or `bloom`"),
    Setting(
        "CRAWLER_DEDUP_CAPACITY",
        10000000,
        "expected distinct URLs per frontier: sizes exact-mode buckets and the first Bloom filter",
    ),
    Setting("CRAWLER_BLOOM_ERROR_RATE", 0.001, "Bloom mode: compound false-positive rate"),
    Setting("CRAWLER_TRACKING_PARAMS", [], "more query parameters to drop when canonicalising (`name`, or `prefix*`)"),
    Setting("CRAWLER_DOMAIN_RATE", 0.0, "token-bucket rate, requests per second per domain (0: no bucket)"),
    Setting("CRAWLER_DOMAIN_BURST", 1, "token-bucket size"),
    Setting(
        "CRAWLER_DOMAIN_DELAY",
        0.0,
        "minimum seconds between two requests to one domain, as the site sees them",
        shown="`0.0` (`70` in billion)",
    ),
    Setting(
        "CRAWLER_DELAY_FROM",
        "start",
        "the delay runs from when the previous response began (`start`) or ended (`finish`)",
        shown='`"start"` (`"finish"` in billion)',
    ),
    Setting(
        "CRAWLER_DELAY_FACTOR", 0.0, "adaptive delay: at least this times the domain's last fetch duration (0: off)"
    ),
    Setting("CRAWLER_DELAY_MAX", 0.0, "cap of the adaptive delay, seconds (0: none)"),
    Setting(
        "CRAWLER_ACK_INTERVAL",
        0.02,
        "seconds within which a finished request is acknowledged (its parked domain waits for it)",
    ),
    Setting("CRAWLER_POLL_INTERVAL", 0.05, "least seconds between two dequeues once everything due was taken"),
    Setting("CRAWLER_DOMAIN_OVERRIDES", {}, '`{"domain": {"rate": r, "burst": b, "delay": s}}`'),
    Setting("CRAWLER_DOMAIN_QUEUE_CAP", 100000, "queued URLs per domain before new ones are dropped (0: no cap)"),
    Setting(
        "CRAWLER_LEASE_SECONDS",
        None,
        "how long a dequeued request stays leased; must exceed `DOWNLOAD_TIMEOUT`",
        shown="`DOWNLOAD_TIMEOUT + 120`",
    ),
    Setting("CRAWLER_PREFETCH", None, "requests leased per dequeue round trip", shown="`CONCURRENT_REQUESTS`"),
    Setting("CRAWLER_ENQUEUE_BATCH", 1000, "buffered requests that force a store"),
    Setting("CRAWLER_FLUSH_INTERVAL", 0.5, "seconds between stores of buffered requests and acknowledgements"),
    Setting(
        "SCHEDULER_PERSIST",
        False,
        "keep the frontier when the crawl ends",
        shown="`True` here (`False` in scrapy-redis)",
    ),
    Setting("SCHEDULER_FLUSH_ON_START", False, "delete the frontier when the crawl starts"),
    Setting("SCHEDULER_IDLE_BEFORE_CLOSE", 0, "seconds to stay open once the frontier is empty"),
    Setting(
        "CRAWLER_CONTACT",
        "",
        "URL or e-mail put in the User-Agent; required by open-web spiders",
        shown="env `CRAWLER_CONTACT`",
    ),
    Setting("CRAWLER_LOCK_ENABLED", True, "domain lock middleware"),
    Setting(
        "CRAWLER_LOCK_DOMAINS",
        [],
        "domains (shell patterns) fetched one request at a time; also the Redis set `<base>:lockdomains`",
    ),
    Setting(
        "CRAWLER_LOCK_TTL",
        0.0,
        "lock expiry, seconds; must exceed `DOWNLOAD_TIMEOUT`",
        shown="`DOWNLOAD_TIMEOUT + 30`",
    ),
    Setting(
        "CRAWLER_LOCK_WAIT",
        1.0,
        "seconds (x 0.5..1.5 jitter) a request waits when its domain is locked",
        form="float",
        minimum=0,
    ),
    Setting("CRAWLER_BACKOFF_ENABLED", True, "backoff middleware (replaces RetryMiddleware)"),
    Setting(
        "CRAWLER_BACKOFF_BASE",
        1.0,
        "seconds; the wait before attempt n+1 is `min(max, base * 2**n) + jitter`",
        form="float",
        minimum=0,
    ),
    Setting("CRAWLER_BACKOFF_MAX", 600.0, "cap of the exponential part, seconds", form="float", minimum=0),
    Setting("CRAWLER_BACKOFF_JITTER", 1.0, "uniform random seconds added to each wait", form="float", minimum=0),
    Setting("CRAWLER_RETRY_AFTER_MAX", 3600.0, "cap on a server's `Retry-After`, seconds", form="float", minimum=0),
    Setting(
        "CRAWLER_MAX_ATTEMPTS", 4, "attempts before a request goes to the dead-letter queue", form="int", minimum=1
    ),
    Setting("CRAWLER_DLQ_ENABLED", True, "dead-letter middlewares"),
    Setting("CRAWLER_DLQ_MAX", 100000, "dead letters kept per frontier", form="int", minimum=1),
    Setting("CRAWLER_ROBOTS_TTL", 86400, "seconds a fetched robots.txt is kept in Redis", form="float", minimum=1),
    Setting(
        "CRAWLER_ROBOTS_ERROR_TTL",
        600,
        "seconds a host whose robots.txt gave 5xx or no answer stays disallowed",
        form="float",
        minimum=1,
    ),
    Setting("CRAWLER_ROBOTS_MAX_DELAY", 120, "cap on a robots.txt Crawl-delay, seconds", form="float", minimum=0),
    Setting("CRAWLER_SIZECAP_ENABLED", True, "size cap middleware"),
    Setting("CRAWLER_MAX_PAGE_BYTES", 250000, "bodies are cut to this many bytes", form="int", minimum=1),
    Setting("CRAWLER_HTML_ONLY", True, "stop non-HTML responses at their headers", form="bool", minimum=0),
    Setting(
        "CRAWLER_KEEPALIVE",
        True,
        "when false, requests ask servers to close the connection after the response (see the size cap)",
        shown="`True` (`False` in billion)",
        form="bool",
        minimum=0,
    ),
    Setting(
        "CRAWLER_MAX_DEPTH",
        16,
        "links followed from a seed (0: no limit)",
        shown="`16` (billion)",
        form="int",
        minimum=0,
    ),
    Setting(
        "CRAWLER_DOMAIN_BUDGET", 0, "URLs ever admitted per domain (0: no budget)", shown="`0` (`100000` in billion)"
    ),
    Setting(
        "CRAWLER_EXCLUDE_FILE", None, "domains never to crawl, one a line; loaded into `<base>:excluded`", shown="unset"
    ),
    Setting(
        "CRAWLER_FORWARD_LINKS", True, "forward links of other shards' domains to their inboxes", form="bool", minimum=0
    ),
    Setting("CRAWLER_SHARD_REDIS_URLS", {}, "shard number -> `REDIS_URL` of that shard's Redis (default: this one)"),
    Setting("CRAWLER_FOLLOW_NOFOLLOW", False, 'follow `rel="nofollow"` links too', form="bool", minimum=0),
    Setting("CRAWLER_MAX_URL_LENGTH", 2000, "longer links are dropped, longer requests refused", form="int", minimum=1),
    Setting(
        "CRAWLER_WARC_DIR", None, "write fetched pages as WARC files here", shown="unset (`output/warc` in billion)"
    ),
    Setting("CRAWLER_WARC_MAX_BYTES", 1000000000, "rotate WARC files at this size", form="int", minimum=1),
    Setting("CRAWLER_WARC_LEVEL", 1, "ISA-L compression level, 0-3", form="int", minimum=0),
    Setting(
        "CRAWLER_WARC_QUEUE",
        256,
        "pages waiting for the WARC writer before the crawl waits (0: no thread)",
        form="int",
        minimum=0,
    ),
    Setting(
        "CRAWLER_WARC_THREAD",
        "auto",
        "write WARC on a thread: `auto` (when the process may use 2+ CPUs), `True`, `False`",
    ),
    Setting("CRAWLER_TLS_SESSIONS", 10000, "hosts whose TLS session is kept for resumption", form="int", minimum=1),
    Setting("CRAWLER_TLS_GROUPS", "X25519:P-256:P-384", 'key-agreement groups offered (`""`: OpenSSL\'s own list)'),
    Setting(
        "CRAWLER_TLS_CA_FILE",
        None,
        "PEM file of trusted CAs when `DOWNLOAD_VERIFY_CERTIFICATES` is true (default: the system's)",
        shown="unset",
    ),
    Setting(
        "CRAWLER_BLOCK_PRIVATE",
        True,
        "refuse to connect to non-global addresses (loopback, private, link-local, ...)",
        form="bool",
        minimum=0,
    ),
    Setting(
        "CRAWLER_ALLOW_PRIVATE",
        [],
        "host patterns and networks (CIDR) let through despite `CRAWLER_BLOCK_PRIVATE`",
        shown='`[]` (`["*.test"]` in this project)',
    ),
    Setting(
        "CRAWLER_MAX_HEADER_BYTES",
        65536,
        "responses whose status line and headers are longer fail",
        form="int",
        minimum=256,
    ),
    Setting(
        "CRAWLER_KEEPALIVE_TIMEOUT", 20.0, "seconds an idle connection is kept for its host", form="float", minimum=0
    ),
    Setting(
        "CRAWLER_DEDUP_START_REQUESTS",
        True,
        "dedup Scrapy's start requests (which skip the dupefilter) so workers do not each fetch the seeds",
        form="bool",
        minimum=0,
    ),
    Setting("CRAWLER_METRICS_ENABLED", False, "serve Prometheus metrics", form="bool", minimum=0),
    Setting("CRAWLER_METRICS_PORT", 9410, "metrics port (0: any free port, logged)", form="int", minimum=0),
    Setting("CRAWLER_METRICS_ADDRESS", "127.0.0.1", "metrics address"),
    Setting(
        "CRAWLER_HOST_MAP",
        {"*.test": "127.0.0.1"},
        "host pattern -> IP address, for the download handler (and `HostMapResolver`, for Scrapy's own handlers)",
    ),
    Setting(
        "CRAWLER_PROGRESS_INTERVAL", 10.0, "seconds between progress lines; 0 turns them off", form="float", minimum=0
    ),
    Setting("CRAWLER_STATS_FILE", None, "write the final stats as JSON to this file", shown="unset"),
)

BY_NAME = {s.name: s for s in SETTINGS}


def markdown_table() -> str:
    head = "| setting | default | what it does |\n| --- | --- | --- |\n"
    return head + "\n".join(s.row() for s in SETTINGS) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
