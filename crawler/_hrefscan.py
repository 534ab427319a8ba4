"""Bounded link extraction for pages a tree builder would choke on.

Lexbor builds the tree of a page as the HTML standard says, and some of its
steps walk the stack of open elements: a ``<div>``, ``<dl>``, ``<ul>``,
``<section>``... start tag looks for a ``<p>`` to close, a ``<b>`` end tag runs
the adoption agency. A page of 250 KB of unclosed ``<div>`` (or ``<dl><dt>``,
``<ul><li>``, ``<center>``, ``<b><div>``...) keeps tens of thousands of
elements open, and its parse costs seconds: quadratic in the nesting
(``bench/bench_extract.py`` measures each construct).

:func:`risky` bounds that cost before parsing, at C speed:

- a page of ``n`` tags costs at most about ``n * depth`` steps of such a
  walk, and its depth is at most ``n``: pages with up to ``SAFE_TAGS``
  tags (``body.count(b"<")``) are parsed whatever they hold, at most tens
  of milliseconds;
- above that, the nesting is estimated by start tags minus end tags
  (``n - 2 * body.count(b"</")``); a page where ``n`` times that estimate
  exceeds the budget goes to :func:`scan`.

:func:`scan` is a tokenizer of the standard's tag syntax that only builds
what link extraction reads (``<a>``, ``<base>`` and ``<meta>`` with their
attributes), skipping comments, doctypes and the raw text of ``<script>``,
``<style>``, ``<textarea>``, ``<title>``... as the standard does; it keeps no
stack of open elements, so its cost is linear in the page. It finds the
elements Lexbor's selector finds, in source order (the tree may move an
``<a>`` out of a ``<table>``): ``tests/test_links_hostile.py`` checks it on
generated pages. It differs where the tree's rules need that stack: an
``<svg>`` or ``<math>`` left open (inside one ``<script>`` and ``<style>``
hold markup, and the scan cannot see an end tag of an HTML element around it
end it, unless ``</a>``, ``</p>`` or a breakout start tag), nested
``<template>`` (skipped to the first ``</template>``), the escaped states of
``<script>``, ``<frameset>`` documents.

The estimate can be fooled by end tags that close nothing (``</x>``): it
catches pages that are deep by accident (broken generators, truncated
markup), not ones built to defeat it.
"""

from __future__ import annotations

import re
from html import unescape
from html.entities import html5

#: pages with at most this many ``<`` are parsed by Lexbor whatever they hold:
#: 5,000 tags all nested cost 25-40 ms (the slowest construct, ``<section>``
#: or ``<center>``, about 3.3 ns per step of n*n/2 steps)
SAFE_TAGS = 5_000
#: above SAFE_TAGS: tags times estimated nesting beyond which the page is scanned
#: (15 M steps, about 50 ms at the slowest construct)
BUDGET = 15_000_000


def risky(body: bytes) -> bool:
    """Whether parsing ``body`` with a tree builder may cost more than
    about 50 ms (the estimate in the module's docstring)."""
    tags = body.count(b"<")
    if tags <= SAFE_TAGS:
        return False
    nesting = tags - 2 * body.count(b"</")
    return tags * nesting > BUDGET


# an attribute: name, and a value quoted or not; atomic, so that a tag cut
# at the end of the page fails in linear time
_ATTR = r"""(?>[\t\n\f\r /]*+([^\t\n\f\r />][^\t\n\f\r />=]*+)(?:[\t\n\f\r ]*+=[\t\n\f\r ]*+("[^"]*+"|'[^']*+'|[^\t\n\f\r >]*+))?)"""
_ATTRS = (r"(?>[\t\n\f\r /]*+[^\t\n\f\r />][^\t\n\f\r />=]*+"
          r"(?:[\t\n\f\r ]*+=[\t\n\f\r ]*+(?:\"[^\"]*+\"|'[^']*+'|[^\t\n\f\r >]*+))?)*+")
#: a tag ends at ">", or at the end of the page (then it is dropped)
_CLOSE = r"[\t\n\f\r /]*+(?:>|\Z)"
_NAME_END = r"(?=[\t\n\f\r />])"
#: elements whose content is text up to their end tag (RAWTEXT/RCDATA), and
#: <template>, whose content is not in the document's tree
_RAW = "script|style|textarea|title|xmp|iframe|noembed|noframes|template"
_WANTED = "a|base|meta|svg|math"
#: start tags that end SVG or MathML content (the standard's "breakout" list)
_BREAKOUT = ("b|big|blockquote|body|br|center|code|dd|div|dl|dt|em|embed|h[1-6]|head|hr|i|img|li|listing|menu"
             "|meta|nobr|ol|p|pre|ruby|s|small|span|strong|strike|sub|sup|table|tt|u|ul|var")
