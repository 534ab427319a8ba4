"""Every private pyOpenSSL binding the TLS code uses, and nothing else.

pyOpenSSL has no public call for these: keeping a session object and
offering it again, checking the name or IP address OpenSSL verifies against,
setting the key-agreement groups, and reading without an exception for "no
more data yet" (which ends nearly every read).
They reach OpenSSL through ``OpenSSL.SSL._lib``/``_ffi`` (cryptography's
bindings) and a few private attributes of pyOpenSSL's objects, which either
project may rename in any release. Known to work with the ``KNOWN`` ranges,
pinned in ``requirements.txt`` and ``pyproject.toml``; the import fails with
the versions named when one is missing (``tests/test_fetch_security.py``
also checks that each one behaves).
"""

from __future__ import annotations

from importlib.metadata import version

from OpenSSL import SSL
from OpenSSL.SSL import _ffi, _lib

KNOWN = {"pyOpenSSL": ">=26.4,<27", "cryptography": ">=49.0,<51"}

LIB = ("SSL_read", "SSL_get_error", "SSL_ERROR_WANT_READ", "BIO_read", "BIO_new", "BIO_s_mem",
       "BIO_get_mem_data", "SSL_set_bio", "SSL_session_reused",
       "SSL_get1_session", "SSL_SESSION_free", "SSL_set_session", "i2d_SSL_SESSION", "d2i_SSL_SESSION",
       "SSL_get0_param",
       "X509_VERIFY_PARAM_set1_host", "X509_VERIFY_PARAM_set1_ip", "SSL_CTX_set1_curves_list")
CONNECTION = ("_ssl", "_into_ssl", "_from_ssl", "_raise_ssl_error")  # attributes of SSL.Connection
CONTEXT = ("_context",)  # of SSL.Context
FFI = ("NULL", "buffer", "gc", "new")  # of OpenSSL.SSL._ffi (cffi's FFI object)

_RECORD = 16 * 1024 + 256
# The reactor's thread is the only reader: one buffer for every read.
_BUFFER = _ffi.new("char[]", 4 * _RECORD)


def versions() -> str:
    return f"pyOpenSSL {version('pyOpenSSL')}, cryptography {version('cryptography')}"


def missing() -> list[str]:
    """The private names this module uses that the installed versions lack."""
    connection = SSL.Connection(SSL.Context(SSL.TLS_CLIENT_METHOD), None)
    context = SSL.Context(SSL.TLS_CLIENT_METHOD)
    return ([f"_lib.{name}" for name in LIB if not hasattr(_lib, name)]
            + [f"Connection.{name}" for name in CONNECTION if not hasattr(connection, name)]
            + [f"Context.{name}" for name in CONTEXT if not hasattr(context, name)]
            + [f"_ffi.{name}" for name in FFI if not hasattr(_ffi, name)])


def read(connection: SSL.Connection) -> tuple[bytes, bool]:
    """All the plaintext OpenSSL holds, and whether the peer sent close_notify;
    ``SSL.Error`` for anything else."""
    chunks = []
    ssl = connection._ssl
    while True:
        size = _lib.SSL_read(ssl, _BUFFER, len(_BUFFER))
        if size > 0:
            chunks.append(_ffi.buffer(_BUFFER, size)[:])
            continue
        if _lib.SSL_get_error(ssl, size) == _lib.SSL_ERROR_WANT_READ:
            return b"".join(chunks), False
        try:
            connection._raise_ssl_error(ssl, size)  # pyOpenSSL's own exception for the error
        except SSL.ZeroReturnError:
            return b"".join(chunks), True
        raise SSL.Error("SSL_read failed without an error")  # pragma: no cover - OpenSSL always sets one


def drain(connection: SSL.Connection) -> bytes:
    """What OpenSSL has written for the network."""
    out = connection._from_ssl
    chunks = []
    while (size := _lib.BIO_read(out, _BUFFER, len(_BUFFER))) > 0:
        chunks.append(_ffi.buffer(_BUFFER, size)[:])
    return b"".join(chunks)


def fresh_input(connection: SSL.Connection) -> None:
    """Give OpenSSL a new, empty buffer for the bytes received, if the old
    one holds none. A memory BIO keeps the room of the largest write it was
    given (up to the event loop's 256 kB reads) for as long as it lives:
    without this, each idle pooled connection holds it."""
    if _lib.BIO_get_mem_data(connection._into_ssl, _ffi.NULL) != 0:
        return
    fresh = _lib.BIO_new(_lib.BIO_s_mem())
    if fresh == _ffi.NULL:
        return
    # the write side unchanged: OpenSSL frees the old read side, takes this one
    _lib.SSL_set_bio(connection._ssl, fresh, connection._from_ssl)
    connection._into_ssl = fresh


def resumed(connection: SSL.Connection) -> bool:
    return bool(_lib.SSL_session_reused(connection._ssl))


def session(connection: SSL.Connection) -> bytes | None:
    """The connection's session as OpenSSL serialises it (DER), or None.
    Kept this way a session costs its size; kept as OpenSSL's object, with
    the server's certificate parsed, several times that, for every host a
    crawl keeps one for (docs/benchmarks.md)."""
    pointer = _lib.SSL_get1_session(connection._ssl)
    if pointer == _ffi.NULL:
        return None
    try:
        size = _lib.i2d_SSL_SESSION(pointer, _ffi.NULL)
        if size <= 0:
            return None
        buffer = _ffi.new("unsigned char[]", size)
        _lib.i2d_SSL_SESSION(pointer, _ffi.new("unsigned char **", buffer))
        return _ffi.buffer(buffer, size)[:]
    finally:
        _lib.SSL_SESSION_free(pointer)


def offer(connection: SSL.Connection, kept: bytes) -> None:
    """Offer a session kept by :func:`session` (ignored if OpenSSL cannot read it back)."""
    buffer = _ffi.new("unsigned char[]", kept)
    pointer = _lib.d2i_SSL_SESSION(_ffi.NULL, _ffi.new("unsigned char **", buffer), len(kept))
    if pointer == _ffi.NULL:
        return
    _lib.SSL_set_session(connection._ssl, pointer)  # takes a reference of its own
    _lib.SSL_SESSION_free(pointer)


def expect_name(connection: SSL.Connection, name: bytes) -> None:
    """Verification also checks the certificate names ``name`` (DNS SAN or CN)."""
    if not _lib.X509_VERIFY_PARAM_set1_host(_lib.SSL_get0_param(connection._ssl), name, len(name)):
        raise ValueError(f"OpenSSL refused the host name {name!r}")


def expect_ip(connection: SSL.Connection, packed: bytes) -> None:
    """Verification also checks the certificate has ``packed`` (4 or 16 bytes)
    as an iPAddress SAN."""
    if not _lib.X509_VERIFY_PARAM_set1_ip(_lib.SSL_get0_param(connection._ssl), packed, len(packed)):
        raise ValueError(f"OpenSSL refused the IP address {packed!r}")


def set_groups(context: SSL.Context, groups: bytes) -> bool:
    """False if OpenSSL knows none of ``groups``."""
    return bool(_lib.SSL_CTX_set1_curves_list(context._context, groups))


if _absent := missing():
    raise ImportError(f"crawler.fetch._openssl: {versions()} lack {', '.join(_absent)}; "
                      f"known to work: pyOpenSSL{KNOWN['pyOpenSSL']}, cryptography{KNOWN['cryptography']}")
