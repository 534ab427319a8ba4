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

__all__ = ["Rules", "compile_rules", "header_nofollow", "meta_nofollow"]
