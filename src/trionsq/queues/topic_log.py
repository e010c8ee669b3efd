"""A topic partition's durable log: append-only segment files and a tail cache (design §2).

The broker's :class:`~trionsq.queues.memory_log.MemoryLog` methods, backed by files,
so that an acknowledged publish survives ``kill -9``: :meth:`TopicLog.append` hands
the whole batch to the kernel with ``os.write`` before it returns (no userspace
buffer); :meth:`TopicLog.sync` adds fsync for power loss, on the broker's
``--sync-every`` / ``--sync-timeout`` schedule.

Files, in ``directory``: ``<name>.<seq:06d>.log``, ``seq`` counting up from 0. Each
segment is a 32-byte header followed by records back to back, each encoded exactly
as :func:`~trionsq.queues.record.encode_record` does (size, crc32, fields, body)::

    header: [8 magic "TNSQSEG1"][8 first offset][8 first id][4 version = 0]
            [4 crc32 of the 28 bytes before it]

The header makes each segment self-describing: a record's position in its file is
``32 + offset - first offset``, and the segments that remain after retention deleted
older ones (or after a damaged one was set aside) still know their ids and virtual
offsets. A segment is rolled before a batch that would take it past
``max_bytes_per_file``; a batch is never split, so one bigger than that gets a
segment of its own.

Reads. The last ``cache_records`` records stay in memory, so a consumer that keeps up
never reads a file; :meth:`TopicLog.read` and :meth:`TopicLog.get` answer only from
memory (the tail cache and the chunks installed with :meth:`TopicLog.install_chunk`)
and never block. For an older id they return nothing and :meth:`TopicLog.is_cold`
says so; the caller then runs :meth:`TopicLog.read_cold` in a worker thread and
installs what it returns. See :meth:`TopicLog.read_cold` for what may run in another
thread.

Ids may have holes: a record recovery had to skip (damaged) keeps its id unused,
and :meth:`TopicLog.read` simply goes past it. :attr:`TopicLog.holes` counts them.
A damaged record is never trusted for where the next one starts (its size field
may be the damaged byte): the walk over a segment resynchronises at the next
intact record (:func:`_resync`), the bytes in between stay in place as a gap that
readers jump over, and a copy goes to ``<segment>.<start>-<stop>.bad``.

Recovery (:meth:`TopicLog.open`) costs the last segment plus one header per segment,
whatever the backlog: only the last segment (the one appends go on in) is read
record by record. A sealed segment (one a later segment follows) is checked by its
header and its size alone; the next segment's header says exactly where it ends.
Its records are verified, and its sparse index built, by the first read or seek
that needs it (:meth:`TopicLog.read_cold`, in a worker thread). What recovery or a
first read cannot read is never dropped silently: each loss is logged on
``trionsq.storage`` and counted, in the :class:`RecoveryReport` at open, in
:attr:`TopicLog.holes` and :attr:`TopicLog.late_missing_ids` once a read found it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
import threading
import time
import zlib
from bisect import bisect_left, bisect_right
from collections import deque
from itertools import accumulate, chain, repeat
from operator import add, attrgetter, itemgetter
from pathlib import Path
from types import MemberDescriptorType
from typing import TYPE_CHECKING, Final

import attrs

from .record import DEFERRED, FIXED_SIZE, MAX_EXT_LENGTH, Record

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = [
    "COLD_CHUNK_BYTES",
    "HEADER_SIZE",
    "INDEX_INTERVAL",
    "SEGMENT_MAGIC",
    "RecoveryReport",
    "TopicLog",
    "segment_name",
]

storage_log = logging.getLogger("trionsq.storage")

SEGMENT_MAGIC: Final = b"TNSQSEG1"
_HEADER_FIELDS: Final = struct.Struct(">8sQQI")
_HEADER_CRC: Final = struct.Struct(">I")
HEADER_SIZE: Final = _HEADER_FIELDS.size + _HEADER_CRC.size  # 32
SEGMENT_VERSION: Final = 0

INDEX_INTERVAL: Final = 64 * 1024
"""Bytes between two entries of a segment's sparse index: a seek reads at most this
much before the record it looks for."""
COLD_CHUNK_BYTES: Final = 1 << 20
"""How much :meth:`TopicLog.read_cold` returns by default: large reads, few calls."""
_SCAN_CHUNK: Final = 1 << 20
"""Read size of recovery and of seeks."""
MAX_CHUNKS: Final = 4
"""Cold chunks kept installed: a few channels at different places in a backlog."""
CACHE_BYTES: Final = 32 << 20
"""Record bytes the tail cache holds at most, whatever its record count: 10,000
records of 200 bytes are 2 MB, but 1,000 of 1 MB held a gigabyte (issue 14). Past
it the oldest cached records are served by cold reads, as records past the count
are."""

# The record encoding of record.py, precompiled for this module's loops.
_SIZE: Final = struct.Struct(">I")
_PREFIX: Final = struct.Struct(">II")  # size, crc
_FIELDS: Final = struct.Struct(">qQQBB")  # timestamp, id, trace id, flags, ext version
_HEAD: Final = struct.Struct(">IIqQQBB")  # the two above, read in one call
_DELIVER_AT: Final = struct.Struct(">q")
_EXT_LENGTH: Final = struct.Struct(">H")
_MIN_SIZE_FIELD: Final = FIXED_SIZE - 4
"""The smallest possible value of a record's size field."""
_FIELDS_AT: Final = _PREFIX.size  # where the checksummed part of a record starts
_BODY_AT: Final = FIXED_SIZE  # body of a record with no ext and no delay

_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_TIMESTAMP_FLOOR: Final = -(1 << 63)
_NO_LIMIT: Final = 1 << 62
_FADVISE: Final = getattr(os, "posix_fadvise", None)
_WILLNEED: Final = getattr(os, "POSIX_FADV_WILLNEED", 0)

_crc32: Final = zlib.crc32
_record_id: Final = attrgetter("internal_id")
_entry_id: Final = itemgetter(0)
_entry_position: Final = itemgetter(1)
_entry_timestamp: Final = itemgetter(2)


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


