"""TLS and addresses for the fetcher against real servers on 127.0.0.1 and
::1 (trustme certificates): the host's identity checked for IP addresses
too, Scrapy's TLS settings honoured or refused in one line, the private
pyOpenSSL calls checked, the address policy and the DNS cache's bounds."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509
from hypothesis import given
from hypothesis import strategies as st
from OpenSSL import SSL
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.clock import SYSTEM, Clock, ManualClock
from crawler.fetch import DownloadHandler, _openssl
from crawler.fetch._address import Addresses, BadHost, PrivateAddressRefused, host_problem, is_public
from crawler.fetch._tls import TLS, TLSProtocol
from crawler.fetch.handler import check_tls
from crawler.resolver import HostMap, parse_host_map
from crawler.settings_registry import SettingsError

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def server_context(ca: trustme.CA, *identities: str, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(*identities).configure_cert(context)
    if maximum is not None:
        context.maximum_version = maximum
    return context


async def serve(context: ssl.SSLContext, host: str = "127.0.0.1") -> tuple[asyncio.Server, int]:
    """A TLS server answering every request with ANSWER."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(ANSWER)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, host, 0, ssl=context)
    return server, server.sockets[0].getsockname()[1]


class _Reader(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self) -> None:
        if not self.done.done():
            self.done.set_result(self.data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.data)


async def exchange(tls: TLS, host: str, address: str, port: int) -> TLSProtocol:
    """One request over TLSProtocol; raises what the handshake raised."""
    reader = _Reader()
    protocol = TLSProtocol(tls.connection(host), reader)
    await asyncio.get_running_loop().create_connection(lambda: protocol, address, port)
    await protocol.ready
    protocol.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await reader.done).endswith(b"\r\n\r\nok")
    tls.keep(host, protocol.tls)
    protocol.close()
    return protocol


