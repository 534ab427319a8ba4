"""robots.txt rules: the index agrees with Protego verdict for verdict, the
private Protego surface it reads is still there, page-level directives."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from protego import Protego

from crawler.robots import Rules, compile_rules, header_nofollow, meta_nofollow
from crawler.robots import _protego
from crawler.robots._groups import rfc9309_groups
from crawler.robots._matcher import matches
from devkit.testweb.config import WebConfig
from devkit.testweb.site import Site

_PIECES = st.sampled_from(["a", "b", "ab", "abc", "x", "/", ".html", "?q=", "=1", "%C3%A9", "é", "$", "*", "**", "-", "1"])
_PATTERN = st.lists(_PIECES, min_size=0, max_size=6).map(lambda parts: "/" + "".join(parts))
_RULE = st.tuples(st.sampled_from(["Allow", "Disallow"]), _PATTERN)
_PATH = st.lists(st.sampled_from(["a", "b", "ab", "abc", "x", "/", ".html", "?q=", "=1", "é", "%C3%A9", "$", "1", "-"]),
                 max_size=8).map(lambda parts: "/" + "".join(parts))


def _file(rules: list[tuple[str, str]], agent_group: bool) -> str:
    """A file Protego and RFC 9309 read alike: no other record between two
    User-agent lines, every User-agent value a bare product token (the two
    cases where we follow the RFC: ``test_rfc9309_groups_where_protego_differs``)."""
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


def test_installed_protego_is_the_one_checked() -> None:
    assert version("protego") in SpecifierSet(_protego.PROTEGO), (
        f"protego {version('protego')} is outside {_protego.PROTEGO}: check crawler/robots/_protego.py against it, "
        "then widen the range")


def _both_paths(body: str, agent: str) -> dict[str, Rules]:
    """``Rules`` for ``body`` by each way it is built: parsed here (Protego
    answers a small group, the index a big one) and compiled as a worker
    process does (always the index)."""
    return {"parsed": Rules({"mode": "parse", "body": body}, agent),
            "compiled": Rules.from_compiled(compile_rules(body, agent), agent)}


_MANY = "".join(f"Allow: /open/{k}/\n" for k in range(32))  # a group of many rules


@pytest.mark.parametrize("many", [False, True], ids=["small", "indexed"])
@pytest.mark.parametrize("other", ["Invalid-Unknown-Line: x", "Unknown-Empty:", "Crawl-delay: 4",
                                   "Sitemap: https://s.test/sitemap.xml", "Request-rate: 1/5"])
def test_a_record_between_user_agent_lines_keeps_one_group(other: str, many: bool) -> None:
    """RFC 9309 2.2.4: other records "MUST NOT interfere" with the defined
    ones; a group is its User-agent lines and the rules after them (2.1)."""
    body = f"User-agent: FooBot\n{other}\nUser-agent: *\n{_MANY if many else ''}Disallow: /\n"
    for path, rules in _both_paths(body, "foobot").items():
        assert rules.matcher is not None  # parsed or compiled, the group's rules are indexed
        assert not rules.allowed("https://s.test/page"), (path, other)
        assert rules.allowed("https://s.test/open/3/x") is many, (path, other)
        assert rules.crawl_delay() == (4.0 if other.startswith("Crawl") else None), (path, other)
    kept = Protego.parse(rfc9309_groups(body))  # the record is moved, not dropped
    assert list(kept.sitemaps) == (["https://s.test/sitemap.xml"] if other.startswith("Sitemap") else [])
    assert (kept.request_rate("foobot") is not None) is other.startswith("Request")


@pytest.mark.parametrize("many", [False, True], ids=["small", "indexed"])
@pytest.mark.parametrize(("value", "agent"), [
    ("Googlebot/2.1 (+http://www.google.com/bot.html)", "googlebot"),
    ("Googlebot/2.1 (+http://www.google.com/bot.html)", "Googlebot"),
    ("FOO BAR", "foo"),
    ("foo\tbar", "FOO"),
    ("crawler/0.1", "crawler"),
])
def test_a_user_agent_value_matches_by_its_product_token(value: str, agent: str, many: bool) -> None:
    """RFC 9309 2.2.1: the group is matched on the crawler's product token,
    case-insensitively; what follows it on the line (a version, a comment)
    is not part of the name, as Google's robotstxt reads it."""
    body = (f"User-agent: *\nDisallow: /private/\n\nUser-agent: {value}\n{_MANY if many else ''}"
            "Disallow: /\nCrawl-delay: 2\n")
    for path, rules in _both_paths(body, agent).items():
        assert rules.matcher is not None  # parsed or compiled, the group's rules are indexed
        assert not rules.allowed("https://s.test/page"), (path, value, agent)
        assert rules.allowed("https://s.test/open/3/x") is many, (path, value, agent)
        assert rules.crawl_delay() == 2.0, (path, value, agent)