@attrs.frozen
class RecoveryReport:
    """What :meth:`TopicLog.open` found, and every loss it had to accept."""

    segments: int
    """Segment files in use after recovery."""
    records: int
    """Records held: the intact ones of the segments read, plus every id of the
    sealed segments not read at open (verified by their first read)."""
    next_id: int
    next_offset: int
    truncated_bytes: int
    """A torn tail cut from the last segment (a write the crash interrupted)."""
    skipped_records: int
    """Records lost to damaged bytes between intact records (the ids the damaged
    range held), left in place, skipped, and copied to a ``.bad`` file."""
    skipped_bytes: int
    missing_ids: int
    """Ids with no record between the first and the last intact one: skipped, or in a
    part of a segment that could not be read."""
    bad_files: tuple[str, ...]
    """``.bad`` files: whole unreadable segments, unreadable segment tails (moved),
    and copies of the damaged ranges skipped (``<segment>.<start>-<stop>.bad``)."""
    bad_bytes: int
    """Bytes moved to ``.bad`` files (the copies of skipped ranges are in
    :attr:`skipped_bytes`)."""
    empty_files_removed: int
    """Zero-length segment files (created, never written): removed, nothing lost."""
    verified_lazily: int = 0
    """Sealed segments whose records were not read at open: their header and size
    were right; their first read verifies them (and counts what it finds in
    :attr:`TopicLog.late_missing_ids`)."""

    @property
    def lossless(self) -> bool:
        """Whether recovery found everything intact."""
        return not (
            self.truncated_bytes
            or self.skipped_records
            or self.missing_ids
            or self.bad_bytes
            or self.bad_files
        )


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
    loop, as in :meth:`TopicLog._read_segment`, whose common case (an intact plain
    record with the next id) does as little as it can; the rest goes through the
    slower branch below it.
    """
    found = _Found([], first_id - 1, position, position)
    index = found.index
    last_id = first_id - 1
    # the id the common case wants: the next one
    expect = first_id if first_id < id_limit else -1
    timestamp_max = _TIMESTAMP_FLOOR
    mark = position
    unpack = _HEAD.unpack_from
    crc32 = _crc32
    chunk = _SCAN_CHUNK
    reason = None
    while position < end and reason is None:
        buffer = os.pread(fd, min(chunk, end - position), position)
        length = len(buffer)
        last = length - FIXED_SIZE
        view = memoryview(buffer)
        at = 0
        mark_at = mark - position
        damaged = None  # why the frame at ``at`` cannot be trusted, if it cannot
        while at <= last:
            size, crc, timestamp, internal_id, _, flags, ext_version = unpack(buffer, at)
            stop = at + 4 + size
            if stop > length or size < _MIN_SIZE_FIELD:
                break
            if (
                internal_id == expect
                and not (flags or ext_version)
                and crc32(view[at + _FIELDS_AT : stop]) == crc
            ):
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
                continue
            if (
                crc32(view[at + _FIELDS_AT : stop]) != crc
                or internal_id <= last_id
                or ((flags or ext_version) and _decode(buffer, at, 0, size) is None)
            ):
                damaged = "a damaged record"
                break
            if internal_id >= id_limit:
                reason = f"record {internal_id} belongs to the next segment"
                break
            if internal_id > last_id + 1:
                found.holes.append((last_id + 1, internal_id))
            if at >= mark_at:
                index.append((internal_id, position + at, timestamp_max))
                mark_at = at + interval
            if timestamp > timestamp_max:
                timestamp_max = timestamp
            last_id = internal_id
            expect = internal_id + 1 if internal_id + 1 < id_limit else -1
            at = stop
        view.release()
        mark = mark_at + position
        position += at
        if damaged is None and reason is None:
            if at:
                continue
            # Not one whole record in the buffer: a large record, or a bad size field.
            if length < _SIZE.size:
                reason = "the file is shorter than expected"
                break
            size = _SIZE.unpack_from(buffer)[0]
            if size < _MIN_SIZE_FIELD or position + 4 + size > end:
                damaged = f"impossible record size {size}"
            elif chunk >= 4 + size:
                reason = "the file is shorter than expected"
                break
            else:
                chunk = 4 + size
                continue
        if damaged is None:
            continue
        resumed = _resync(fd, position, end, last_id, id_limit)
        if resumed is None:
            reason = damaged
            break
        resume_at, resume_id = resumed
        found.gaps.append((position, resume_at, last_id + 1, resume_id))
        # the record found is intact: the loop takes it next, with no hole
        last_id = resume_id - 1
        expect = resume_id
        position = resume_at
        chunk = _SCAN_CHUNK
    found.last_id = last_id
    found.good_end = position
    found.stop = position
    found.reason = reason
    found.records = last_id - first_id + 1 - sum(hi - lo for lo, hi in found.missing())
    found.timestamp_max = timestamp_max
    return found


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


@attrs.define
class _Walk:
    """Where a walk over a segment's frames ended, and why if early."""

    stop: int
    reason: str | None = None


def _frames(
    fd: int, position: int, end: int, chunk: int, walk: _Walk
) -> Iterator[tuple[bytes, int, int, int]]:
    """Each record frame of a segment from ``position`` to ``end``, read in chunks.

    Yields (buffer, index in buffer, position in file, size field) for every frame
    whose size is possible and that fits before ``end``; the checksum is the caller's
    business. Stops at an impossible size field or a short read, with ``walk.reason``.
    """
    buffer = b""
    base = position
    while position < end:
        index = position - base
        if len(buffer) - index < _SIZE.size:
            if end - position < _SIZE.size:
                walk.reason = f"{end - position} bytes too short for a record"
                break
            buffer = os.pread(fd, min(chunk, end - position), position)
            base = position
            index = 0
            if len(buffer) < _SIZE.size:
                walk.reason = "the file is shorter than expected"
                break
        (size,) = _SIZE.unpack_from(buffer, index)
        stop = position + 4 + size
        if size < _MIN_SIZE_FIELD or stop > end:
            walk.reason = f"impossible record size {size}"
            break
        if stop - base > len(buffer):
            buffer = os.pread(fd, min(max(chunk, stop - position), end - position), position)
            base = position
            index = 0
            if len(buffer) < stop - position:
                walk.reason = "the file is shorter than expected"
                break
        yield buffer, index, position, size
        position = stop
    walk.stop = position


def _decode(buffer: bytes, index: int, offset: int, size: int) -> Record | None:
    """The record in a frame, or None if its checksum or its fields are wrong."""
    stop = index + 4 + size
    crc, timestamp, internal_id, trace_id, flags, ext_version = _HEAD.unpack_from(buffer, index)[1:]
    if _crc32(memoryview(buffer)[index + _FIELDS_AT : stop]) != crc:
        return None
    cursor = index + _BODY_AT
    deliver_at = 0
    if flags & DEFERRED:
        if cursor + _DELIVER_AT.size > stop:
            return None
        (deliver_at,) = _DELIVER_AT.unpack_from(buffer, cursor)
        cursor += _DELIVER_AT.size
    ext = b""
    if ext_version:
        if cursor + _EXT_LENGTH.size > stop:
            return None
        (length,) = _EXT_LENGTH.unpack_from(buffer, cursor)
        cursor += _EXT_LENGTH.size
        if cursor + length > stop:
            return None
        ext = buffer[cursor : cursor + length]
        cursor += length
    return Record(
        offset,
        size + 4,
        internal_id,
        timestamp,
        buffer[cursor:stop],
        trace_id,
        ext_version,
        ext,
        deliver_at,
    )


def _intact(buffer: bytes, index: int, size: int) -> tuple[int, int] | None:
    """(id, timestamp) of the record in a frame if it is intact, else None; builds no
    Record (recovery checks every record of the log)."""
    _, crc, timestamp, internal_id, _, flags, ext_version = _HEAD.unpack_from(buffer, index)
    if _crc32(buffer[index + _FIELDS_AT : index + 4 + size]) != crc:
        return None
    if (flags or ext_version) and _decode(buffer, index, 0, size) is None:
        return None
    return internal_id, timestamp


def _overlaps(header: tuple[int, int], segment: _Segment) -> bool:
    """Whether a segment with this (first offset, first id) starts inside ``segment``."""
    return header[1] < segment.next_id or header[0] < segment.end_offset


