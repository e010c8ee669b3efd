"""Log lines in nsqd's format: ``[nsqd] 2026/11/21 19:25:39.123456 INFO: message``."""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["NsqdFormatter", "configure_logging"]

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


def configure_logging(level: str = "info", prefix: str = "[nsqd] ") -> None:
    """Send trionsq's logs to stderr in nsqd's format (only the CLI calls this)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NsqdFormatter(prefix))
    root = logging.getLogger("trionsq")
    root.handlers[:] = [handler]
    root.setLevel({"warn": "WARNING", "fatal": "CRITICAL"}.get(level.lower(), level.upper()))
    root.propagate = False