@pytest.mark.parametrize(("value", "agent", "applies"), [
    ("FOO BAR", "FOO BAR", True),  # the whole value still names the agent
    ("Googlebot/2.1", "Mozilla/5.0 (compatible; Googlebot/2.1)", True),
    ("FOO BAR", "bar", False),  # only the first word is the product token
    ("Googlebot-News/1.0", "googlebot", False),  # another product
    ("* ignored", "anybot", True),  # "*" followed by more: still the wildcard group
])
def test_the_whole_value_and_only_the_product_token_name_the_agent(value: str, agent: str, applies: bool) -> None:
    body = f"User-agent: {value}\nDisallow: /\n"
    for path, rules in _both_paths(body, agent).items():
        assert rules.allowed("https://s.test/page") is not applies, (path, value, agent)


_UA_VALUES = st.sampled_from(["crawler", "CRAWLER", "crawler/2.0 (+https://c.test)", "Crawler 2", "other",
                              "other/1.0", "*", "crawler-news"])
_OTHER = st.sampled_from(["Crawl-delay: 3", "Unknown: x", "Nofield:", "Sitemap: https://s.test/s.xml",
                          "Host: s.test", "# a comment", ""])
_GROUP = st.tuples(st.lists(st.tuples(_UA_VALUES, st.lists(_OTHER, max_size=2)), min_size=1, max_size=3),
                   st.lists(_RULE, min_size=1, max_size=40))  # a group without rules joins the next (RFC 9309 2.1)


def _token(value: str) -> str:
    return value.replace("/", " ").split()[0]


@settings(max_examples=150, deadline=None)
@given(groups=st.lists(_GROUP, min_size=1, max_size=4), paths=st.lists(_PATH, min_size=1, max_size=10))
def test_rfc9309_groups_where_protego_differs(groups: list[tuple[list[tuple[str, list[str]]], list[tuple[str, str]]]],
                                              paths: list[str]) -> None:
    """Any file answers as Protego answers the same groups written plainly
    (User-agent lines first, by product token, then the other records, then
    the rules); Protego reading the file as written agrees unless it has one
    of the two cases where RFC 9309 and Protego differ: a record between two
    User-agent lines, a User-agent value with more than a product token."""
    written: list[str] = []
    plain: list[str] = []
    differs = False
    for agents, rules in groups:
        others: list[str] = []
        for i, (value, after) in enumerate(agents):
            written += [f"User-agent: {value}", *after]
            plain.append(f"User-agent: {_token(value)}")
            others += after
            differs |= _token(value) != value or (
                i < len(agents) - 1 and any(o and not o.startswith(("#", "Sitemap", "Host")) for o in after))
        written += [f"{field}: {pattern}" for field, pattern in rules]
        plain += [*others, *(f"{field}: {pattern}" for field, pattern in rules)]
    body, reference = "\n".join(written), Protego.parse("\n".join(plain))
    as_written = Protego.parse(body)
    built = _both_paths(body, "crawler")
    assert built["parsed"].crawl_delay() == built["compiled"].crawl_delay() == reference.crawl_delay("crawler")
    for path in [*paths, "/robots.txt"]:
        url = f"https://site.test{path}"
        expected = reference.can_fetch(url, "crawler")
        assert built["parsed"].allowed(url) == expected, (path, body)
        assert built["compiled"].allowed(url) == expected, (path, body)
        if not differs:
            assert as_written.can_fetch(url, "crawler") == expected, (path, body)


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


def test_small_files_are_indexed_too() -> None:
    rules = Rules({"mode": "parse", "body": "User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n"}, "crawler")
    assert rules.matcher is not None and rules.crawl_delay() == 2.0
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


