"""The parts of Protego's private surface the matcher reads, in one place.

Checked against protego 0.7.0 (``_RuleSet._rules`` sorted by precedence,
each rule a ``(field, _URLPattern)`` whose ``_pattern`` is the quoted text;
``Protego._get_matching_rule_set``; ``_utils._quote_path``). :func:`check`
says what moved; ``tests/test_robots_rules.py`` runs it, so an upgrade that
breaks these reads fails there with the names, not as wrong verdicts.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from protego import Protego

try:
    from protego._utils import _quote_path as quote_path
except ImportError:  # pragma: no cover - reported by check()
    quote_path = None

KNOWN_GOOD = ("0.7",)


def rule_set(parser: Protego, agent: str) -> Any | None:
    """The rule set Protego applies to ``agent`` (None: no group applies)."""
    return parser._get_matching_rule_set(agent)


def rules_of(ruleset: Any) -> list[tuple[bool, str]]:
    """``(allow, quoted pattern)`` in Protego's order of precedence: longest
    pattern first, allow before disallow on a tie."""
    return [(rule.field == "allow", rule.value._pattern) for rule in ruleset._rules]


def check() -> list[str]:
    """What of the private surface is missing or changed (empty: all there)."""
    problems = []
    if quote_path is None:
        problems.append("protego._utils._quote_path is gone")
    parser = Protego.parse("User-agent: *\nDisallow: /a*b\nAllow: /a\n")
    if not hasattr(parser, "_get_matching_rule_set"):
        return [*problems, "Protego._get_matching_rule_set is gone"]
    ruleset = rule_set(parser, "bot")
    try:
        rules = rules_of(ruleset)
    except AttributeError as exc:
        return [*problems, f"rule sets changed shape: {exc}"]
    if rules != [(False, "/a*b"), (True, "/a")]:
        problems.append(f"rules are no longer sorted by precedence: {rules!r}")
    if problems:
        problems.append(f"installed protego {version('protego')}, checked with {', '.join(KNOWN_GOOD)}")
    return problems
