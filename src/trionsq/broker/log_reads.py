"""Reading a partition log by byte offset, for readers that are not channels (issue 17).

A channel consumes: it has a cursor, in-flight messages and a state file. A reader by
offset (the Spark source, ``GET /partition/read``) only looks: it names a byte offset
(a record's ``offset``, as in traced replies and SUB_ORDERED), gets the records from
there in pages, and continues from the page's ``next_offset``. Nothing it does moves a
channel or changes a file. It may read everything the log still has: the records
channels have released but retention has not deleted yet (down to
:attr:`~trionsq.queues.partition_log.PartitionLog.earliest_id`) as well as the rest.

Where the records come from:

- memory (the tail cache, or chunks channels installed), without a worker thread,
  when the page's first record is there. Each page remembers the id its
  ``next_offset`` starts at (a few hundred per log), so a reader paging through the
  tail never seeks;
- otherwise the segment files, in a worker thread (a seek, then one cold read from
  the page's first id with ``floor=earliest_id``), as channels' cold reads do.

Offsets a read refuses (:class:`ReadError`): below the oldest one held, past the end,
or not the start of a record. The end itself is a valid offset with no record yet.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from functools import partial
from itertools import accumulate
from operator import attrgetter
from typing import TYPE_CHECKING, Final, TypeAlias, TypeVar

import attrs
import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..queues.partition_log import PartitionLog
    from ..queues.record import Record
    from .topic import Partition

    ReplayableLog: TypeAlias = PartitionLog
    """A partition log that can be read by offset (what :func:`replayable_log`
    returns): the name the transport layer uses, so it needs nothing from queues."""

__all__ = [
    "PartitionOffsets",
    "ReadError",
    "ReplayableLog",
    "earliest_offset",
    "id_at_offset",
    "offset_after",
    "offsets",
    "read_from_offset",
    "replayable_log",
]

T = TypeVar("T")

MAX_HINTS: Final = 256
"""Continuations remembered per log: ``next_offset`` -> the id it starts at."""
_raw_size: Final = attrgetter("raw_size")


class ReadError(ValueError):
    """An offset this partition cannot be read from; the text says why."""


@attrs.frozen
class PartitionOffsets:
    """Where a partition's readable records begin and end, at one moment."""

    earliest_offset: int
    """The offset of the oldest record still readable (``latest_offset`` if none)."""
    latest_offset: int
    """The end of the log: where the next record published will start."""
    earliest_id: int
    next_id: int
    timestamp_offset: int | None = None
    """With a timestamp: the offset of the first record published at or after it
    (``latest_offset`` if none is)."""


class _Hints:
    """What reads of one log remember: the earliest offset for the earliest id, and
    the id each recently returned ``next_offset`` starts at."""

    def __init__(self) -> None:
        self.earliest: tuple[int, int] | None = None
        """(earliest_id, its offset), as last found."""
        self.ids: dict[int, int] = {}

    def remember(self, offset: int, internal_id: int) -> None:
        ids = self.ids
        ids[offset] = internal_id
        if len(ids) > MAX_HINTS:
            del ids[next(iter(ids))]


_HINTS: Final[weakref.WeakKeyDictionary[PartitionLog, _Hints]] = weakref.WeakKeyDictionary()


def _hints(log: PartitionLog) -> _Hints:
    found = _HINTS.get(log)
    if found is None:
        found = _HINTS[log] = _Hints()
    return found


def replayable_log(partition: Partition) -> PartitionLog:
    """The partition's log, unless its topic is ephemeral (nothing to replay there).

    Raises:
        ReadError: an ``#ephemeral`` topic.
    """
    if partition.ephemeral:
        raise ReadError(f"topic {partition.topic} is ephemeral: it keeps no log to read by offset")
    return partition.log


async def _blocking(log: PartitionLog, function: Callable[[], T]) -> T:
    """Run a seek or cold read: in a worker thread for a log on disk, else here."""
    if log.on_disk:
        return await trio.to_thread.run_sync(function)
    return function()


async def earliest_offset(log: PartitionLog) -> int:
    """The offset of the oldest record still readable (the log's end if none).

    Found once per oldest id (a bounded read for a log on disk), then remembered.
    """
    earliest_id = log.earliest_id
    if earliest_id >= log.next_id:
        return log.next_offset
    hints = _hints(log)
    known = hints.earliest
    if known is not None and known[0] == earliest_id:
        return known[1]
    offset = await _blocking(log, partial(log.offset_of, earliest_id, floor=earliest_id))
    hints.earliest = (earliest_id, offset)
    return offset


async def offsets(log: PartitionLog, timestamp_ns: int | None = None) -> PartitionOffsets:
    """The log's earliest and latest offsets and ids; with ``timestamp_ns``, also the
    offset of the first record published at or after it."""
    earliest = await earliest_offset(log)
    found = PartitionOffsets(earliest, log.next_offset, log.earliest_id, log.next_id)
    if timestamp_ns is None:
        return found
    floor = found.earliest_id
    at = await _blocking(log, partial(_offset_at_time, log, timestamp_ns, floor))
    return attrs.evolve(found, timestamp_offset=min(max(at, earliest), log.next_offset))


def _offset_at_time(log: PartitionLog, timestamp_ns: int, floor: int) -> int:
    next_id, next_offset = log.next_id, log.next_offset
    internal_id = log.seek_timestamp(timestamp_ns, floor=floor)
    if internal_id >= next_id:
        return next_offset
    return log.offset_of(internal_id, floor=floor)


