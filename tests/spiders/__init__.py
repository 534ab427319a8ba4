"""Spiders used only by the tests (``-s SPIDER_MODULES=tests.spiders``)."""
