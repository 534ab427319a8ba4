"""Spiders of the benchmarks: what a Scrapy user writes without this project."""