def run(make: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(make())  # type: ignore[arg-type]


# item 14: the identity of an IP-address host


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_ip_host_needs_its_address_in_the_certificate(ca: trustme.CA, ca_file: str, address: str) -> None:
    url_host = f"[{address}]" if ":" in address else address
    settings = {"DOWNLOAD_VERIFY_CERTIFICATES": True, "CRAWLER_TLS_CA_FILE": ca_file,
                "CRAWLER_ALLOW_PRIVATE": ["127.0.0.0/8", "::1/128"]}

    async def fetch(*identities: str, verify: bool = True) -> Any:
        server, port = await serve(server_context(ca, *identities), address)
        h = DownloadHandler(get_crawler(settings_dict={**settings, "DOWNLOAD_VERIFY_CERTIFICATES": verify}))
        try:
            return await h.download_request(Request(f"https://{url_host}:{port}/"))
        except Exception as e:  # noqa: BLE001 - the test looks at it
            return e
        finally:
            await h.close()
            server.close()

    other_name = run(lambda: fetch("other.test"))
    other_address = run(lambda: fetch("127.0.0.2", "::2"))
    right = run(lambda: fetch(address))
    unchecked = run(lambda: fetch("other.test", verify=False))
    for refused in (other_name, other_address):
        assert isinstance(refused, Exception), refused
        assert "certificate verify failed" in str(refused), refused
    assert right.status == 200 and right.body == b"ok"
    assert unchecked.status == 200  # as Scrapy: not checked unless asked


def test_name_host_still_needs_its_name(ca: trustme.CA, ca_file: str) -> None:
    tls = TLS(Settings({"DOWNLOAD_VERIFY_CERTIFICATES": True, "CRAWLER_TLS_CA_FILE": ca_file}))

    async def main() -> tuple[Exception | None, bool]:
        server, port = await serve(server_context(ca, "a.test", "127.0.0.1"))
        try:
            try:
                await exchange(tls, "b.test", "127.0.0.1", port)
                wrong = None
            except SSL.Error as e:
                wrong = e
            return wrong, (await exchange(tls, "a.test", "127.0.0.1", port)).tls.get_servername() == b"a.test"
        finally:
            server.close()

    wrong, right = run(main)
    assert wrong is not None and "certificate verify failed" in str(wrong)
    assert right


# item 10: DOWNLOAD_TLS_MIN_VERSION / DOWNLOAD_TLS_MAX_VERSION (and the deprecated method)


@pytest.mark.parametrize(("settings", "server_max", "negotiated"), [
    ({}, None, "TLSv1.3"),
    ({}, ssl.TLSVersion.TLSv1_2, "TLSv1.2"),
    ({"DOWNLOAD_TLS_MAX_VERSION": "TLSv1.2"}, None, "TLSv1.2"),
    ({"DOWNLOAD_TLS_MIN_VERSION": "TLSv1.2", "DOWNLOAD_TLS_MAX_VERSION": "TLSv1.2"}, None, "TLSv1.2"),
    ({"DOWNLOAD_TLS_MIN_VERSION": "TLSv1.3"}, None, "TLSv1.3"),
    ({"DOWNLOAD_TLS_MIN_VERSION": "TLSv1.3"}, ssl.TLSVersion.TLSv1_2, None),  # refused
    ({"DOWNLOAD_TLS_MAX_VERSION": "TLSv1.3"}, ssl.TLSVersion.TLSv1_2, "TLSv1.2"),
    ({"DOWNLOADER_CLIENT_TLS_METHOD": "TLSv1.2"}, None, "TLSv1.2"),
    # the limits win over the method, as in Scrapy
    ({"DOWNLOADER_CLIENT_TLS_METHOD": "TLSv1.2", "DOWNLOAD_TLS_MIN_VERSION": "TLSv1.3"}, None, "TLSv1.3"),
])
@pytest.mark.filterwarnings("ignore:Setting DOWNLOADER_CLIENT_TLS_METHOD")
def test_tls_versions_follow_scrapys_settings(ca: trustme.CA, settings: dict[str, str],
                                              server_max: ssl.TLSVersion | None, negotiated: str | None) -> None:
    tls = TLS(Settings(settings))

    async def main() -> str | None:
        server, port = await serve(server_context(ca, "a.test", maximum=server_max))
        try:
            return (await exchange(tls, "a.test", "127.0.0.1", port)).tls.get_protocol_version_name()
        except (SSL.Error, ConnectionError):  # the server hangs up on a version it does not speak
            return None
        finally:
            server.close()

    assert run(main) == negotiated


def test_ciphers_are_honoured(ca: trustme.CA) -> None:
    async def main(ciphers: str) -> str:
        tls = TLS(Settings({"DOWNLOADER_CLIENT_TLS_CIPHERS": ciphers, "DOWNLOAD_TLS_MAX_VERSION": "TLSv1.2"}))
        server, port = await serve(server_context(ca, "a.test"))
        try:
            return (await exchange(tls, "a.test", "127.0.0.1", port)).tls.get_cipher_name()
        finally:
            server.close()

    # trustme's keys are ECDSA
    assert run(lambda: main("ECDHE-ECDSA-AES256-GCM-SHA384")) == "ECDHE-ECDSA-AES256-GCM-SHA384"
    assert run(lambda: main("ECDHE-ECDSA-CHACHA20-POLY1305")) == "ECDHE-ECDSA-CHACHA20-POLY1305"


@pytest.mark.parametrize(("settings", "message"), [
    ({"DOWNLOAD_TLS_MIN_VERSION": "TLSv1.4"},
     "DOWNLOAD_TLS_MIN_VERSION must be one of TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3 or None, got 'TLSv1.4'"),
    ({"DOWNLOAD_TLS_MAX_VERSION": "tls1.2"}, "DOWNLOAD_TLS_MAX_VERSION must be one of .*, got 'tls1.2'"),
    ({"DOWNLOAD_TLS_MIN_VERSION": "TLSv1.3", "DOWNLOAD_TLS_MAX_VERSION": "TLSv1.2"},
     r"DOWNLOAD_TLS_MIN_VERSION \(TLSv1.3\) is above DOWNLOAD_TLS_MAX_VERSION \(TLSv1.2\)"),
    ({"DOWNLOADER_CLIENT_TLS_METHOD": "SSLv3"},
     "DOWNLOADER_CLIENT_TLS_METHOD must be one of TLS, TLSv1.0, TLSv1.1, TLSv1.2, got 'SSLv3'"),
    ({"DOWNLOADER_CLIENT_TLS_METHOD": "SSLv3", "DOWNLOAD_TLS_MIN_VERSION": "TLSv1.2"},  # checked, as by Scrapy
     "DOWNLOADER_CLIENT_TLS_METHOD must be one of TLS, TLSv1.0, TLSv1.1, TLSv1.2, got 'SSLv3'"),
    ({"DOWNLOADER_CLIENT_TLS_CIPHERS": "NO-SUCH-CIPHER"},
     "DOWNLOADER_CLIENT_TLS_CIPHERS: OpenSSL knows none of 'NO-SUCH-CIPHER'"),
    ({"DOWNLOADER_CLIENTCONTEXTFACTORY": "myproject.tls.MyFactory"},
     r"DOWNLOADER_CLIENTCONTEXTFACTORY \('myproject.tls.MyFactory'\) is not supported by "
     r"crawler.fetch.DownloadHandler; to use it, set DOWNLOAD_HANDLERS = \{'https': "
     r"'scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler'\}"),
])
def test_bad_tls_settings_are_one_line(settings: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=f"^{message}$"):
        TLS(Settings(settings))
    with pytest.raises(SettingsError, match=f"^{message}$"):  # the handler says it before any request
        DownloadHandler(get_crawler(settings_dict=settings))


def test_settings_check_asks_only_when_the_handler_is_ours() -> None:
    custom = {"DOWNLOADER_CLIENTCONTEXTFACTORY": "myproject.tls.MyFactory"}
    check_tls(Settings(custom))  # Scrapy's handlers: theirs to use
    check_tls(Settings({**custom, "DOWNLOAD_HANDLERS": {"https": "scrapy.core.downloader.handlers.http11."
                                                                 "HTTP11DownloadHandler"}}))
    for ours in ("crawler.fetch.DownloadHandler", DownloadHandler):
        with pytest.raises(SettingsError, match="^DOWNLOADER_CLIENTCONTEXTFACTORY .* is not supported"):
            check_tls(Settings({**custom, "DOWNLOAD_HANDLERS": {"http": ours}}))
    with pytest.raises(SettingsError, match="^CRAWLER_TLS_CA_FILE must be a readable file that exists, got '/no/such.pem'"):
        check_tls(Settings({"DOWNLOAD_VERIFY_CERTIFICATES": True, "CRAWLER_TLS_CA_FILE": "/no/such.pem",
                            "DOWNLOAD_HANDLERS": {"https": DownloadHandler}}))
    with pytest.raises(SettingsError, match=f"^CRAWLER_TLS_CA_FILE: OpenSSL cannot load '{__file__}': "):  # not PEM
        check_tls(Settings({"DOWNLOAD_VERIFY_CERTIFICATES": True, "CRAWLER_TLS_CA_FILE": __file__,
                            "DOWNLOAD_HANDLERS": {"https": DownloadHandler}}))


def test_scrapys_own_context_factory_is_accepted() -> None:
    from scrapy.core.downloader.contextfactory import _ScrapyClientContextFactory

    for factory in ("SENTINEL", "scrapy.core.downloader.contextfactory.ScrapyClientContextFactory",
                    _ScrapyClientContextFactory):
        TLS(Settings({"DOWNLOADER_CLIENTCONTEXTFACTORY": factory}))


# item 12: verbose logging and SSLKEYLOGFILE


@pytest.mark.parametrize("verbose", [False, True])
def test_verbose_logging_says_what_scrapy_says(ca: trustme.CA, caplog: pytest.LogCaptureFixture,
                                               verbose: bool) -> None:
    tls = TLS(Settings({"DOWNLOADER_CLIENT_TLS_VERBOSE_LOGGING": verbose}))

    async def main() -> str:
        server, port = await serve(server_context(ca, "a.test"))
        try:
            return (await exchange(tls, "a.test", "127.0.0.1", port)).tls.get_cipher_name()
        finally:
            server.close()

    with caplog.at_level(logging.DEBUG, logger="crawler.fetch._tls"):
        cipher = run(main)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("SSL connection")]
    if not verbose:
        assert lines == []
        return
    assert cipher.startswith("TLS_AES_")
    assert lines[0] == f"SSL connection to a.test using protocol TLSv1.3, cipher {cipher}"
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.bytes()).subject.rfc4514_string()
    assert re.fullmatch(f'SSL connection certificate: issuer "{re.escape(issuer)}", '
                        r'subject "OU=Testing cert #\S+,O=trustme v[\d.]+"', lines[1]), lines[1]
    assert len(lines) == 2


