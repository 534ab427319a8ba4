"""The crawler's own HTTP/1.1 and HTTPS download handler."""

from crawler.fetch._address import Addresses, Answer
from crawler.fetch.handler import DownloadHandler, keeps_alive


def tls_private() -> tuple[dict[str, str], list[str], list[str]]:
    """The private pyOpenSSL/cryptography surface the TLS code reads
    (``_openssl.py``): the version ranges it was read from, every name, and
    the names the installed versions lack (for ``crawler._compat``)."""
    from crawler.fetch import _openssl

    names = ([f"OpenSSL.SSL._lib.{n}" for n in _openssl.LIB]
             + [f"OpenSSL.SSL.Connection.{n}" for n in _openssl.CONNECTION]
             + [f"OpenSSL.SSL.Context.{n}" for n in _openssl.CONTEXT]
             + [f"OpenSSL.SSL._ffi.{n}" for n in _openssl.FFI])
    return dict(_openssl.KNOWN), names, list(_openssl.missing())


__all__ = ["Addresses", "Answer", "DownloadHandler", "keeps_alive", "tls_private"]
