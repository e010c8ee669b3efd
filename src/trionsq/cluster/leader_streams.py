"""The leader's end of a follower's replication connection.

One connection per follower and partition: FOLLOW and START until the follower
knows where its log agrees with the leader's (epochs.py), its ACK of that point,
then RECORDS as the log grows (the log's own bytes, read back from its segment
file once for every follower; which records, from memory or, when the follower is
behind the tail cache, from the files in a worker thread), COMMIT when only the
commit end moved and no RECORDS carried it within a few milliseconds, and the
follower's ACKs back, which move the commit end. A heartbeat COMMIT goes out when
nothing else did for a while, so a silent follower is noticed.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from operator import attrgetter
from typing import TYPE_CHECKING, Final

import trio

from ..protocol.replication import (
    Ack,
    Commit,
    Follow,
    FrameReader,
    Records,
    Refuse,
    ReplicationError,
    Start,
    State,
    encode,
)
from .raw_stream import RawStream

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..queues.record import Record
    from .roles import LeaderRole

__all__ = ["serve_follower"]

log = logging.getLogger("trionsq.cluster")

READ: Final = 1 << 16
BATCH_RECORDS: Final = 2048
BATCH_BYTES: Final = 1 << 20
"""Most records and bytes per RECORDS frame."""
COMMIT_DELAY: Final = 0.005
"""Seconds a moved commit end waits for the next RECORDS frame to carry it before it
goes alone: while publishes flow, the follower is not woken once more per batch
for it (it needs it only once elected, and START tells it then too). An ACK wakes
the streams only when it commits the whole log (``LeaderRole.acked``): before
that, a RECORDS frame still to come carries the commit end."""
_end: Final = attrgetter("end")


async def _receive(stream: trio.SocketStream, reader: FrameReader) -> list[object]:
    data = await stream.receive_some(READ)
    if not data:
        raise trio.BrokenResourceError("follower closed the connection")
    return list(reader.feed(data))


async def serve_follower(
    stream: trio.SocketStream,
    find_role: Callable[[str, int], LeaderRole | None],
    heartbeat: float,
) -> None:
    """Serve one follower until it or the leadership goes."""
    reader = FrameReader(expect_magic=True)
    try:
        follower, role, position = await _handshake(stream, reader, find_role)
    except (ReplicationError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
        log.info("replication handshake failed: %s", error)
        return
    if role is None:
        return
    log.info(
        "%s/%d: %s follows from id %d (epoch %d)",
        role.partition.topic,
        role.partition.index,
        follower,
        position,
        role.epoch,
    )
    try:
        async with trio.open_nursery() as nursery:
            raw = RawStream(stream)
            nursery.start_soon(_read_acks, raw, reader, role, follower, nursery.cancel_scope)
            await _send(raw, role, position, heartbeat)
    except* (
        ReplicationError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
        OSError,
    ) as group:
        # except*: from the nursery, even one error comes wrapped in a group
        log.info(
            "%s/%d: stream to %s ended: %s",
            role.partition.topic,
            role.partition.index,
            follower,
            "; ".join(str(error) for error in group.exceptions),
        )
    finally:
        if not role.lost:
            role.progress.forget(follower)


async def _handshake(
    stream: trio.SocketStream,
    reader: FrameReader,
    find_role: Callable[[str, int], LeaderRole | None],
) -> tuple[str, LeaderRole | None, int]:
    """FOLLOW/START rounds until the follower ACKs the point it cut its log to."""
    role: LeaderRole | None = None
    follower = ""
    frames: list[object] = []
    while True:
        while not frames:
            frames = await _receive(stream, reader)
        frame = frames.pop(0)
        if isinstance(frame, Follow):
            role = find_role(frame.topic, frame.partition)
            follower = frame.follower
            if role is None or role.lost or role.epoch != frame.epoch:
                reason = f"not the leader of {frame.topic}/{frame.partition} in epoch {frame.epoch}"
                await stream.send_all(encode(Refuse(reason)))
                return follower, None, 0
            epoch, end = role.files.history.answer(frame.last_epoch, role.partition.log.next_id)
            await stream.send_all(encode(Start(epoch, end, role.progress.committed)))
        elif isinstance(frame, Ack) and role is not None:
            if frame.end > role.partition.log.next_id:
                await stream.send_all(encode(Refuse(f"end {frame.end} is past the leader's log")))
                return follower, None, 0
            role.acked(follower, frame.end)
            return follower, role, frame.end
        else:
            raise ReplicationError(f"unexpected {type(frame).__name__} before the follower's ACK")


async def _read_acks(
    stream: RawStream,
    reader: FrameReader,
    role: LeaderRole,
    follower: str,
    done: trio.CancelScope,
) -> None:
    """The follower's ACKs, until it closes (which ends the stream's nursery)."""
    try:
        while True:
            for frame in reader.feed(await stream.receive(READ)):
                if isinstance(frame, Ack):
                    role.acked(follower, frame.end)
                elif isinstance(frame, Refuse):
                    log.info("%s refused the stream: %s", follower, frame.reason)
                    done.cancel()
                    return
    finally:
        done.cancel()


async def _send(stream: RawStream, role: LeaderRole, position: int, heartbeat: float) -> None:
    """RECORDS from ``position`` on as the log grows; COMMIT when only that moved and
    no RECORDS (which carry it) went for :data:`COMMIT_DELAY`."""
    sent_commit = -1
    sent_state = 0
    commit_due: float | None = None
    while not role.lost:
        grown = role.grown_event()
        partition_log = role.partition.log
        if position < partition_log.next_id:
            records = await _read(role, position)
            if records:
                records, data = role.shipment(records)
                first = records[0]
                epoch = role.files.history.epoch_at(first.internal_id)
                sent_commit = role.progress.committed
                frame = Records(epoch, sent_commit, first.internal_id, first.offset, data)
                await stream.send(encode(frame))
                position = records[-1].internal_id + 1
                commit_due = None
                if position < partition_log.next_id:  # catching up: the others run between
                    await trio.lowlevel.checkpoint()
                continue
        if role.progress.committed != sent_commit:
            now = trio.current_time()
            if commit_due is None:
                commit_due = now + COMMIT_DELAY
            if now < commit_due:
                with trio.move_on_at(commit_due):
                    await grown.wait()
                continue
            sent_commit = role.progress.committed
            commit_due = None
            await stream.send(encode(Commit(sent_commit)))
            continue
        if role.state_version != sent_state:  # caught up: the consumer state too
            sent_state = role.state_version
            await stream.send(encode(State(role.state_bytes)))
            continue
        with trio.move_on_after(heartbeat):
            await grown.wait()
            continue
        await stream.send(encode(Commit(sent_commit)))  # heartbeat
    await stream.send(encode(Refuse(f"leadership of epoch {role.epoch} is over")))


async def _read(role: LeaderRole, position: int) -> list[Record]:
    """Records from ``position``, of one epoch, within the batch bounds."""
    partition_log = role.partition.log
    stop = role.files.history.next_start(position)
    count = BATCH_RECORDS if stop is None else min(BATCH_RECORDS, stop - position)
    if partition_log.is_cold(position):
        records = await trio.to_thread.run_sync(
            partition_log.read_cold, position, count, BATCH_BYTES
        )
    else:
        records = partition_log.read(position, count)
    records = records[:count]
    if not records:
        return records
    fits = bisect_right(records, records[0].offset + BATCH_BYTES, key=_end)
    return records[: max(fits, 1)]
