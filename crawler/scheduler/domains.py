"""Registered domains (public-suffix aware, offline): the unit of politeness."""

from __future__ import annotations

from functools import lru_cache

import tldextract

# The snapshot of the Public Suffix List bundled with tldextract: no network.
_extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


@lru_cache(maxsize=200_000)
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
    return registered_domain(host_of(url))
