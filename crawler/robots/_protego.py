"""The parts of Protego's private surface the crawler reads, in one place.

Read from protego ``PROTEGO`` (0.7.0): ``_RuleSet._rules`` sorted by
precedence, each rule a ``(field, _URLPattern)`` whose ``_pattern`` is the
quoted text; ``Protego._get_matching_rule_set``; ``_utils._quote_path``;
and, to see a file's records as Protego sees them (``_groups.py``),
``_protego._extract_directive`` with the field names of ``User-agent``,
``Allow`` and ``Disallow`` (``_USER_AGENT_DIRECTIVE``, ``_ALLOW_DIRECTIVE``,
``_DISALLOW_DIRECTIVE``); ``Protego._user_agents`` and
``_RuleSet._parser_instance``, to cut the reference cycle between a parser
and its rule sets once it is parsed (:func:`detach`). :func:`check` says which of ``PRIVATE`` moved;
``tests/test_robots_rules.py`` runs it and checks the installed version, so
an upgrade that breaks these reads fails there with the names, not as wrong
verdicts.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from protego import Protego

PROTEGO = ">=0.7,<0.8"  # the releases the names below were read from
PRIVATE = (
    "protego._utils._quote_path",
    "protego._protego._extract_directive",
    "protego._protego._USER_AGENT_DIRECTIVE",
    "protego._protego._ALLOW_DIRECTIVE",
    "protego._protego._DISALLOW_DIRECTIVE",
    "Protego._get_matching_rule_set",
    "_RuleSet._rules",
    "_Rule.field",
    "_Rule.value._pattern",
    "Protego._user_agents",
    "_RuleSet._parser_instance",
)

try:
    from protego._utils import _quote_path as quote_path
except ImportError:  # pragma: no cover - reported by check()
    quote_path = None  # type: ignore[assignment]

try:
    from protego._protego import _ALLOW_DIRECTIVE, _DISALLOW_DIRECTIVE, _USER_AGENT_DIRECTIVE
    from protego._protego import _extract_directive as extract_directive
except ImportError:  # pragma: no cover - reported by check(); files are then grouped as Protego groups them
    extract_directive = None  # type: ignore[assignment]
    _ALLOW_DIRECTIVE = _DISALLOW_DIRECTIVE = _USER_AGENT_DIRECTIVE = set()

USER_AGENT: frozenset[str] = frozenset(_USER_AGENT_DIRECTIVE)  # the spellings of each field Protego accepts
RULES: frozenset[str] = frozenset(_ALLOW_DIRECTIVE | _DISALLOW_DIRECTIVE)


def record(line: str) -> tuple[str, str] | None:
    """``(field, value)`` of one line of a file as Protego reads it (field
    lowercased, any field, misspellings and ``User agent foo`` included);
    None for a blank or comment line, or one Protego skips."""
    text = line.split("#", 1)[0].strip()
    if not text or extract_directive is None:
        return None
    return extract_directive(text)


def rule_set(parser: Protego, agent: str) -> Any | None:
    """The rule set Protego applies to ``agent`` (None: no group applies)."""
    return parser._get_matching_rule_set(agent)


def detach(parser: Protego) -> Protego:
    """``parser`` with its rule sets' references back to it cut: they are
    read only while the file is parsed, and the cycle they make outlives
    the parser until a full collection of the garbage collector, which a
    tuned crawl runs rarely (crawler/extensions/gcpauses.py; none in the
    soak's first 22 minutes): until then every robots.txt replaced stays in
    memory. Returns ``parser``."""
    for ruleset in getattr(parser, "_user_agents", {}).values():
        if hasattr(ruleset, "_parser_instance"):
            ruleset._parser_instance = None
    return parser


def rules_of(ruleset: Any) -> list[tuple[bool, str]]:
    """``(allow, quoted pattern)`` in Protego's order of precedence: longest
    pattern first, allow before disallow on a tie."""
    return [(rule.field == "allow", rule.value._pattern) for rule in ruleset._rules]


def check() -> list[str]:
    """What of the private surface (``PRIVATE``) is missing or changed
    (empty: all there)."""
    problems = []
    if quote_path is None:
        problems.append("protego._utils._quote_path is gone")
    if extract_directive is None:
        problems.append("protego._protego._extract_directive or its _USER_AGENT_DIRECTIVE, _ALLOW_DIRECTIVE, "
                        "_DISALLOW_DIRECTIVE are gone")
    else:
        read = [record(line) for line in ("User-agent: Foo/1 # x", "user agent foo", "Dissallow: /a", "Allow:",
                                          "Unknown-Field: x", "# only a comment")]
        fields = [None if found is None else (found[0] in USER_AGENT, found[0] in RULES) for found in read]
        if read[0] != ("user-agent", "Foo/1") or fields != [(True, False), (True, False), (False, True),
                                                               (False, True), (False, False), None]:
            problems.append(f"protego._protego._extract_directive reads records otherwise: {read!r}")
    parser = Protego.parse("User-agent: *\nDisallow: /a*b\nAllow: /a\n")
    if not hasattr(parser, "_get_matching_rule_set"):
        problems.append("Protego._get_matching_rule_set is gone")
    else:
        try:
            rules = rules_of(rule_set(parser, "bot"))
        except AttributeError as exc:
            problems.append(f"rule sets changed shape (_RuleSet._rules, _Rule.field, _Rule.value._pattern): {exc}")
        else:
            if rules != [(False, "/a*b"), (True, "/a")]:
                problems.append(f"rules are no longer sorted by precedence: {rules!r}")
    sets = list(getattr(parser, "_user_agents", {}).values())
    if not sets or any(getattr(s, "_parser_instance", None) is not parser for s in sets):
        problems.append("Protego._user_agents or _RuleSet._parser_instance changed: a parser's cycle is not cut")
    if problems:
        problems.append(f"installed protego {version('protego')}, read from {PROTEGO}")
    return problems
