"""A robots.txt rewritten so that Protego groups it as RFC 9309 does.

Two readings of Protego differ from the RFC's, and from Google's robotstxt:

- Any record but ``User-agent`` (``Crawl-delay``, an unknown or misspelt
  field) between two ``User-agent`` lines ends a group for Protego, so the
  agents named before it get no rules. RFC 9309 2.1: a group is its
  ``User-agent`` lines and the rules after them; 2.2.4: other records "MUST
  NOT interfere" with those. Such a record is moved after the group's last
  ``User-agent`` line, where it keeps applying to the whole group (a
  ``Crawl-delay`` to each of its agents).
- A ``User-agent`` value with more than the product token
  (``Googlebot/2.1 (+http://www.google.com/bot.html)``, ``FOO BAR``) names no
  one for Protego, which looks for the whole value in the agent. RFC 9309
  2.2.1 matches the product token, case-insensitively: the value up to its
  first whitespace or ``/`` is added to the group as a ``User-agent`` line of
  its own; the whole value stays, so an agent named by it still matches.

Everything else is left to Protego; a file with neither case comes back as
it came (the same string). One pass over the lines, as Protego's own parse.
"""

from __future__ import annotations

import re

from crawler.robots import _protego

_TOKEN_END = re.compile(r"[\s/]")


def product_token(value: str) -> str:
    """``Googlebot/2.1 (+http://...)`` -> ``Googlebot``: what names the agent."""
    end = _TOKEN_END.search(value)
    return value if end is None else value[:end.start()]


def rfc9309_groups(body: str) -> str:
    """``body`` with its groups written as Protego reads them as RFC 9309 does."""
    lines: list[str] = []
    held: list[str] = []  # other records met since the group's first User-agent line
    agents = False  # between a group's first User-agent line and its first rule
    changed = False
    for line in body.splitlines():
        found = _protego.record(line)
        if found is None:  # blank, comment, or skipped by Protego
            lines.append(line)
            continue
        field, value = found
        if field in _protego.USER_AGENT:
            agents = True
            changed = changed or bool(held)
            lines.append(line)
            token = product_token(value)
            if token and len(token) < len(value):
                lines.append(f"User-agent: {token}")
                changed = True
        elif field in _protego.RULES:  # the first rule ends the group's User-agent lines
            agents = False
            lines += held
            held.clear()
            lines.append(line)
        elif agents:
            held.append(line)
        else:
            lines.append(line)
    lines += held
    return "\n".join(lines) if changed else body
