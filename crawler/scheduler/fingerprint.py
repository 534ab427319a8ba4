"""SHA-256 request fingerprints of canonical URLs, as raw 32-byte digests.

    REQUEST_FINGERPRINTER_CLASS = "crawler.scheduler.fingerprint.Fingerprinter"

A GET (or HEAD) without a body is identified by its canonical URL alone, so a
link found in a page and the request later made for it share a fingerprint.
Other methods, or a body, are folded in.
"""

from __future__ import annotations

from hashlib import sha256
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from crawler.scheduler.canonical import Canonicalizer
from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request


def url_fingerprint(canonical_url: str) -> bytes:
    return sha256(canonical_url.encode()).digest()


class Fingerprinter:
    def __init__(self, crawler: Crawler | None = None) -> None:
        tracking = setting(crawler.settings, "CRAWLER_TRACKING_PARAMS") if crawler else []
        self.canonicalize = Canonicalizer(tracking)
        self._cache: WeakKeyDictionary[Request, bytes] = WeakKeyDictionary()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Fingerprinter:
        return cls(crawler)

    def fingerprint(self, request: Request) -> bytes:
        cached = self._cache.get(request)
        if cached is not None:
            return cached
        try:
            url = self.canonicalize(request.url)
        except ValueError:
            url = request.url  # unparsable: identify it by its spelling
        if request.method in ("GET", "HEAD") and not request.body:
            digest = url_fingerprint(url)
        else:
            digest = sha256(b"%s %s\n%s" % (request.method.encode(), url.encode(), request.body)).digest()
        self._cache[request] = digest
        return digest
