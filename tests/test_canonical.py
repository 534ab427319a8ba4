"""Canonical URLs and fingerprints."""

from __future__ import annotations

from hashlib import sha256

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request

from crawler.identity import Canonicalizer, _normalise_escapes, canonicalize
from crawler.identity import domain_of, host_of, registered_domain
from crawler.identity import Fingerprinter

label = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
host = st.lists(label, min_size=1, max_size=3).map(lambda ls: ".".join(ls) + ".com")
segment = st.text("abcXYZ019-._~!$'()*+,;=:@%20é€/", max_size=12)
path = st.lists(segment, max_size=4).map(lambda ss: "/" + "/".join(ss))
word = st.text("abcdefgXYZ019-._~%é", min_size=1, max_size=8)
params = st.lists(st.tuples(word, st.text("abcXYZ019-._~%é=/", max_size=8)), max_size=4)
tracking = st.lists(
    st.sampled_from(["utm_source=x", "utm_medium=email", "UTM_Campaign=y", "gclid=123", "fbclid=z",
                     "mc_cid=1", "mc_eid=2"]), min_size=1, max_size=3)


def build(scheme: str, h: str, p: str, q: list[tuple[str, str]], port: str = "") -> str:
    query = "&".join(f"{k}={v}" for k, v in q)
    return f"{scheme}://{h}{port}{p}{'?' + query if query else ''}"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["http", "https", "HTTP", "Https"]), host, path, params)
def test_idempotent(scheme: str, h: str, p: str, q: list[tuple[str, str]]) -> None:
    once = canonicalize(build(scheme, h, p, q))
    assert canonicalize(once) == once


@settings(max_examples=300, deadline=None)
@given(host, path, params, tracking, st.text("abc#xyz", max_size=6))
def test_tracking_fragment_and_host_case_share_a_fingerprint(
    h: str, p: str, q: list[tuple[str, str]], extra: list[str], fragment: str
) -> None:
    fp = Fingerprinter()
    plain = build("http", h, p, q)
    noisy_query = "&".join([*(f"{k}={v}" for k, v in q), *extra])
    noisy = f"HTTP://{h.upper()}:80{p}?{noisy_query}#{fragment}"
    assert canonicalize(noisy) == canonicalize(plain)
    assert fp.fingerprint(Request(noisy)) == fp.fingerprint(Request(plain))


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("HTTP://Example.COM:80/a/./b/../c?b=2&a=1#frag", "http://example.com/a/c?a=1&b=2"),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/x/", "https://example.com:8443/x/"),
        ("http://example.com/?", "http://example.com/"),
        ("http://example.com/p?utm_source=a&utm_medium=b", "http://example.com/p"),
        ("http://example.com/%7euser/%41b%2f?q=%e2%82%ac", "http://example.com/~user/Ab%2F?q=%E2%82%AC"),
        ("http://bücher.de/straße", "http://xn--bcher-kva.de/stra%C3%9Fe"),
        ("http://example.com/a b", "http://example.com/a%20b"),
        ("http://example.com/x?b=1&a=2&a=1", "http://example.com/x?a=1&a=2&b=1"),
    ],
)
def test_examples(url: str, canonical: str) -> None:
    assert canonicalize(url) == canonical


def reference_escapes(text: str) -> str:
    """Every %XX: decoded if unreserved, else upper-case hex."""
    out, i = [], 0
    while i < len(text):
        chunk = text[i : i + 3]
        if len(chunk) == 3 and chunk[0] == "%" and all(c in "0123456789abcdefABCDEF" for c in chunk[1:]):
            char = chr(int(chunk[1:], 16))
            out.append(char if char.isascii() and (char.isalnum() or char in "-_~") else chunk.upper())
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@settings(max_examples=800, deadline=None)
@given(st.lists(st.one_of(st.sampled_from("%a/.-"), st.integers(0, 255).map(lambda b: f"%{b:02x}"),
                          st.integers(0, 255).map(lambda b: f"%{b:02X}")), max_size=12).map("".join))
def test_escapes_normalised_byte_by_byte(text: str) -> None:
    assert _normalise_escapes(text) == reference_escapes(text)


def test_extra_tracking_parameters_from_settings() -> None:
    canon = Canonicalizer(["sessionid", "ref_*"])
    assert canon("http://a.com/?sessionid=9&ref_src=t&id=3&utm_x=1") == "http://a.com/?id=3"


def test_invalid_url_raises() -> None:
    with pytest.raises(ValueError):
        canonicalize("http://exa mple.com/")


def test_fingerprint_is_raw_sha256_of_the_canonical_url() -> None:
    fp = Fingerprinter().fingerprint(Request("http://Example.com/a?utm_source=x#top"))
    assert isinstance(fp, bytes) and len(fp) == 32
    assert fp == sha256(b"http://example.com/a").digest()


def test_method_and_body_count_when_not_a_plain_get() -> None:
    fp = Fingerprinter()
    get = fp.fingerprint(Request("http://a.com/form"))
    post = fp.fingerprint(Request("http://a.com/form", method="POST", body=b"x=1"))
    post2 = fp.fingerprint(Request("http://a.com/form", method="POST", body=b"x=2"))
    assert len({get, post, post2}) == 3


@pytest.mark.parametrize(("url", "domain"), [
    ("https://www.bbc.co.uk/news", "bbc.co.uk"),
    ("https://user:pw@shop.example.com:8443/a?b=/c", "example.com"),
    ("http://host.example.org?x=/y", "example.org"),
    ("http://host.example.org#x/y", "example.org"),
    ("https://d17.test:4443", "d17.test"),
    ("http://[::1]:8080/x", "[::1]"),
    ("http://127.0.0.1/x", "127.0.0.1"),
    # the Public Suffix List's default rule "*": an unknown suffix is the last label
    ("http://www.example.test/", "example.test"),
    ("http://a.b.d3.test:8080/", "d3.test"),
    ("http://files.intranet/x", "files.intranet"),
    ("http://localhost:8080/", "localhost"),
    ("http://co.uk/", "co.uk"),
])
def test_domain_of_url(url: str, domain: str) -> None:
    assert domain_of(url) == domain


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["http://", "https://", "", "//"]), st.sampled_from(["", "u@", "u:p@", "a@b@"]), host,
       st.sampled_from(["", ":80", ":8443"]), st.sampled_from(["", "/", "/a/b", "?q=/x", "#f/g", "/x?y#z"]))
def test_domain_of_is_the_domain_of_the_url_s_host(scheme: str, userinfo: str, h: str, port: str,
                                                   rest: str) -> None:
    url = scheme + userinfo + h + port + rest  # cached by origin: the same answer as from the host
    assert domain_of(url) == registered_domain(host_of(url))
