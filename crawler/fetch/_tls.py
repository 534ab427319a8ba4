"""TLS for the fetcher: one context per process, sessions resumed per host.

pyOpenSSL (OpenSSL as shipped with ``cryptography``), driven through memory
buffers by :class:`TLSProtocol`, an asyncio protocol that carries the HTTP
connection inside it. The standard library's ``ssl`` was tried and dropped:
linked to OpenSSL 3.0 on current Pythons, its client handshake cost twice
the CPU, and reading or setting a session object re-encodes it (0.4 ms).

- One context, made once from Scrapy's TLS settings.
- Each host's newest session (the most recent ``CRAWLER_TLS_SESSIONS``
  hosts) is offered on its next connection, so a server that supports
  resumption skips the certificate exchange and its signature. OpenSSL
  uses a TLS 1.3 ticket once, as RFC 8446 asks of clients, so the session
  kept is the one the last connection ended with (a resumed connection
  gets a fresh ticket). The session object itself is kept, as curl does:
  decoding it from bytes for each connection cost 2% of a crawl's CPU.
  OpenSSL marks a session unresumable when its connection is freed without
  a close_notify sent, so every connection that finished its handshake
  sends one as it ends, aborted or not: for a crawler, a cut connection
  says nothing against the session.
- Key agreement offers ``CRAWLER_TLS_GROUPS`` (``X25519:P-256:P-384``): one
  key share in the greeting, where OpenSSL 3.5+ would also compute a
  post-quantum one for every connection. ``""``: OpenSSL's own list.
- TLS 1.3 suites are offered in browsers' order (``CRAWLER_TLS13_CIPHERSUITES``):
  AES-128-GCM with SHA-256 first, where OpenSSL puts AES-256 with SHA-384
  first. Most servers take the client's order, or prefer AES-128
  themselves; its key schedule and decryption cost less CPU.
- Certificates are not checked, as in Scrapy, unless
  ``DOWNLOAD_VERIFY_CERTIFICATES`` is true; then the chain is verified
  against ``CRAWLER_TLS_CA_FILE`` (PEM) or the system's store, and the name.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from OpenSSL import SSL
from OpenSSL.SSL import _ffi, _lib  # no public wrapper for sessions, or for reads without exceptions

from crawler.settings_registry import setting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

_RECORD = 16 * 1024 + 256
# Reads go straight to OpenSSL into one buffer (the reactor's thread is the
# only reader): pyOpenSSL's recv and bio_read raise an exception for "no
# more data yet", which ends nearly every read, at 2% of a crawl's CPU.
_BUFFER = _ffi.new("char[]", 4 * _RECORD)


class TLS:
    def __init__(self, settings: BaseSettings) -> None:
        self.max_sessions = setting(settings, "CRAWLER_TLS_SESSIONS")  # 0: no resumption
        self.sessions: OrderedDict[str, Any] = OrderedDict()  # host -> SSL_SESSION *
        self.verify = settings.getbool("DOWNLOAD_VERIFY_CERTIFICATES", False)
        context = self.context = SSL.Context(SSL.TLS_CLIENT_METHOD)
        context.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_ALL)
        context.set_session_cache_mode(SSL.SESS_CACHE_CLIENT | SSL.SESS_CACHE_NO_INTERNAL)
        context.set_cipher_list((settings.get("DOWNLOADER_CLIENT_TLS_CIPHERS") or "DEFAULT").encode("ascii"))
        _set_groups(context, setting(settings, "CRAWLER_TLS_GROUPS"))
        _set_suites(context, setting(settings, "CRAWLER_TLS13_CIPHERSUITES"))
        if self.verify:
            ca_file = setting(settings, "CRAWLER_TLS_CA_FILE") or ""
            if ca_file:
                context.load_verify_locations(ca_file)
            else:
                context.set_default_verify_paths()
            context.set_verify(SSL.VERIFY_PEER, None)
        context.set_alpn_protos([b"http/1.1"])

    def connection(self, host: str) -> SSL.Connection:
        connection = SSL.Connection(self.context, None)
        if not _is_address(host):
            name = host.encode("idna")
            connection.set_tlsext_host_name(name)
            if self.verify:
                _lib.X509_VERIFY_PARAM_set1_host(_lib.SSL_get0_param(connection._ssl), name, len(name))
        session = self.sessions.get(host)
        if session is not None:
            _lib.SSL_set_session(connection._ssl, session)  # takes its own reference
        connection.set_connect_state()
        return connection

    def keep(self, host: str, connection: SSL.Connection) -> None:
        """After an exchange: keep the connection's session for the host's next one."""
        if not self.max_sessions:
            return
        session = _lib.SSL_get1_session(connection._ssl)
        if session != _ffi.NULL:
            self.sessions[host] = _ffi.gc(session, _lib.SSL_SESSION_free)
            self.sessions.move_to_end(host)
            if len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)


class TLSProtocol(asyncio.Protocol):
    """TLS over a socket transport; looks like a transport to ``app``."""

    def __init__(self, tls: SSL.Connection, app: asyncio.Protocol) -> None:
        self.tls = tls
        self.app = app
        self.transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.notified = False

    @property
    def resumed(self) -> bool:
        return bool(_lib.SSL_session_reused(self.tls._ssl))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._handshake()

    def _handshake(self) -> bool:
        try:
            self.tls.do_handshake()
        except SSL.WantReadError:
            self._flush()
            return False
        except SSL.Error as e:
            self._flush()
            self._fail(e)
            return False
        self._flush()
        self.app.connection_made(self)  # type: ignore[arg-type]
        self.ready.set_result(None)
        return True

    def _fail(self, error: Exception) -> None:
        if not self.ready.done():
            self.ready.set_exception(error)
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.tls.bio_write(data)
        if not self.ready.done() and not self._handshake():
            return
        chunks = []
        ended = False
        tls = self.tls
        while True:
            size = _lib.SSL_read(tls._ssl, _BUFFER, len(_BUFFER))
            if size > 0:
                chunks.append(_ffi.buffer(_BUFFER, size)[:])
                continue
            if _lib.SSL_get_error(tls._ssl, size) == _lib.SSL_ERROR_WANT_READ:
                break
            try:
                tls._raise_ssl_error(tls._ssl, size)  # pyOpenSSL's own exception for the error
            except SSL.ZeroReturnError:
                ended = True
            except SSL.Error as e:
                self.app.connection_lost(ConnectionError(f"TLS error: {e}"))
                self.abort()
                return
            break
        self._flush()
        if chunks:
            self.app.data_received(b"".join(chunks))
        if ended:
            self.app.eof_received()

    def _flush(self) -> None:
        out = self.tls._from_ssl
        chunks = []
        while (size := _lib.BIO_read(out, _BUFFER, len(_BUFFER))) > 0:
            chunks.append(_ffi.buffer(_BUFFER, size)[:])
        if chunks and self.transport is not None:
            self.transport.write(b"".join(chunks))

    def eof_received(self) -> None:
        if self.ready.done():
            self.app.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(exc or ConnectionError("connection closed during the TLS handshake"))
        else:
            self._close_notify()  # the shared session stays resumable
            self.app.connection_lost(exc)

    def _close_notify(self) -> None:
        if not self.notified:
            self.notified = True
            try:
                self.tls.shutdown()
            except SSL.Error:
                pass

    # what the HTTP connection sees as its transport

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            sent = self.tls.send(view)
            view = view[sent:]
        self._flush()

    def close(self) -> None:
        if self.ready.done():
            self._close_notify()
            self._flush()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self.tls
        return self.transport.get_extra_info(name, default) if self.transport else default


def _set_groups(context: SSL.Context, groups: str) -> None:
    if groups and not _lib.SSL_CTX_set1_curves_list(context._context, groups.encode("ascii")):
        raise ValueError(f"CRAWLER_TLS_GROUPS: OpenSSL knows none of {groups!r}")


def _set_suites(context: SSL.Context, suites: str) -> None:
    if suites:
        try:
            context.set_tls13_ciphersuites(suites.encode("ascii"))
        except SSL.Error:
            raise ValueError(f"CRAWLER_TLS13_CIPHERSUITES: OpenSSL knows none of {suites!r}") from None


def check_lists(groups: str, suites: str) -> None:
    """ValueError unless OpenSSL knows one of ``groups`` (``CRAWLER_TLS_GROUPS``)
    and one of ``suites`` (``CRAWLER_TLS13_CIPHERSUITES``)."""
    context = SSL.Context(SSL.TLS_CLIENT_METHOD)
    _set_groups(context, groups)
    _set_suites(context, suites)


def _is_address(host: str) -> bool:
    if ":" not in host and not host[-1:].isdigit():
        return False  # a name: no IPv6 colon, and no IPv4 address ends in a letter
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
