"""Records moved between logs as bytes (replication, docs/replication.md).

A replica must hold exactly the leader's bytes: the records of one publish share
their timestamp, delivery time and ext version, so a run of records that share them
encodes (with the log's own encoders: compiled where built) to the bytes the
leader's log holds, and decodes back with the checksums verified.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import attrgetter
from typing import TYPE_CHECKING, Final

from .record import Record, RecordError
from .record_codec import _decode_run, _encode_general, _encode_plain

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["batch_runs", "decode_all", "encode_records", "whole_records"]

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
        if first.ext_version or first.deliver_at:
            exts = [record.ext for record in run] if first.ext_version else None
            data, _, _ = _encode_general(
                bodies,
                first.timestamp,
                first.internal_id,
                first.offset,
                traces,
                first.ext_version,
                exts,
                first.deliver_at,
            )
        else:
            data, _, _ = _encode_plain(
                bodies, first.timestamp, first.internal_id, first.offset, traces
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
