"""Downloader middlewares: domain lock, backoff and dead letters, robots.txt, size cap."""
