"""After a restart: the dead-letter moves a crash cut short, resolved from the
channel's delivery journal before the broker serves (``dead_letter_moves.py`` says
how a move is ordered; docs/storage.md "Dead letters and crashes").

Storage calls it while it recovers a channel; it reads logs only, so it needs the
channel and the logs, not the mover.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .dead_letters import came_from

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..queues.delivery_journal import Move
    from ..queues.partition_log import PartitionLog
    from ..queues.record import Record
    from .channel import Channel

__all__ = ["resolve_moves"]


def resolve_moves(
    channel: Channel, moves: Iterable[Move], logs: Mapping[tuple[str, int], PartitionLog]
) -> None:
    """After a restart: each journaled move of a message ``channel`` still holds is
    finished if its dead letter is in the target's log, and leaves again if not;
    then every message restored at the channel's own bound leaves too (blocking
    reads: at start only)."""
    unfinished = channel.unfinished
    latest: dict[int, tuple[Move, int]] = {}
    for move in moves:  # the latest move of an id wins
        for index, (internal_id, _) in enumerate(move.messages):
            latest[internal_id] = (move, index)
    leaving: dict[int, int] = {}
    for internal_id, (move, index) in latest.items():
        if not unfinished(internal_id):
            continue
        record = _record(channel.log, internal_id)
        target = logs.get((move.topic, move.partition))
        there = _record(target, move.first_id + index) if target is not None else None
        origin = (channel.topic, channel.name, channel.partition)
        if record is not None and there is not None and came_from(there, record.body, *origin):
            channel.finished_at_restart(internal_id)
        else:
            leaving[internal_id] = move.messages[index][1]
    bound = channel.max_attempts
    if bound:
        for internal_id, deliveries in channel.restored_counts():
            if deliveries >= bound and internal_id not in leaving and unfinished(internal_id):
                leaving[internal_id] = deliveries
    for internal_id in sorted(leaving):
        record = _record(channel.log, internal_id)
        if record is not None:  # cut from the log by recovery: counted lost there
            channel.leave_at_restart(record, leaving[internal_id])


def _record(log: PartitionLog, internal_id: int) -> Record | None:
    """One record of ``log``, from memory or its files (blocking)."""
    record = log.get(internal_id)
    if record is None and log.on_disk and internal_id < log.next_id:
        cold = log.read_cold(internal_id, 1)
        record = cold[0] if cold and cold[0].internal_id == internal_id else None
    return record
