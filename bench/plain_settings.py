"""Scrapy's own defaults, plus what every run of the crawl benchmark shares."""

BOT_NAME = "bench"
SPIDER_MODULES = ["bench.spiders"]
ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS = 64
CONCURRENT_REQUESTS_PER_DOMAIN = 8
COOKIES_ENABLED = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
TWISTED_DNS_RESOLVER = "crawler.resolver.HostMapResolver"
CRAWLER_HOST_MAP = {"*.test": "127.0.0.1"}
