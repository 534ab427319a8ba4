"""The one place a body's format is decided: from its first bytes, never its name.

Pure functions of a prefix; ``None`` means "not decidable yet, give me more".
"""

from __future__ import annotations

from typing import Literal

Transport = Literal["gzip", "identity"]
Format = Literal["gzip", "xml", "text", "empty"]

GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_BLANK = b" \t\r\n"


def detect_transport(head: bytes, final: bool) -> Transport | None:
    """``'gzip'`` if ``head`` starts with the gzip magic, else ``'identity'``."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if not final and GZIP_MAGIC.startswith(head):
        return None
    return "identity"


def detect_format(head: bytes, final: bool) -> tuple[Format | None, int]:
    """Sniff decompressed content: ``(format, skip)``.

    ``skip`` leading bytes (UTF-8 BOM, ASCII whitespace) can be dropped, whether or
    not the format is known yet; with format ``None`` call again with more bytes
    (``final`` when there are none). After the skip: ``<`` is XML (a declaration,
    comment or the root element; the root decides the kind later), a UTF-16 BOM or
    a UTF-16 ``<`` is XML, the gzip magic is a nested gzip, nothing at all is
    ``'empty'``, anything else is text.
    """
    if head[:2] in _UTF16_BOMS or head[:2] in (b"<\x00", b"\x00<"):
        return "xml", 0
    i = 0
    if head.startswith(_UTF8_BOM):
        i = 3
    elif not final and head and (_UTF8_BOM.startswith(head) or head in (b"\xff", b"\xfe", b"\x00")):
        return None, 0
    n = len(head)
    i = n - len(head[i:].lstrip(_BLANK))
    if i == n:
        return ("empty" if final else None), i
    first = head[i]
    if first == 0x3C:  # '<'
        return "xml", i
    if first == GZIP_MAGIC[0]:
        if i + 1 == n and not final:
            return None, i
        if head[i + 1 : i + 2] == GZIP_MAGIC[1:]:
            return "gzip", i
    return "text", i
