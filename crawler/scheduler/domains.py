"""Registered domains (public-suffix aware, offline): the unit of politeness."""

from __future__ import annotations

from functools import lru_cache

import tldextract

# The snapshot of the Public Suffix List bundled with tldextract: no network.
_extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def registered_domain(host: str) -> str:
    """``www.bbc.co.uk`` -> ``bbc.co.uk``; names without a public suffix
    (``d0.test``, ``localhost``, IP addresses) stand for themselves."""
    host = host.lower().rstrip(".")
    result = _extract(host)
    if result.suffix and result.domain:
        return f"{result.domain}.{result.suffix}"
    return host


def host_of(url: str) -> str:
    """The host of an absolute http(s) URL, without port or userinfo."""
    rest = url.split("//", 1)[1] if "//" in url else url
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    netloc = netloc.rsplit("@", 1)[-1]
    if netloc.startswith("["):
        return netloc[: netloc.find("]") + 1]
    return netloc.split(":", 1)[0]


def domain_of(url: str) -> str:
    start = url.find("//")
    if start < 0:
        return registered_domain(host_of(url))
    end = url.find("/", start + 2)  # a page's links share a few origins: cached by origin
    return _origin_domain(url if end < 0 else url[:end])


@lru_cache(maxsize=200_000)  # the one cache: registered_domain is called through it
def _origin_domain(origin: str) -> str:
    return registered_domain(host_of(origin))
