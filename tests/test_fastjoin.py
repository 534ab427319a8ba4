"""The string-work join of plain hrefs gives exactly what ada's WHATWG join
gives, or declines (``None``) and leaves the href to ada."""

from __future__ import annotations

from ada_url import join_url
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler._fastjoin import FastJoin

# pieces that exercise every rule: dot segments, empty segments, schemes,
# escapes, queries, backslashes, non-ASCII, characters WHATWG percent-encodes
PIECES = [*"ab.-/_~!$&'()*+,;=@:%?\\ ^|{}`Aé0x9", "..", "./", "../", "//", "xn--", "%2e", "http://",
          "https://", "HTTP://"]
LABEL_PIECES = [*"abz09-xX", "xn--", "0x", "a" * 30, "é"]
BASES = [
    "https://x.com/d/e", "http://x.com/", "http://x.com", "https://x.com:8443/a/b/c.html?q=1#f",
    "https://u:p@x.com/a/", "http://127.0.0.1/a/b", "ftp://x.com/a", "https://x.com/a//b/",
    "https://X.com/a/./b/../c/d.html", "https://xn--bcher-kva.de/a/", "https://x.com/a/%2e%2e/b/",
    "https://x.com/p?a/../b#c/d", "https://x.com/é/",
]

hrefs = st.lists(st.sampled_from(PIECES), max_size=14).map("".join)
hosts = st.lists(st.lists(st.sampled_from(LABEL_PIECES), max_size=5).map("".join), min_size=1,
                 max_size=4).map(".".join)
paths = st.lists(st.sampled_from([*"ab./-_~", "..", "//"]), max_size=8).map("".join)
joined = {"fast": 0}


def agrees(base: str, href: str) -> None:
    href = href.strip().split("#", 1)[0]
    got = FastJoin(base).join(href)
    if got is None:
        return
    joined["fast"] += 1
    assert got == join_url(base, href).split("#", 1)[0], (base, href)


@settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(BASES), hrefs)
def test_relative_hrefs_join_as_ada_does(base: str, href: str) -> None:
    agrees(base, href)


PORTS = ["", "", ":80", ":443", ":8080", ":8443", ":0", ":00", ":08", ":65535", ":65536", ":99999", ":"]


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["http://", "https://"]), hosts, st.sampled_from(PORTS), st.sampled_from(["", "/"]),
       paths)
def test_absolute_hrefs_join_as_ada_does(scheme: str, host: str, port: str, slash: str, path: str) -> None:
    agrees("https://x.com/d/e", scheme + host + port + slash + path)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["http://", "https://"]), st.sampled_from(PORTS), hrefs)
def test_bases_with_ports_join_as_ada_does(scheme: str, port: str, href: str) -> None:
    agrees(scheme + "x.com" + port + "/d/e", href)


def test_the_fast_path_is_taken_for_plain_links() -> None:
    base = "https://doc.rust-lang.org/alloc/rc/struct.Rc.html"
    cases = {
        "../../std/index.html": "https://doc.rust-lang.org/std/index.html",
        "struct.Weak.html": "https://doc.rust-lang.org/alloc/rc/struct.Weak.html",
        "/": "https://doc.rust-lang.org/",
        "./a/../b/.": "https://doc.rust-lang.org/alloc/rc/b/",
        "https://github.com/rust-lang/rust": "https://github.com/rust-lang/rust",
        "http://example.org": "http://example.org/",
        "http://x.org:8080/a": "http://x.org:8080/a",  # a port WHATWG keeps as written
    }
    for href, url in cases.items():
        assert FastJoin(base).join(href) == url == join_url(base, href)
    # declined: left to ada
    for href in ("?q=1", "//cdn.org/x", "a%20b", "mailto:x@y.z", "https://Example.org/", "https://1.2.3.4/",
                 "https://xn--bcher-kva.de/", "http://x.org:80/", "https://x.org:0443/", "é.html", "a\\b", ""):
        assert FastJoin(base).join(href) is None, href
    assert FastJoin("ftp://x.com/a").join("b") is None
    assert FastJoin("http://x.com:65536/a").join("https://y.org/g") is None  # ada refuses the base


def test_generated_cases_reach_the_fast_path() -> None:
    # the property tests above prove nothing if every href is declined
    joined["fast"] = 0
    for base in BASES:
        for href in ("a", "../b", "/c/./d", "e/../../f", "https://y.org/g", "https://y.org:8443/g"):
            agrees(base, href)
    assert joined["fast"] >= 36
