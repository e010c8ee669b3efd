"""What the persister writes and in which order, run on a worker thread: each durable
channel's state captured on the broker's thread (:func:`channel_state`), then the
delay stores and the logs dead letters went to made durable before any state that
counts on them is written (:func:`sync_then_write`), each file atomically."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import crash_points
from ..persist import ensure_directory, write_atomic
from ..queues.cursor import ChannelCursor
from ..queues.cursor_state import ChannelState, capture_state

if TYPE_CHECKING:
    from pathlib import Path

    from ..descriptors import FileHandle
    from ..queues.delay_store import DelayStore
    from ..queues.topic_log import TopicLog
    from .channel import Channel

__all__ = ["channel_state", "sync_logs", "sync_then_write", "write_all"]


def channel_state(channel: Channel, now: float, wall: int) -> ChannelState:
    """What a durable channel persists, read on the broker's thread."""

    cursor = channel.cursor
    if not isinstance(cursor, ChannelCursor):
        raise TypeError("an ephemeral channel has no state")
    return capture_state(
        cursor,
        channel.deferred,
        paused=channel.paused,
        now_monotonic=now,
        now_wall_ns=wall,
        finished_ahead=channel.finished_ahead(),
        attempts=channel.delivery_counts(),
    )


def sync_logs(logs: set[TopicLog]) -> tuple[set[TopicLog], OSError] | None:
    """fsync each log; None, or the logs not synced and the first error."""
    failed: set[TopicLog] = set()
    first: OSError | None = None
    for topic_log in logs:
        try:
            topic_log.sync()
        except OSError as error:
            failed.add(topic_log)
            first = first or error
    return None if first is None else (failed, first)


def sync_then_write(
    syncs: list[tuple[DelayStore, FileHandle]],
    logs: set[TopicLog],
    writes: list[tuple[Path, bytes]],
) -> tuple[list[bool], OSError | None]:
    """fsync the delay stores and the logs dead letters went to, then write the files
    (:func:`write_all`); when an fsync fails nothing is written (a state must not
    count a message as finished whose PARK or dead letter may not be on disk), and
    they are synced again later."""
    first: OSError | None = None
    for store, handle in syncs:
        try:
            handle.fsync()
        except OSError as error:
            first = first or error
            store.unsynced_again()  # a flag: safe from this thread
    failed = sync_logs(logs) if first is None else None
    if failed is not None:
        first = failed[1]
    if first is not None:
        return [False] * len(writes), first
    if logs and crash_points.ARMED:
        crash_points.reached("storage.dead_letters_synced")
    return write_all(writes)


def write_all(writes: list[tuple[Path, bytes]]) -> tuple[list[bool], OSError | None]:
    """Write each file atomically: which were written, and the first error."""
    written: list[bool] = []
    first: OSError | None = None
    for path, data in writes:
        try:
            ensure_directory(path.parent)
            write_atomic(path, data)
        except OSError as error:
            first = first or error
            written.append(False)
        else:
            written.append(True)
    return written, first
