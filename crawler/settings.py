"""Settings of the ``crawler`` Scrapy project.

Every ``CRAWLER_*`` setting is documented in README.md ("Settings reference").
"""

import os

BOT_NAME = "crawler"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"
COMMANDS_MODULE = "crawler.commands"

# Redis: REDIS_URL from the environment; unset means the embedded Redis.
REDIS_URL = os.environ.get("REDIS_URL") or None
CRAWLER_EMBEDDED_REDIS = True

# The Redis frontier (crawler/scheduler): dedup happens in Redis, so Scrapy's
# dupefilter is a no-op.
SCHEDULER = "crawler.scheduler.FrontierScheduler"
REQUEST_FINGERPRINTER_CLASS = "crawler.scheduler.fingerprint.Fingerprinter"
DUPEFILTER_CLASS = "scrapy.dupefilters.BaseDupeFilter"
SCHEDULER_PERSIST = True
SPIDER_MIDDLEWARES = {
    "crawler.scheduler.acks.FrontierAckSpiderMiddleware": 10,
    "crawler.middlewares.deadletter.DeadLetterSpiderMiddleware": 20,
}
DOWNLOADER_MIDDLEWARES = {
    "crawler.scheduler.acks.FrontierAckDownloaderMiddleware": 1,
    "crawler.middlewares.deadletter.DeadLetterMiddleware": 50,
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    "crawler.middlewares.robots.SharedRobotsMiddleware": 100,
    "scrapy.downloadermiddlewares.useragent.UserAgentMiddleware": None,
    "crawler.middlewares.useragent.ContactUserAgentMiddleware": 500,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "crawler.middlewares.backoff.BackoffMiddleware": 550,
    "crawler.middlewares.sizecap.SizeCapMiddleware": 580,
    "crawler.middlewares.lock.DomainLockMiddleware": 950,
}
CRAWLER_DEDUP = "exact"
CRAWLER_DOMAIN_RATE = 0.0
CRAWLER_DOMAIN_BURST = 1
CRAWLER_DOMAIN_DELAY = 0.0

# The `.test` domains of the local test web resolve to loopback; names that
# match no pattern resolve as usual.
TWISTED_DNS_RESOLVER = "crawler.resolver.HostMapResolver"
CRAWLER_HOST_MAP = {"*.test": "127.0.0.1"}

ROBOTSTXT_OBEY = True
# "{contact}" is filled from CRAWLER_CONTACT (a URL or an e-mail address)
USER_AGENT = "crawler/0.1 (+{contact})"
CRAWLER_CONTACT = os.environ.get("CRAWLER_CONTACT", "")
# asyncio HTTP/1.1: no silent re-sends, TLS sessions resumed, private
# addresses refused, bodies capped after decoding (crawler/fetch/)
DOWNLOAD_HANDLERS = {
    "http": "crawler.fetch.DownloadHandler",
    "https": "crawler.fetch.DownloadHandler",
}
# the test web's hosts resolve to 127.0.0.1 (CRAWLER_HOST_MAP above)
CRAWLER_ALLOW_PRIVATE = ["*.test"]
CONCURRENT_REQUESTS = 64
CONCURRENT_REQUESTS_PER_DOMAIN = 8
DOWNLOAD_TIMEOUT = 30
DOWNLOAD_MAXSIZE = 8 * 1024 * 1024
COOKIES_ENABLED = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"

EXTENSIONS = {
    "crawler.extensions.progress.Progress": 500,
    "crawler.extensions.statsfile.StatsFile": 510,
    "crawler.extensions.warc.WarcExtension": 520,
    "crawler.extensions.metrics.MetricsExtension": 530,
}
CRAWLER_PROGRESS_INTERVAL = 10.0
