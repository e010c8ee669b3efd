"""The walk over a segment's records: verify each one, and resynchronise after damage.

Recovery walks the last segment at open, and the first read of a sealed segment
walks that one (both in :mod:`trionsq.queues.recovery`). A damaged record is never
trusted for where the next one starts: the walk finds the next intact record
(:func:`_resync`) and records the bytes in between as a gap. What it found, intact
records, gaps and holes, comes back as a :class:`_Found`; acting on it (copies,
counts, logs) is the caller's business.
"""

from __future__ import annotations

import os
import re
import struct
from typing import Final

import attrs

from .record import FIXED_SIZE
from .record_codec import _FIELDS_AT, _HEAD, _MIN_SIZE_FIELD, _SIZE, _crc32, _decode
from .segment_format import _NO_LIMIT, _SCAN_CHUNK, _TIMESTAMP_FLOOR, _Check


@attrs.define
class _Found:
    """What :func:`_walk_records` found in a segment."""

    index: list[tuple[int, int, int]]
    last_id: int
    """The id of the last intact record (the first id - 1 if none)."""
    good_end: int
    """The position just past the last intact record."""
    stop: int
    """Where the walk stopped: the end, or an unreadable frame."""
    reason: str | None = None
    """Why the walk stopped before the end, if it did."""
    records: int = 0
    timestamp_max: int = _TIMESTAMP_FLOOR
    gaps: list[tuple[int, int, int, int]] = attrs.Factory(list)
    """Damaged ranges followed by an intact record: (start, stop, lo, hi), bytes
    [start, stop) that held ids [lo, hi)."""
    holes: list[tuple[int, int]] = attrs.Factory(list)
    """Ids [lo, hi) with no record between two intact records that touch (no damaged
    bytes between them: a segment written with a hole)."""

    def missing(self) -> list[tuple[int, int]]:
        """Every id range [lo, hi) with no intact record between two intact ones."""
        return sorted([*self.holes, *((lo, hi) for _, _, lo, hi in self.gaps if hi > lo)])

    def check(self, end: int = _NO_LIMIT) -> _Check:
        """The :class:`_Check` readers use: the index, the gaps to jump over."""
        return _Check(
            self.index,
            self.timestamp_max,
            frozenset(start for start, _, _, _ in self.gaps),
            end,
            tuple((start, stop) for start, stop, _, _ in self.gaps),
        )


@attrs.define
class _Cursor:
    """How far :func:`_walk_records` got: carried from one buffer to the next."""

    position: int
    """Where the next read starts: just past the last intact record."""
    last_id: int
    """The id of the last intact record (the first id - 1 if none)."""
    expect: int
    """The id the common case wants (the next one); -1 once that is ``id_limit``."""
    mark: int
    """The position from which the next index entry is due."""
    timestamp_max: int = _TIMESTAMP_FLOOR
    chunk: int = _SCAN_CHUNK
    """Read size: a record larger than it makes it grow, until the next resync."""
    reason: str | None = None
    """Why the walk stopped before the end, once it did."""


def _walk_records(
    fd: int, position: int, end: int, first_id: int, id_limit: int, interval: int
) -> _Found:
    """Verify every record of a segment from ``position`` to ``end``; build its index.

    A record is intact if its checksum and fields are right and its id comes after
    the last intact one and before ``id_limit``. A frame that is not (a bad checksum,
    bad fields, an impossible size field) proves nothing about where the next record
    starts, since its own size field may be the damaged byte: the walk resynchronises
    at the first intact record after it (:func:`_resync`) and records the range in
    between as a gap. It stops where no intact record follows damage, at a short
    read, or at an intact record at or past ``id_limit`` (it belongs to the next
    segment). This is what recovery and first reads spend their time in: one inline
    loop per buffer (:func:`_walk_buffer`), as in :meth:`TopicLog._read_segment`.
    """
    found = _Found([], first_id - 1, position, position)
    # the id the common case wants: the next one
    walk = _Cursor(position, first_id - 1, first_id if first_id < id_limit else -1, position)
    while walk.position < end and walk.reason is None:
        buffer = os.pread(fd, min(walk.chunk, end - walk.position), walk.position)
        at, damaged = _walk_buffer(buffer, walk, found, id_limit, interval)
        walk.position += at
        if damaged is None and walk.reason is None and not at:
            damaged = _stalled(buffer, walk, end)
        if damaged is not None:
            _resume(fd, walk, found, end, id_limit, damaged)
    last_id = walk.last_id
    found.last_id = last_id
    found.good_end = walk.position
    found.stop = walk.position
    found.reason = walk.reason
    found.records = last_id - first_id + 1 - sum(hi - lo for lo, hi in found.missing())
    found.timestamp_max = walk.timestamp_max
    return found


