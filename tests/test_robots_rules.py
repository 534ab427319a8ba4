"""robots.txt rules: the index agrees with Protego verdict for verdict, the
private Protego surface it reads is still there, page-level directives."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protego import Protego

from crawler.robots import Rules, compile_rules, header_nofollow, meta_nofollow
from crawler.robots import _protego
from crawler.robots._matcher import matches
from devkit.testweb.config import WebConfig
from devkit.testweb.site import Site

_PIECES = st.sampled_from(["a", "b", "ab", "abc", "x", "/", ".html", "?q=", "=1", "%C3%A9", "é", "$", "*", "**", "-", "1"])
_PATTERN = st.lists(_PIECES, min_size=0, max_size=6).map(lambda parts: "/" + "".join(parts))
_RULE = st.tuples(st.sampled_from(["Allow", "Disallow"]), _PATTERN)
_PATH = st.lists(st.sampled_from(["a", "b", "ab", "abc", "x", "/", ".html", "?q=", "=1", "é", "%C3%A9", "$", "1", "-"]),
                 max_size=8).map(lambda parts: "/" + "".join(parts))


def _file(rules: list[tuple[str, str]], agent_group: bool) -> str:
    head = "User-agent: crawler\n" if agent_group else "User-agent: *\n"
    return head + "".join(f"{field}: {pattern}\n" for field, pattern in rules) + "User-agent: other\nDisallow: /\n"


@settings(max_examples=150, deadline=None)
@given(rules=st.lists(_RULE, min_size=32, max_size=60), paths=st.lists(_PATH, min_size=1, max_size=20),
       agent_group=st.booleans())
def test_the_index_gives_protegos_verdicts(rules: list[tuple[str, str]], paths: list[str], agent_group: bool) -> None:
    body = _file(rules, agent_group)
    protego = Protego.parse(body)
    indexed = Rules({"mode": "parse", "body": body}, "crawler")
    compiled = Rules.from_compiled(compile_rules(body, "crawler"), "crawler")
    assert indexed.matcher is not None  # 32 rules or more: the index is what answers
    for path in [*paths, "/robots.txt"]:
        url = f"https://site.test{path}"
        expected = protego.can_fetch(url, "crawler")
        assert indexed.allowed(url) == expected, (path, body)
        assert compiled.allowed(url) == expected, (path, body)


@settings(max_examples=300, deadline=None)
@given(pattern=_PATTERN, path=_PATH)
def test_one_pattern_matches_as_protego_matches(pattern: str, path: str) -> None:
    from protego._urlpattern import _URLPattern  # the reference, on quoted text as Protego keeps it
    from protego._utils import _quote_path, _quote_pattern

    quoted = _quote_pattern(pattern)
    url_path = _quote_path(f"https://site.test{path}")
    if quoted:
        assert matches(quoted, url_path) == _URLPattern(quoted).match(url_path)


def test_protegos_private_surface_is_still_there() -> None:
    assert _protego.check() == []


def test_hostile_files_answer_like_protego_and_keep_their_crawl_delay() -> None:
    site = Site(WebConfig(), 1)
    for kind in ("wildcards", "big"):
        body = site._hostile_robots(kind)[:512_000].decode() + "\nCrawl-delay: 3\n"
        protego = Protego.parse(body)
        rules = Rules.from_compiled(compile_rules(body, "crawler"), "crawler")
        assert rules.crawl_delay() == protego.crawl_delay("crawler")
        urls = ["https://s.test/private/1.html", "https://s.test/p/1.html", "https://s.test/1aq/x/crawl",
                "https://s.test/nothing/000017/here", "https://s.test/3fq-polite", "https://s.test/robots.txt"]
        assert [rules.allowed(u) for u in urls] == [protego.can_fetch(u, "crawler") for u in urls]
        assert not rules.allowed("https://s.test/private/1.html")


def test_small_files_keep_protego_itself() -> None:
    rules = Rules({"mode": "parse", "body": "User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n"}, "crawler")
    assert rules.matcher is None and rules.crawl_delay() == 2.0
    assert not rules.allowed("https://s.test/private/x") and rules.allowed("https://s.test/x")
    assert Rules({"mode": "allow"}, "c").allowed("https://s.test/private/x")
    assert not Rules({"mode": "disallow"}, "c").allowed("https://s.test/x")


@pytest.mark.parametrize(("values", "stops"), [
    ([b"nofollow"], True),
    ([b"noindex, NoFollow"], True),
    ([b"none"], True),
    ([b"noindex"], False),
    ([b"crawler: nofollow"], True),
    ([b"otherbot: nofollow"], False),
    ([b"otherbot: nofollow", b"crawler: noindex"], False),
    ([b"unavailable_after: 25 Jun 2010 15:00:00 PST, nofollow"], True),
    ([b"unavailable_after: 25 Jun 2010 15:00:00 PST"], False),
    ([b"max-snippet: 20"], False),
    ([], False),
])
def test_x_robots_tag(values: list[bytes], stops: bool) -> None:
    assert header_nofollow(values, "crawler") is stops


@pytest.mark.parametrize(("metas", "stops"), [
    ([("robots", "noindex, nofollow")], True),
    ([("ROBOTS", "none")], True),
    ([("crawler", "nofollow")], True),
    ([("googlebot", "nofollow")], False),
    ([("description", "nofollow")], False),
    ([("robots", "noarchive")], False),
    ([(None, "nofollow"), ("robots", None)], False),
])
def test_meta_robots(metas: list[tuple[str | None, str | None]], stops: bool) -> None:
    assert meta_nofollow(metas, "crawler") is stops
