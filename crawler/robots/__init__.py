"""robots.txt rules and page-level robots directives.

:class:`Rules` answers "may this URL be fetched?" for one user agent, with a
cost per URL that stays small whatever the file holds (``_matcher.py``),
reading the file's groups as RFC 9309 does where Protego differs
(``_groups.py``);
:func:`compile_rules` builds the same rules as JSON in a worker process;
:func:`header_nofollow` and :func:`meta_nofollow` read page-level directives
(``_directives.py``).
"""

from crawler.robots._directives import header_nofollow, meta_nofollow
from crawler.robots._rules import Rules, compile_rules


def protego_private() -> tuple[dict[str, str], list[str], list[str]]:
    """The private Protego surface the rule index reads (``_protego.py``):
    the version range it was read from, every name, and what the installed
    Protego lacks or reads otherwise (for ``crawler._compat``)."""
    from crawler.robots import _protego

    return {"protego": _protego.PROTEGO}, list(_protego.PRIVATE), _protego.check()


__all__ = ["Rules", "compile_rules", "header_nofollow", "meta_nofollow", "protego_private"]