def test_keylog_file_gets_nss_lines(ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keylog = tmp_path / "keys.log"
    monkeypatch.setenv("SSLKEYLOGFILE", str(keylog))
    tls = TLS(Settings())

    async def main() -> bytes:
        server, port = await serve(server_context(ca, "a.test"))
        try:
            return (await exchange(tls, "a.test", "127.0.0.1", port)).tls.client_random()
        finally:
            server.close()

    client_random = run(main).hex()
    lines = keylog.read_text().splitlines()
    labels = {line.split()[0] for line in lines}
    assert {"CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET",
            "CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0"} <= labels
    for line in lines:  # NSS: label, the client random, the secret, in hex
        label, random, secret = line.split(" ")
        assert random == client_random and re.fullmatch(r"[0-9a-f]{64,96}", secret)


def test_unwritable_keylog_file_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("SSLKEYLOGFILE", str(tmp_path / "no" / "such" / "dir" / "keys.log"))
    TLS(Settings())
    assert any(r.getMessage().startswith("Cannot write TLS session keys to ") for r in caplog.records)


# the private pyOpenSSL calls


def _versions_message(problem: str) -> str:
    return (f"{problem}: crawler/fetch/_openssl.py is known to work with pyOpenSSL{_openssl.KNOWN['pyOpenSSL']}, "
            f"cryptography{_openssl.KNOWN['cryptography']}; installed: {_openssl.versions()}")


def test_private_pyopenssl_calls_exist() -> None:
    absent = _openssl.missing()
    assert not absent, _versions_message(f"missing {', '.join(absent)}")


def test_private_pyopenssl_calls_behave(ca: trustme.CA, ca_file: str) -> None:
    """Each wrapper in _openssl against a real server: reads, writes, sessions,
    the name and the address checked, the groups set."""
    tls = TLS(Settings({"DOWNLOAD_VERIFY_CERTIFICATES": True, "CRAWLER_TLS_CA_FILE": ca_file,
                        "CRAWLER_TLS_GROUPS": "X25519"}))
    probe = SSL.Context(SSL.TLS_CLIENT_METHOD)
    problems = []
    if _openssl.set_groups(probe, b"nonsense") or not _openssl.set_groups(probe, b"X25519:P-256"):
        problems.append("set_groups")

    async def main() -> None:
        server, port = await serve(server_context(ca, "a.test", "127.0.0.1"))
        try:
            first = await exchange(tls, "a.test", "127.0.0.1", port)  # read() and drain() carried it
            second = await exchange(tls, "a.test", "127.0.0.1", port)
            if first.resumed or not second.resumed or _openssl.session(second.tls) is None:
                problems.append("session/offer/resumed")
            kept = tls.sessions["a.test"]  # serialised: its bytes, not OpenSSL's parse (about 14 kB)
            if not isinstance(kept, bytes) or not 100 < len(kept) < 4096:
                problems.append(f"session kept as {type(kept).__name__} of {len(kept)} bytes")
            tls.sessions["a.test"] = b"not a session"  # offered anyway: a full handshake, no error
            if (await exchange(tls, "a.test", "127.0.0.1", port)).resumed:
                problems.append("offer of an unreadable session")
            if not (await exchange(tls, "127.0.0.1", "127.0.0.1", port)).tls.get_peer_certificate():
                problems.append("expect_ip")
            wrong = tls.connection("b.test")  # expect_name: a certificate for a.test is refused
            reader = _Reader()
            protocol = TLSProtocol(wrong, reader)
            await asyncio.get_running_loop().create_connection(lambda: protocol, "127.0.0.1", port)
            try:
                await protocol.ready
                problems.append("expect_name")
            except SSL.Error:
                pass
        finally:
            server.close()

    run(main)
    assert not problems, _versions_message(f"{', '.join(problems)} misbehave")


# item 19: the address policy


@pytest.mark.parametrize(("address", "public"), [
    ("8.8.8.8", True), ("10.0.0.1", False), ("169.254.169.254", False), ("100.64.0.1", False),
    ("224.0.0.1", False), ("0.0.0.0", False),
    ("2606:4700:4700::1111", True), ("::1", False), ("::", False), ("fe80::1", False), ("fc00::1", False),
    ("ff02::1", False),
    ("fec0::1", False), ("feff::1", False),  # site-local fec0::/10
    ("::ffff:10.0.0.1", False), ("::ffff:8.8.8.8", True),
    ("::a00:1", False), ("::808:808", True), ("::7f00:1", False),  # IPv4-compatible
    ("64:ff9b::a00:1", False), ("64:ff9b::a9fe:a9fe", False), ("64:ff9b::808:808", True),  # NAT64
    ("64:ff9b:1::808:808", False),  # local-use NAT64 (RFC 8215)
    ("::ffff:0:a00:1", False), ("::ffff:0:808:808", True),  # SIIT
    ("2002:a00:1::1", False), ("2002:a9fe:a9fe::1", False), ("2002:7f00:1::", False), ("2002:808:808::1", True),
])
def test_address_policy(address: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(address)) is public


@given(st.integers(0, 2**32 - 1))
def test_embedded_ipv4_is_judged_as_itself(n: int) -> None:
    v4 = ipaddress.IPv4Address(n)
    forms = [ipaddress.IPv6Address(f"::ffff:{v4}"), ipaddress.IPv6Address(n),
             ipaddress.IPv6Address((0x64FF9B << 96) | n), ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | 1),
             ipaddress.IPv6Address((0xFFFF << 32) | n)]
    assert [is_public(form) for form in forms] == [is_public(v4)] * len(forms)


