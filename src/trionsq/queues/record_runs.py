"""Records moved between logs as bytes (replication, docs/replication.md).

A replica must hold exactly the leader's bytes: the records of one publish share
their timestamp, delivery time and ext version, so a run of records that share them
encodes (with the log's own encoders: compiled where built) to the bytes the
leader's log holds, and decodes back with the checksums verified. A replica that
needs no Record of what it copies checks the bytes with :func:`scan_copies` instead.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Final

import attrs

from ..speedups import compiled
from .record import FIXED_SIZE, Record, RecordError
from .record_codec import (
    _FIELDS_AT,
    _HEAD,
    _MIN_SIZE_FIELD,
    _crc32,
    _decode,
    _decode_run,
    _encode_batch,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "CopyScan",
    "batch_runs",
    "decode_all",
    "encode_records",
    "scan_copies",
    "whole_records",
]

_end: Final = attrgetter("end")
_raw_size: Final = attrgetter("raw_size")


def batch_runs(records: Sequence[Record]) -> list[Sequence[Record]]:
    """Consecutive records that were one batch as far as the log can tell."""
    runs: list[Sequence[Record]] = []
    start = 0
    count = len(records)
    for index in range(1, count + 1):
        if index == count or _batch_key(records[index]) != _batch_key(records[start]):
            runs.append(records[start:index])
            start = index
    return runs


def _batch_key(record: Record) -> tuple[int, int, int]:
    return record.timestamp, record.deliver_at, record.ext_version


def encode_records(records: Sequence[Record]) -> bytes:
    """The log's bytes for ``records`` (consecutive ids)."""
    parts: list[bytes] = []
    for run in batch_runs(records):
        first = run[0]
        bodies = [record.body for record in run]
        traces = [record.trace_id for record in run]
        exts = [record.ext for record in run] if first.ext_version else None
        data, _, _ = _encode_batch(
            bodies,
            first.timestamp,
            first.internal_id,
            first.offset,
            traces,
            first.ext_version,
            exts,
            first.deliver_at,
        )
        parts.append(data)
    return b"".join(parts)


def decode_all(data: bytes, offset: int) -> list[Record]:
    """Every record of ``data`` (which starts at ``offset``), checksums verified.

    Raises:
        RecordError: a damaged record, or bytes left that are not a whole record.
    """
    records: list[Record] = []
    at, _, _, damaged = _decode_run(
        data, 0, offset, 0, len(data) + 1, len(data) + 1, Record, records
    )
    if damaged or at != len(data):
        raise RecordError(f"records damaged or cut at byte {at} of {len(data)}")
    return records


def whole_records(records: Sequence[Record], size: int) -> int:
    """How many of ``records`` (from consecutive ids, the first where the bytes start)
    the first ``size`` bytes of their log hold whole and back to back; 0 if those
    leave a gap (a damaged stretch recovery skipped) or hold no whole record."""
    if not records:
        return 0
    first = records[0]
    count = bisect_right(records, first.offset + size, key=_end)
    if not count:
        return 0
    last = records[count - 1]
    if last.internal_id - first.internal_id != count - 1:
        return 0
    if last.end - first.offset != sum(map(_raw_size, records[:count])):
        return 0
    return count


@attrs.frozen
class CopyScan:
    """What a replica's durable log needs of records it copies as they are, found
    without a Record per message (a follower's CPU went mostly to making them)."""

    first_id: int
    offsets: Sequence[int]
    """Each record's offset, then the end of the last."""
    stamps: Sequence[int]
    """The greatest timestamp up to each record (a log's index keeps it)."""
    body_bytes: int
    """The records' body lengths summed (the topic's byte count)."""

    @property
    def count(self) -> int:
        """How many records."""
        return len(self.stamps)


def scan_copies(data: bytes, offset: int, first_id: int) -> CopyScan:
    """Check that ``data`` (which starts at ``offset``) is whole, intact records with
    ids from ``first_id`` on, one after another, and give what the log keeps of them.

    Raises:
        RecordError: no record, a damaged one, a gap in the ids, or bytes left over.
    """
    at, body_bytes, offsets, stamps = _scan_copies(data, offset, first_id)
    if at != len(data) or not stamps:
        raise RecordError(
            f"records from id {first_id} damaged, cut or out of sequence at byte {at}"
            f" of {len(data)}"
        )
    return CopyScan(first_id, offsets, stamps, body_bytes)


def _scan_copies_py(
    data: bytes, offset: int, first_id: int
) -> tuple[int, int, array[int], array[int]]:
    """The pure-Python twin of ``trionsq._speedups.scan_copies``: walk the records of
    ``data`` while each is whole, intact and has the next id; returns where the walk
    stopped, the body bytes, the offsets (then the end) and the running greatest
    timestamps."""
    unpack = _HEAD.unpack_from
    offsets = array("q")
    stamps = array("q")
    view = memoryview(data)
    length = len(data)
    at = body = high = 0
    expected = first_id
    while length - at >= FIXED_SIZE:
        size, crc, timestamp, internal_id, _, flags, ext_version = unpack(data, at)
        stop = at + size + 4
        if stop > length or size < _MIN_SIZE_FIELD or internal_id != expected:
            break
        if flags or ext_version:
            record = _decode(data, at, 0, size)
            if record is None:
                break
            body += len(record.body)
        elif _crc32(view[at + _FIELDS_AT : stop]) == crc:
            body += stop - at - FIXED_SIZE
        else:
            break
        if expected == first_id or timestamp > high:
            high = timestamp
        offsets.append(offset + at)
        stamps.append(high)
        expected += 1
        at = stop
    view.release()
    offsets.append(offset + at)
    return at, body, offsets, stamps


_scan_copies: Final[Callable[[bytes, int, int], tuple[int, int, array[int], array[int]]]] = (
    _scan_copies_py if compiled is None else compiled.scan_copies
)
"""Compiled where built (checksums verified with the GIL released), else
:func:`_scan_copies_py`."""
