"""Text sitemaps: one URL a line, UTF-8.

Lines are cut at ``\\n`` (a ``\\r`` before it is whitespace and stripped). A line
longer than the URL cap is not kept while it grows: the reader drops its bytes
until the next newline and reports it once as invalid. Blank lines are ignored;
every other line goes to ``emit`` (which checks it is an absolute http(s) URL);
a line that is not UTF-8 is reported invalid.
"""

from __future__ import annotations

from collections.abc import Callable


class TextReader:
    def __init__(self, emit: Callable[[str], None], invalid: Callable[[], None], max_line: int) -> None:
        self._emit = emit
        self._invalid = invalid
        self._max_line = max_line
        self._partial = bytearray()
        self._overlong = False  # dropping the rest of a line already too long

    def feed(self, data: bytes) -> None:
        lines = data.split(b"\n")
        last = lines.pop()  # the part after the last newline: its line goes on
        for line in lines:
            if self._overlong:  # this newline ends the line being dropped
                self._overlong = False
                continue
            if self._partial:
                self._partial += line
                line = bytes(self._partial)
                self._partial.clear()
            self._line(line)
        self._grow(last)

    def close(self, complete: bool) -> None:
        """End of content; ``complete`` is False when the body was cut short, and then
        the last line, which may be a cut URL, is dropped."""
        if complete and not self._overlong:
            self._line(bytes(self._partial))
        self._partial.clear()

    def _grow(self, piece: bytes) -> None:
        if self._overlong:
            return
        self._partial += piece
        if len(self._partial) > 4 * self._max_line + 16:  # UTF-8: up to 4 bytes a character
            self._partial.clear()
            self._overlong = True
            self._invalid()

    def _line(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        if len(line) > 4 * self._max_line + 16:
            self._invalid()
            return
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            self._invalid()
            return
        self._emit(text)
