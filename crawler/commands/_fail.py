"""How the commands end on an error the user must fix: one line, no traceback.

Only the command layer exits; everything below raises
(:class:`~crawler.settings_registry.SettingsError`,
:class:`~crawler.connection.RedisUnavailable`). Exit statuses: 2 for a bad
setting (as argparse for a bad option), 1 for anything else (Redis
unreachable, a crawl that failed).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, NoReturn

from crawler.settings_registry import SettingsError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

BAD_SETTING = 2
FAILED = 1


def status(error: BaseException) -> int:
    return BAD_SETTING if isinstance(error, SettingsError) else FAILED


def say(settings: BaseSettings | None, line: str, *, logging_on: bool) -> None:
    """``line`` on stderr and, with ``LOG_FILE`` (as Scrapyd sets it), at the
    end of the log: through the logging Scrapy configured when ``logging_on``,
    else appended to the file directly."""
    print(f"crawler: error: {line}", file=sys.stderr, flush=True)
    path = settings.get("LOG_FILE") if settings is not None else None
    if not path:
        return
    if logging_on:
        logger.error("crawler: error: %s", line)
        return
    try:
        handler = logging.FileHandler(path, mode="a" if settings.getbool("LOG_FILE_APPEND", True) else "w",
                                      encoding=settings.get("LOG_ENCODING") or "utf-8")
    except OSError:
        return
    handler.setFormatter(logging.Formatter(settings.get("LOG_FORMAT"), settings.get("LOG_DATEFORMAT")))
    handler.handle(logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "crawler: error: %s", (line,), None))
    handler.close()


def fail(settings: BaseSettings | None, error: BaseException) -> NoReturn:
    """End the command with ``error`` in one line and its exit status."""
    say(settings, str(error), logging_on=False)
    raise SystemExit(status(error))