@pytest.mark.parametrize("host", [
    "xn--zz.example", "a..b", ".a", "a." * 2 + ".", "x" * 64 + ".example", ("a" * 63 + ".") * 4 + "com",
    "xn--abc.example", "xn--.example", "xn--a-ecp.example", "a b.example", "a/b.example", "", "b\u00fc\u0000.de",
])
def test_hosts_that_cannot_be_names(host: str) -> None:
    assert host_problem(host) is not None


@pytest.mark.parametrize("host", [
    "example.com", "example.com.", "xn--bcher-kva.example", "xn--55qx5d.cn", "xn--ls8h.la", "under_score.test",
    "x" * 63 + ".example", ("a" * 62 + ".") * 4 + "c", "bücher.example", "EXAMPLE.COM", "-dash-.blogspot.com",
])
def test_hosts_that_can_be_names(host: str) -> None:
    assert host_problem(host) is None


@given(st.text(alphabet="abcxyz019-_.\u00fc\u4e2d\u2488", max_size=300)
       | st.lists(st.sampled_from(["xn--", "xn--zz", "xn--bcher-kva", "a" * 63, "a" * 64, "", "b"]), max_size=6)
       .map(".".join))
def test_a_host_taken_as_a_name_can_be_encoded(host: str) -> None:
    """What host_problem lets through, TLS (SNI) and the system resolver can encode."""
    if host_problem(host) is None:
        encoded = host.encode("idna")
        name = encoded[:-1] if encoded.endswith(b".") else encoded
        assert 0 < len(name) <= 253 and all(0 < len(label) <= 63 for label in name.split(b"."))


