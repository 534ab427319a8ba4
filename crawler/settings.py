"""Settings of the ``crawler`` Scrapy project.

Only the project's own choices are here: every other setting has its
default in ``crawler/settings_registry.toml`` (docs/reference/settings.md).
"""

import importlib.util
import os

BOT_NAME = "crawler"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"
COMMANDS_MODULE = "crawler.commands"

# Redis: REDIS_URL from the environment; unset means the embedded Redis.
REDIS_URL = os.environ.get("REDIS_URL") or None

# The Redis frontier, its middlewares, extensions and download handler: the
# same addon any Scrapy project uses (crawler/addon.py).
ADDONS = {"crawler.addon.Addon": 0}
SCHEDULER_PERSIST = True

# Names in CRAWLER_HOST_MAP (empty here; devkit/settings.py maps the test
# web's `*.test` to loopback) resolve as mapped, also for proxied requests.
TWISTED_DNS_RESOLVER = "crawler.resolver.HostMapResolver"

# uvloop under Twisted's asyncio reactor: 13-16% less CPU per page than
# asyncio's own loop (docs/benchmarks.md). Scrapy reads this setting before
# add-ons run, so it lives here, not in the addon.
ASYNCIO_EVENT_LOOP = "uvloop.Loop" if importlib.util.find_spec("uvloop") else None

ROBOTSTXT_OBEY = True
# "{contact}" is filled from CRAWLER_CONTACT (a URL or an e-mail address)
USER_AGENT = "crawler/0.1 (+{contact})"
CRAWLER_CONTACT = os.environ.get("CRAWLER_CONTACT", "")
CONCURRENT_REQUESTS = 64
CONCURRENT_REQUESTS_PER_DOMAIN = 8
DOWNLOAD_TIMEOUT = 30
DOWNLOAD_MAXSIZE = 8 * 1024 * 1024
COOKIES_ENABLED = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
