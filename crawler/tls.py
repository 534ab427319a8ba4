"""HTTPS that costs little: one TLS context per process, sessions resumed per host.

Scrapy's own context factory builds a new ``SSL.Context`` (cipher list,
options, verify mode) for every connection and resumes no session, so each
HTTPS fetch pays a full handshake plus the context set-up.
:class:`ReusingContextFactory` (used by :mod:`crawler.download`) keeps:

- one context for the whole process, made once from Scrapy's TLS settings
  (``DOWNLOADER_CLIENT_TLS_CIPHERS``, ``DOWNLOAD_TLS_MIN_VERSION``, ...);
- the session a server gave is kept per host name (``CRAWLER_TLS_SESSIONS``
  hosts at most, least recently used dropped) and offered on the next
  connection to that host, so a server that supports resumption skips the
  certificate exchange and the key agreement's signature;
- key agreement offers ``CRAWLER_TLS_GROUPS`` (``X25519:P-256:P-384``):
  one key share in the greeting, where OpenSSL 3.5+ would also compute a
  post-quantum one (X25519MLKEM768) for every connection (a quarter of the
  client's handshake CPU). Set it to ``""`` for OpenSSL's own list;
- certificates are not verified, as in Scrapy, unless
  ``DOWNLOAD_VERIFY_CERTIFICATES`` is true; ``CRAWLER_TLS_CA_FILE`` (PEM)
  then replaces the system's trust store.

Stats: ``crawler/tls/handshakes``, ``crawler/tls/resumed``.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from OpenSSL import SSL
from OpenSSL.SSL import _ffi, _lib  # sessions as bytes have no public wrapper
from scrapy.core.downloader.contextfactory import _ScrapyCertificateOptions, _ScrapyClientContextFactory
from twisted.internet._sslverify import ClientTLSOptions
from twisted.internet.ssl import Certificate, platformTrust, trustRootFromCertificates
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector
    from twisted.protocols.tls import TLSMemoryBIOProtocol


class _Unverified(ClientTLSOptions):
    """Twisted's client options (SNI) without the certificate checks."""

    def clientConnectionForTLS(self, tlsProtocol: TLSMemoryBIOProtocol) -> SSL.Connection:
        connection = self._createConnection(tlsProtocol)
        if self._sendServerName:
            connection.set_tlsext_host_name(self._hostnameBytes)
        return connection


@implementer(IPolicyForHTTPS)
class ReusingContextFactory(_ScrapyClientContextFactory):
    """Scrapy's context factory with one shared context and a session cache."""

    def __init__(self, *args: Any, sessions: int = 10_000, ca_file: str = "", groups: str = "",
                 stats: StatsCollector | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_sessions = sessions
        self.sessions: OrderedDict[bytes, bytes] = OrderedDict()  # host -> DER session
        self.stats = stats
        self.counted: weakref.WeakSet[SSL.Connection] = weakref.WeakSet()
        options = self._get_cert_options_kwargs()
        if self._verify_certificates:
            if ca_file:
                pem = Path(ca_file).read_bytes()
                options["trustRoot"] = trustRootFromCertificates([Certificate.loadPEM(pem)])
            else:
                options["trustRoot"] = platformTrust()
        self.options = _ScrapyCertificateOptions(**options)
        context = self.options.getContext()  # made once, shared by every connection
        context.set_session_cache_mode(SSL.SESS_CACHE_CLIENT | SSL.SESS_CACHE_NO_INTERNAL)
        if groups and not _lib.SSL_CTX_set1_curves_list(context._context, groups.encode("ascii")):
            raise ValueError(f"CRAWLER_TLS_GROUPS: OpenSSL knows none of {groups!r}")
        context.set_info_callback(self._info)

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> ReusingContextFactory:
        settings = crawler.settings
        kwargs.setdefault("sessions", settings.getint("CRAWLER_TLS_SESSIONS", 10_000))
        kwargs.setdefault("ca_file", settings.get("CRAWLER_TLS_CA_FILE") or "")
        kwargs.setdefault("groups", settings.get("CRAWLER_TLS_GROUPS", "X25519:P-256:P-384"))
        kwargs.setdefault("stats", crawler.stats)
        return super().from_crawler(crawler, *args, **kwargs)  # type: ignore[return-value]

    def creatorForNetloc(self, hostname: bytes, port: int) -> ClientTLSOptions:
        connect = partial(self._connection, hostname)
        if self._verify_certificates:
            return ClientTLSOptions(connect, hostname.decode("ascii"))
        return _Unverified(connect, hostname.decode("ascii"))

    def _connection(self, hostname: bytes, protocol: TLSMemoryBIOProtocol) -> SSL.Connection:
        connection = self.options._makeTLSConnection(protocol)
        der = self.sessions.get(hostname.lower())
        if der is not None:
            _set_session(connection, der)
        return connection

    def _info(self, connection: SSL.Connection, where: int, ret: int) -> None:
        if where & SSL.SSL_CB_HANDSHAKE_DONE and connection not in self.counted:
            self.counted.add(connection)
            if self.stats is not None:
                self.stats.inc_value("crawler/tls/handshakes")
                if _lib.SSL_session_reused(connection._ssl):
                    self.stats.inc_value("crawler/tls/resumed")
        elif not (where & SSL.SSL_CB_EXIT and ret > 0 and connection in self.counted):
            return
        # TLS 1.2 sessions are complete with the handshake; TLS 1.3 servers
        # send tickets after it, each ending in another successful exit
        name = connection.get_servername()
        if not name:
            return  # no SNI (an IP address): nothing to key the session on
        der = _session_bytes(connection)
        if der:
            key = name.lower()
            self.sessions[key] = der
            self.sessions.move_to_end(key)
            while len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)


# Sessions are kept as bytes, not as the connection's SSL_SESSION: a
# connection freed without a TLS shutdown (an aborted download) marks its
# session object unresumable, and Scrapy aborts every download it cuts short.
def _session_bytes(connection: SSL.Connection) -> bytes:
    session = _lib.SSL_get_session(connection._ssl)
    if session == _ffi.NULL:
        return b""
    size = _lib.i2d_SSL_SESSION(session, _ffi.NULL)
    if size <= 0:
        return b""
    buffer = _ffi.new("unsigned char[]", size)
    _lib.i2d_SSL_SESSION(session, _ffi.new("unsigned char **", buffer))
    return _ffi.buffer(buffer, size)[:]


def _set_session(connection: SSL.Connection, der: bytes) -> None:
    buffer = _ffi.new("unsigned char[]", der)
    session = _lib.d2i_SSL_SESSION(_ffi.NULL, _ffi.new("unsigned char **", buffer), len(der))
    if session != _ffi.NULL:
        _lib.SSL_set_session(connection._ssl, session)  # takes its own reference
        _lib.SSL_SESSION_free(session)