def addresses(clock: Clock = SYSTEM, **settings: Any) -> Addresses:
    """The address policy as billion has it (refusing), unless ``settings``
    say otherwise; its cache lifetimes measured on ``clock``."""
    crawler = get_crawler(settings_dict={"CRAWLER_BLOCK_PRIVATE": True, **settings})
    crawler.stats.open_spider()
    return Addresses(crawler.settings, crawler.stats, clock)


def test_bad_hosts_are_refused_before_any_lookup() -> None:
    # "*" would answer any name: a refusal shows no lookup was made
    a = addresses(CRAWLER_HOST_MAP={"*": "127.0.0.1"}, CRAWLER_ALLOW_PRIVATE=["127.0.0.0/8"])

    async def main() -> list[Any]:
        out = []
        for host in ("xn--zz.test", "a..b.test", "x" * 64 + ".test", "a." * 127 + "test", "fine.test"):
            try:
                out.append(await a.resolve_all(host))
            except BadHost as e:
                out.append(e)
        return out

    *refused, fine = run(main)
    assert all(isinstance(r, BadHost) for r in refused), refused
    assert "is not a host name: label 'xn--zz' is not IDNA" in str(refused[0])
    assert "it has an empty label" in str(refused[1])
    assert "a label is 64 characters long, over 63" in str(refused[2])
    assert "it is 258 characters long, over 253" in str(refused[3])
    assert fine == [ipaddress.ip_address("127.0.0.1")]
    assert a.stats.get_value("crawler/refused/bad_host") == 4
    assert list(a.cache) == ["fine.test"]


