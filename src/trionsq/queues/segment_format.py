"""The segment file itself: its name, its header, and what the log knows of one.

A segment is a 32-byte header followed by records back to back (see
:mod:`trionsq.queues.topic_log`). This module holds the header's encoding, the
per-segment state every part of the log shares (:class:`_Segment` and the
:class:`_Check` a verification builds), and the small file operations recovery,
reads and writes all use. It is the lowest module of the durable log: it imports
none of the others.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from typing import TYPE_CHECKING, Final

import attrs

if TYPE_CHECKING:
    from pathlib import Path

storage_log = logging.getLogger("trionsq.storage")

SEGMENT_MAGIC: Final = b"TNSQSEG1"
_HEADER_FIELDS: Final = struct.Struct(">8sQQI")
_HEADER_CRC: Final = struct.Struct(">I")
HEADER_SIZE: Final = _HEADER_FIELDS.size + _HEADER_CRC.size  # 32
SEGMENT_VERSION: Final = 0

INDEX_INTERVAL: Final = 64 * 1024
"""Bytes between two entries of a segment's sparse index: a seek reads at most this
much before the record it looks for."""
_SCAN_CHUNK: Final = 1 << 20
"""Read size of recovery and of seeks."""

_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_TIMESTAMP_FLOOR: Final = -(1 << 63)
_NO_LIMIT: Final = 1 << 62

_crc32: Final = zlib.crc32


def segment_name(name: str, seq: int) -> str:
    """The file name of segment ``seq`` of log ``name``."""
    return f"{name}.{seq:06d}.log"


def _encode_header(first_offset: int, first_id: int) -> bytes:
    fields = _HEADER_FIELDS.pack(SEGMENT_MAGIC, first_offset, first_id, SEGMENT_VERSION)
    return fields + _HEADER_CRC.pack(_crc32(fields))


def _decode_header(data: bytes) -> tuple[int, int] | None:
    """(first offset, first id), or None for a header that is short or damaged."""
    if len(data) < HEADER_SIZE:
        return None
    magic, first_offset, first_id, version = _HEADER_FIELDS.unpack_from(data)
    (crc,) = _HEADER_CRC.unpack_from(data, _HEADER_FIELDS.size)
    if (
        magic != SEGMENT_MAGIC
        or version != SEGMENT_VERSION
        or crc != _crc32(data[: _HEADER_FIELDS.size])
        or first_id < 1
    ):
        return None
    return first_offset, first_id


def _copy_bytes(fd: int, out: int, start: int, stop: int) -> None:
    """Bytes [start, stop) of ``fd`` to ``out``, in large reads."""
    position = start
    while position < stop:
        data = os.pread(fd, min(_SCAN_CHUNK, stop - position), position)
        if not data:
            break
        view = memoryview(data)
        while view:
            view = view[os.write(out, view) :]
        position += len(data)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _bad_path(path: str) -> str:
    """``<file>.bad``, or ``<file>.bad.<n>`` if an earlier recovery left one."""
    candidate = path + ".bad"
    number = 0
    while os.path.lexists(candidate):
        number += 1
        candidate = f"{path}.bad.{number}"
    return candidate


def _open_to_read(path: str) -> int | None:
    """A read-only descriptor on a segment, or None if it was deleted (expired)."""
    try:
        return os.open(path, os.O_RDONLY | _O_CLOEXEC)
    except FileNotFoundError:
        return None


@attrs.define(eq=False)
class _Check:
    """What a walk over a segment's records found: built whole, then published with
    one assignment to :attr:`_Segment.check`. Only the active segment's changes
    after that, by the appending thread: ``index`` grows, ``timestamp_max`` rises."""

    index: list[tuple[int, int, int]]
    """Sparse index, append-only: (id, position, greatest timestamp of this segment
    before it), at most ``index_interval`` bytes apart."""
    timestamp_max: int = _TIMESTAMP_FLOOR
    """The greatest timestamp of the segment's records."""
    damaged: frozenset[int] = frozenset()
    """Positions of the damaged records found (and counted)."""
    end: int = _NO_LIMIT
    """Readers stop here: what follows could not be read (already counted)."""
    gaps: tuple[tuple[int, int], ...] = ()
    """Damaged byte ranges [start, stop) between intact records, in order: readers
    jump from ``start`` (where the last intact record before ended) to ``stop`` (where
    the next intact record begins), since nothing in between can be framed."""


@attrs.define(eq=False)
class _Segment:
    """One segment file. Only ``end``, ``next_id`` and ``closed_at`` change, and only
    for the active segment (by the appending thread); ``check`` is set once."""

    seq: int
    path: str
    first_id: int
    first_offset: int
    end: int = 0
    """Bytes of the file written completely (header included); 0 before the header."""
    next_id: int = 0
    """The id after the last record written to it; for a sealed segment not verified
    yet, the next segment's first id."""
    closed_at: float = 0.0
    """When it stopped taking writes (wall clock): retention counts from there."""
    check: _Check | None = None
    """None until the records were verified: at open for the last segment, at its
    first read for a sealed one (see :meth:`TopicLog._checked`)."""
    checking: threading.Lock = attrs.Factory(threading.Lock)
    """Held while a thread verifies this segment, so that only one does."""

    @property
    def end_offset(self) -> int:
        """The virtual offset just past the last record."""
        return self.first_offset + max(self.end - HEADER_SIZE, 0)


def _spans(check: _Check, start: int, stop: int) -> list[tuple[int, int]]:
    """The parts of [start, stop) outside the check's gaps: where readers can frame
    records one after another."""
    spans: list[tuple[int, int]] = []
    position = start
    for gap_start, gap_stop in check.gaps:
        if gap_stop <= position:
            continue
        if gap_start >= stop:
            break
        if gap_start > position:
            spans.append((position, gap_start))
        position = gap_stop
    if position < stop:
        spans.append((position, stop))
    return spans
