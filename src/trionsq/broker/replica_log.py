"""A replica's side of a replicated partition's log: copies of the leader's records,
and cutting back a tail the leader does not have (docs/replication.md).

A follower appends the leader's records exactly: the bytes the leader's log holds,
written as they came (checked, not encoded again), hence the same ids, timestamps,
trace ids, headers, DPUB times and offsets. Keys of ``##idempotency_key`` headers
are remembered as the leader remembered them, so a publish retried after a
failover is still stored once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..queues.cursor import ChannelCursor
from ..queues.log_cut import cut_segment_files, restart_segment_files
from ..queues.memory_log import MemoryLog
from ..queues.record_runs import decode_all, scan_copies
from ..queues.topic_log import TopicLog
from . import idempotence

if TYPE_CHECKING:
    from ..queues.partition_log import PartitionLog
    from .broker import Broker
    from .storage import Storage
    from .topic import Partition

__all__ = ["CopyError", "append_copies", "restart_partition", "truncate_partition"]

log = logging.getLogger("trionsq.cluster")


class CopyError(ValueError):
    """The leader's records do not continue this replica's log."""


def append_copies(
    broker: Broker, topic: str, index: int, data: bytes, first_id: int, first_offset: int
) -> None:
    """Append the leader's records from ``first_id`` (at ``first_offset``: continuing
    this log), ``data`` their bytes in the leader's log, written as they are after a
    check of each record (:func:`scan_copies`): nothing is encoded again, and no
    Record is made unless a memory log, a feed or idempotency keys need them.

    Raises:
        CopyError: they do not start at this log's end.
        RecordError: a damaged record, a gap in the ids, or a record cut short.
        OSError: the log refused the write.
    """
    partition = broker.topics[topic].partitions[index]
    partition_log = partition.log
    if first_id != partition_log.next_id or first_offset != partition_log.next_offset:
        raise CopyError(
            f"{topic}/{index}: records from id {first_id} (offset {first_offset}) do not"
            f" continue the log at {partition_log.next_id} ({partition_log.next_offset})"
        )
    scan = scan_copies(data, first_offset, first_id)
    window = broker.config.idempotency_window
    keyed = window > 0 and idempotence.may_hold_keys(data)
    records = (
        decode_all(data, first_offset)
        if keyed or not partition_log.on_disk or partition.feeds_records
        else None
    )
    partition.append_copies(data, scan, records)
    if broker.storage is not None:
        broker.storage.appended(partition.log, scan.count)
    if keyed and records is not None:
        table = idempotence.remember_copies(partition.idempotence, window, records)
        partition.idempotence = idempotence.journaled(table, partition.log, window)


def truncate_partition(broker: Broker, topic: str, index: int, end_id: int) -> int:
    """Remove the partition's records from ``end_id`` on; returns how many went.

    A durable log is closed, cut on disk and opened again (recovered as after a
    stop); channel cursors past the cut move back to it, and the idempotency keys
    are rebuilt from what stays.
    """
    partition = broker.topics[topic].partitions[index]
    old = partition.log
    if end_id >= old.next_id:
        return 0
    count = old.next_id - end_id
    if isinstance(old, MemoryLog):
        old.truncate(end_id)
    elif isinstance(old, TopicLog) and broker.storage is not None:
        storage = broker.storage
        offset = old.offset_of(end_id)
        _close(storage, topic, index, old)
        cut_segment_files(old.directory, old.name, offset)
        _swap_log(partition, storage.open_log(topic, index))
    else:  # pragma: no cover - every log is one of the two
        raise TypeError(f"cannot cut a {type(old).__name__}")
    for channel in partition.channels.values():
        cursor = channel.cursor
        if isinstance(cursor, ChannelCursor) and cursor.read_id > end_id:
            channel.move_to(min(cursor.confirmed_id, end_id))
    partition.idempotence = idempotence.restore(partition.log, broker.config.idempotency_window)
    idempotence.rewrite_journal(partition.idempotence)
    log.warning("%s/%d: cut %d records from id %d (not on the leader)", topic, index, count, end_id)
    return count


def restart_partition(
    broker: Broker, topic: str, index: int, first_id: int, first_offset: int
) -> None:
    """Drop every record of the partition and start its log at ``first_id`` (at
    ``first_offset``): the leader no longer holds what this replica lacks before it."""
    partition = broker.topics[topic].partitions[index]
    old = partition.log
    if isinstance(old, TopicLog) and broker.storage is not None:
        storage = broker.storage
        _close(storage, topic, index, old)
        restart_segment_files(old.directory, old.name, first_id, first_offset)
        new = storage.open_log(topic, index)
    else:
        new = MemoryLog(first_id=first_id, first_offset=first_offset)
    _swap_log(partition, new)
    for channel in partition.channels.values():
        if isinstance(channel.cursor, ChannelCursor):
            channel.move_to(max(first_id, min(channel.cursor.confirmed_id, first_id)))
    partition.idempotence = None
    log.warning(
        "%s/%d: log restarted at id %d (the leader holds nothing older)", topic, index, first_id
    )


def _close(storage: Storage, topic: str, index: int, old: TopicLog) -> None:
    """Close a log to change its files; the storage opens it anew afterwards."""
    old.close(sync=True)
    storage.logs.pop((topic, index), None)
    storage._unsynced.discard(old)  # closed: not to be synced again


def _swap_log(partition: Partition, new: PartitionLog) -> None:
    partition.log = new
    for channel in partition.channels.values():
        channel.log = new
        if isinstance(channel.cursor, ChannelCursor):
            channel.cursor.log = new