# item 20: every address, a cache with a TTL, bounded


def test_resolve_all_keeps_the_resolvers_order_and_drops_refused_addresses() -> None:
    a = addresses(CRAWLER_HOST_MAP={"multi.test": ["127.0.0.2", "169.254.169.254", "127.0.0.1", "::1"],
                                    "meta.test": ["169.254.169.254", "10.1.1.1"], "one.test": "127.0.0.3"},
                  CRAWLER_ALLOW_PRIVATE=["127.0.0.0/8", "::1/128"])

    async def main() -> tuple[Any, ...]:
        multi = await a.resolve_all("multi.test")
        first = await a.resolve("multi.test")
        one = await a.resolve_all("one.test")
        with pytest.raises(PrivateAddressRefused, match="meta.test leads to the non-global address 169.254.169.254"):
            await a.resolve_all("meta.test")
        with pytest.raises(PrivateAddressRefused):
            await a.resolve("meta.test")  # cached: refused again, counted again
        return multi, first, one

    multi, first, one = run(main)
    assert multi == [ipaddress.ip_address(x) for x in ("127.0.0.2", "127.0.0.1", "::1")]
    assert first == ipaddress.ip_address("127.0.0.2")
    assert one == [ipaddress.ip_address("127.0.0.3")]
    stats = a.stats
    assert stats.get_value("crawler/dns/dropped") == 1
    assert stats.get_value("crawler/refused/private_address") == 2
    assert stats.get_value("crawler/dns/refused_hosts") == 1
    assert stats.get_value("crawler/dns/cache_size") == 3


def test_system_resolver_answers_every_address() -> None:
    a = addresses(CRAWLER_BLOCK_PRIVATE=False)
    found = run(lambda: a.resolve_all("localhost"))
    assert ipaddress.ip_address("127.0.0.1") in found and len(found) == len(set(found))


def test_handler_reaches_a_name_whose_first_address_refuses() -> None:
    async def main() -> Any:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(ANSWER)
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        h = DownloadHandler(get_crawler(settings_dict={
            "CRAWLER_HOST_MAP": {"multi.test": ["127.0.0.2", "127.0.0.1"]},  # nothing listens on .2
            "CRAWLER_ALLOW_PRIVATE": ["*.test"]}))
        try:
            return await h.download_request(Request(f"http://multi.test:{port}/"))
        finally:
            await h.close()
            server.close()

    response = run(main)
    assert response.status == 200 and response.body == b"ok"
    assert str(response.ip_address) == "127.0.0.1"


def test_cached_answers_expire_per_entry() -> None:
    clock = ManualClock()
    a = addresses(clock, CRAWLER_HOST_MAP={"a.test": "127.0.0.1", "b.test": "127.0.0.1"},
                  CRAWLER_ALLOW_PRIVATE=["127.0.0.0/8"])
    a.ttl = 0.4

    async def main() -> list[list[Any]]:
        seen = [await a.resolve_all("a.test")]
        clock.advance(0.25)
        seen.append(await a.resolve_all("b.test"))
        # the names move (as DNS answers do); the cache keeps what it was told until each entry expires
        a.host_map = HostMap(parse_host_map({"a.test": "127.0.0.7", "b.test": "127.0.0.8"}))
        seen += [await a.resolve_all("a.test"), await a.resolve_all("b.test")]
        clock.advance(0.25)  # a.test's entry is 0.5 s old, b.test's 0.25 s
        seen += [await a.resolve_all("a.test"), await a.resolve_all("b.test")]
        clock.advance(0.25)
        seen.append(await a.resolve_all("b.test"))
        return seen

    seen = [[str(x) for x in answer] for answer in run(main)]
    assert seen == [["127.0.0.1"], ["127.0.0.1"], ["127.0.0.1"], ["127.0.0.1"],
                    ["127.0.0.7"], ["127.0.0.1"], ["127.0.0.8"]]
    assert a.stats.get_value("crawler/dns/expired") == 2


