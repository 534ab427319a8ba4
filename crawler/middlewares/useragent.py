"""A User-Agent that names the crawler and how to reach its operator.

``USER_AGENT`` may contain ``{contact}``, filled from ``CRAWLER_CONTACT`` (a URL
or an e-mail address): ``crawler/0.1 (+{contact})``. Without a contact the
parentheses are dropped. Replaces Scrapy's UserAgentMiddleware.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.useragent import UserAgentMiddleware

from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings


def contact_of(settings: BaseSettings) -> str:
    """``CRAWLER_CONTACT``: the setting, else (when no settings name it: an
    addon project's do not read the environment) the environment variable
    of that name. A setting given empty is empty (``-s CRAWLER_CONTACT=``
    overrides the environment as any ``-s`` does): an open-web spider then
    refuses to start."""
    if settings.get("CRAWLER_CONTACT") is None:
        return str(os.environ.get("CRAWLER_CONTACT") or "").strip()
    return str(setting(settings, "CRAWLER_CONTACT")).strip()


def user_agent(settings: BaseSettings) -> str:
    template = str(settings.get("USER_AGENT") or "crawler")
    contact = contact_of(settings)
    if "{contact}" not in template:
        return template
    if contact:
        return template.replace("{contact}", contact)
    return template.replace(" (+{contact})", "").replace("{contact}", "").strip()


def product_token(agent: str) -> str:
    """``crawler/0.1 (+https://x)`` -> ``crawler``: what robots.txt groups match."""
    return agent.split("/", 1)[0].split(" ", 1)[0] or agent


def robots_agent(settings: BaseSettings) -> str:
    """The name robots.txt rules and page-level directives are matched for:
    ``ROBOTSTXT_USER_AGENT``, else the User-Agent's product token."""
    return settings.get("ROBOTSTXT_USER_AGENT") or product_token(user_agent(settings))


class ContactUserAgentMiddleware(UserAgentMiddleware):
    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ContactUserAgentMiddleware:
        return cls(user_agent(crawler.settings))
