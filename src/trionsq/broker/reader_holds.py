"""Reader holds: named positions that keep a partition's records from being released.

A reader by offset (``broker/log_reads.py``: the Spark source) has no channel, so
nothing it has not read yet is safe from retention: once every channel confirmed a
record, the log releases it and its segment goes. A hold fixes that. While a hold
named ``reader`` sits at offset O, the partition releases nothing from O on
(:meth:`~trionsq.broker.topic.Partition.release` and the last channel's deletion take
the lowest hold as their floor); the reader moves it forward as it commits, and
removes it when done. A partition with no channel keeps everything anyway, as before.

Holds of durable topics are saved in ``<data-path>/channels/<topic>-<partition>/
holds.json`` (beside the channel state files, written atomically the same way), before
the request that made them is answered, and restored at start; a hold whose reader
name is ``#ephemeral`` is kept in memory only, as an ephemeral channel is. Format
(version 1), holds sorted by reader::

    {"version":1,"holds":[{"reader":"spark-orders","offset":4096,"internal_id":33}]}
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from ..persist import (
    StorageFormatError,
    decode_versioned,
    ensure_directory,
    read_optional,
    remove_file,
    storage_converter,
    write_atomic,
)
from ..protocol.names import is_ephemeral, is_valid_name
from ..queues.cursor_state import partition_state_directory
from ..serialization import dumps
from .holds import ReaderHold, ReaderHolds
from .log_reads import ReadError, id_at_offset, replayable_log

if TYPE_CHECKING:
    import os
    from collections.abc import Awaitable, Callable

    from ..queues.partition_log import PartitionLog
    from .topic import Partition

__all__ = [
    "HOLDS_FILE",
    "HOLDS_VERSION",
    "HoldsError",
    "HoldsFile",
    "ReaderHold",
    "ReaderHolds",
    "decode_holds",
    "encode_holds",
    "fit_holds",
    "holds_path",
    "load_holds",
    "move_hold",
    "release_hold",
    "save_holds",
]

storage_log = logging.getLogger("trionsq.storage")

HOLDS_VERSION: Final = 1
HOLDS_FILE: Final = "holds.json"
"""Never a channel's file: those end in ``.state``."""

_CONVERTER: Final = storage_converter()


class HoldsError(StorageFormatError):
    """A holds file that cannot be used."""


@attrs.frozen
class HoldsFile:
    """A partition's saved holds: see the module docstring for the format."""

    version: int
    holds: tuple[ReaderHold, ...]


# ------------------------------------------------------------------ moving holds


async def move_hold(
    partition: Partition,
    reader: str,
    offset: int,
    *,
    save: Callable[[], Awaitable[None]],
) -> ReaderHold:
    """Create or move ``reader``'s hold on ``partition`` to ``offset``, then ``save``.

    The offset must be readable (from the oldest offset held to the log's end) and a
    record's start. If ``save`` fails, the hold goes back to what it was and its
    error propagates.

    Raises:
        ReadError: an ephemeral topic, or an offset :func:`id_at_offset` refuses.
    """
    log = replayable_log(partition)
    internal_id = await id_at_offset(log, offset)
    if internal_id < log.earliest_id:  # retention went on while the seek ran
        raise ReadError(f"offset {offset} is no longer held")
    hold = ReaderHold(reader, offset, internal_id)
    previous = partition.hold(hold)
    try:
        await save()
    except BaseException:
        _undo(partition, hold, previous)
        raise
    return hold


async def release_hold(
    partition: Partition, reader: str, *, save: Callable[[], Awaitable[None]]
) -> ReaderHold | None:
    """Remove ``reader``'s hold (None if it has none), then ``save``; if that fails,
    the hold comes back and the error propagates."""
    removed = partition.unhold(reader)
    if removed is None:
        return None
    try:
        await save()
    except BaseException:
        partition.hold(removed)
        raise
    return removed


def _undo(partition: Partition, hold: ReaderHold, previous: ReaderHold | None) -> None:
    if partition.holds.get(hold.reader) != hold:
        return  # moved again meanwhile: the later request decides
    if previous is None:
        partition.unhold(hold.reader)
    else:
        partition.hold(previous)


def fit_holds(
    log: PartitionLog, holds: tuple[ReaderHold, ...], *, label: str
) -> tuple[ReaderHold, ...]:
    """Saved holds fitted to the log found at start (blocking: may read segments).

    A hold below the oldest record left (segments removed by hand) or beyond the end
    (a power loss cut the log) is moved to the nearest end, with a warning.
    """
    fitted: list[ReaderHold] = []
    earliest, end = log.earliest_id, log.next_id
    for hold in holds:
        internal_id = min(max(hold.internal_id, earliest), end)
        if internal_id != hold.internal_id:
            offset = log.offset_of(internal_id, floor=earliest)
            storage_log.warning(
                "%s: reader hold %s at id %d (offset %d) is outside the log (ids %d to %d);"
                " moved to id %d (offset %d)",
                label,
                hold.reader,
                hold.internal_id,
                hold.offset,
                earliest,
                end,
                internal_id,
                offset,
            )
            hold = ReaderHold(hold.reader, offset, internal_id)
        fitted.append(hold)
    return tuple(fitted)


# ------------------------------------------------------------------ files


def holds_path(data_path: str | os.PathLike[str], topic: str, partition: int) -> Path:
    """``<data-path>/channels/<topic>-<partition>/holds.json``."""
    return partition_state_directory(data_path, topic, partition) / HOLDS_FILE


def encode_holds(holds: tuple[ReaderHold, ...]) -> bytes:
    """Compact JSON bytes (the module docstring's format)."""
    return dumps(HoldsFile(HOLDS_VERSION, holds), _CONVERTER)


def decode_holds(data: bytes, *, what: str = HOLDS_FILE) -> tuple[ReaderHold, ...]:
    """Parse and check a holds file; ``what`` names it in errors.

    Raises:
        HoldsError: not a usable version-1 holds file.
    """
    found = decode_versioned(
        data, HoldsFile, _CONVERTER, version=HOLDS_VERSION, what=what, error=HoldsError
    )
    seen: set[str] = set()
    for hold in found.holds:
        if not is_valid_name(hold.reader.encode()) or is_ephemeral(hold.reader):
            raise HoldsError(f"{what}: reader {hold.reader!r} is not a valid durable name")
        if hold.reader in seen:
            raise HoldsError(f"{what}: reader {hold.reader!r} listed twice")
        if hold.offset < 0 or hold.internal_id < 1:
            raise HoldsError(f"{what}: reader {hold.reader!r} has a negative position")
        seen.add(hold.reader)
    return found.holds


def load_holds(path: str | os.PathLike[str]) -> tuple[ReaderHold, ...]:
    """The holds saved in ``path`` (none if there is no file; blocking).

    Raises:
        HoldsError: the file is there but unusable.
    """
    data = read_optional(path)
    return () if data is None else decode_holds(data, what=str(path))


def save_holds(path: str | os.PathLike[str], holds: tuple[ReaderHold, ...]) -> None:
    """Write the holds atomically, or remove the file when there are none (blocking)."""
    if not holds:
        remove_file(path)
        return
    ensure_directory(Path(path).parent)
    write_atomic(path, encode_holds(holds))