async def _check_bounds(log: PartitionLog, offset: int) -> int:
    """Refuse an offset outside [earliest, latest]; the earliest offset."""
    latest = log.next_offset
    if offset > latest:
        raise ReadError(f"offset {offset} is past the end of the partition ({latest})")
    earliest = await earliest_offset(log)
    if offset < earliest:
        raise ReadError(f"offset {offset} is no longer held: the oldest is {earliest}")
    return earliest


async def _not_a_start(log: PartitionLog, offset: int) -> ReadError:
    """Why nothing starts at ``offset``: retention may have deleted it meanwhile."""
    earliest = await earliest_offset(log)
    if offset < earliest:
        return ReadError(f"offset {offset} is no longer held: the oldest is {earliest}")
    return ReadError(f"offset {offset} is not the start of a message")


async def id_at_offset(log: PartitionLog, offset: int) -> int:
    """The id of the record starting at ``offset`` (``next_id`` for the log's end).

    Raises:
        ReadError: the offset is not held, past the end, or not a record's start.
    """
    await _check_bounds(log, offset)
    if offset == log.next_offset:
        return log.next_id
    floor = log.earliest_id
    hint = _hints(log).ids.get(offset)
    if hint is not None:
        record = log.get(hint)
        if record is not None and record.offset == offset:
            return hint
    internal_id, start = await _blocking(log, partial(_seek, log, offset, floor))
    if start != offset:
        raise await _not_a_start(log, offset)
    return internal_id


async def offset_after(log: PartitionLog, offset: int, count: int) -> int:
    """Where ``count`` records from the one at ``offset`` end: the offset of the
    record ``count`` ids later, or the log's end (a batch bound for a reader that
    takes at most ``count`` at a time; ids recovery found damaged count too).

    Raises:
        ReadError: ``offset`` is not held, past the end, or not a record's start.
    """
    first = await id_at_offset(log, offset)
    target = first + count
    if target >= log.next_id:
        return log.next_offset
    floor = log.earliest_id
    return await _blocking(log, partial(log.offset_of, target, floor=floor))


def _seek(log: PartitionLog, offset: int, floor: int) -> tuple[int, int]:
    """(id, offset) of the first record at or after ``offset`` (-1 as offset if none)."""
    internal_id = log.seek_offset(offset, floor=floor)
    if internal_id >= log.next_id:
        return internal_id, -1
    return internal_id, log.offset_of(internal_id, floor=floor)


async def read_from_offset(
    log: PartitionLog, offset: int, *, max_records: int, max_bytes: int
) -> tuple[list[Record], int]:
    """Up to ``max_records`` records from the one starting at ``offset`` on, and the
    offset to read next.

    ``max_bytes`` bounds the records' stored size (``raw_size``), but the first
    record is returned even if it alone is larger. At the end of the log: no
    records, and ``offset`` again. Nothing changes: no channel moves, nothing is
    installed in the log's memory.

    Raises:
        ReadError: the offset is not held, past the end, or not a record's start.
        OSError: a segment could not be read.
    """
    await _check_bounds(log, offset)
    if offset == log.next_offset:
        return [], offset
    hints = _hints(log)
    hint = hints.ids.get(offset)
    records: list[Record] | None = None
    if hint is not None:
        records = _from_memory(log, hint, offset, max_records)
    if records is None and not log.on_disk:
        records = _from_memory(log, log.seek_offset(offset), offset, max_records)
    if records is None:
        floor = log.earliest_id
        read = partial(_read_cold, log, offset, hint, floor, max_records, max_bytes)
        records = await trio.to_thread.run_sync(read)
    if not records or records[0].offset != offset:
        raise await _not_a_start(log, offset)
    page, following = _page(records, max_records, max_bytes)
    last = page[-1]
    if following is None:
        next_offset, next_id = last.end, last.internal_id + 1
    else:
        next_offset, next_id = following.offset, following.internal_id
    hints.remember(next_offset, next_id)
    return page, next_offset


def _from_memory(
    log: PartitionLog, internal_id: int, offset: int, max_records: int
) -> list[Record] | None:
    """The page (and one record after it) from memory, if its first record is there."""
    found = log.read(internal_id, max_records + 1)
    if found and found[0].offset == offset:
        return found
    return None


def _read_cold(
    log: PartitionLog,
    offset: int,
    hint: int | None,
    floor: int,
    max_records: int,
    max_bytes: int,
) -> list[Record]:
    """The page (and one record after it, when within reach) from the segment files:
    from the remembered id if it still starts at ``offset``, else after a seek.
    Blocking: in a worker thread."""

    def read(from_id: int) -> list[Record]:
        # read_cold stops once max_bytes is spent, counting the record that spends it:
        # that record (if beyond max_bytes) is the one after the page
        return log.read_cold(from_id, max_records + 1, max_bytes, floor=floor)

    if hint is not None:
        records = read(hint)
        if records and records[0].offset == offset:
            return records
    internal_id = log.seek_offset(offset, floor=floor)
    if internal_id >= log.next_id:
        return []
    return read(internal_id)


def _page(
    records: list[Record], max_records: int, max_bytes: int
) -> tuple[list[Record], Record | None]:
    """The records that fit ``max_records`` and ``max_bytes`` (at least one), and the
    record after them if known."""
    sizes = list(accumulate(map(_raw_size, records[:max_records])))
    count = max(bisect_right(sizes, max_bytes), 1)
    return records[:count], records[count] if count < len(records) else None
