"""The crawler's own HTTP/1.1 and HTTPS download handler."""

from crawler.fetch.handler import DownloadHandler, keeps_alive

__all__ = ["DownloadHandler", "keeps_alive"]
