"""Log lines in nsqd's format: ``[nsqd] 2026/11/21 19:25:39.123456 INFO: message``."""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["NsqdFormatter", "OncePerInterval", "configure_logging"]

TCP_ACCEPT_LOGGER = "trionsq.accept"
"""Where the accept loop of every listener (listen.py) complains when accept fails
for lack of descriptors or memory: ten times a second per listener, until it works
again."""
ACCEPT_COMPLAINT_INTERVAL = 60.0

_LEVELS = {
    "DEBUG": "DEBUG",
    "INFO": "INFO",
    "WARNING": "WARNING",
    "ERROR": "ERROR",
    "CRITICAL": "FATAL",
}


class NsqdFormatter(logging.Formatter):
    """nsqd's line: prefix, local time to the microsecond, level, message."""

    def __init__(self, prefix: str = "[nsqd] ") -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        level = _LEVELS.get(record.levelname, record.levelname)
        line = f"{self.prefix}{stamp}.{micros:06d} {level}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class OncePerInterval(logging.Filter):
    """Let one record through per ``interval`` seconds, without its traceback: a
    condition that repeats (accept failing on EMFILE) is said, not flooded."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._last: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        now = self._clock()
        if self._last is not None and now - self._last < self.interval:
            return False
        self._last = now
        record.exc_info = None
        record.exc_text = None
        return True


def configure_logging(level: str = "info", prefix: str = "[nsqd] ") -> None:
    """Send trionsq's logs to stderr in nsqd's format (only the CLI calls this)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NsqdFormatter(prefix))
    root = logging.getLogger("trionsq")
    root.handlers[:] = [handler]
    root.setLevel({"warn": "WARNING", "fatal": "CRITICAL"}.get(level.lower(), level.upper()))
    root.propagate = False
    logging.getLogger(TCP_ACCEPT_LOGGER).filters[:] = [OncePerInterval(ACCEPT_COMPLAINT_INTERVAL)]