def test_remembered_verdicts_are_bounded_over_every_host_and_never_outlive_their_rules(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdicts a process remembers are capped for all hosts together
    (per host, they grew with every host met: the soak's memory slope), and
    a host's new robots.txt is never answered with its old one's verdicts."""
    from crawler.robots import _rules

    monkeypatch.setattr(_rules, "_VERDICTS", 1000)
    monkeypatch.setattr(_rules, "_verdicts", {})
    hosts = [Rules({"mode": "parse", "body": "User-agent: *\nDisallow: /private/\n"}, "crawler") for _ in range(50)]
    for i, rules in enumerate(hosts):
        for page in range(100):
            assert rules.allowed(f"https://d{i}.test/p/{page}.html")
        assert not rules.allowed(f"https://d{i}.test/private/x")
    assert 0 < len(_rules._verdicts) <= 1000  # 5,050 URLs judged, a thousand at most remembered
    old = Rules({"mode": "parse", "body": "User-agent: *\nDisallow: /p/\n"}, "crawler")
    new = Rules({"mode": "parse", "body": "User-agent: *\nAllow: /\n"}, "crawler")
    assert not old.allowed("https://e.test/p/1.html")
    assert new.allowed("https://e.test/p/1.html")  # its own verdict, not the remembered one
    assert not old.allowed("https://e.test/p/1.html")


def test_a_parse_leaves_nothing_for_the_garbage_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """Protego's rule sets point back at their parser: each parse left a
    cycle that only a full collection frees, and a crawl with the collector
    tuned runs those rarely (none in the soak's first 22 minutes, while some
    450 cycles of Protego objects came every two). Cut once parsed, nothing
    of a parse outlives it; the Rules keeps only its group's index, and its
    verdicts are Protego's."""
    import gc

    from crawler.robots import _rules

    monkeypatch.setattr(_rules, "_verdicts", {})
    body = "User-agent: *\nDisallow: /private/\nAllow: /private/ok$\n\nUser-agent: other\nDisallow: /\n"
    urls = [f"https://e.test{p}" for p in ("/a", "/private/x", "/private/ok", "/private/ok/2", "/robots.txt")]

    def protegos() -> int:
        return sum(type(o) is Protego for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        before = protegos()
        kept = [Rules({"mode": "parse", "body": body}, "crawler") for _ in range(20)]
        assert protegos() == before  # all 20 parses freed by reference counting alone
    finally:
        gc.enable()
    expected = [Protego.parse(body).can_fetch(u, "crawler") for u in urls]
    assert expected == [True, False, True, False, True]
    assert all([r.allowed(u) for u in urls] == expected for r in kept)


def test_a_remembered_verdict_does_not_keep_its_rules_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """A verdict remembers its rules by serial number, not by reference: the
    rules of a host the process let go (robots.txt kept per host are capped)
    are freed with the host, not held by up to 65,536 remembered URLs, and a
    new Rules at the old one's address is never answered with the old one's
    verdict. The remembered verdicts are strings and ints, which the garbage
    collector does not track: a full collection does not visit them."""
    import gc
    import weakref

    from crawler.robots import _rules

    monkeypatch.setattr(_rules, "_verdicts", {})
    rules = Rules({"mode": "parse", "body": "User-agent: *\nDisallow: /p/\n"}, "crawler")
    assert not rules.allowed("https://e.test/p/1.html")
    gone = weakref.ref(rules)
    del rules
    gc.collect()
    assert gone() is None and len(_rules._verdicts) == 1
    assert not gc.is_tracked(_rules._verdicts)
    for _ in range(20):  # whatever address a new one gets, the old verdict is not its
        again = Rules({"mode": "parse", "body": "User-agent: *\nAllow: /\n"}, "crawler")
        assert again.allowed("https://e.test/p/1.html")
        del again


def test_the_weight_of_rules_follows_their_memory() -> None:
    """``Rules.weight`` (what a process's kept robots.txt are capped by, in
    bytes) from 2/3 to twice what tracemalloc sees an index hold: a cap
    that errs on the safe side."""
    import tracemalloc

    def body(count: int, wild: bool) -> str:
        return "User-agent: *\n" + "".join(f"Disallow: /s{i}/part{i * 7}/{'*x.php$' if wild else 'page'}\n"
                                           for i in range(count))

    for count, wild in ((0, False), (50, False), (2000, False), (50, True), (2000, True)):
        text = body(count, wild)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            kept = [Rules({"mode": "parse", "body": text}, "crawler") for _ in range(10)]
            held = (tracemalloc.get_traced_memory()[0] - before) / 10
        finally:
            tracemalloc.stop()
        assert held / 1.5 <= kept[0].weight <= held * 2, (count, wild, held, kept[0].weight)


def test_kept_rules_cost_a_full_collection_two_objects() -> None:
    """A process keeps up to 50,000 hosts' rules: once collected, only the
    Rules and its Matcher are left for the garbage collector to walk (the
    index's lists were tracked for good, each a walk of its items)."""
    import gc

    body = "User-agent: *\n" + "".join(f"Disallow: /s{i}/*x.php$\nDisallow: /p{i}/\nAllow: /p{i}/ok$\n" for i in range(30))
    kept = [Rules({"mode": "parse", "body": body}, "crawler") for _ in range(20)]
    gc.collect()
    assert all(gc.is_tracked(r) and gc.is_tracked(r.matcher) for r in kept)
    tracked = [name for name, value in vars(kept[0].matcher).items() if gc.is_tracked(value)]
    assert tracked == []
    assert not kept[0].allowed("https://e.test/s3/ax.php") and kept[0].allowed("https://e.test/p3/ok")
