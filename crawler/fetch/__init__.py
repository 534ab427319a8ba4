"""The crawler's own HTTP/1.1 and HTTPS download handler."""

from crawler.fetch.handler import DownloadHandler

__all__ = ["DownloadHandler"]
