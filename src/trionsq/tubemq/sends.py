"""SendMessage at the broker: a producer's messages checked as TubeMQ checks them,
stored as NSQ's PUB stores one, and answered after the append.

The calls of one read are checked together (:meth:`Sends.send_calls`, fed a whole run
by :func:`~..protocol.tubemq_sends.take_sends`; a call read alone is a run of one):
what a run of calls from one producer to one partition shares (client id, topic,
partition) is checked once. The messages that pass wait in a :class:`Pending` per
partition until the connection's turn ends (:meth:`Sends.end_turn`): one append per
partition, as an MPUB is, and only then are the replies made (:class:`SendReplies`),
so a success is never sent for a message not yet stored. :mod:`.messages` says how
attributes travel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..broker.health import StorageFault
from ..protocol.errors import ProtocolError
from ..protocol.ext_header import check_ext_header
from ..protocol.message import EXT_VERSION_JSON
from ..protocol.tubemq import Method, encode_reply
from ..protocol.tubemq_formats import ATTRIBUTES_FLAG, ErrCode, checksum, split_payload
from ..protocol.tubemq_proto import broker_pb2
from ..protocol.tubemq_sends import encode_sent
from .checks import MAX_CLIENT_ID, MAX_TOPIC, missing, not_text, partition_problem
from .messages import header_of

if TYPE_CHECKING:
    from ..protocol.tubemq_sends import SendCalls
    from ..queues.record import Record
    from .node import ProducerSession, TubeNode

__all__ = ["Pending", "SendReplies", "Sends"]

Refusal = tuple[int, str]
"""TubeMQ's (errCode, errMsg) of a refused message."""


def _refusal_reply(code: int, text: str) -> broker_pb2.SendMessageResponseB2P:
    return broker_pb2.SendMessageResponseB2P(success=False, errCode=code, errMsg=text)


