"""What a robots.txt says, for one user agent."""

from __future__ import annotations

import itertools
import json
from typing import Any
from urllib.parse import urlparse

from protego import Protego

from crawler.robots import _protego
from crawler.robots._groups import rfc9309_groups
from crawler.robots._matcher import Matcher, index

#: URLs whose verdict the process remembers, every host's together (a URL is
#: checked when found and again when fetched). One bound for all hosts, not one
#: per host: a bound per host grows with the hosts a crawl meets, without end
#: (docs/benchmarks.md, the soak's findings).
_VERDICTS = 65_536
#: url -> the serial of the rules that judged it, times two, plus the verdict.
#: Strings and ints only: the garbage collector does not track the dict, so a
#: full collection does not visit its entries (a tuple each would be one more
#: object per verdict for every full collection to walk). A verdict keeps no rules alive, and a host's newer rules, with a
#: serial of their own, never read an older one's verdicts.
_verdicts: dict[str, int] = {}
_serials = itertools.count(1)


class Rules:
    """``Rules(record, agent).allowed(url)``.

    ``record["mode"]`` is ``"parse"`` (``record["body"]`` is the file),
    ``"allow"`` (no restrictions: RFC 9309 "unavailable") or ``"disallow"``
    (everything refused). The file is grouped as RFC 9309 groups it where
    Protego differs (``_groups.py``), parsed by Protego, and only the rules
    of the group for ``agent`` are kept, as an index (``_matcher.py``):
    Protego's parse of every group held 4-5 times the memory (69 kB against
    15 kB for a 1.4 kB file of 60 wildcard rules), for up to 50,000 hosts
    a process remembers. :func:`compile_rules` builds that index as JSON,
    in a worker process for a big file, and :meth:`from_compiled` reads it
    back.
    """

    def __init__(self, record: dict[str, Any], agent: str, compiled: dict[str, Any] | None = None) -> None:
        self.mode = record["mode"]
        self.agent = agent
        self.matcher: Matcher | None = None
        self.delay: float | None = None
        self.serial = next(_serials)
        if compiled is not None:  # parsed and indexed elsewhere
            self.delay = compiled["delay"]
            self.matcher = Matcher(compiled["index"])
        elif self.mode == "parse":
            self.delay, rules = _parse(record.get("body", ""), agent)
            self.matcher = Matcher(index(rules))

    @classmethod
    def from_compiled(cls, text: str, agent: str) -> Rules:
        return cls({"mode": "parse"}, agent, json.loads(text))

    def allowed(self, url: str) -> bool:
        if self.matcher is None:
            return self.mode == "allow"
        known = _verdicts.get(url)
        if known is not None and known >> 1 == self.serial:  # judged by these rules (not older ones of the host)
            return bool(known & 1)
        verdict = self.matcher.allowed(_protego.quote_path(url)) or _is_robots_txt(url)
        if len(_verdicts) >= _VERDICTS:
            _verdicts.clear()
        _verdicts[url] = self.serial << 1 | verdict
        return verdict

    @property
    def weight(self) -> int:
        """About the bytes these rules hold (their index)."""
        return 200 if self.matcher is None else self.matcher.weight

    def crawl_delay(self) -> float | None:
        return self.delay


def _is_robots_txt(url: str) -> bool:
    """Protego always allows /robots.txt itself."""
    return "/robots.txt" in url and urlparse(url).path == "/robots.txt"


def _parse(body: str, agent: str) -> tuple[float | None, list[tuple[bool, str]]]:
    """From Protego's parse of ``body`` (grouped as RFC 9309 groups it:
    ``_groups.py``), its Crawl-delay for ``agent`` and the rules of the group
    that applies to ``agent``, in precedence order; the parse itself is let go."""
    parser = _protego.detach(Protego.parse(rfc9309_groups(body)))
    ruleset = _protego.rule_set(parser, agent)
    delay = parser.crawl_delay(agent)
    rules = _protego.rules_of(ruleset) if ruleset is not None else []
    return float(delay) if delay is not None else None, rules


def compile_rules(body: str, agent: str) -> str:
    """The rules of ``body`` for ``agent`` as JSON (index and Crawl-delay),
    for :meth:`Rules.from_compiled`; run in a worker process for big files."""
    delay, rules = _parse(body, agent)
    return json.dumps({"delay": delay, "index": index(rules)})
