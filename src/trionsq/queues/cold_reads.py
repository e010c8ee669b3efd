"""Cold reads: older records from the segment files, in a worker thread.

A consumer behind the tail cache gets its records from
:meth:`_ColdReads.read_cold`, which reads a large chunk of a segment (the caller
installs it in memory), and a channel moved to an offset or a time finds its id
with the seeks. Reads only: they run in any number of threads while one other
thread appends (see :meth:`_ColdReads.read_cold` for the contract), and a sealed
segment's first read verifies it first (:mod:`trionsq.queues.recovery`).
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Final

from .record import Record
from .record_codec import (
    _MIN_SIZE_FIELD,
    _SIZE,
    _decode,
    _decode_run,
    _frames,
    _Walk,
)
from .recovery import _SegmentRecovery
from .segment_format import (
    _SCAN_CHUNK,
    HEADER_SIZE,
    INDEX_INTERVAL,
    _open_to_read,
    _spans,
    storage_log,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .segment_format import _Check, _Segment

COLD_CHUNK_BYTES: Final = 1 << 20
"""How much :meth:`TopicLog.read_cold` returns by default: large reads, few calls."""

_FADVISE: Final = getattr(os, "posix_fadvise", None)
_WILLNEED: Final = getattr(os, "POSIX_FADV_WILLNEED", 0)

_entry_id: Final = itemgetter(0)
_entry_position: Final = itemgetter(1)
_entry_timestamp: Final = itemgetter(2)


def _segment_of(segments: Sequence[_Segment], internal_id: int) -> int:
    """The index of the segment ``internal_id`` falls in (0 if before the first)."""
    return max(bisect_right(segments, internal_id, key=attrgetter("first_id")) - 1, 0)


def _grow_chunk(buffer: bytes, position: int, end: int, chunk: int) -> tuple[int, str | None]:
    """Not one whole record in a buffer read at ``position``: a large record, or a bad
    size field. The read size that takes the record whole, or why it cannot be read."""
    size = _SIZE.unpack_from(buffer)[0] if len(buffer) >= _SIZE.size else -1
    if size < _MIN_SIZE_FIELD or position + 4 + size > end:
        return chunk, f"impossible record size {size}"
    if chunk >= 4 + size:
        return chunk, "the file is shorter than expected"
    return 4 + size, None


class _ColdReads(_SegmentRecovery):
    """The disk-reading side of :class:`~trionsq.queues.topic_log.TopicLog`."""

    # -- reading from disk (any thread) ---------------------------------------------

    def read_cold(
        self,
        from_id: int,
        max_records: int,
        max_bytes: int = COLD_CHUNK_BYTES,
        *,
        floor: int | None = None,
    ) -> list[Record]:
        """Up to ``max_records`` records (about ``max_bytes``) from ``from_id`` on, read
        from the segment files. Blocking, and meant for a worker thread.

        Ids below ``floor`` (default ``start_id``) are not read: a channel never reads
        what was released, while a reader by offset (``broker/log_reads.py``) passes
        :attr:`earliest_id` to read what retention still keeps on disk.

        The first read that needs a sealed segment verifies it first (one pass over
        its records, see :meth:`_checked`): damaged records are skipped, logged and
        counted once; :meth:`install_chunk` (or :attr:`holes`, ``len``,
        :meth:`discard_before`) then counts their ids as holes.

        Thread-safety contract: this (and :meth:`seek_timestamp`,
        :meth:`seek_offset`, :meth:`offset_of`) may run in any number of threads
        while one other thread appends, discards and expires. It reads only:

        - ``_segments``, a tuple replaced (never changed) on roll and expiry, taken
          once as a snapshot;
        - per segment, fields fixed at creation (path, first id/offset), ``end``,
          read once (the appender moves it only after ``os.write`` has put every
          byte below it in the file, so nothing past it is read), and ``check``,
          read once: the segment's sparse index, damaged positions and readable end.
          The active segment's index is a list only ever appended to (a bisect sees
          a consistent prefix). A sealed segment's check is None until a read
          verifies it: that thread builds a complete one and publishes it with a
          single assignment, so others see None or all of it; a per-segment lock
          makes the others wait for it rather than verify too. The holes it finds go
          to a list guarded by ``_lock``, which the appending thread empties;
        - ``_start_id``, one integer read (only when ``floor`` is None).

        Each call opens its own descriptor per segment and closes it, so closing
        or deleting segments meanwhile cannot make it read another file. A segment
        deleted before it was opened held only ids below the start: the read stops
        there if it has records (so what it returns is one run of the log, with no
        gap but holes), else it goes on to the next segment. It never touches the
        tail cache, the chunks or the write descriptor. It returns records appended
        before the call, and perhaps some appended during it.
        """
        segments = self._segments
        from_id = max(from_id, self._start_id if floor is None else floor)
        out: list[Record] = []
        if max_records <= 0 or not segments:
            return out
        number, position = self._locate(segments, from_id)
        budget = max_bytes
        for segment in segments[number:]:
            end = segment.end
            if end > position:
                fd = _open_to_read(segment.path)
                if fd is None:
                    # Expired meanwhile: all its ids are below the start now. Stop here
                    # so that what is returned stays one run without a gap.
                    if out:
                        break
                    position = HEADER_SIZE
                    continue
                try:
                    check = self._checked(segment, fd)
                    if check is not None:  # each run of records between damaged ranges
                        for start, stop in _spans(check, position, min(end, check.end)):
                            budget = self._read_segment(
                                fd, segment, check, start, stop, from_id, out, max_records, budget
                            )
                            if len(out) >= max_records or budget <= 0:
                                break
                finally:
                    os.close(fd)
                if len(out) >= max_records or budget <= 0:
                    break
            position = HEADER_SIZE
        return out

    def _read_segment(
        self,
        fd: int,
        segment: _Segment,
        check: _Check,
        position: int,
        end: int,
        from_id: int,
        out: list[Record],
        max_records: int,
        budget: int,
    ) -> int:
        """Decode records of one segment into ``out``; returns the byte budget left.

        The hot loop of cold reads (:meth:`_decode_buffer`): it walks each buffer
        itself, not via :func:`_frames`, and checks the checksum only of records it
        returns.
        """
        chunk = max(min(budget, COLD_CHUNK_BYTES * 4), INDEX_INTERVAL)
        wanted = max_records - len(out)
        problem = None
        if _FADVISE is not None and position + chunk < end:
            # the kernel fetches what the next cold read will want while this decodes
            _FADVISE(fd, position + chunk, min(chunk, end - position - chunk), _WILLNEED)
        while position < end and wanted > 0 and budget > 0:
            buffer = os.pread(fd, min(chunk, end - position), position)
            at, wanted, budget = self._decode_buffer(
                buffer, segment, check, position, from_id, out, wanted, budget
            )
            if at:
                position += at
                continue
            chunk, problem = _grow_chunk(buffer, position, end, chunk)
            if problem is not None:
                break
        if problem is not None:
            storage_log.warning(
                "TOPICLOG(%s) %s is unreadable from position %d (%s); skipped to the next segment",
                self.name,
                segment.path,
                position,
                problem,
            )
        return budget

    def _decode_buffer(
        self,
        buffer: bytes,
        segment: _Segment,
        check: _Check,
        position: int,
        from_id: int,
        out: list[Record],
        wanted: int,
        budget: int,
    ) -> tuple[int, int, int]:
        """Decode the whole records of a buffer read at ``position`` into ``out``, from
        ``from_id`` on, until ``wanted`` are taken or ``budget`` bytes are spent; a
        damaged record is reported and stepped over.

        Returns how many bytes of the buffer it went through, and what is left of
        ``wanted`` and of ``budget``.
        """
        base = segment.first_offset - HEADER_SIZE + position  # offset of buffer[0]
        at = 0
        while True:
            at, wanted, budget, damaged = _decode_run(
                buffer, at, base, from_id, wanted, budget, Record, out
            )
            if not damaged:
                return at, wanted, budget
            self._damaged_on_read(segment, check, position + at)
            at += _SIZE.unpack_from(buffer, at)[0] + 4

    def _damaged_on_read(self, segment: _Segment, check: _Check, position: int) -> None:
        """A damaged record met by a read: warn once, unless its segment's verification
        (at open or at its first read) counted it already."""
        if position in check.damaged:
            return
        key = (segment.seq, position)
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        storage_log.warning(
            "TOPICLOG(%s) record at position %d of %s is damaged; skipped",
            self.name,
            position,
            segment.path,
        )

    def _locate(self, segments: Sequence[_Segment], internal_id: int) -> tuple[int, int]:
        """(segment index, file position) where a scan for ``internal_id`` starts."""
        number = _segment_of(segments, internal_id)
        check = self._checked(segments[number])
        if check is None:
            return number, HEADER_SIZE
        index = check.index
        entry = bisect_right(index, internal_id, key=_entry_id) - 1
        return number, index[entry][1] if entry >= 0 else HEADER_SIZE

    def _scan(
        self,
        segments: Sequence[_Segment],
        number: int,
        position: int,
        accept: Callable[[Record], bool],
        floor: int | None = None,
    ) -> tuple[Record | None, int]:
        """The first intact record from (segment, position) on that ``accept`` takes,
        and the id after the last record looked at (0 if none). Records below
        ``floor`` (default: ``start_id``) are passed over."""
        start_id = self._start_id if floor is None else floor
        after = 0
        for segment in segments[number:]:
            end = segment.end
            if end > position:
                fd = _open_to_read(segment.path)
                if fd is None:
                    position = HEADER_SIZE
                    continue
                try:
                    check = self._checked(segment, fd)
                    base = segment.first_offset - HEADER_SIZE
                    spans = _spans(check, position, min(end, check.end)) if check else []
                    for span_start, span_stop in spans:  # around damaged ranges
                        walk = _Walk(span_start)
                        for buffer, at, file_position, size in _frames(
                            fd, span_start, span_stop, _SCAN_CHUNK, walk
                        ):
                            record = _decode(buffer, at, base + file_position, size)
                            if record is None or record.internal_id < start_id:
                                continue
                            if accept(record):
                                return record, after
                            after = record.internal_id + 1
                finally:
                    os.close(fd)
            position = HEADER_SIZE
        return None, after

    def offset_of(self, internal_id: int, *, floor: int | None = None) -> int:
        """The offset of the first record from ``internal_id`` on (``next_offset``
        if none), not looking below ``floor`` (default ``start_id``). Reads disk like
        :meth:`read_cold`; same thread-safety contract."""
        next_offset = self.next_offset
        segments = self._segments
        floor = self._start_id if floor is None else floor
        internal_id = max(internal_id, floor)
        if not segments:
            return next_offset
        number, position = self._locate(segments, internal_id)
        found, _ = self._scan(
            segments, number, position, lambda record: record.internal_id >= internal_id, floor
        )
        if found is None:
            return max(next_offset, segments[-1].end_offset)
        return found.offset

    def seek_offset(self, offset: int, *, floor: int | None = None) -> int:
        """The id of the record at ``offset``, or of the first one after it
        (``next_id`` if none), looking from ``floor`` (default ``start_id``; down to
        :attr:`earliest_id` to replay). Same thread-safety contract as :meth:`read_cold`."""
        next_id = self.next_id
        segments = self._segments
        if not segments:
            return next_id
        floor = self._start_id if floor is None else floor
        number = max(bisect_right(segments, offset, key=attrgetter("first_offset")) - 1, 0)
        start_number = _segment_of(segments, floor)
        if start_number > number:
            number, position = self._locate(segments, floor)
        else:
            segment = segments[number]
            check = self._checked(segment)
            index = check.index if check is not None else []
            target = offset - segment.first_offset + HEADER_SIZE
            entry = bisect_right(index, target, key=_entry_position) - 1
            position = index[entry][1] if entry >= 0 else HEADER_SIZE
            if start_number == number:
                position = max(position, self._locate(segments, floor)[1])
        found, after = self._scan(
            segments, number, position, lambda record: record.offset >= offset, floor
        )
        return max(next_id, after) if found is None else found.internal_id

    def seek_timestamp(self, timestamp: int, *, floor: int | None = None) -> int:
        """The first id whose record has a timestamp at or after ``timestamp``
        (``next_id`` if none), from ``floor`` on as in :meth:`seek_offset`. Same
        thread-safety contract as :meth:`read_cold`.

        Segments are taken in order from the start, and one is read only if its
        greatest timestamp reaches ``timestamp``, so the answer is right even if the
        clock went back. That needs the greatest timestamp of each segment before
        the answer: a sealed segment not read yet is verified for it (once).
        In the segment, each index entry carries the greatest timestamp before it,
        and the scan starts at the last entry before which nothing is that late.
        """
        next_id = self.next_id
        segments = self._segments
        if not segments:
            return next_id
        floor = self._start_id if floor is None else floor
        start_number, start_position = self._locate(segments, floor)
        after = 0
        for number in range(start_number, len(segments)):
            check = self._checked(segments[number])
            if check is None or check.timestamp_max < timestamp:
                continue
            index = check.index
            entry = bisect_left(index, timestamp, key=_entry_timestamp) - 1
            position = index[entry][1] if entry >= 0 else HEADER_SIZE
            if number == start_number:
                position = max(position, start_position)
            found, seen = self._scan(
                segments[number : number + 1],
                0,
                position,
                lambda record: record.timestamp >= timestamp,
                floor,
            )
            if found is not None:
                return found.internal_id
            after = max(after, seen)
        return max(next_id, after)
