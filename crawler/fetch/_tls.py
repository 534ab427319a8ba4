"""TLS for the fetcher: one context per process, sessions resumed per host.

pyOpenSSL (OpenSSL as shipped with ``cryptography``), driven through memory
buffers by :class:`TLSProtocol`, an asyncio protocol that carries the HTTP
connection inside it. The standard library's ``ssl`` was tried and dropped:
linked to OpenSSL 3.0 on current Pythons, its client handshake costs more
CPU, and reading or setting a session object re-encodes it (measurements in
docs/benchmarks.md).

- One context, made once from Scrapy's TLS settings.
- Each host's newest session (the most recent ``CRAWLER_TLS_SESSIONS``
  hosts) is offered on its next connection, so a server that supports
  resumption skips the certificate exchange and its signature. The one
  kept is what the host's last exchange ended with (a resumed connection
  gets a fresh TLS 1.3 ticket, so a host visited one connection at a time,
  as politeness has it, never shows a ticket twice, as RFC 8446 asks of
  clients); connections opened together share it (taking it from the first
  left the others a full handshake each). Sessions are kept serialised and
  read back for the connection they are offered to: OpenSSL's own object,
  certificate parsed, is several times larger, and a crawl keeps one for
  each of up to ``CRAWLER_TLS_SESSIONS`` hosts (sizes and cost in
  docs/benchmarks.md).
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
  against ``CRAWLER_TLS_CA_FILE`` (PEM) or the system's store, and the
  host: its name (DNS SAN), or for ``https://<IP address>/`` the address
  (iPAddress SAN), as Scrapy's handler checks it.
- Scrapy's TLS settings as Scrapy reads them: ``DOWNLOAD_TLS_MIN_VERSION``
  and ``DOWNLOAD_TLS_MAX_VERSION`` (TLS 1.2 at least when unset, as
  Twisted), else the deprecated ``DOWNLOADER_CLIENT_TLS_METHOD``;
  ``DOWNLOADER_CLIENT_TLS_CIPHERS``; ``DOWNLOADER_CLIENT_TLS_VERBOSE_LOGGING``
  (protocol, cipher and certificate at DEBUG, once per connection);
  ``SSLKEYLOGFILE`` (NSS key log lines). A bad value is a ``SettingsError``
  naming the setting; so is a custom ``DOWNLOADER_CLIENTCONTEXTFACTORY``,
  which only Scrapy's own handler can use.
- The private pyOpenSSL calls are in :mod:`crawler.fetch._openssl`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import sys
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from OpenSSL import SSL
from scrapy.exceptions import ScrapyDeprecationWarning
from scrapy.utils.python import global_object_name

from crawler.fetch import _openssl
from crawler.settings_registry import SettingsError, setting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

_VERSIONS = {"TLSv1.0": SSL.TLS1_VERSION, "TLSv1.1": SSL.TLS1_1_VERSION,
             "TLSv1.2": SSL.TLS1_2_VERSION, "TLSv1.3": SSL.TLS1_3_VERSION}
_METHODS = {"TLS": None, "TLSv1.0": SSL.TLS1_VERSION, "TLSv1.1": SSL.TLS1_1_VERSION,
            "TLSv1.2": SSL.TLS1_2_VERSION}  # DOWNLOADER_CLIENT_TLS_METHOD: one version each
# Scrapy's own factory, by the names it is known by
_STOCK_FACTORIES = {"SENTINEL", "scrapy.core.downloader.contextfactory.ScrapyClientContextFactory",
                    "scrapy.core.downloader.contextfactory._ScrapyClientContextFactory"}


class TLS:
    def __init__(self, settings: BaseSettings) -> None:
        factory = settings.get("DOWNLOADER_CLIENTCONTEXTFACTORY")
        if factory and (factory if isinstance(factory, str) else global_object_name(factory)) not in _STOCK_FACTORIES:
            raise SettingsError(
                f"DOWNLOADER_CLIENTCONTEXTFACTORY ({factory!r}) is not supported by crawler.fetch.DownloadHandler; "
                "to use it, set DOWNLOAD_HANDLERS = {'https': "
                "'scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler'}")
        self.max_sessions = setting(settings, "CRAWLER_TLS_SESSIONS")  # 0: no resumption
        self.sessions: OrderedDict[str, bytes] = OrderedDict()  # host -> its last session, serialised
        self.verify = settings.getbool("DOWNLOAD_VERIFY_CERTIFICATES", False)
        self.verbose = settings.getbool("DOWNLOADER_CLIENT_TLS_VERBOSE_LOGGING")
        context = self.context = SSL.Context(SSL.TLS_CLIENT_METHOD)
        # OP_LEGACY_SERVER_CONNECT as Scrapy: servers without RFC 5746 renegotiation
        context.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_ALL | SSL.OP_LEGACY_SERVER_CONNECT)
        context.set_session_cache_mode(SSL.SESS_CACHE_CLIENT | SSL.SESS_CACHE_NO_INTERNAL)
        # an idle kept-alive connection holds no read/write buffers (docs/benchmarks.md)
        context.set_mode(SSL.MODE_RELEASE_BUFFERS)
        minimum, maximum = _version_limits(settings)
        context.set_min_proto_version(minimum)
        context.set_max_proto_version(maximum)
        _set_ciphers(context, settings.get("DOWNLOADER_CLIENT_TLS_CIPHERS") or "DEFAULT")
        _set_groups(context, setting(settings, "CRAWLER_TLS_GROUPS"))
        _set_suites(context, setting(settings, "CRAWLER_TLS13_CIPHERSUITES"))
        if self.verify:
            ca_file = setting(settings, "CRAWLER_TLS_CA_FILE") or ""
            if ca_file:
                try:
                    context.load_verify_locations(ca_file)
                except SSL.Error as e:
                    raise SettingsError(f"CRAWLER_TLS_CA_FILE: OpenSSL cannot load {ca_file!r}: {e}") from None
            else:
                context.set_default_verify_paths()
            context.set_verify(SSL.VERIFY_PEER, None)
        context.set_alpn_protos([b"http/1.1"])
        if keylog := _keylog_file():
            context.set_keylog_callback(_keylog_writer(keylog))

    def connection(self, host: str) -> SSL.Connection:
        connection = SSL.Connection(self.context, None)
        address = _address(host)
        if address is None:
            name = host.encode("idna")
            connection.set_tlsext_host_name(name)
            if self.verify:
                _openssl.expect_name(connection, name)
        elif self.verify:  # no SNI for an address, but its certificate must name it
            _openssl.expect_ip(connection, address.packed)
        session = self.sessions.get(host)  # until keep() replaces it with a newer one
        if session is not None:
            _openssl.offer(connection, session)
        if self.verbose:
            connection.set_app_data(host)  # TLSProtocol logs the handshake for it
        connection.set_connect_state()
        return connection

    def keep(self, host: str, connection: SSL.Connection) -> None:
        """After an exchange: keep the connection's session for the host's next one."""
        if not self.max_sessions:
            return
        session = _openssl.session(connection)
        if session is not None:
            self.sessions[host] = session
            self.sessions.move_to_end(host)
            if len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)

    @staticmethod
    def pooled(connection: SSL.Connection) -> None:
        """Before ``connection`` waits in the pool: its buffer of received
        bytes is freed (a new, empty one replaces it)."""
        _openssl.fresh_input(connection)


_GONE = asyncio.Protocol()  # the app of a closed connection


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
        return _openssl.resumed(self.tls)

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
        if (host := self.tls.get_app_data()) is not None:
            log_connection(host, self.tls)
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
        try:
            plain, ended = _openssl.read(self.tls)
        except SSL.Error as e:
            self._flush()
            self.app.connection_lost(ConnectionError(f"TLS error: {e}"))
            self.abort()
            return
        self._flush()
        if plain:
            self.app.data_received(plain)
        if ended:
            self.app.eof_received()

    def _flush(self) -> None:
        out = _openssl.drain(self.tls)
        if out and self.transport is not None:
            self.transport.write(out)

    def eof_received(self) -> None:
        if self.ready.done():
            self.app.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(exc or ConnectionError("connection closed during the TLS handshake"))
        else:
            self._close_notify()  # the shared session stays resumable
            self.app.connection_lost(exc)
        # the transport, this protocol and the app refer to one another: without
        # the cycles a closed connection (and OpenSSL's buffers) goes with its
        # last reference, not at a collection of the oldest generation
        self.transport = None
        self.app = _GONE

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

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()  # type: ignore[attr-defined]

    def resume_reading(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()  # type: ignore[attr-defined]

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self.tls
        return self.transport.get_extra_info(name, default) if self.transport else default


def _set_groups(context: SSL.Context, groups: str) -> None:
    if groups and not _openssl.set_groups(context, groups.encode("ascii")):
        raise ValueError(f"CRAWLER_TLS_GROUPS: OpenSSL knows none of {groups!r}")


def _set_suites(context: SSL.Context, suites: str) -> None:
    if suites:
        try:
            context.set_tls13_ciphersuites(suites.encode("ascii"))
        except SSL.Error:
            raise ValueError(f"CRAWLER_TLS13_CIPHERSUITES: OpenSSL knows none of {suites!r}") from None


def check_groups(groups: str) -> None:
    """ValueError unless OpenSSL knows one of ``groups`` (``CRAWLER_TLS_GROUPS``)."""
    _set_groups(SSL.Context(SSL.TLS_CLIENT_METHOD), groups)


def check_suites(suites: str) -> None:
    """ValueError unless OpenSSL knows one of ``suites`` (``CRAWLER_TLS13_CIPHERSUITES``)."""
    _set_suites(SSL.Context(SSL.TLS_CLIENT_METHOD), suites)


def _set_ciphers(context: SSL.Context, ciphers: str) -> None:
    try:
        context.set_cipher_list(ciphers.encode("ascii"))
    except (SSL.Error, UnicodeError):
        raise SettingsError(f"DOWNLOADER_CLIENT_TLS_CIPHERS: OpenSSL knows none of {ciphers!r}") from None


def _version_limits(settings: BaseSettings) -> tuple[int, int]:
    """OpenSSL's (minimum, maximum) protocol versions, as Scrapy's settings ask."""
    limits = []
    for name in ("DOWNLOAD_TLS_MIN_VERSION", "DOWNLOAD_TLS_MAX_VERSION"):
        value = settings.get(name)
        if value is not None and value not in _VERSIONS:
            raise SettingsError(f"{name} must be one of {', '.join(_VERSIONS)} or None, got {value!r}")
        limits.append(_VERSIONS.get(value))
    minimum, maximum = limits
    method = settings.get("DOWNLOADER_CLIENT_TLS_METHOD") or "TLS"
    if method not in _METHODS:
        raise SettingsError(f"DOWNLOADER_CLIENT_TLS_METHOD must be one of {', '.join(_METHODS)}, got {method!r}")
    if minimum is None and maximum is None:
        if method != "TLS":
            warnings.warn("Setting DOWNLOADER_CLIENT_TLS_METHOD to a non-default value is deprecated, please use "
                          "DOWNLOAD_TLS_MIN_VERSION and/or DOWNLOAD_TLS_MAX_VERSION instead.",
                          ScrapyDeprecationWarning, stacklevel=2)
            return _METHODS[method], _METHODS[method]  # type: ignore[return-value]
    if minimum is not None and maximum is not None and minimum > maximum:
        raise SettingsError(f"DOWNLOAD_TLS_MIN_VERSION ({settings.get('DOWNLOAD_TLS_MIN_VERSION')}) is above "
                            f"DOWNLOAD_TLS_MAX_VERSION ({settings.get('DOWNLOAD_TLS_MAX_VERSION')})")
    # unset: at least TLS 1.2 (Twisted's default, so Scrapy's), at most what OpenSSL knows (0)
    return minimum or min(SSL.TLS1_2_VERSION, maximum or SSL.TLS1_2_VERSION), maximum or 0


def log_connection(host: str, connection: SSL.Connection) -> None:
    """What Scrapy logs with ``DOWNLOADER_CLIENT_TLS_VERBOSE_LOGGING``."""
    logger.debug("SSL connection to %s using protocol %s, cipher %s",
                 host, connection.get_protocol_version_name(), connection.get_cipher_name())
    if certificate := connection.get_peer_certificate(as_cryptography=True):
        logger.debug('SSL connection certificate: issuer "%s", subject "%s"',
                     certificate.issuer.rfc4514_string(), certificate.subject.rfc4514_string())


def _keylog_file() -> Path | None:
    """``SSLKEYLOGFILE``, if set and writable (as Scrapy reads it)."""
    if sys.flags.ignore_environment or not (filename := os.environ.get("SSLKEYLOGFILE")):
        return None
    path = Path(filename)
    try:
        with path.open("ab"):
            pass
    except OSError as e:
        logger.warning("Cannot write TLS session keys to %s: %s", filename, e)
        return None
    return path


def _keylog_writer(path: Path) -> Any:
    def write(connection: SSL.Connection, line: bytes) -> None:
        with path.open("ab") as f:
            f.write(line + b"\n")
    return write


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if ":" not in host and not host[-1:].isdigit():
        return None  # a name: no IPv6 colon, and no IPv4 address ends in a letter
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