class Pending:
    """Messages of one turn to one partition, all with a header or all without:
    appended together when the turn ends."""

    __slots__ = ("failure", "headers", "partition", "payloads", "records", "topic")

    def __init__(self, topic: str, partition: int, *, with_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.payloads: list[bytes] = []
        self.headers: list[bytes] | None = [] if with_headers else None
        self.records: list[Record] = []
        """What the append made (an ephemeral topic may drop the last ones)."""
        self.failure = ""
        """Why the append failed ("": it did not)."""

    def unstored_reply(self) -> broker_pb2.SendMessageResponseB2P:
        """The reply of a message that has no record: the append failed, or an
        ephemeral topic dropped it (which NSQ's PUB reports as published too)."""
        if self.failure:
            return _refusal_reply(ErrCode.INTERNAL_SERVER_ERROR, self.failure)
        return broker_pb2.SendMessageResponseB2P(
            success=True, errCode=ErrCode.SUCCESS, errMsg="OK!", requireAuth=False
        )


class _Part(NamedTuple):
    """Calls ``start:stop`` of a run: stored in ``pending`` from ``first`` on, one after
    the other; or (``pending`` None) one call answered ``refusal``."""

    start: int
    stop: int
    pending: Pending | None
    first: int = 0
    refusal: broker_pb2.SendMessageResponseB2P | None = None


class SendReplies:
    """The replies to a run of SendMessage calls, made (by calling it) once the turn's
    messages are stored: one frame per call, in the calls' order."""

    __slots__ = ("parts", "serial_nos")

    def __init__(self, serial_nos: list[int]) -> None:
        self.serial_nos = serial_nos
        self.parts: list[_Part] = []

    def __call__(self) -> bytes:
        frames: list[bytes] = []
        serial_nos = self.serial_nos
        for start, stop, pending, first, refusal in self.parts:
            if pending is None:
                assert refusal is not None  # noqa: S101 - a part is one or the other
                frames.append(encode_reply(serial_nos[start], Method.SEND_MESSAGE, refusal))
                continue
            records = pending.records[first : first + stop - start]
            frames.append(encode_sent(serial_nos[start : start + len(records)], records))
            for index in range(start + len(records), stop):  # not stored
                reply = pending.unstored_reply()
                frames.append(encode_reply(serial_nos[index], Method.SEND_MESSAGE, reply))
        return b"".join(frames)


class Sends:
    """The broker's SendMessage: checks, the turn's pending batches, their append."""

    def __init__(self, node: TubeNode) -> None:
        self.node = node
        self._pending: list[Pending] = []

    def send_calls(self, calls: SendCalls) -> SendReplies:
        """Check a run of calls and stage the messages that pass; the replies are
        made after :meth:`end_turn`. Calls of one producer to one partition are
        checked once for what they share, and stored one after the other."""
        replies = SendReplies(calls.serial_nos)
        parts = replies.parts
        limit = self.node.config.max_msg_size
        key: tuple[str, str, int] | None = None
        topic, refused, counts = "", None, None
        pending: Pending | None = None  # where calls since ``start`` are stored
        start = first = 0
        for index, request in enumerate(calls.requests):
            client_id, topic_name, partition = (
                request.clientId,
                request.topicName,
                request.partitionId,
            )
            if key != (client_id, topic_name, partition):  # a run of them: checked once
                key = (client_id, topic_name, partition)
                topic, refused, producer = self._target(client_id, topic_name, partition)
                counts = producer.pub_counts if producer is not None else None
            data = request.data
            problem = refused or _data_refusal(topic, data, request.checkSum, limit)
            if problem is None and not (request.flag & ATTRIBUTES_FLAG or request.msgType):
                if pending is None or pending.partition != partition or pending.topic != topic:
                    if pending is not None:  # the calls stored one after the other end here
                        parts.append(_Part(start, index, pending, first))
                    pending = self._pending_for(topic, partition, with_headers=False)
                    start, first = index, len(pending.payloads)
                pending.payloads.append(data)
            else:  # answered on its own
                if pending is not None:
                    parts.append(_Part(start, index, pending, first))
                    pending = None
                part = (
                    _Part(index, index + 1, None, refusal=_refusal_reply(*problem))
                    if problem is not None
                    else self._stage_with_attributes(index, topic, partition, request)
                )
                parts.append(part)
                if part.pending is None:
                    continue
            if counts is not None:
                counts[topic] = counts.get(topic, 0) + 1
        if pending is not None:
            parts.append(_Part(start, len(calls.serial_nos), pending, first))
        return replies

    def _target(
        self, client_id: str, topic_name: str, partition: int
    ) -> tuple[str, Refusal | None, ProducerSession | None]:
        """The topic, why not (None: fine) and the producer of calls with these fields."""
        problem = missing(
            ("clientId", client_id, MAX_CLIENT_ID), ("topicName", topic_name, MAX_TOPIC)
        )
        if problem:
            return "", (ErrCode.BAD_REQUEST, problem), None
        topic = topic_name.strip()
        problem = partition_problem(self.node.groups.topic_partitions(topic), topic, partition)
        if problem:
            return topic, (ErrCode.FORBIDDEN, problem), None
        return topic, None, self.node.producers.get(client_id.strip())

    def _stage_with_attributes(
        self, index: int, topic: str, partition: int, request: broker_pb2.SendMessageRequestP2B
    ) -> _Part:
        """Call ``index``, whose message has attributes or a msgType: on an ext topic
        they become its JSON header; on a plain topic only the payload is kept."""
        try:
            attributes, payload = split_payload(request.data, request.flag)
        except (ValueError, UnicodeDecodeError) as error:
            text = f"Illegal message attributes: {error}"
            return _Part(index, index + 1, None, refusal=_refusal_reply(ErrCode.BAD_REQUEST, text))
        msg_type = request.msgType
        if not isinstance(msg_type, str):
            refusal = _refusal_reply(ErrCode.BAD_REQUEST, not_text("msgType"))
            return _Part(index, index + 1, None, refusal=refusal)
        msg_type = msg_type.strip()
        header = header_of(attributes, msg_type) if attributes or msg_type else None
        if header is not None:
            if not self.node.broker.topics[topic].ext:
                header = None  # a plain topic keeps the payload; attributes have no place
            else:
                checked = check_ext_header(header)
                if isinstance(checked, ProtocolError):
                    refusal = _refusal_reply(ErrCode.BAD_REQUEST, checked.text)
                    return _Part(index, index + 1, None, refusal=refusal)
        pending = self._pending_for(topic, partition, with_headers=header is not None)
        pending.payloads.append(payload)
        if header is not None and pending.headers is not None:
            pending.headers.append(header)
        return _Part(index, index + 1, pending, len(pending.payloads) - 1)

    def _pending_for(self, topic: str, partition: int, *, with_headers: bool) -> Pending:
        """The batch the turn's next message to the partition joins: the last one, if it
        is to the same partition and alike, else a new one (the order is kept)."""
        pending = self._pending[-1] if self._pending else None
        if (
            pending is None
            or pending.partition != partition
            or pending.topic != topic
            or (pending.headers is not None) != with_headers
        ):
            pending = Pending(topic, partition, with_headers=with_headers)
            self._pending.append(pending)
        return pending

    def end_turn(self) -> None:
        """Store what the turn's calls staged: one append per pending batch."""
        pending, self._pending = self._pending, []
        broker = self.node.broker
        for batch in pending:
            try:
                if batch.headers is not None:
                    batch.records = broker.publish(
                        batch.topic,
                        batch.payloads,
                        broker.wall_clock(),
                        partition_index=batch.partition,
                        ext_version=EXT_VERSION_JSON,
                        exts=batch.headers,
                    )
                else:
                    batch.records = broker.publish(
                        batch.topic,
                        batch.payloads,
                        broker.wall_clock(),
                        partition_index=batch.partition,
                    )
            except StorageFault as fault:
                batch.failure = f"Put message failed from {self.node.identity.host} {fault}"


def _data_refusal(topic: str, data: bytes, check_sum: int, limit: int) -> Refusal | None:
    """A message's data as TubeMQ checks it: present, within the size limit, and equal
    to its checksum unless that is -1."""
    if not data:
        return ErrCode.BAD_REQUEST, "data length is zero!"
    if len(data) > limit:
        text = (
            f"data length over max length, allowed max length is {limit},"
            f" data length is {len(data)}"
        )
        return ErrCode.BAD_REQUEST, text
    if check_sum != -1 and check_sum != checksum(data):
        text = (
            f"Checksum msg data failure: {check_sum} of {topic} not equal to the"
            f" data's checksum of {checksum(data)}"
        )
        return ErrCode.FORBIDDEN, text
    return None
