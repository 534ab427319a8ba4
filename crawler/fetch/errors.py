"""How a download failed, as the dead-letter queue names it.

The handler's exceptions are Scrapy's (``DownloadFailedError``,
``ResponseDataLossError``, ``IgnoreRequest``...) or subclasses of them, so
``RETRY_EXCEPTIONS`` and a spider's errback see what they expect; the
subclasses say more, for a dead letter's ``reason``.
"""

from __future__ import annotations

from scrapy.exceptions import ResponseDataLossError

from crawler.fetch._address import BadHost, NoSuchHost, PrivateAddressRefused
from crawler.fetch._exchange import BodyDecodeError, HeadTooLarge, TooLarge
from crawler.fetch.handler import RefusedURL, UnsupportedScheme

__all__ = ["FINAL", "REFUSED", "BadHost", "BodyDecodeError", "NoSuchHost", "PrivateAddressRefused", "RefusedURL", "TooLarge",
           "reason"]

_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (ResponseDataLossError, "data_loss"),
    (BodyDecodeError, "decode_failure"),
    (TooLarge, "too_large"),
    (HeadTooLarge, "too_large"),
    (PrivateAddressRefused, "refused_address"),
    (BadHost, "bad_host"),
    (NoSuchHost, "dns"),
    (RefusedURL, "refused_url"),
    (UnsupportedScheme, "unsupported_scheme"),
)

#: failures that another attempt would only repeat
FINAL: tuple[type[BaseException], ...] = (BodyDecodeError, TooLarge, HeadTooLarge)
#: refusals (``IgnoreRequest``) that are failures of the URL, not choices of the crawl
REFUSED: tuple[type[BaseException], ...] = (PrivateAddressRefused, BadHost, NoSuchHost, RefusedURL)


def reason(exception: BaseException, default: str) -> str:
    """The dead-letter reason of a download that failed with ``exception``;
    ``default`` for the failures that come and go (timeouts, DNS, resets)."""
    for cls, name in _REASONS:
        if isinstance(exception, cls):
            return name
    return default
