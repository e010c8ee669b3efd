"""A follower's replication connection to its partition's leader.

Connect, FOLLOW with the epoch of the last record held, cut the log where it agrees
with the leader's (asking again with older epochs when the leader's answer names
an epoch this log lacks: epochs.py), ACK that point, then append every RECORDS
frame as it is (``broker/replica_log.py``) and ACK the new end after each read's
frames: one durable append and one ACK per read, not per record. The consumer state
the leader ships is applied at most once a :data:`STATE_APPLY_INTERVAL`, and the
last one at once when the role ends (an election: the new leader serves from it).
A broken connection is tried again after a short pause, for as long as the role
lasts.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Final, NamedTuple

import trio

from ..broker.replica_log import CopyError, append_copies, restart_partition, truncate_partition
from ..broker.replica_state import apply_consumer_state
from ..config import split_host_port
from ..protocol import replication as wire
from ..queues.record import RecordError
from .raw_stream import RawStream

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..broker.broker import Broker
    from ..server.admission import ConnectionGate
    from .roles import FollowerRole

__all__ = ["LEADER_WITHOUT_ROOM", "follow"]

log = logging.getLogger("trionsq.cluster")

READ: Final = 1 << 20
STATE_APPLY_INTERVAL: Final = 1.0
"""Seconds between applications of the consumer state the leader ships (10 times a
second while consumers finish messages): only a leader serves from it, so a
follower applies the last one it got at once when it is elected (its role's end),
and otherwise at most this often, for its own files. Applying every shipment cost
a follower a fifth of its CPU while 4 consumers read 130k messages a second."""
RETRY: Final = 0.2
"""Seconds between connection attempts to the leader."""
NO_ROOM_RETRY: Final = 1.0
"""Seconds between attempts while this broker's or the leader's descriptor budget
has no room."""
LEADER_WITHOUT_ROOM: Final = "the leader's descriptor budget is full"
"""The leader's REFUSE of a connection its descriptor budget cannot hold."""


class _Refused(Exception):
    pass


def _apply_state(broker: Broker, topic: str, index: int, data: bytes) -> None:
    """A shipped consumer state applied to this broker's copy of the partition (a
    bad one is logged and skipped, as the leader ships a whole new one soon)."""
    found = broker.topics.get(topic)
    if found is None or index >= len(found.partitions):
        return  # deleted meanwhile
    try:
        apply_consumer_state(broker, topic, index, data)
    except ValueError as error:
        log.warning("%s/%d: consumer state not applied: %s", topic, index, error)


async def follow(
    broker: Broker,
    me: str,
    role: FollowerRole,
    leader_address: Callable[[], str | None],
    saved: Callable[[], None],
    gate: ConnectionGate,
) -> None:
    """Copy the leader's log until cancelled (the role's scope).

    ``leader_address``: the leader's replication ``host:port`` now (None: unknown);
    ``saved``: persist the epoch history (it changed); ``gate``: the broker's
    descriptor budget, which must admit the connection before it is opened.
    """
    partition = role.partition
    where = f"{partition.topic}/{partition.index}"
    role.apply_state = functools.partial(_apply_state, broker, partition.topic, partition.index)
    while True:
        address = leader_address()
        pause = RETRY
        if address is not None and not gate.admit_replication(f"{where} from {address}"):
            pause = NO_ROOM_RETRY  # the gate logs it, once a minute
        elif address is not None:
            try:
                await _session(broker, me, role, address, saved)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
                log.info("%s: replication from %s broke: %s", where, address, error)
            except _Refused as error:
                if str(error) != LEADER_WITHOUT_ROOM:
                    log.warning("%s: replication from %s stopped: %s", where, address, error)
                else:  # the leader logs it, once a minute
                    log.info("%s: replication from %s waits: %s", where, address, error)
                    pause = NO_ROOM_RETRY
            except (wire.ReplicationError, RecordError, CopyError) as error:
                log.warning("%s: replication from %s stopped: %s", where, address, error)
            finally:
                role.connected = False
                gate.replication_closed()
                role.take_state()  # before the next connection's handshake cuts the log
        await trio.sleep(pause)


async def _session(
    broker: Broker, me: str, role: FollowerRole, address: str, saved: Callable[[], None]
) -> None:
    host, port = split_host_port(address)
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        link = _Link(broker, role, stream, wire.FrameReader(), saved)
        await _handshake(link, me)
        role.connected = True
        await _copy(link, RawStream(stream))


class _Link(NamedTuple):
    """One connection to the leader, and what its frames are applied to."""

    broker: Broker
    role: FollowerRole
    stream: trio.SocketStream
    reader: wire.FrameReader
    saved: Callable[[], None]
    """Persist the epoch history (it changed)."""


async def _next_frame(
    stream: trio.SocketStream, reader: wire.FrameReader, pending: list[object]
) -> object:
    while not pending:
        data = await stream.receive_some(READ)
        if not data:
            raise trio.BrokenResourceError("leader closed the connection")
        pending.extend(reader.feed(data))
    return pending.pop(0)


async def _handshake(link: _Link, me: str) -> None:
    """Find where this log agrees with the leader's, cut it there, ACK that point."""
    broker, role, stream, reader, saved = link
    partition = role.partition
    history = role.files.history
    ask: int | None = history.last_epoch(partition.log.next_id)
    first = True
    pending: list[object] = []
    start = wire.Start(0, 1, 0)
    while ask is not None:
        follow_frame = wire.Follow(
            partition.topic, partition.index, role.epoch, me, ask, partition.log.next_id
        )
        await stream.send_all((wire.MAGIC if first else b"") + wire.encode(follow_frame))
        first = False
        frame = await _next_frame(stream, reader, pending)
        if isinstance(frame, wire.Refuse):
            raise _Refused(frame.reason)
        if not isinstance(frame, wire.Start):
            raise wire.ReplicationError(f"expected START, got {type(frame).__name__}")
        start = frame
        ask = history.next_question(start.epoch, partition.log.next_id)
    end = partition.log.next_id
    cut = history.cut_point(start.epoch, start.end, end)
    if cut < end:
        truncate_partition(broker, partition.topic, partition.index, cut)
        history.truncate(cut)
        saved()
    role.files.committed = max(role.files.committed, min(start.commit, cut))
    await stream.send_all(wire.encode(wire.Ack(partition.log.next_id)))


async def _copy(link: _Link, stream: RawStream) -> None:
    """Append what the leader sends; one ACK per read."""
    broker, role, _, reader, saved = link
    partition = role.partition
    history = role.files.history
    while True:
        if role.pending_state is None:  # no cancel scope a read while none waits
            data = await stream.receive(READ)
        else:
            data = b""
            with trio.move_on_at(role.state_due):
                data = await stream.receive(READ)
            if not data:  # the shipped state waited its interval out: applied now
                role.take_state()
                role.state_due = trio.current_time() + STATE_APPLY_INTERVAL
                continue
        appended = False
        for frame in reader.feed(data):
            if isinstance(frame, wire.Records):
                partition_log = partition.log
                if frame.first_id > partition_log.next_id:  # the leader let go of what lies between
                    restart_partition(
                        broker, partition.topic, partition.index, frame.first_id, frame.first_offset
                    )
                    history.truncate(0)
                    saved()
                append_copies(
                    broker,
                    partition.topic,
                    partition.index,
                    frame.data,
                    frame.first_id,
                    frame.first_offset,
                )
                if history.begin(frame.epoch, frame.first_id):
                    saved()
                role.fetched += len(frame.data)
                role.files.committed = max(role.files.committed, frame.commit)
                appended = True
            elif isinstance(frame, wire.Commit):
                role.files.committed = max(role.files.committed, frame.commit)
            elif isinstance(frame, wire.State):
                role.pending_state = frame.data
                now = trio.current_time()
                if now >= role.state_due:
                    role.take_state()
                    role.state_due = now + STATE_APPLY_INTERVAL
            elif isinstance(frame, wire.Refuse):
                raise _Refused(frame.reason)
            else:
                raise wire.ReplicationError(f"unexpected {type(frame).__name__} from the leader")
        if appended:
            await stream.send(wire.encode(wire.Ack(partition.log.next_id)))