def _walk_buffer(
    buffer: bytes, walk: _Cursor, found: _Found, id_limit: int, interval: int
) -> tuple[int, str | None]:
    """Verify the records of a buffer read at ``walk.position``, moving ``walk`` on.

    Returns how many bytes of it are records taken one after another, and why the
    frame after them cannot be trusted, or None (the buffer ends in it, or
    ``walk.reason`` says why the walk stops there). The common case (an intact plain
    record with the next id) does as little as it can: one test, then the bookkeeping
    every intact record shares, inline (no call per record); any other record is
    checked the slow way first.
    """
    index = found.index
    position = walk.position
    last_id = walk.last_id
    expect = walk.expect
    timestamp_max = walk.timestamp_max
    unpack = _HEAD.unpack_from
    crc32 = _crc32
    length = len(buffer)
    last = length - FIXED_SIZE
    view = memoryview(buffer)
    at = 0
    mark_at = walk.mark - position
    damaged = None  # why the frame at ``at`` cannot be trusted, if it cannot
    while at <= last:
        size, crc, timestamp, internal_id, _, flags, ext_version = unpack(buffer, at)
        stop = at + 4 + size
        if stop > length or size < _MIN_SIZE_FIELD:
            break
        if (
            internal_id != expect
            or flags
            or ext_version
            or crc32(view[at + _FIELDS_AT : stop]) != crc
        ):  # not the common case: check the record the slow way
            if (
                crc32(view[at + _FIELDS_AT : stop]) != crc
                or internal_id <= last_id
                or ((flags or ext_version) and _decode(buffer, at, 0, size) is None)
            ):
                damaged = "a damaged record"
                break
            if internal_id >= id_limit:
                walk.reason = f"record {internal_id} belongs to the next segment"
                break
            if internal_id > last_id + 1:
                found.holes.append((last_id + 1, internal_id))
        if at >= mark_at:
            index.append((internal_id, position + at, timestamp_max))
            mark_at = at + interval
        if timestamp > timestamp_max:
            timestamp_max = timestamp
        last_id = internal_id
        expect = internal_id + 1
        if expect >= id_limit:
            expect = -1
        at = stop
    view.release()
    walk.mark = mark_at + position
    walk.last_id = last_id
    walk.expect = expect
    walk.timestamp_max = timestamp_max
    return at, damaged


def _stalled(buffer: bytes, walk: _Cursor, end: int) -> str | None:
    """Not one whole record in the buffer: a large record, or a bad size field.

    Either the next read is larger (``walk.chunk``), or the walk ends there
    (``walk.reason``), or the frame there cannot be trusted: returns why.
    """
    if len(buffer) < _SIZE.size:
        walk.reason = "the file is shorter than expected"
        return None
    size = _SIZE.unpack_from(buffer)[0]
    if size < _MIN_SIZE_FIELD or walk.position + 4 + size > end:
        return f"impossible record size {size}"
    if walk.chunk >= 4 + size:
        walk.reason = "the file is shorter than expected"
    else:
        walk.chunk = 4 + size
    return None


def _resume(fd: int, walk: _Cursor, found: _Found, end: int, id_limit: int, damaged: str) -> None:
    """The frame at ``walk.position`` is damaged (``damaged`` says how): go on at the
    next intact record, the bytes before it a gap, or end the walk if there is none."""
    resumed = _resync(fd, walk.position, end, walk.last_id, id_limit)
    if resumed is None:
        walk.reason = damaged
        return
    resume_at, resume_id = resumed
    found.gaps.append((walk.position, resume_at, walk.last_id + 1, resume_id))
    # the record found is intact: the loop takes it next, with no hole
    walk.last_id = resume_id - 1
    walk.expect = resume_id
    walk.position = resume_at
    walk.chunk = _SCAN_CHUNK