#: the rest of a tag without a quote but in quoted values (nor "<" nor "="
#: elsewhere): the common case, matched faster than by _ATTRS, never otherwise
_FAST_TAG = r"(?:[^<>\"'=]++|=[\t\n\f\r ]*+(?:\"[^\"]*+\"|'[^']*+'))*+>"
#: the start of a tag name that none of _WANTED, _RAW or plaintext can be
_OTHER = (r"<(?:(?![abimnpstx])[a-z]|a[a-z0-9]|b(?!ase)|i(?!frame)|m(?!eta|ath)|n(?!o(?:embed|frames))"
          r"|p(?!laintext)|s(?!cript|tyle|vg)|t(?!extarea|itle|emplate)|x(?!mp))")
#: what the scan steps over in C: text, comments, doctypes and processing
#: instructions, end tags, start tags of other elements, a "<" that opens nothing
_SKIP = (
    r"(?:[^<]++"
    r"|" + _OTHER + _FAST_TAG +
    r"|</[A-Za-z]" + _FAST_TAG +
    r"|<!--(?>-?>|.*?--!?>|.*+)"
    r"|<[!?][^>]*+>?"
    r"|</[A-Za-z][^\t\n\f\r />]*+" + _ATTRS + _CLOSE +
    r"|</(?![A-Za-z])[^>]*+>?"
    r"|<(?!(?:" + _WANTED + "|" + _RAW + r"|plaintext)" + _NAME_END + r")[A-Za-z][^\t\n\f\r />]*+"
    + _ATTRS + _CLOSE +
    r"|<(?![A-Za-z!?/])"
    r")*+"
)
_TOKEN = re.compile(
    _SKIP + r"(?:<(?P<tag>" + _WANTED + "|" + _RAW + r"|plaintext)" + _NAME_END
    + "(?P<attrs>" + _ATTRS + r")(?P<slash>[\t\n\f\r /]*+)(?P<close>>|\Z))?",
    re.DOTALL | re.IGNORECASE | re.ASCII,
)
#: the same inside <svg> and <math>: no raw text there, CDATA sections, and
#: the tags that matter are <a>, <base>, <svg>, <math> and the end tags of the
#: first three, and what ends foreign content: the standard's breakout start
#: tags, </p> and </br>, and </a> when an HTML <a> is open (an end tag of
#: another HTML element open around the <svg> ends it too: the scan keeps no
#: stack of those and reads on as foreign)
_FOREIGN_TOKEN = re.compile(
    r"(?:[^<]++"
    r"|<!--(?>-?>|.*?--!?>|.*+)"
    r"|<!\[CDATA\[(?>.*?\]\]>|.*+)"
    r"|<[!?][^>]*+>?"
    r"|</(?!(?:a|svg|math|p|br)" + _NAME_END + r")[A-Za-z][^\t\n\f\r />]*+" + _ATTRS + _CLOSE +
    r"|</(?![A-Za-z])[^>]*+>?"
    r"|<(?!(?:a|base|svg|math|" + _BREAKOUT + r")" + _NAME_END + r")[A-Za-z][^\t\n\f\r />]*+" + _ATTRS + _CLOSE +
    r"|<(?![A-Za-z!?/])"
    r")*+"
    r"(?:<(?P<end>/)?(?P<tag>a|base|svg|math|" + _BREAKOUT + r")" + _NAME_END
    + "(?P<attrs>" + _ATTRS + r")(?P<slash>[\t\n\f\r /]*+)(?P<close>>|\Z))?",
    re.DOTALL | re.IGNORECASE | re.ASCII,
)
_ATTR_RE = re.compile(_ATTR, re.DOTALL)
_END_A = re.compile(r"</a" + _NAME_END, re.IGNORECASE | re.ASCII)
_END = {name: re.compile(r"</" + name + _NAME_END, re.IGNORECASE | re.ASCII) for name in _RAW.split("|")}
_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[A-Za-z][A-Za-z0-9]*;?)")


