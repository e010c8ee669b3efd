"""Where SUB_ADVANCED and ``/channel/setoffset`` move a channel (Youzan's consume offsets).

An offset spec (spec tcp-protocol.md §8.6) names a place in one partition's log by
time, by byte offset ("virtual queue" offset), by message count, or the tail. Youzan
resolves all but the tail through its cluster coordinator; here the log answers
directly, so every kind works standalone. A spec that names no place this log can
start from is an error and moves nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ..protocol.commands import OffsetSpec
    from ..queues.partition_log import PartitionLog

__all__ = ["FIRST_ID", "OffsetError", "resolve_offset"]

FIRST_ID: Final = 1
"""The id of a partition's first message ever: ``msgcount:N`` starts after N of them."""
_NS_PER_SECOND: Final = 1_000_000_000


class OffsetError(ValueError):
    """The spec names no place this partition's log can start a channel from."""


def resolve_offset(log: PartitionLog, spec: OffsetSpec) -> int:
    """The id a channel reads next to start where ``spec`` says.

    May read segment files (a durable log's seeks), so for one call it from a worker
    thread, as the router does cold reads. Positions go back as far as the log still
    has records on disk (:attr:`PartitionLog.earliest_id`), which is what retention
    keeps for replay.

    - ``special:-1``: the tail, skipping the backlog.
    - ``timestamp:S``: the first message published at or after S (Unix seconds);
      before the oldest held: the oldest; after the newest: the tail.
    - ``virtual_queue:B``: the message starting at byte offset B (as in traced
      replies: ``queue_offset``); B must be a message's start or the end of the log.
    - ``msgcount:N``: after the partition's first N messages (N = 0: its first).
    """
    next_id = log.next_id
    earliest = log.earliest_id
    kind, value = spec.kind, spec.value
    if kind == "special":
        return next_id
    if kind == "timestamp":
        if value <= 0:
            return earliest
        return min(log.seek_timestamp(value * _NS_PER_SECOND, floor=earliest), next_id)
    if kind == "msgcount":
        total = next_id - FIRST_ID
        if not 0 <= value <= total:
            raise OffsetError(f"consume offset {spec} out of range: the queue has {total} messages")
        target = FIRST_ID + value
        if target < earliest:
            raise OffsetError(
                f"consume offset {spec} is no longer held: the oldest is"
                f" msgcount:{earliest - FIRST_ID}"
            )
        return target
    if kind == "virtual_queue":
        return _at_byte_offset(log, spec, next_id, earliest)
    raise OffsetError(f"not supported offset type: {spec}")


def _at_byte_offset(log: PartitionLog, spec: OffsetSpec, next_id: int, earliest: int) -> int:
    end = log.next_offset
    offset = spec.value
    if offset == end:
        return next_id
    if not 0 <= offset < end:
        raise OffsetError(f"consume offset {spec} out of range: the queue ends at {end}")
    oldest = log.offset_of(earliest, floor=earliest)
    if offset < oldest:
        raise OffsetError(f"consume offset {spec} is no longer held: the oldest is {oldest}")
    target = log.seek_offset(offset, floor=earliest)
    if target >= next_id or log.offset_of(target, floor=earliest) != offset:
        raise OffsetError(f"consume offset {spec} is not the start of a message")
    return target