_ID_AT: Final = 16
"""Where a record's id starts: after its size, checksum and timestamp."""
_ID: Final = struct.Struct(">Q")


def _resync(
    fd: int, damaged_at: int, end: int, last_id: int, id_limit: int
) -> tuple[int, int] | None:
    """(position, id) of the first intact record after the damaged frame at
    ``damaged_at``, or None if there is none before ``end``.

    Every byte after ``damaged_at`` may start it (the damaged byte may be a size
    field), so each is a candidate. One is taken only if all of these hold, which
    arbitrary bytes practically never do together:

    - its id comes after ``last_id`` and before ``id_limit``, and no more ids are
      skipped than the bytes skipped could have held: ids in a segment go up by one
      per record and a record takes at least ``FIXED_SIZE`` bytes. Random bytes pass
      this with odds near ``window / 2**64``;
    - its size fits before ``end``;
    - its crc32 matches (odds 2**-32 for bytes that are not a record) and its
      fields decode.

    Candidates are found by a regular expression (run in C) that wants a possible
    size and, at the id's place, the bytes every id of the window starts with, so
    even a long damaged range (a zeroed disk block, say) is scanned quickly. Only a record a client itself placed inside a message body, with the
    right id, right where the damage is, could be mistaken for the real next one.
    """
    lowest = last_id + 1
    if end - damaged_at - 1 < FIXED_SIZE:
        return None
    highest = min(id_limit - 1, lowest + (end - damaged_at) // FIXED_SIZE)
    if highest < lowest:
        return None
    candidates = _candidates(lowest, highest)
    unpack = _HEAD.unpack_from
    base = damaged_at + 1
    while end - base >= FIXED_SIZE:
        buffer = os.pread(fd, min(_SCAN_CHUNK, end - base), base)
        last = len(buffer) - FIXED_SIZE  # the last candidate whose fields are all here
        if last < 0:
            return None
        for match in candidates.finditer(buffer):
            at = match.start()
            if at > last:
                break
            candidate = base + at
            size, crc, _, internal_id, _, flags, ext_version = unpack(buffer, at)
            if (
                lowest <= internal_id <= highest
                and internal_id - lowest <= (candidate - damaged_at) // FIXED_SIZE
                and size >= _MIN_SIZE_FIELD
                and candidate + 4 + size <= end
            ):
                if at + 4 + size <= len(buffer):
                    frame, start = buffer, at
                else:
                    frame, start = os.pread(fd, 4 + size, candidate), 0
                if (
                    len(frame) - start >= 4 + size
                    and _crc32(memoryview(frame)[start + _FIELDS_AT : start + 4 + size]) == crc
                    and not ((flags or ext_version) and _decode(frame, start, 0, size) is None)
                ):
                    return candidate, internal_id
        base += last + 1
    return None


def _candidates(lowest: int, highest: int) -> re.Pattern[bytes]:
    """Where a record with an id in [lowest, highest] may start: a size field of at
    least ``_MIN_SIZE_FIELD``, then (after the checksum and timestamp) the leading id
    bytes the whole window shares, and the range of the byte after them."""
    low, high = _ID.pack(lowest), _ID.pack(highest)
    shared = 0
    while shared < _ID.size and low[shared] == high[shared]:
        shared += 1
    pattern = b"(?=(?!\\x00\\x00\\x00[\\x00-%s]).{%d}%s" % (
        re.escape(bytes([_MIN_SIZE_FIELD - 1])),
        _ID_AT,
        re.escape(low[:shared]),
    )
    if shared < _ID.size:
        pattern += b"[%s-%s]" % (
            re.escape(low[shared : shared + 1]),
            re.escape(high[shared : shared + 1]),
        )
    return re.compile(pattern + b")", re.DOTALL)