def _charref(m: re.Match[str]) -> str:
    name = m.group(1)
    if name[0] == "#":
        return unescape(m.group(0))
    # the longest named reference; in an attribute one without ";" followed
    # by a letter, digit or "=" stays as written
    for k in range(min(len(name), 32), 1, -1):
        key = name[:k]
        if key in html5:
            if not key.endswith(";"):
                after = name[k] if k < len(name) else m.string[m.end():m.end() + 1]
                if after.isalnum() or after == "=":
                    return m.group(0)
            return html5[key] + name[k:]
    return m.group(0)


def _attributes(text: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    pairs = _ATTR_RE.findall(text)
    plain = text.isascii() and "&" not in text and "\r" not in text and "\x00" not in text
    for name, value in pairs:
        name = name.lower() if plain or name.isascii() else name
        if name in attrs:
            continue  # the first one counts
        if value[:1] in ("'", '"'):
            value = value[1:-1]
        if not plain:
            if "&" in value:
                value = _CHARREF.sub(_charref, value)
            if "\r" in value:
                value = value.replace("\r\n", "\n").replace("\r", "\n")
            if "\x00" in value:
                value = value.replace("\x00", "\ufffd")
        attrs[name] = value
    return attrs


def scan(body: bytes) -> list[tuple[str, dict[str, str]]]:
    """The ``<a>``, ``<base>`` and ``<meta>`` elements of ``body`` in
    document order, as (lower-case tag, attributes); linear time."""
    text = body.decode("utf-8", "replace")
    found: list[tuple[str, dict[str, str]]] = []
    pos, end = 0, len(text)
    foreign: list[str] = []  # the <svg> and <math> elements open, and <a> in them
    anchor = False  # whether an HTML <a> is open, as far as the text up to `checked` says
    checked = 0
    while pos < end:
        m = (_FOREIGN_TOKEN if foreign else _TOKEN).match(text, pos)
        tag = m.group("tag")
        if tag is None:  # the end of the page
            pos = m.end() + 1
            continue
        if not m.group("close"):  # a tag cut by the end of the page: dropped
            break
        pos = m.end()
        tag = tag.lower()
        if foreign:
            if m.group("end"):
                if tag in foreign:  # closes the innermost of that name, and what it holds
                    del foreign[len(foreign) - 1 - foreign[::-1].index(tag):]
                    if not foreign:
                        checked = pos
                    continue
                if tag not in ("p", "br") and not (tag == "a" and anchor):
                    continue
                anchor = anchor and tag != "a"
            elif tag in ("svg", "math", "a"):
                if not m.group("slash").endswith("/"):
                    foreign.append(tag)
                if tag != "a":
                    continue
            if m.group("end") or tag not in ("a", "base"):
                # a breakout start tag, </p>, </br>, or </a> with an <a> open
                # around the <svg>: foreign content ends and the tag is read
                # again as HTML
                foreign.clear()
                pos = checked = (m.start("end") if m.group("end") else m.start("tag")) - 1
                continue
        elif tag in ("svg", "math"):
            if not m.group("slash").endswith("/"):
                foreign.append(tag)
                # whether an <a> is still open: its end tags were skipped in C
                if anchor and _END_A.search(text, checked, pos) is not None:
                    anchor = False
                checked = pos
            continue
        elif tag in _END:
            close = _END[tag].search(text, pos)
            if close is None:
                break
            pos = close.start()
            continue
        elif tag == "plaintext":
            break
        elif tag == "a":
            anchor, checked = True, pos
        found.append((tag, _attributes(m.group("attrs"))))
    return found


#: what is not text for the signature of a scanned page: comments, the content
#: of the elements a tree's signature strips (and <title>, outside <body>),
#: doctypes and processing instructions, tags with their quoted values; each
#: alternative atomic and ending at the end of the page, so linear
_NOT_TEXT = re.compile(
    r"<!--(?>.*?-->|.*+)"
    r"|<(script|style|noscript|template|title)" + _NAME_END + r"[^>]*+>?(?>.*?</\1" + _NAME_END + r"[^>]*+>?|.*+)"
    r"|<[!?][^>]*+>?"
    r"|</?[A-Za-z](?:[^>\"']++|\"[^\"]*+\"|'[^']*+')*+>?",
    re.DOTALL | re.IGNORECASE | re.ASCII,
)


def visible_text(body: bytes) -> str:
    """The text of ``body`` between tags, character references decoded,
    without comments and the content of ``<script>``, ``<style>``,
    ``<noscript>``, ``<template>`` and ``<title>``: a page's text signature
    where :func:`risky` says no tree; linear time, a few copies of the page."""
    return unescape(_NOT_TEXT.sub(" ", body.decode("utf-8", "replace")))
