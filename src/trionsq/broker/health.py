"""Whether the broker can store: the state behind ``/ping`` and ``/stats`` health.

nsqd marks itself unhealthy when a write to its backend fails and healthy again at
the next write that succeeds (spec semantics §4). Here several kinds of writes can
fail independently (appends, fsyncs, channel states and metadata, cold reads), so
each is an *area*: the broker is healthy when no area is failing. A fault is logged
once when its episode starts and once when it ends, however many writes fail in
between, so a full disk cannot flood the log.
"""

from __future__ import annotations

import logging
import os
from typing import Final

__all__ = [
    "APPEND",
    "CREATE",
    "PERSIST",
    "READ",
    "SYNC",
    "StorageFault",
    "StorageHealth",
    "go_error_text",
]

log = logging.getLogger("trionsq.storage")

APPEND: Final = "appending messages"
SYNC: Final = "fsync"
PERSIST: Final = "saving channel states and metadata"
READ: Final = "reading a log segment"
CREATE: Final = "creating a topic"


class StorageFault(Exception):
    """A file operation the broker needed was refused (disk full, read-only file
    system, no descriptors left); what the client is told is :attr:`reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def go_error_text(error: OSError) -> str:
    """The error as a Go program words it: ``t-0.000001.log: no space left on device``.

    Only the file's base name is given: the client learns what failed, not where
    the data directory is.
    """
    text = error.strerror or str(error)
    text = text[:1].lower() + text[1:]
    if error.filename:
        return f"{os.path.basename(os.fsdecode(error.filename))}: {text}"
    return text


class StorageHealth:
    """The failing areas and their last error; empty means healthy."""

    def __init__(self) -> None:
        self._faults: dict[str, str] = {}
        self._failures: dict[str, int] = {}
        self.last_fault = ""
        """The most recent reason, kept after recovery (for /stats and tests)."""

    @property
    def healthy(self) -> bool:
        return not self._faults

    @property
    def text(self) -> str:
        """nsqd's health string: ``OK`` or ``NOK - <error>``."""
        if not self._faults:
            return "OK"
        return f"NOK - {self.last_fault}"

    def failed(self, area: str, error: OSError) -> StorageFault:
        """Record a refused operation; the fault to raise or answer with."""
        reason = go_error_text(error)
        if area not in self._faults:
            log.error("storage: %s failed: %s (logged once until it succeeds again)", area, reason)
            self._failures[area] = 0
        self._faults[area] = reason
        self._failures[area] += 1
        self.last_fault = reason
        return StorageFault(reason)

    def succeeded(self, area: str) -> None:
        """An operation of ``area`` worked: its episode, if any, is over."""
        if area in self._faults:
            del self._faults[area]
            count = self._failures.pop(area, 0)
            log.warning("storage: %s works again after %d failed attempts", area, count)