def test_an_expired_answer_is_checked_again() -> None:
    """A name that moves to the metadata address is refused once its old answer expires."""
    clock = ManualClock()
    a = addresses(clock, CRAWLER_HOST_MAP={"rebind.test": "127.0.0.1"}, CRAWLER_ALLOW_PRIVATE=["127.0.0.0/8"])
    a.ttl = 0.1

    async def main() -> Any:
        await a.resolve_all("rebind.test")
        a.host_map = HostMap(parse_host_map({"rebind.test": "169.254.169.254"}))
        clock.advance(0.15)
        return await a.resolve_all("rebind.test")

    with pytest.raises(PrivateAddressRefused, match="169.254.169.254"):
        run(main)


def test_caches_are_bounded_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    a = addresses(CRAWLER_HOST_MAP={"*.ok": "127.0.0.1", "*.no": "10.0.0.1"},
                  CRAWLER_ALLOW_PRIVATE=["*.ok"], DNSCACHE_SIZE=3)
    a.max_refused_hosts = 2

    async def main() -> list[str]:
        for host in ("1.ok", "2.ok", "3.ok", "1.ok", "4.ok"):  # 1.ok used again: 2.ok is the oldest
            await a.resolve_all(host)
        kept = list(a.cache)
        for host in ("1.no", "2.no", "3.no", "1.no"):
            with pytest.raises(PrivateAddressRefused):
                await a.resolve_all(host)
        return kept

    with caplog.at_level(logging.WARNING):
        kept = run(main)
    assert kept == ["3.ok", "1.ok", "4.ok"]
    assert list(a.cache) == ["2.no", "3.no", "1.no"]
    assert list(a.refused_hosts) == ["3.no", "1.no"]
    assert a.stats.get_value("crawler/dns/cache_size") == 3
    assert a.stats.get_value("crawler/dns/refused_hosts") == 2
    # 1.no was forgotten as logged, so it is logged again: bounded, at the cost of a repeated line
    assert sum(r.getMessage().startswith("Refused 1.no") for r in caplog.records) == 2


def test_cache_can_be_off() -> None:
    a = addresses(CRAWLER_HOST_MAP={"a.test": "127.0.0.1"}, CRAWLER_ALLOW_PRIVATE=["127.0.0.0/8"],
                  DNSCACHE_ENABLED=False)

    async def main() -> list[Any]:
        first = await a.resolve_all("a.test")
        a.host_map = HostMap(parse_host_map({"a.test": "127.0.0.9"}))
        return [first, await a.resolve_all("a.test")]

    assert [[str(x) for x in answer] for answer in run(main)] == [["127.0.0.1"], ["127.0.0.9"]]
    assert not a.cache


def test_host_map_takes_lists() -> None:
    hosts = HostMap(parse_host_map({"multi.test": ["127.0.0.2", "::1"], "*.test": "127.0.0.1"}))
    assert hosts.lookup_all("multi.test") == ("127.0.0.2", "::1")
    assert hosts.lookup("multi.test") == "127.0.0.2"
    assert hosts.lookup_all("x.test") == ("127.0.0.1",)
    with pytest.raises(ValueError, match=r"CRAWLER_HOST_MAP\['m'\] must be an IP address or a list of them"):
        parse_host_map({"m": ["127.0.0.1", "nope"]})
    with pytest.raises(ValueError, match=r"CRAWLER_HOST_MAP\['m'\] is an empty list"):
        parse_host_map({"m": []})
