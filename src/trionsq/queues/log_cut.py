"""Cutting a closed durable log back to a virtual offset (a replica's divergent tail).

After a leader change a replica may hold records the new leader never had
(docs/replication.md, "Divergence"): they must go before it copies the leader's.
The log is closed first; segments that start at or after the cut are removed, the
one holding it is truncated; opening the log again (``TopicLog.open``) then
recovers it as after any stop, so no in-memory structure of the log is patched.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from .segment_format import (
    HEADER_SIZE,
    _decode_header,
    _encode_header,
    _fsync_directory,
    segment_name,
)

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["cut_segment_files", "restart_segment_files"]


def cut_segment_files(directory: Path, name: str, offset: int) -> int:
    """Remove every record of log ``name`` at or after virtual ``offset``; returns the
    bytes removed. The log must be closed."""
    pattern = re.compile(re.escape(name) + r"\.(\d{6,})\.log")
    segments: list[tuple[int, str, int]] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match is None or not entry.is_file(follow_symlinks=False):
                continue
            with open(entry.path, "rb") as file:
                header = _decode_header(file.read(HEADER_SIZE))
            if header is not None:
                segments.append((int(match[1]), entry.path, header[0]))
    segments.sort()
    removed = 0
    for _, path, first_offset in segments:
        size = os.path.getsize(path)
        if first_offset >= offset:
            os.unlink(path)
            removed += max(size - HEADER_SIZE, 0)
            continue
        keep = HEADER_SIZE + offset - first_offset
        if size > keep:
            with open(path, "r+b") as file:
                file.truncate(keep)
                os.fsync(file.fileno())
            removed += size - keep
    _fsync_directory(directory)
    return removed


def restart_segment_files(directory: Path, name: str, first_id: int, first_offset: int) -> None:
    """Replace every segment of log ``name`` (closed) with one empty segment whose
    first record will be ``first_id`` at ``first_offset``: a replica that must start
    where its leader's retained records start."""
    pattern = re.compile(re.escape(name) + r"\.(\d{6,})\.log(\.bad(\.\d+)?)?")
    last = -1
    with os.scandir(directory) as entries:
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match is None:
                continue
            last = max(last, int(match[1]))
            if match[2] is None:
                os.unlink(entry.path)
    path = directory / segment_name(name, last + 1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, _encode_header(first_offset, first_id))
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_directory(directory)