def _segment_of(segments: Sequence[_Segment], internal_id: int) -> int:
    """The index of the segment ``internal_id`` falls in (0 if before the first)."""
    return max(bisect_right(segments, internal_id, key=attrgetter("first_id")) - 1, 0)


def _record_offset(record: Record) -> int:
    return record.offset


def _open_to_read(path: str) -> int | None:
    """A read-only descriptor on a segment, or None if it was deleted (expired)."""
    try:
        return os.open(path, os.O_RDONLY | _O_CLOEXEC)
    except FileNotFoundError:
        return None


_RECORD_FIELDS: Final = (
    "offset",
    "raw_size",
    "internal_id",
    "timestamp",
    "body",
    "trace_id",
    "ext_version",
    "ext",
    "deliver_at",
)


def _slot_setters() -> tuple[Callable[[Record, object], None], ...] | None:
    """Record's slot descriptors, if Record is still the plain frozen attrs class this
    module knows (no validator, converter or init hook); None otherwise."""
    fields = attrs.fields(Record)
    if tuple(field.name for field in fields) != _RECORD_FIELDS or any(
        field.validator is not None or field.converter is not None or not field.init
        for field in fields
    ):
        return None
    if hasattr(Record, "__attrs_pre_init__") or hasattr(Record, "__attrs_post_init__"):
        return None
    if set(getattr(Record, "__slots__", ())) - {"__weakref__"} != set(_RECORD_FIELDS):
        return None  # e.g. a cached hash, which __init__ would have to reset
    descriptors = [vars(Record).get(name) for name in _RECORD_FIELDS]
    setters: list[Callable[[Record, object], None]] = []
    for descriptor in descriptors:
        if not isinstance(descriptor, MemberDescriptorType):
            return None
        setters.append(descriptor.__set__)
    return tuple(setters)


_SETTERS: Final = _slot_setters()


def _make_records(
    count: int,
    offsets: list[int],
    sizes: list[int],
    ids: range,
    timestamp: int,
    bodies: Sequence[bytes],
    trace_ids: Sequence[int] | None,
) -> list[Record]:
    """The records of a plain batch, built column by column.

    Equal to calling ``Record(...)`` per record, about a third faster: attrs' frozen
    ``__init__`` goes through ``object.__setattr__`` by name for each field, while
    this fills each slot for the whole batch with one ``map`` over its descriptor.
    Only used while :func:`_slot_setters` recognises Record.
    """
    traces = repeat(0, count) if trace_ids is None else trace_ids
    if _SETTERS is None:
        return list(
            map(
                Record,
                offsets,
                sizes,
                ids,
                repeat(timestamp, count),
                bodies,
                traces,
                repeat(0, count),
                repeat(b"", count),
                repeat(0, count),
            )
        )
    records = list(map(object.__new__, repeat(Record, count)))
    columns = (
        offsets,
        sizes,
        ids,
        repeat(timestamp, count),
        bodies,
        traces,
        repeat(0, count),
        repeat(b"", count),
        repeat(0, count),
    )
    for setter, column in zip(_SETTERS, columns, strict=True):
        deque(map(setter, records, column), 0)
    return records


def _encode_plain(
    bodies: Sequence[bytes],
    timestamp: int,
    first_id: int,
    offset: int,
    trace_ids: Sequence[int] | None,
) -> tuple[bytes, list[Record], list[int]]:
    """A batch with no ext and no delay: its bytes, its records, its offsets and end.

    Every per-record step is a ``map`` over a C function, which keeps the interpreter
    out of the loop: this is the MPUB hot path.
    """
    count = len(bodies)
    ids = range(first_id, first_id + count)
    zeros = repeat(0, count)
    lengths = list(map(len, bodies))
    fields = map(
        _FIELDS.pack,
        repeat(timestamp, count),
        ids,
        zeros if trace_ids is None else trace_ids,
        repeat(0, count),
        repeat(0, count),
    )
    payloads = list(map(add, fields, bodies))
    prefixes = map(
        _PREFIX.pack, map(add, lengths, repeat(FIXED_SIZE - 4, count)), map(_crc32, payloads)
    )
    data = b"".join(chain.from_iterable(zip(prefixes, payloads, strict=True)))
    sizes = list(map(add, lengths, repeat(FIXED_SIZE, count)))
    offsets = list(accumulate(sizes, initial=offset))
    records = _make_records(count, offsets, sizes, ids, timestamp, bodies, trace_ids)
    return data, records, offsets


def _encode_general(
    bodies: Sequence[bytes],
    timestamp: int,
    first_id: int,
    offset: int,
    trace_ids: Sequence[int] | None,
    ext_version: int,
    exts: Sequence[bytes] | None,
    deliver_at: int,
) -> tuple[bytes, list[Record], list[int]]:
    """Like :func:`_encode_plain`, for records with an ext header or a delivery time."""
    flags = DEFERRED if deliver_at else 0
    delay = _DELIVER_AT.pack(deliver_at) if deliver_at else b""
    parts: list[bytes] = []
    records: list[Record] = []
    offsets: list[int] = []
    internal_id = first_id
    for number, body in enumerate(bodies):
        ext = exts[number] if ext_version and exts is not None else b""
        if len(ext) > MAX_EXT_LENGTH:
            raise ValueError("ext header longer than its 2-byte length allows")
        trace_id = trace_ids[number] if trace_ids is not None else 0
        middle = delay + _EXT_LENGTH.pack(len(ext)) + ext if ext_version else delay
        payload = _FIELDS.pack(timestamp, internal_id, trace_id, flags, ext_version) + middle + body
        size = len(payload) + 8
        parts.append(_PREFIX.pack(size - 4, _crc32(payload)))
        parts.append(payload)
        records.append(
            Record(
                offset, size, internal_id, timestamp, body, trace_id, ext_version, ext, deliver_at
            )
        )
        offsets.append(offset)
        internal_id += 1
        offset += size
    offsets.append(offset)
    return b"".join(parts), records, offsets


@attrs.frozen
class _Chunk:
    """Cold records installed in memory; they stand for every id in [start, stop)."""

    start: int
    stop: int
    records: list[Record]
    dense: bool
    """No hole: ``records[i]`` has id ``records[0].internal_id + i``."""


@attrs.frozen
class _Head:
    """A segment file whose header was read at open."""

    seq: int
    path: str
    size: int
    first_offset: int
    first_id: int
    mtime: float


def _log_holes(name: str, path: str, found: _Found) -> None:
    """Log the ids a walk found missing between two intact records that touch."""
    for lo, hi in found.holes:
        storage_log.warning("TOPICLOG(%s) ids %d to %d are missing in %s", name, lo, hi - 1, path)


@attrs.define
class _Tally:
    """Counts recovery builds up (then frozen into a RecoveryReport)."""

    records: int = 0
    truncated_bytes: int = 0
    skipped_records: int = 0
    skipped_bytes: int = 0
    missing_ids: int = 0
    bad_files: list[str] = attrs.Factory(list)
    bad_bytes: int = 0
    empty_files_removed: int = 0


