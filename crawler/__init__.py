"""Polite, distributed, Redis-coordinated crawling for Scrapy."""

__version__ = "0.1.0"
