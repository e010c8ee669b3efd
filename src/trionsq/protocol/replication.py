"""The broker-to-broker replication protocol, sans-IO (docs/replication.md, "Wire").

A follower opens a TCP connection to the partition leader's replication listener,
sends the magic ``b"  R1"`` and a FOLLOW frame; the leader answers START (where
the follower's log must be cut, and the commit end), then RECORDS as the partition
grows, COMMIT when only the commit end moved and STATE when the consumer state
(channels and their positions) changed; the follower sends ACK with its
log end after each durable append. Either side may send REFUSE and close.

Every frame is ``[4-byte size][1-byte type][payload]``, the size counting type and
payload (big-endian, as V2). RECORDS carries the records exactly as the log
stores them (``queues/record.py``), so a follower appends the same bytes and ids.
"""

from __future__ import annotations

import struct
from typing import Final

import attrs
import orjson

__all__ = [
    "MAGIC",
    "MAX_FRAME",
    "Ack",
    "Commit",
    "Follow",
    "FrameReader",
    "Records",
    "Refuse",
    "ReplicationError",
    "Start",
    "State",
    "encode",
]

MAGIC: Final = b"  R1"
MAX_FRAME: Final = 64 << 20
"""Largest frame accepted: a RECORDS frame carries at most about this much."""

_SIZE: Final = struct.Struct(">I")
_HEAD: Final = struct.Struct(">IB")
_QQQ: Final = struct.Struct(">qqq")
_QQQQ: Final = struct.Struct(">qqqq")
_Q: Final = struct.Struct(">q")

FOLLOW, START, RECORDS, ACK, COMMIT, REFUSE, STATE = 1, 2, 3, 4, 5, 6, 7


class ReplicationError(ValueError):
    """Bytes that are not a valid replication frame."""


@attrs.frozen
class Follow:
    """A follower asks to copy ``topic``/``partition`` from the leader of ``epoch``.

    ``last_epoch``: the epoch of the last record it holds (0: none); ``end``: its log
    end (next id). The leader cuts it back to where its log and the follower's agree.
    """

    topic: str
    partition: int
    epoch: int
    follower: str
    last_epoch: int
    end: int


@attrs.frozen
class Start:
    """The leader's answer to FOLLOW: the newest epoch it holds that is not later than
    the follower's last, and where that epoch ends in the leader's log. The follower
    cuts its log where the two agree (cluster/epochs.py) and sends FOLLOW again from
    there when that is below the end it gave; otherwise RECORDS follow."""

    epoch: int
    end: int
    commit: int


@attrs.frozen
class Records:
    """Records of ``epoch`` from id ``first_id`` (at offset ``first_offset``) on, in
    the log's encoding. A ``first_id`` past the follower's end means the leader no
    longer holds what lies between (retention): the follower starts its log anew there."""

    epoch: int
    commit: int
    first_id: int
    first_offset: int
    data: bytes


@attrs.frozen
class Ack:
    """The follower holds every record below ``end`` durably."""

    end: int


@attrs.frozen
class Commit:
    """The leader's commit end moved (no new records)."""

    commit: int


@attrs.frozen
class State:
    """The partition's consumer state on the leader (broker/replica_state.py's JSON):
    channels, their positions and settings, sent when it changed."""

    data: bytes


@attrs.frozen
class Refuse:
    """The other side will not go on (a stale epoch, not the leader, a bad request)."""

    reason: str


Frame = Follow | Start | Records | Ack | Commit | State | Refuse


def _frame(kind: int, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload) + 1, kind) + payload


def encode(frame: Frame) -> bytes:
    """One frame's bytes."""
    if isinstance(frame, Records):  # one copy of the records' bytes, not two
        size = _QQQQ.size + len(frame.data) + 1
        head = _QQQQ.pack(frame.epoch, frame.commit, frame.first_id, frame.first_offset)
        return b"".join((_HEAD.pack(size, RECORDS), head, frame.data))
    if isinstance(frame, Ack):
        return _frame(ACK, _Q.pack(frame.end))
    if isinstance(frame, Commit):
        return _frame(COMMIT, _Q.pack(frame.commit))
    if isinstance(frame, Start):
        return _frame(START, _QQQ.pack(frame.epoch, frame.end, frame.commit))
    if isinstance(frame, Follow):
        return _frame(FOLLOW, orjson.dumps(attrs.asdict(frame)))
    if isinstance(frame, State):
        return _frame(STATE, frame.data)
    return _frame(REFUSE, frame.reason.encode())


def _fixed(kind: str, payload: memoryview, shape: struct.Struct) -> tuple[int, ...]:
    if len(payload) != shape.size:
        raise ReplicationError(f"{kind} frame of {len(payload)} bytes, expected {shape.size}")
    return shape.unpack(payload)


def _follow(payload: memoryview) -> Follow:
    try:
        raw = orjson.loads(bytes(payload))
    except orjson.JSONDecodeError as error:
        raise ReplicationError(f"FOLLOW: not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise ReplicationError("FOLLOW: not a JSON object")
    fields = {
        "topic": str,
        "partition": int,
        "epoch": int,
        "follower": str,
        "last_epoch": int,
        "end": int,
    }
    for name, kind in fields.items():
        value = raw.get(name)
        if type(value) is not kind:
            raise ReplicationError(f"FOLLOW: {name} must be a {kind.__name__}")
    return Follow(**{name: raw[name] for name in fields})


def _decode(kind: int, payload: memoryview) -> Frame:
    if kind == RECORDS:
        if len(payload) < _QQQQ.size:
            raise ReplicationError("RECORDS frame too short")
        epoch, commit, first_id, first_offset = _QQQQ.unpack_from(payload)
        return Records(epoch, commit, first_id, first_offset, bytes(payload[_QQQQ.size :]))
    if kind == ACK:
        return Ack(*_fixed("ACK", payload, _Q))
    if kind == COMMIT:
        return Commit(*_fixed("COMMIT", payload, _Q))
    if kind == START:
        return Start(*_fixed("START", payload, _QQQ))
    if kind == FOLLOW:
        return _follow(payload)
    if kind == REFUSE:
        return Refuse(bytes(payload).decode(errors="replace"))
    if kind == STATE:
        return State(bytes(payload))
    raise ReplicationError(f"unknown frame type {kind}")


class FrameReader:
    """Bytes in, whole frames out; the magic first when ``expect_magic``."""

    __slots__ = ("_buffer", "_magic")

    def __init__(self, *, expect_magic: bool = False) -> None:
        self._buffer = bytearray()
        self._magic = expect_magic

    def feed(self, data: bytes) -> list[Frame]:
        """Every frame completed by ``data``.

        Raises:
            ReplicationError: a bad magic, size or frame (the connection must end).
        """
        buffer = self._buffer
        buffer += data
        if self._magic:
            if len(buffer) < len(MAGIC):
                return []
            if bytes(buffer[: len(MAGIC)]) != MAGIC:
                raise ReplicationError(f"bad magic {bytes(buffer[: len(MAGIC)])!r}")
            del buffer[: len(MAGIC)]
            self._magic = False
        frames: list[Frame] = []
        view = memoryview(buffer)
        position, end = 0, len(buffer)
        try:
            while end - position >= _SIZE.size:
                (size,) = _SIZE.unpack_from(view, position)
                if size < 1 or size > MAX_FRAME:
                    raise ReplicationError(f"frame size {size} out of range")
                if end - position - _SIZE.size < size:
                    break
                start = position + _SIZE.size
                frames.append(_decode(view[start], view[start + 1 : start + size]))
                position = start + size
        finally:
            view.release()
        del buffer[:position]
        return frames