class TopicLog:
    """One topic partition's records in segment files, with MemoryLog's methods.

    Create with :meth:`open`. ``append``, ``read``, ``get``, ``is_cold``,
    ``install_chunk``, ``discard_before``, ``expire`` and ``close`` belong to one
    thread (the event loop's); ``read_cold``, the seeks and ``offset_of`` may run in
    other threads at the same time (see :meth:`read_cold`), and so may ``sync``.
    """

    on_disk = True
    """Records past the tail cache are read from the segment files."""

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
    ) -> None:
        """An empty log that has not looked at its directory: use :meth:`open`."""
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
        self._fd: int | None = None
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
        self._pending_fds: list[int] = []
        """Descriptors of rolled segments, to fsync and close at the next sync."""
        self._directory_dirty = False

    # -- opening and recovery -------------------------------------------------------

    @classmethod
    def open(
        cls,
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
    ) -> tuple[TopicLog, RecoveryReport]:
        """Open (creating the directory if needed) and recover the log ``name``.

        Rules. Every segment's header is read, and files are taken in order:

        - a zero-length file is removed: it was created and never written;
        - a file with a damaged header, or one whose header starts before the one
          before it, is renamed ``.bad`` (logged in nsqd's words: "jump to next file
          and saving bad file as"); a last file too short for a header is removed
          (a torn header);
        - a sealed segment (one a later segment follows) is not read: it must end
          where the next one's header starts (position ``32 + next first offset -
          its first offset``), and holds ids [first id, next first id).

          - Longer: the bytes past that point are a write that failed and could
            not be undone, then a roll (the later segment holds what was
            acknowledged); they are saved as ``<file>.bad`` and cut. A segment
            left with no record is removed.
          - Shorter (the segment after it was set aside, or it was cut before):
            it is read record by record at open, and the ids it lacks become
            holes. What follows its last intact record is saved as ``.bad`` and
            cut; with no intact record it is set aside.
          - Otherwise its records are verified by the first read or seek that
            needs them (:meth:`_checked`): damage found then is skipped, copied,
            logged and counted once (:attr:`late_missing_ids`), its ids holes, as
            at open. A damaged rest with no intact record after it stays in the
            file unread (and is copied), its ids holes: a read never changes a
            segment;

        - the last segment is read record by record. Damaged bytes (a bad
          checksum, bad fields, an impossible size field) followed by an intact
          record are skipped where they are: the walk resynchronises at the first
          intact record after them (:func:`_resync`), their ids become holes, a
          copy goes to ``<segment>.<start>-<stop>.bad``, one warning per range.
          What follows the last intact record (a torn write, or damage with
          nothing intact after it, which cannot be told from one) is truncated
          and not counted as lost. A segment whose header says it
          starts inside the one before cuts that one back to there;
        - ids of missing records between segments become holes;
        - ids continue after the last intact record, offsets after its end.

        The tail cache is filled with the last records of the segments read (a
        sealed one is not read for it). The logical start is the first segment's
        first id: the caller moves it on with :meth:`discard_before` from what its
        channels have confirmed.
        """
        log = cls(
            directory,
            name,
            max_bytes_per_file=max_bytes_per_file,
            cache_records=cache_records,
            retention=retention,
            clock=clock,
            index_interval=index_interval,
            max_chunks=max_chunks,
            cache_bytes=cache_bytes,
        )
        return log, log._recover()

    def _recover(self) -> RecoveryReport:
        self.directory.mkdir(parents=True, exist_ok=True)
        pattern = re.compile(re.escape(self.name) + r"\.(\d{6,})\.log(\.bad(\.\d+)?)?")
        found: list[tuple[int, str]] = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                match = pattern.fullmatch(entry.name)
                if match is None:
                    continue
                seq = int(match[1])
                # new segments never reuse the number of one set aside as .bad
                self._next_seq = max(self._next_seq, seq + 1)
                if match[2] is None and entry.is_file(follow_symlinks=False):
                    found.append((seq, entry.path))
        found.sort()
        tally = _Tally()
        heads = self._read_headers(found, tally)
        segments: list[_Segment] = []
        for number, head in enumerate(heads):
            previous = segments[-1] if segments else None
            if number + 1 < len(heads):
                segment = self._open_sealed(head, heads[number + 1], previous, tally)
            else:
                segment = self._recover_segment(head, is_last=True, previous=previous, tally=tally)
            if segment is None:
                continue
            if previous is not None and previous.end <= HEADER_SIZE:
                # cut back to nothing by the segment that follows it
                os.unlink(previous.path)
                self._directory_dirty = True
                segments.pop()
                previous = segments[-1] if segments else None
            if previous is not None and segment.first_id > previous.next_id:
                self._add_hole(previous.next_id, segment.first_id, tally)
                storage_log.warning(
                    "TOPICLOG(%s) ids %d to %d are missing between %s and %s",
                    self.name,
                    previous.next_id,
                    segment.first_id - 1,
                    previous.path,
                    segment.path,
                )
            segments.append(segment)
        self._segments = tuple(segments)
        self._disk_bytes = sum(segment.end for segment in segments)
        if segments:
            first = segments[0]
            last = segments[-1]
            check = last.check
            assert check is not None  # noqa: S101 - the last segment is always read
            self._start_id = first.first_id
            self.next_id = last.next_id
            self.next_offset = last.end_offset
            self._start_offset = self.next_offset
            for segment in segments:
                if segment.check is None:  # its first record, if intact
                    self._start_offset = segment.first_offset
                    break
                if segment.check.index:  # its first intact record
                    self._start_offset = (
                        segment.first_offset + segment.check.index[0][1] - HEADER_SIZE
                    )
                    break
            self._active = last
            self._active_check = check
            self._fd = os.open(last.path, os.O_WRONLY | os.O_APPEND | _O_CLOEXEC)
            self._mark = (
                last.first_offset + check.index[-1][1] - HEADER_SIZE + self.index_interval
                if check.index
                else last.first_offset
            )
        self._cache_base = self.next_id
        if self._directory_dirty:
            _fsync_directory(self.directory)
            self._directory_dirty = False
        self._load_tail()
        report = RecoveryReport(
            segments=len(segments),
            records=tally.records,
            next_id=self.next_id,
            next_offset=self.next_offset,
            truncated_bytes=tally.truncated_bytes,
            skipped_records=tally.skipped_records,
            skipped_bytes=tally.skipped_bytes,
            missing_ids=tally.missing_ids,
            bad_files=tuple(tally.bad_files),
            bad_bytes=tally.bad_bytes,
            empty_files_removed=tally.empty_files_removed,
            verified_lazily=sum(segment.check is None for segment in segments),
        )
        if not report.lossless:
            storage_log.warning("TOPICLOG(%s) recovered with losses: %s", self.name, report)
        return report

    def _read_headers(self, found: list[tuple[int, str]], tally: _Tally) -> list[_Head]:
        """The segment files in order, each with its header; what has no usable header
        is removed (empty, or a torn last header) or set aside."""
        files: list[tuple[int, str, bytes, os.stat_result]] = []
        for seq, path in found:
            fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
            try:
                status = os.fstat(fd)
                data = os.pread(fd, HEADER_SIZE, 0) if status.st_size else b""
            finally:
                os.close(fd)
            if status.st_size:
                files.append((seq, path, data, status))
            else:
                os.unlink(path)
                tally.empty_files_removed += 1
                self._directory_dirty = True
                storage_log.info("TOPICLOG(%s) removed empty segment %s", self.name, path)
        heads: list[_Head] = []
        for number, (seq, path, data, status) in enumerate(files):
            size = status.st_size
            header = _decode_header(data)
            if header is None and number == len(files) - 1 and size < HEADER_SIZE:
                os.unlink(path)
                self._directory_dirty = True
                tally.truncated_bytes += size
                storage_log.warning(
                    "TOPICLOG(%s) removed %s: %d bytes, a torn segment header",
                    self.name,
                    path,
                    size,
                )
                continue
            if header is None:
                self._set_aside(path, size, "damaged segment header", tally)
                continue
            first_offset, first_id = header
            if heads and (first_offset < heads[-1].first_offset or first_id < heads[-1].first_id):
                self._set_aside(path, size, f"segment overlaps {heads[-1].path}", tally)
                continue
            heads.append(_Head(seq, path, size, first_offset, first_id, status.st_mtime))
        return heads

    def _open_sealed(
        self, head: _Head, following: _Head, previous: _Segment | None, tally: _Tally
    ) -> _Segment | None:
        """A segment another one follows: its size checked against the next header,
        its records left for their first read. None if nothing is left of it."""
        if previous is not None and _overlaps((head.first_offset, head.first_id), previous):
            # the one before was read at open and holds ids of this one: as the last
            return self._recover_segment(head, is_last=False, previous=previous, tally=tally)
        expected = HEADER_SIZE + following.first_offset - head.first_offset
        size = head.size
        if size > expected:
            fd = os.open(head.path, os.O_RDWR | _O_CLOEXEC)
            try:
                bad = self._save_tail(fd, head.path, expected, size)
            finally:
                os.close(fd)
            tally.bad_files.append(bad)
            tally.bad_bytes += size - expected
            storage_log.warning(
                "TOPICLOG(%s) %s starts at position %d of %s: cut %d bytes (a write that "
                "failed, then a roll) from there, saved as %s",
                self.name,
                following.path,
                expected,
                head.path,
                size - expected,
                bad,
            )
            size = expected
        if size < expected:
            # Cut or set aside before: read it now, to know which ids it lacks.
            return self._recover_segment(head, is_last=False, previous=previous, tally=tally)
        if size <= HEADER_SIZE:
            os.unlink(head.path)
            self._directory_dirty = True
            if head.size <= HEADER_SIZE:
                tally.empty_files_removed += 1
            return None
        tally.records += following.first_id - head.first_id
        return _Segment(
            head.seq,
            head.path,
            head.first_id,
            head.first_offset,
            end=size,
            next_id=following.first_id,
            closed_at=head.mtime,
        )

    def _recover_segment(
        self, head: _Head, *, is_last: bool, previous: _Segment | None, tally: _Tally
    ) -> _Segment | None:
        """Check one segment record by record; None if nothing usable is left of it."""
        path = head.path
        size = head.size
        fd = os.open(path, os.O_RDWR | _O_CLOEXEC)
        try:
            header = (head.first_offset, head.first_id)
            reason = None
            if previous is not None and _overlaps(header, previous):
                self._cut_back(previous, head.first_offset, head.first_id, path, tally)
                if _overlaps(header, previous):
                    reason = f"segment overlaps {previous.path}"
            if reason is not None:
                os.close(fd)
                fd = -1
                self._set_aside(path, size, reason, tally)
                return None
            segment = _Segment(
                seq=head.seq,
                path=path,
                first_id=head.first_id,
                first_offset=head.first_offset,
                closed_at=head.mtime,
            )
            found = _walk_records(
                fd, HEADER_SIZE, size, head.first_id, _NO_LIMIT, self.index_interval
            )
            tally.bad_files.extend(self._keep_damaged(fd, path, found))
            _log_holes(self.name, path, found)
            for lo, hi in found.missing():
                self._add_hole(lo, hi, tally)
            tally.records += found.records
            tally.skipped_records += sum(hi - lo for _, _, lo, hi in found.gaps)
            tally.skipped_bytes += sum(stop - start for start, stop, _, _ in found.gaps)
            segment.check = found.check()
            segment.next_id = found.last_id + 1
            good_end = found.good_end
            tail = size - good_end
            why = found.reason or "damaged records"
            if tail and is_last:
                os.ftruncate(fd, good_end)
                os.fsync(fd)
                tally.truncated_bytes += tail
                storage_log.warning(
                    "TOPICLOG(%s) cut a torn tail of %d bytes at position %d of %s (%s)",
                    self.name,
                    tail,
                    good_end,
                    path,
                    why,
                )
            elif tail and good_end == HEADER_SIZE:
                os.close(fd)
                fd = -1
                self._set_aside(path, size, f"no intact record ({why})", tally)
                return None
            elif tail:
                bad = self._save_tail(fd, path, good_end, size)
                tally.bad_files.append(bad)
                tally.bad_bytes += tail
                storage_log.warning(
                    "TOPICLOG(%s) %s is unreadable from position %d (%s): kept %d bytes of "
                    "intact records, saved the other %d bytes as %s",
                    self.name,
                    path,
                    good_end,
                    why,
                    good_end,
                    tail,
                    bad,
                )
            elif not is_last and good_end == HEADER_SIZE:
                os.close(fd)
                fd = -1
                os.unlink(path)
                self._directory_dirty = True
                tally.empty_files_removed += 1
                return None
            segment.end = good_end
            return segment
        finally:
            if fd >= 0:
                os.close(fd)

    def _cut_back(
        self, segment: _Segment, first_offset: int, first_id: int, by: str, tally: _Tally
    ) -> None:
        """The segment after ``segment`` starts inside it: keep what lies before.

        This is what a write that failed and could not be truncated leaves (the log
        then rolls, and the next segment starts where the failed batch did): the
        records past that point were never acknowledged, and the later segment holds
        what was. They are saved as ``.bad`` and counted. Only for a segment read at
        open (a sealed one is cut by its size, see :meth:`_open_sealed`).
        """
        check = segment.check or _Check([])
        limit = HEADER_SIZE + first_offset - segment.first_offset
        entries = [entry for entry in check.index if entry[1] <= limit]
        start = entries[-1][1] if entries else HEADER_SIZE
        last_id = entries[-1][0] - 1 if entries else segment.first_id - 1
        good_end = start
        cut_records = 0
        fd = os.open(segment.path, os.O_RDWR | _O_CLOEXEC)
        try:
            for span_start, span_stop in _spans(check, start, segment.end):
                walk = _Walk(span_start)
                for buffer, at, position, size in _frames(
                    fd, span_start, span_stop, _SCAN_CHUNK, walk
                ):
                    intact = _intact(buffer, at, size)
                    if intact is None or intact[0] <= last_id:
                        continue
                    if position + 4 + size <= limit and intact[0] < first_id:
                        last_id = intact[0]
                        good_end = position + 4 + size
                    else:
                        cut_records += 1
            tail = segment.end - good_end
            bad = self._save_tail(fd, segment.path, good_end, segment.end)
        finally:
            os.close(fd)
        tally.records -= cut_records
        tally.bad_files.append(bad)
        tally.bad_bytes += tail
        segment.end = good_end
        segment.next_id = last_id + 1
        if segment.check is not None:
            # the greatest timestamp stays an upper bound: enough for the seeks
            segment.check = _Check(
                [entry for entry in check.index if entry[1] < good_end],
                check.timestamp_max,
                frozenset(p for p in check.damaged if p < good_end),
                gaps=tuple(gap for gap in check.gaps if gap[1] <= good_end),
            )
        kept = [hole for hole in self._holes if hole[0] < segment.next_id]
        tally.missing_ids -= sum(hi - lo for lo, hi in self._holes[len(kept) :])
        self._holes = kept
        storage_log.warning(
            "TOPICLOG(%s) %s starts inside %s: cut %d bytes (%d records of a write that "
            "failed) from position %d, saved as %s",
            self.name,
            by,
            segment.path,
            tail,
            cut_records,
            good_end,
            bad,
        )

    def _set_aside(self, path: str, size: int, reason: str, tally: _Tally) -> None:
        """A whole segment is unreadable: keep it as ``.bad``, in nsqd's words."""
        bad = _bad_path(path)
        os.rename(path, bad)
        self._directory_dirty = True
        tally.bad_files.append(bad)
        tally.bad_bytes += size
        storage_log.warning(
            "TOPICLOG(%s) %s in %s: jump to next file and saving bad file as %s",
            self.name,
            reason,
            path,
            bad,
        )

    def _save_tail(self, fd: int, path: str, start: int, size: int) -> str:
        """Copy bytes ``start:size`` to a new ``.bad`` file, then truncate them off."""
        bad = _bad_path(path)
        out = os.open(bad, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
        try:
            _copy_bytes(fd, out, start, size)
            os.fsync(out)
        finally:
            os.close(out)
        os.ftruncate(fd, start)
        os.fsync(fd)
        self._directory_dirty = True
        return bad

    def _keep_damaged(self, fd: int, path: str, found: _Found) -> list[str]:
        """Copy each damaged range a walk jumped over to a ``.bad`` file and log it, one
        line per range (segment, bytes, records lost); returns the files written."""
        kept: list[str] = []
        for start, stop, lo, hi in found.gaps:
            copy = self._copy_aside(fd, path, start, stop)
            if copy is not None:
                kept.append(copy)
            storage_log.warning(
                "TOPICLOG(%s) skipped %d damaged record(s), ids %d to %d, at bytes %d to %d "
                "of %s; the bytes are kept in %s",
                self.name,
                hi - lo,
                lo,
                hi - 1,
                start,
                stop,
                path,
                copy or "no file (could not write one)",
            )
        return kept

    def _copy_aside(self, fd: int, path: str, start: int, stop: int) -> str | None:
        """Copy damaged bytes [start, stop) of a segment to ``<segment>.<start>-<stop>.bad``
        (left as it is if an earlier start wrote it: the segment is not changed there).

        None if it cannot be written: logged, and recovery goes on, since the copy is
        for an operator, not for the log. Any thread (a first read may call it).
        """
        target = f"{path}.{start}-{stop}.bad"
        if os.path.lexists(target):
            return target
        try:
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
        except FileExistsError:
            return target
        except OSError as error:
            storage_log.error("TOPICLOG(%s) could not create %s: %s", self.name, target, error)
            return None
        try:
            _copy_bytes(fd, out, start, stop)
            os.fsync(out)
        except OSError as error:
            os.close(out)
            with contextlib.suppress(OSError):
                os.unlink(target)
            storage_log.error("TOPICLOG(%s) could not write %s: %s", self.name, target, error)
            return None
        os.close(out)
        with self._lock:
            self._directory_dirty = True
        return target

    def _add_hole(self, lo: int, hi: int, tally: _Tally) -> None:
        self._holes.append((lo, hi))
        tally.missing_ids += hi - lo

    def _load_tail(self) -> None:
        """Fill the tail cache from disk: the last contiguous ids, up to the cache size,
        from the segments read at open."""
        if not self.cache_records or self.next_id <= self._start_id:
            return
        first = max(self._start_id, self.next_id - self.cache_records)
        if self._holes:
            first = max(first, self._holes[-1][1])
        for segment in reversed(self._segments):
            if segment.check is None:  # sealed: reading it would verify it all
                first = max(first, segment.next_id)
                break
        floor = self.next_offset - self.cache_bytes  # no more than the byte bound either
        if self._segments and floor > self._segments[-1].first_offset:
            first = max(first, self.seek_offset(floor, floor=first))
        if first >= self.next_id:
            return
        records = self.read_cold(first, self.cache_records, max_bytes=1 << 62)
        if not records or records[-1].internal_id != self.next_id - 1:
            return
        start = len(records) - 1
        while start and records[start - 1].internal_id == records[start].internal_id - 1:
            start -= 1
        self._cache = records[start:]
        self._cache_base = records[start].internal_id

    # -- sizes ----------------------------------------------------------------------

    @property
    def start_id(self) -> int:
        """The oldest id still held (== ``next_id`` when empty)."""
        return self._start_id

    @property
    def start_offset(self) -> int:
        """The offset of the oldest record held (== ``next_offset`` when empty).

        Known in memory unless the start moved to a record neither cached nor in an
        installed chunk; then one bounded read (at most an index interval) finds it.
        """
        if self._start_offset is None:
            self._start_offset = self.offset_of(self._start_id)
        return self._start_offset

    @property
    def earliest_id(self) -> int:
        """The oldest id still in a segment file: below ``start_id`` while retention
        (or a partly released first segment) keeps it, so a channel can replay it."""
        segments = self._segments
        return min(segments[0].first_id, self._start_id) if segments else self._start_id

    def rewind(self, internal_id: int) -> None:
        """Move the logical start back to ``internal_id`` (not below
        :attr:`earliest_id`), for a channel set to replay from there.

        Those records are read from disk again; holes found before the earlier
        release are not remembered, so ``len`` may count them until they are read.
        """
        target = max(internal_id, self.earliest_id)
        if target < self._start_id:
            self._start_id = target
            self._start_offset = None

    def __len__(self) -> int:
        return self.next_id - self._start_id - self._missing(self._start_id, self.next_id)

    @property
    def holes(self) -> int:
        """Ids from ``start_id`` on with no record (recovery or a first read skipped
        them)."""
        return self._missing(self._start_id, self.next_id)

    @property
    def late_missing_ids(self) -> int:
        """Ids found missing after open, by the first read of a sealed segment
        (damaged records, an unreadable part); logged, and counted in :attr:`holes`
        as well while they are at or after ``start_id``."""
        with self._lock:
            return self._late_missing

    @property
    def bytes_held(self) -> int:
        """Record bytes held in memory: the tail cache and installed cold chunks."""
        held = 0
        if self._cache_skip < len(self._cache):
            held = self.next_offset - self._cache[self._cache_skip].offset
        for chunk in self._chunks:
            held += chunk.records[-1].end - chunk.records[0].offset
        return held

    @property
    def disk_bytes(self) -> int:
        """Bytes of the segment files (headers included)."""
        return self._disk_bytes

    @property
    def segment_count(self) -> int:
        return len(self._segments)

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

    # -- writing --------------------------------------------------------------------

    def append(
        self,
        bodies: Sequence[bytes],
        timestamp: int,
        *,
        trace_ids: Sequence[int] | None = None,
        ext_version: int = 0,
        exts: Sequence[bytes] | None = None,
        deliver_at: int = 0,
    ) -> list[Record]:
        """Append a batch (one PUB, or all of an MPUB) and return its records.

        The batch is in the kernel (one ``os.write``) when this returns, so it survives
        the broker being killed; :meth:`sync` makes it survive a power loss. On an
        error nothing is appended (the partial write is truncated off).
        """
        count = len(bodies)
        if not count:
            return []
        if self._closed:
            raise ValueError(f"TOPICLOG({self.name}) is closed")
        if (trace_ids is not None and len(trace_ids) < count) or (
            ext_version and exts is not None and len(exts) < count
        ):
            raise ValueError("trace_ids and exts need one entry per body")
        first_id = self.next_id
        offset = self.next_offset
        if ext_version or deliver_at:
            data, records, offsets = _encode_general(
                bodies, timestamp, first_id, offset, trace_ids, ext_version, exts, deliver_at
            )
        else:
            data, records, offsets = _encode_plain(bodies, timestamp, first_id, offset, trace_ids)
        segment = self._active
        check = self._active_check
        if (
            segment is None
            or self._force_roll
            or (segment.end > HEADER_SIZE and segment.end + len(data) > self.max_bytes_per_file)
        ):
            segment = self._roll()
            check = self._active_check
        if segment.end == 0:
            data = _encode_header(segment.first_offset, segment.first_id) + data
        self._write(segment, data)
        # Committed: readers in other threads go by ``end``, so it moves first.
        segment.end += len(data)
        segment.next_id = first_id + count
        if offsets[-2] >= self._mark:
            self._index(segment, check, offsets, first_id, timestamp)
        if timestamp > check.timestamp_max:
            check.timestamp_max = timestamp
        self.next_id = first_id + count
        self.next_offset = offsets[-1]
        self._disk_bytes += len(data)
        self._cache_append(records)
        with self._lock:
            self.unsynced += count
        return records

    def _index(
        self, segment: _Segment, check: _Check, offsets: list[int], first_id: int, timestamp: int
    ) -> None:
        """Add the sparse index entries due in a batch just written (``offsets``: the
        batch's record offsets, then its end)."""
        last = len(offsets) - 1
        position_base = HEADER_SIZE - segment.first_offset
        mark = self._mark
        at = bisect_left(offsets, mark, 0, last)
        index = check.index
        while at < last:
            before = check.timestamp_max if at == 0 else max(check.timestamp_max, timestamp)
            index.append((first_id + at, offsets[at] + position_base, before))
            mark = offsets[at] + self.index_interval
            at = bisect_left(offsets, mark, at + 1, last)
        self._mark = mark

    def _write(self, segment: _Segment, data: bytes) -> None:
        """All of ``data`` to the active segment, or nothing (then re-raise)."""
        fd = self._fd
        assert fd is not None  # noqa: S101 - set together with _active
        try:
            written = os.write(fd, data)
            if written != len(data):
                view = memoryview(data)
                while written < len(data):
                    step = os.write(fd, view[written:])
                    if step <= 0:
                        raise OSError("os.write wrote nothing")
                    written += step
        except OSError as error:
            if error.errno is not None and error.filename is None:
                error.filename = segment.path
            try:
                os.ftruncate(fd, segment.end)
            except OSError as undo:
                # The file may end in part of this batch: never write after it.
                self._force_roll = True
                storage_log.error(
                    "TOPICLOG(%s) could not undo a failed write to %s: %s",
                    self.name,
                    segment.path,
                    undo.strerror or undo,
                )
            raise

    def _roll(self) -> _Segment:
        """Start a new segment at ``next_id`` / ``next_offset``; its header goes out
        with the first batch."""
        seq = self._next_seq
        path = str(self.directory / segment_name(self.name, seq))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _O_CLOEXEC, 0o644)
        self._next_seq = seq + 1
        check = _Check([])
        segment = _Segment(
            seq, path, self.next_id, self.next_offset, next_id=self.next_id, check=check
        )
        old = self._active
        with self._lock:
            if self._fd is not None:
                self._pending_fds.append(self._fd)
            self._fd = fd
            self._directory_dirty = True
        if old is not None:
            old.closed_at = self._clock()
        self._segments = (*self._segments, segment)
        self._active = segment
        self._active_check = check
        self._mark = segment.first_offset
        self._force_roll = False
        return segment

    def sync(self) -> None:
        """fsync what was written: rolled segments, the active one, the directory.

        Blocks (milliseconds): may run in a worker thread while the event loop
        appends, but not at the same time as another ``sync`` or ``close``.
        """
        with self._lock:
            pending = self._pending_fds
            self._pending_fds = []
            fd = self._fd
            directory_dirty = self._directory_dirty
            self._directory_dirty = False
            self.unsynced = 0
        failure: OSError | None = None
        for old in pending:  # each is closed, even after a failed fsync
            try:
                os.fsync(old)
            except OSError as error:
                failure = failure or error
            finally:
                os.close(old)
        try:
            if fd is not None:
                os.fsync(fd)
            if directory_dirty:
                _fsync_directory(self.directory)
        except OSError as error:
            failure = failure or error
        if failure is not None:
            with self._lock:  # the directory entry may not be durable yet
                self._directory_dirty = self._directory_dirty or directory_dirty
            if failure.errno is not None and failure.filename is None:
                failure.filename = self.name
            raise failure

    def close(self, *, sync: bool = True) -> None:
        """Stop taking writes; fsync first unless ``sync`` is False."""
        if self._closed:
            return
        if sync:
            self.sync()
        self._closed = True
        with self._lock:
            fds = [*self._pending_fds, *([self._fd] if self._fd is not None else [])]
            self._pending_fds = []
            self._fd = None
        for fd in fds:
            os.close(fd)

    def delete_files(self) -> None:
        """Close and remove every segment file (topic or channel deleted)."""
        self.close(sync=False)
        for segment in self._segments:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(segment.path)
        self._segments = ()
        self._disk_bytes = 0

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

    # -- releasing ------------------------------------------------------------------

    def discard_before(self, internal_id: int, *, now: float | None = None) -> int:
        """Move the logical start to ``internal_id``; returns how many records that
        released. Segments wholly before it are deleted as :meth:`expire` allows."""
        target = min(internal_id, self.next_id)
        start = self._start_id
        released = 0
        if target > start:
            released = target - start - self._missing(start, target)
            self._start_offset = self._offset_in_memory(target)
            self._start_id = target
            skip = target - self._cache_base
            if skip > self._cache_skip:
                self._cache_skip = min(skip, len(self._cache))
            self._chunks = [chunk for chunk in self._chunks if chunk.stop > target]
            self._holes = [hole for hole in self._holes if hole[1] > target]
        self.expire(now)
        return released

    def expire(self, now: float | None = None) -> int:
        """Delete the segments retention lets go; returns how many.

        A segment goes when all its ids are below ``start_id``, it is not the active
        one, and (with ``retention`` > 0) it stopped taking writes that long ago.
        Call now and then when retention is on: age alone does not trigger it.
        """
        if self._undeleted:
            undeleted, self._undeleted = self._undeleted, []
            for path in undeleted:
                self._unlink(path, again=True)
        segments = self._segments
        if len(segments) < 2:
            return 0
        if now is None:
            now = self._clock()
        count = 0
        for segment in segments:
            if (
                segment is self._active
                or segment.next_id > self._start_id
                or (self.retention > 0 and now - segment.closed_at < self.retention)
            ):
                break
            count += 1
        if not count:
            return 0
        self._segments = segments[count:]
        for segment in segments[:count]:
            self._unlink(segment.path)
            self._disk_bytes -= segment.end
        with self._lock:
            self._directory_dirty = True
        return count

    def _unlink(self, path: str, *, again: bool = False) -> None:
        """Remove an expired segment; if refused (read-only, I/O error), keep its name
        to try at the next :meth:`expire` and say so once. Its records are below every
        channel's start, so a restart before it goes only skips them again."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as error:
            self._undeleted.append(path)
            if not again:
                storage_log.warning(
                    "TOPICLOG(%s) cannot remove expired segment %s yet: %s",
                    self.name,
                    path,
                    error.strerror or error,
                )

    # -- reading from disk (any thread) ---------------------------------------------

    def read_cold(
        self, from_id: int, max_records: int, max_bytes: int = COLD_CHUNK_BYTES
    ) -> list[Record]:
        """Up to ``max_records`` records (about ``max_bytes``) from ``from_id`` on, read
        from the segment files. Blocking, and meant for a worker thread.

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
        - ``_start_id``, one integer read.

        Each call opens its own descriptor per segment and closes it, so closing
        or deleting segments meanwhile cannot make it read another file. A segment
        deleted before it was opened held only ids below the start: the read stops
        there if it has records (so what it returns is one run of the log, with no
        gap but holes), else it goes on to the next segment. It never touches the
        tail cache, the chunks or the write descriptor. It returns records appended
        before the call, and perhaps some appended during it.
        """
        segments = self._segments
        from_id = max(from_id, self._start_id)
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
                    if check is not None:
                        budget = self._read_spans(
                            fd, segment, check, position, end, from_id, out, max_records, budget
                        )
                finally:
                    os.close(fd)
                if len(out) >= max_records or budget <= 0:
                    break
            position = HEADER_SIZE
        return out

    def _read_spans(
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
        """:meth:`_read_segment` over each run of records between damaged ranges."""
        for span_start, span_stop in _spans(check, position, min(end, check.end)):
            budget = self._read_segment(
                fd, segment, check, span_start, span_stop, from_id, out, max_records, budget
            )
            if len(out) >= max_records or budget <= 0:
                break
        return budget

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

        The hot loop of cold reads: it walks each buffer itself, not via
        :func:`_frames`, and checks the checksum only of records it returns.
        """
        offset_base = segment.first_offset - HEADER_SIZE
        unpack = _HEAD.unpack_from
        crc32 = _crc32
        make = Record
        add = out.append
        chunk = max(min(budget, COLD_CHUNK_BYTES * 4), INDEX_INTERVAL)
        wanted = max_records - len(out)
        problem = None
        if _FADVISE is not None and position + chunk < end:
            # the kernel fetches what the next cold read will want while this decodes
            _FADVISE(fd, position + chunk, min(chunk, end - position - chunk), _WILLNEED)
        while position < end and wanted > 0 and budget > 0:
            buffer = os.pread(fd, min(chunk, end - position), position)
            length = len(buffer)
            view = memoryview(buffer)
            at = 0
            while length - at >= FIXED_SIZE:
                size, crc, timestamp, internal_id, trace_id, flags, ext_version = unpack(buffer, at)
                stop = at + 4 + size
                if stop > length or size < _MIN_SIZE_FIELD:
                    break
                if internal_id >= from_id:
                    if flags or ext_version:
                        record = _decode(buffer, at, offset_base + position + at, size)
                    elif crc32(view[at + _FIELDS_AT : stop]) == crc:
                        record = make(
                            offset_base + position + at,
                            size + 4,
                            internal_id,
                            timestamp,
                            buffer[at + _BODY_AT : stop],
                            trace_id,
                            0,
                            b"",
                            0,
                        )
                    else:
                        record = None
                    if record is None:
                        self._damaged_on_read(segment, check, position + at)
                    else:
                        add(record)
                        wanted -= 1
                        budget -= size + 4
                        if not wanted or budget <= 0:
                            at = stop
                            break
                at = stop
            view.release()
            if at:
                position += at
                continue
            # Not one whole record in the buffer: a large record, or a bad size field.
            size = _SIZE.unpack_from(buffer)[0] if length >= _SIZE.size else -1
            if size < _MIN_SIZE_FIELD or position + 4 + size > end:
                problem = f"impossible record size {size}"
                break
            if chunk >= 4 + size:
                problem = "the file is shorter than expected"
                break
            chunk = 4 + size
        if problem is not None:
            storage_log.warning(
                "TOPICLOG(%s) %s is unreadable from position %d (%s); skipped to the next segment",
                self.name,
                segment.path,
                position,
                problem,
            )
        return budget

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

    def _checked(self, segment: _Segment, fd: int | None = None) -> _Check | None:
        """The segment's check; a sealed segment not read yet is verified first.

        Blocking, any thread. ``fd``: a descriptor open on the segment, if the caller
        has one. None if the file is gone (the segment expired meanwhile).

        Only the thread that holds ``segment.checking`` verifies; it builds the whole
        :class:`_Check` and assigns it to ``segment.check`` at once. Others wait for
        the lock, then find it set (or read it without the lock if already set).
        """
        check = segment.check
        if check is not None:
            return check
        with segment.checking:
            check = segment.check
            if check is None:
                check = self._verify(segment, fd)
                segment.check = check
        return check

    def _verify(self, segment: _Segment, fd: int | None) -> _Check | None:
        """Read a sealed segment record by record, as recovery reads the last one, and
        log and count what is lost. Runs once per segment (under ``checking``); changes
        nothing in it: damaged ranges are jumped over (and copied to ``.bad`` files), an
        unreadable rest stays in the file, past the check's end (and is copied too)."""
        own = fd is None
        if fd is None:
            fd = _open_to_read(segment.path)
            if fd is None:
                return None
        rest = None
        try:
            found = _walk_records(
                fd, HEADER_SIZE, segment.end, segment.first_id, segment.next_id, self.index_interval
            )
            self._keep_damaged(fd, segment.path, found)
            if found.good_end < segment.end:
                rest = self._copy_aside(fd, segment.path, found.good_end, segment.end)
        finally:
            if own:
                os.close(fd)
        _log_holes(self.name, segment.path, found)
        holes = found.missing()
        if found.last_id + 1 < segment.next_id:
            holes.append((found.last_id + 1, segment.next_id))
        if found.good_end < segment.end:
            storage_log.warning(
                "TOPICLOG(%s) %s is unreadable from position %d (%s): %s; the bytes from "
                "there are kept in %s",
                self.name,
                segment.path,
                found.good_end,
                found.reason or "damaged records",
                f"ids {found.last_id + 1} to {segment.next_id - 1} are missing"
                if found.last_id + 1 < segment.next_id
                else "no id is missing",
                rest or "no file (could not write one)",
            )
        if holes:
            with self._lock:
                self._found_holes.extend(holes)
                self._late_missing += sum(hi - lo for lo, hi in holes)
        return found.check(found.good_end)

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
