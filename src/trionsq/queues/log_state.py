"""The state every part of :class:`~trionsq.queues.topic_log.TopicLog` shares, and
its in-memory side: the tail cache, the installed cold chunks and the holes.

:class:`_LogState` holds every attribute of the log (its ``__init__`` is the log's),
so that the parts that act on disk (recovery, cold reads, the active segment,
retention), each a class in its own module, build on it and type-check alone. It
also holds the reads that answer from memory only and never block.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from ..descriptors import DescriptorBudget
from .record import Record
from .segment_format import INDEX_INTERVAL, _Check, _Segment

if TYPE_CHECKING:
    import os
    from collections.abc import Callable

    from ..descriptors import FileHandle

MAX_CHUNKS: Final = 8
"""Cold chunks kept installed: a few channels at different places in a backlog,
each with the chunk it reads and the one read ahead (``dispatch/router.py``)."""
CACHE_BYTES: Final = 32 << 20
"""Record bytes the tail cache holds at most, whatever its record count: 10,000
records of 200 bytes are 2 MB, but 1,000 of 1 MB held a gigabyte (issue 14). Past
it the oldest cached records are served by cold reads, as records past the count
are."""

_record_id: Final = attrgetter("internal_id")


def _record_offset(record: Record) -> int:
    return record.offset


@attrs.frozen
class _Chunk:
    """Cold records installed in memory; they stand for every id in [start, stop)."""

    start: int
    stop: int
    records: list[Record]
    dense: bool
    """No hole: ``records[i]`` has id ``records[0].internal_id + i``."""


class _LogState:
    """A log's attributes and its reads from memory (see :class:`TopicLog`)."""

    # a twin on purpose: TopicLog.open (topic_log.py) takes these settings again and
    # forwards them by name, so that its callers get them typed and checked
    def __init__(
        self,
        directory: str | os.PathLike[str],
        name: str,
        *,
        max_bytes_per_file: int,
        cache_records: int,
        retention: float = 0.0,
        clock: Callable[[], float] = time.time,
        index_interval: int = INDEX_INTERVAL,
        max_chunks: int = MAX_CHUNKS,
        cache_bytes: int = CACHE_BYTES,
        files: DescriptorBudget | None = None,
    ) -> None:
        """An empty log that has not looked at its directory: use :meth:`open`.

        ``files``: the broker's descriptor budget, which closes the active segment
        while it is idle and others need descriptors (default: a budget of its own
        that closes it only when the kernel refuses one)."""
        self.directory: Final = Path(directory)
        self.name: Final = name
        self.max_bytes_per_file: Final = max_bytes_per_file
        self.cache_records: Final = max(cache_records, 0)
        self.cache_bytes: Final = max(cache_bytes, 0)
        self.retention: Final = retention
        self.index_interval: Final = max(index_interval, 1)
        self.max_chunks: Final = max(max_chunks, 1)
        self._clock: Final = clock
        self.next_id = 1
        self.next_offset = 0
        self.unsynced = 0
        """Records written since the last :meth:`sync` began."""
        self._start_id = 1
        self._start_offset: int | None = 0
        """None: not known in memory, found on disk when asked for."""
        self._segments: tuple[_Segment, ...] = ()
        """Replaced, never changed in place: a reader's snapshot stays valid."""
        self._active: _Segment | None = None
        self._active_check = _Check([])
        """The active segment's check (the appending thread keeps it up to date)."""
        self._files: Final = files if files is not None else DescriptorBudget.unbounded()
        self._handle: FileHandle | None = None
        """The active segment's file: opened for appends when used, closed by the
        budget when idle and descriptors are wanted elsewhere."""
        self._next_seq = 0
        self._mark = 0
        """The virtual offset from which the next index entry is due."""
        self._disk_bytes = 0
        self._force_roll = False
        self._closed = False
        self._undeleted: list[str] = []
        """Expired segment files the file system refused to remove (tried again)."""
        self._cache: list[Record] = []
        self._cache_base = 1
        """Id of ``_cache[0]``; the cache always ends at ``next_id - 1``."""
        self._cache_skip = 0
        """Leading cache entries no longer served (trimmed or discarded)."""
        self._chunks: list[_Chunk] = []
        self._holes: list[tuple[int, int]] = []
        """Ranges [lo, hi) of ids that have no record, in order."""
        self._lock = threading.Lock()
        """Guards what :meth:`sync` and the first reads of sealed segments share with
        the appending thread."""
        self._found_holes: list[tuple[int, int]] = []
        """Holes found by first reads (any thread), not yet in ``_holes``."""
        self._late_missing = 0
        self._warned: set[tuple[int, int]] = set()
        """(segment seq, position) of damaged records a read warned about."""
        self._pending: list[FileHandle] = []
        """Rolled segments' files, to fsync and close at the next sync."""
        self._directory_dirty = False

    def _missing(self, lo: int, hi: int) -> int:
        self._take_found_holes()
        return sum(max(0, min(b, hi) - max(a, lo)) for a, b in self._holes)

    def _take_found_holes(self) -> None:
        """Move the holes first reads found (in any thread) to ``_holes``, which
        belongs to the appending thread."""
        if not self._found_holes:
            return
        with self._lock:
            found = self._found_holes
            self._found_holes = []
        start = self._start_id
        self._holes = sorted([*self._holes, *(hole for hole in found if hole[1] > start)])

    # -- reading from memory --------------------------------------------------------

    def _cache_append(self, records: list[Record]) -> None:
        """Add a batch just written; what falls past the record count or the byte
        bound is no longer served, and its memory goes once it is worth a list shift
        (over 1,024 records and half the list, or a quarter of the byte bound)."""
        cache = self._cache
        cache.extend(records)
        over = len(cache) - self._cache_skip - self.cache_records
        if over > 0:
            self._cache_skip += over
        skip = self._cache_skip
        if skip < len(cache) and self.next_offset - cache[skip].offset > self.cache_bytes:
            # over the byte bound: serve from the first record that fits it (maybe none)
            floor = self.next_offset - self.cache_bytes
            skip = self._cache_skip = bisect_left(cache, floor, lo=skip, key=_record_offset)
        if not skip:
            return
        skipped = (cache[skip].offset if skip < len(cache) else self.next_offset) - cache[0].offset
        if (skip > 1024 and skip * 2 > len(cache)) or skipped > self.cache_bytes // 4:
            del cache[:skip]
            self._cache_base += skip
            self._cache_skip = 0

    def _cache_restart(self) -> None:
        """Empty the tail cache: what was just written has no Records in memory (a
        replica's copies, checked without making them), so the cache starts again
        at ``next_id`` and reads of everything before it go to the files."""
        self._cache = []
        self._cache_base = self.next_id
        self._cache_skip = 0

    def read(self, from_id: int, max_count: int) -> list[Record]:
        """Up to ``max_count`` records from ``from_id`` on, from memory only.

        Ids before ``start_id`` are gone, missing ids are skipped. An empty answer
        with ``is_cold(from_id)`` true means the records are on disk only.
        """
        if from_id < self._start_id:
            from_id = self._start_id
        index = from_id - self._cache_base
        if index >= self._cache_skip:
            return self._cache[index : index + max_count]
        for chunk in reversed(self._chunks):
            if chunk.start <= from_id < chunk.stop:
                records = chunk.records
                if chunk.dense:
                    first = max(from_id - records[0].internal_id, 0)
                else:
                    first = bisect_left(records, from_id, key=_record_id)
                return records[first : first + max_count]
        return []

    def get(self, internal_id: int) -> Record | None:
        """The record with this id, if held in memory (None if cold, gone or a hole)."""
        if not self._start_id <= internal_id < self.next_id:
            return None
        index = internal_id - self._cache_base
        if index >= self._cache_skip:
            return self._cache[index]
        for chunk in reversed(self._chunks):
            if chunk.start <= internal_id < chunk.stop:
                records = chunk.records
                if chunk.dense:
                    at = internal_id - records[0].internal_id
                    return records[at] if at >= 0 else None  # below it: a hole
                at = bisect_left(records, internal_id, key=_record_id)
                if at < len(records) and records[at].internal_id == internal_id:
                    return records[at]
                return None
        return None

    def is_cold(self, from_id: int) -> bool:
        """Whether reading from ``from_id`` needs :meth:`read_cold` first."""
        from_id = max(from_id, self._start_id)
        if from_id >= self.next_id or from_id - self._cache_base >= self._cache_skip:
            return False
        return not any(chunk.start <= from_id < chunk.stop for chunk in self._chunks)

    def install_chunk(self, from_id: int, records: list[Record]) -> None:
        """Keep what ``read_cold(from_id, ...)`` returned, so :meth:`read` serves it.

        The chunk answers for every id from ``from_id`` to its last record (ids in
        between with no record are holes). The oldest chunk goes past ``max_chunks``.
        Also counts the holes the read found, if it was the first of a segment.
        """
        self._take_found_holes()
        if not records:
            return
        last = records[-1].internal_id
        if last < self._start_id:
            return
        dense = last - records[0].internal_id + 1 == len(records)
        self._chunks.append(_Chunk(min(from_id, records[0].internal_id), last + 1, records, dense))
        if len(self._chunks) > self.max_chunks:
            del self._chunks[0]

    def chunk_stop(self, from_id: int) -> int | None:
        """Where the installed chunk holding ``from_id`` ends: where a read ahead of
        it starts (None: no chunk holds it)."""
        for chunk in reversed(self._chunks):
            if chunk.start <= from_id < chunk.stop:
                return chunk.stop
        return None

    def _offset_in_memory(self, internal_id: int) -> int | None:
        """The offset of the first record from ``internal_id`` on, if memory knows."""
        if internal_id >= self.next_id:
            return self.next_offset
        index = internal_id - self._cache_base
        if index >= self._cache_skip:
            return self._cache[index].offset
        for chunk in self._chunks:
            if chunk.start <= internal_id < chunk.stop:
                at = bisect_left(chunk.records, internal_id, key=_record_id)
                if at < len(chunk.records):
                    return chunk.records[at].offset
        return None
