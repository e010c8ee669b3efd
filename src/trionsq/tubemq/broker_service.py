"""TubeMQ's broker service: SendMessage, and a consumer's register, heartbeat, pull
and commit on a partition.

A message sent is checked, stored and answered by :mod:`.sends`. A consumer takes a
partition its group's deal gave it (``RegisterRequestC2B``, exclusive in the group: a
second holder is refused PARTITION_OCCUPIED), keeps it by heartbeats, pulls packs and
confirms them (:mod:`.pulls`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, TypeAlias

import trio

from ..broker.health import StorageFault
from ..broker.offsets import OffsetError
from ..protocol.commands import OffsetSpec
from ..protocol.tubemq import Method, Service, encode_reply
from ..protocol.tubemq_formats import (
    REGISTER,
    UNREGISTER,
    ErrCode,
    ReadStatus,
    parse_partition,
)
from ..protocol.tubemq_proto import broker_pb2
from ..protocol.tubemq_sends import SendCalls
from .checks import MAX_CLIENT_ID, MAX_GROUP, MAX_TOPIC, missing, partition_problem
from .node import PULL_WAIT, Hold, hold_lease
from .pulls import MAX_PACK, confirm, pack_reply, position, put_back
from .sends import SendReplies, Sends

if TYPE_CHECKING:
    from collections.abc import Callable

    from google.protobuf.message import Message

    from .groups import Seat
    from .node import TubeNode

    PartitionCall: TypeAlias = (
        broker_pb2.RegisterRequestC2B
        | broker_pb2.GetMessageRequestC2B
        | broker_pb2.CommitOffsetRequestC2B
    )
    """A consumer's call about one partition of a group's topic."""

__all__ = ["BrokerService"]

log = logging.getLogger("trionsq.tubemq")
SPEED_LIMIT: Final = "RpcServer consume speed limit!"


class BrokerService:
    """Answers the broker calls (service types 2 and 3) of producers and consumers."""

    services: Final = frozenset({Service.BROKER_READ, Service.BROKER_WRITE})

    def __init__(self, node: TubeNode) -> None:
        self.node = node
        self.sends = Sends(node)
        self._waiting: dict[Seat, tuple[Callable[[bytes], None], int]] = {}
        """Seats whose pull waits for the router: how to answer, and the call's serialNo."""
        node.answer_late = self._answer_waiting

    async def handle(
        self, serial_no: int, body: Message, send: Callable[[bytes], None]
    ) -> Message | SendReplies | None:
        """The reply to one call (the request's type says which); a message sent is
        answered by :class:`SendReplies` once its turn ends; None when a pull waits
        (``send`` gets its reply frame)."""
        if self.node.auth.enabled:
            refused = await self._auth(body)
            if refused is not None:
                return refused
        match body:
            case broker_pb2.SendMessageRequestP2B():
                return self.sends.send_calls(SendCalls([serial_no], [body]))
            case broker_pb2.RegisterRequestC2B():
                return await self._register(body)
            case broker_pb2.HeartBeatRequestC2B():
                return self._heartbeat(body)
            case broker_pb2.GetMessageRequestC2B():
                return self._get_message(body, serial_no, send)
            case broker_pb2.CommitOffsetRequestC2B():
                return self._commit(body)
        raise TypeError(f"not a broker call: {type(body).__name__}")

    async def _auth(self, body: Message) -> Message | None:
        """AUTH (when on) for a broker call: the refusal reply, or None. GetMessage and
        CommitOffset carry no authorization in TubeMQ: the hold they need was
        authorized when it was taken."""
        auth = self.node.auth
        match body:
            case broker_pb2.SendMessageRequestP2B():
                info = body.authInfo if body.HasField("authInfo") else None
                refused = await auth.at_broker(info, "PUB", body.topicName.strip())
                reply: Message = broker_pb2.SendMessageResponseB2P(success=False)
            case broker_pb2.RegisterRequestC2B():
                info = body.authInfo if body.HasField("authInfo") else None
                group = body.groupName.strip()
                refused = await auth.at_broker(info, "SUB", body.topicName.strip(), group)
                reply = broker_pb2.RegisterResponseB2C(success=False, currOffset=-1)
            case _:
                return None
        if refused is None:
            return None
        code, text = refused
        reply.errCode, reply.errMsg = code, text  # type: ignore[attr-defined]
        return reply

    # ---------------------------------------------------------------- consumers

    def _holder_check(
        self, consumer_id: str, key: tuple[str, str, int]
    ) -> tuple[Hold | None, str | None]:
        """The consumer's hold, or the holder's id when someone else has it."""
        hold = self.node.holds.get(key)
        if hold is None:
            return None, None
        if hold.consumer.consumer_id != consumer_id:
            return None, hold.consumer.consumer_id
        return hold, None

    def _call_problem(self, request: PartitionCall) -> tuple[int, str]:
        """A consumer call's fields as TubeMQ checks them: (code, why) or (200, "")."""
        client_id, group, topic = request.clientId, request.groupName, request.topicName
        problem = missing(
            ("clientId", client_id, MAX_CLIENT_ID),
            ("topicName", topic, MAX_TOPIC),
            ("groupName", group, MAX_GROUP),
        )
        if problem:
            return ErrCode.BAD_REQUEST, problem
        topic = topic.strip()
        partitions = self.node.groups.topic_partitions(topic)
        problem = partition_problem(partitions, topic, request.partitionId)
        return (ErrCode.FORBIDDEN, problem) if problem else (ErrCode.SUCCESS, "")

    def _part(self, key: tuple[str, str, int]) -> str:
        group, topic, partition = key
        return f"{group}:{topic}:{partition}"

    async def _register(
        self, request: broker_pb2.RegisterRequestC2B
    ) -> broker_pb2.RegisterResponseB2C:
        reply = broker_pb2.RegisterResponseB2C(success=False, currOffset=-1)
        code, problem = self._call_problem(request)
        if problem:
            reply.errCode, reply.errMsg = code, problem
            return reply
        topic, partition = request.topicName.strip(), request.partitionId
        consumer_id, group = request.clientId.strip(), request.groupName.strip()
        key = (group, topic, partition)
        if request.opType == UNREGISTER:
            return self._unregister(consumer_id, key, request.readStatus, reply)
        if request.opType != REGISTER:
            reply.errCode, reply.errMsg = ErrCode.BAD_REQUEST, f"Invalid request:{request.opType}"
            return reply
        node = self.node
        part = f"{node.identity.broker_id}#{self._part(key)}"
        hold, holder = self._holder_check(consumer_id, key)
        if holder is not None:
            reply.errCode = ErrCode.PARTITION_OCCUPIED
            reply.errMsg = f"[Duplicated Register] Partition {part} has been registered by {holder}"
            return reply
        session = node.consumers.get((group, consumer_id))
        seat = session.seats.get((topic, partition)) if session is not None else None
        if session is None or seat is None:
            reply.errCode = ErrCode.HB_NO_NODE
            reply.errMsg = (
                f"UnRegistered Consumer:{consumer_id}, you have to register to the master"
                f" for topic {topic} firstly!"
            )
            return reply
        owner = node.groups.owner(seat)
        if owner != consumer_id:
            reply.errCode = ErrCode.PARTITION_OCCUPIED
            reply.errMsg = (
                f"[Duplicated Register] Partition {part} is assigned to"
                f" {owner or 'no consumer yet'} by the group's balance"
            )
            return reply
        if hold is not None:  # registered again: what it held unconfirmed goes back
            node.release(key)
        node.holds[key] = Hold(session, seat)
        node.renew(hold_lease(key))
        problem = await self._place(seat, request)
        if problem:
            node.release(key)
            reply.errCode, reply.errMsg = ErrCode.BAD_REQUEST, problem
            return reply
        reply.success, reply.errCode, reply.errMsg = True, ErrCode.SUCCESS, "OK!"
        reply.currOffset, reply.maxOffset = position(seat)
        return reply

    async def _place(self, seat: Seat, request: broker_pb2.RegisterRequestC2B) -> str:
        """Where the group starts on the partition: a given offset (clamped into what
        the log holds, as TubeMQ clamps it), the latest, or where it left off (a new
        group: the oldest, or the latest with FROM_MAX)."""
        channel = seat.channel
        if channel is None:
            return "the partition's channel was deleted"
        read = request.readStatus
        key = (seat.group, seat.topic, seat.partition)
        fresh = key in self.node.fresh
        self.node.fresh.discard(key)
        spec: OffsetSpec | None = None
        if request.HasField("currOffset") and request.currOffset >= 0:
            log_ = channel.log
            oldest = log_.offset_of(log_.earliest_id, floor=log_.earliest_id)
            target = min(max(request.currOffset, oldest), log_.next_offset)
            spec = OffsetSpec("virtual_queue", target)
        elif read == ReadStatus.FROM_MAX_ALWAYS or (fresh and read == ReadStatus.FROM_MAX):
            spec = OffsetSpec("special", -1)
        elif fresh:
            spec = OffsetSpec("timestamp", 0)  # the oldest message held
        if spec is None:
            return ""
        try:
            await self.node.broker.set_channel_offset(seat.topic, seat.partition, seat.group, spec)
        except (OffsetError, StorageFault) as error:
            return f"Illegal value: currOffset {request.currOffset}: {error}"
        return ""

    def _unregister(
        self,
        consumer_id: str,
        key: tuple[str, str, int],
        read_status: int,
        reply: broker_pb2.RegisterResponseB2C,
    ) -> broker_pb2.RegisterResponseB2C:
        hold, holder = self._holder_check(consumer_id, key)
        if holder is not None:
            reply.errCode = ErrCode.DUPLICATE_PARTITION
            reply.errMsg = (
                f"[Duplicated Request]Partition {self._part(key)} has been consumed by {holder}"
                f";Current consumer {consumer_id}"
            )
            return reply
        if hold is None:
            reply.errCode = ErrCode.HB_NO_NODE
            reply.errMsg = f"UnRegistered Consumer {consumer_id}, you have to register firstly!"
            return reply
        if read_status == 0:  # TubeMQ: the pack counts as consumed; otherwise it goes back
            confirm(hold.seat)
        self.node.release(key)
        reply.success, reply.errCode, reply.errMsg = True, ErrCode.SUCCESS, "OK!"
        return reply

    def _heartbeat(
        self, request: broker_pb2.HeartBeatRequestC2B
    ) -> broker_pb2.HeartBeatResponseB2C:
        problem = missing(
            ("clientId", request.clientId, MAX_CLIENT_ID),
            ("groupName", request.groupName, MAX_GROUP),
        )
        if problem:
            return broker_pb2.HeartBeatResponseB2C(
                success=False, errCode=ErrCode.BAD_REQUEST, errMsg=problem
            )
        consumer_id, group = request.clientId.strip(), request.groupName.strip()
        failures: list[str] = []
        for text in request.partitionInfo:
            try:
                ref = parse_partition(text)
            except ValueError:
                failures.append(f"{ErrCode.BAD_REQUEST}:{text}")
                continue
            key = (group, ref.topic, ref.partition)
            hold, holder = self._holder_check(consumer_id, key)
            if hold is not None:
                self.node.renew(hold_lease(key))
            else:
                code = ErrCode.HB_NO_NODE if holder is None else ErrCode.DUPLICATE_PARTITION
                failures.append(f"{int(code)}:{text}")
        return broker_pb2.HeartBeatResponseB2C(
            success=True,
            errCode=ErrCode.SUCCESS,
            errMsg="OK!",
            hasPartFailure=bool(failures),
            failureInfo=failures,
            requireAuth=False,
        )

    def _consumer_hold(
        self, request: PartitionCall, *, committing: bool
    ) -> tuple[Hold | None, int, str]:
        """The caller's hold on the partition, or TubeMQ's code and text for why not."""
        code, problem = self._call_problem(request)
        if problem:
            return None, code, problem
        consumer_id = request.clientId.strip()
        key = (request.groupName.strip(), request.topicName.strip(), request.partitionId)
        hold, holder = self._holder_check(consumer_id, key)
        if hold is not None:
            self.node.renew(hold_lease(key))
            return hold, ErrCode.SUCCESS, ""
        if committing:
            if holder is None:
                return None, ErrCode.UNAUTHORIZED, "The partition not registered by consumers"
            text = f"The partition has been registered by other consumer: {holder}"
            return None, ErrCode.UNAUTHORIZED, text
        if holder is None:
            text = f"UnRegistered Consumer:{consumer_id}, you have to register firstly!"
            return None, ErrCode.HB_NO_NODE, text
        text = (
            f"[Duplicated Request] Partition={self._part(key)} of Broker="
            f"{self.node.identity.broker_id} has been consumed by {holder};Current consumer"
            f" {consumer_id}"
        )
        return None, ErrCode.DUPLICATE_PARTITION, text

    def _get_message(
        self,
        request: broker_pb2.GetMessageRequestC2B,
        serial_no: int,
        send: Callable[[bytes], None],
    ) -> broker_pb2.GetMessageResponseB2C | None:
        hold, code, text = self._consumer_hold(request, committing=False)
        if hold is None:
            return broker_pb2.GetMessageResponseB2C(
                success=False,
                errCode=code,
                errMsg=text,
                currOffset=-1,
                escFlowCtrl=False,
                currDataDlt=-1,
                minLimitTime=0,
            )
        seat = hold.seat
        if seat in self._waiting:  # one pull at a time per partition, as the SDKs pull
            return pack_reply(seat)
        if not request.manualCommitOffset:
            if request.lastPackConsumed:
                confirm(seat)
            else:
                put_back(seat)
        if seat.buffered:
            return pack_reply(seat)
        subscription, channel = seat.subscription, seat.channel
        if subscription is None or channel is None:
            return pack_reply(seat)
        if channel.refill_at is not None:  # the channel's rate limit holds it back
            wait = max(0, round((channel.refill_at - trio.current_time()) * 1000))
            reply = pack_reply(seat)
            reply.errCode, reply.errMsg, reply.minLimitTime = (
                ErrCode.SERVER_CONSUME_SPEED_LIMIT,
                SPEED_LIMIT,
                wait,
            )
            return reply
        if not channel.has_work():
            return pack_reply(seat)
        subscription.pull(MAX_PACK)
        if not subscription.room():  # not this member's to read now (a deal under way)
            subscription.ready(0)
            return pack_reply(seat)
        self._waiting[seat] = (send, serial_no)
        seat.on_delivery = self._answer_waiting
        self.node.wait_pull(seat, trio.current_time() + PULL_WAIT)
        return None

    def _answer_waiting(self, seat: Seat) -> None:
        """The router delivered for a waiting pull, or its time is up, or its hold
        ended: answer it with what the seat has (NOT_FOUND if nothing)."""
        waiting = self._waiting.pop(seat, None)
        seat.on_delivery = None
        self.node.pulls.drop(seat)
        if waiting is None:
            return
        if seat.subscription is not None:
            seat.subscription.ready(0)  # the rest of the credit: not asked for any more
        send, serial_no = waiting
        send(encode_reply(serial_no, Method.GET_MESSAGE, pack_reply(seat)))

    def _commit(
        self, request: broker_pb2.CommitOffsetRequestC2B
    ) -> broker_pb2.CommitOffsetResponseB2C:
        hold, code, text = self._consumer_hold(request, committing=True)
        if hold is None:
            return broker_pb2.CommitOffsetResponseB2C(
                success=False, errCode=code, errMsg=text, currOffset=-1
            )
        consumed = request.lastPackConsumed if request.HasField("lastPackConsumed") else True
        if consumed:
            confirm(hold.seat)
        else:
            put_back(hold.seat)
        current, end = position(hold.seat)
        return broker_pb2.CommitOffsetResponseB2C(
            success=True, errCode=ErrCode.SUCCESS, errMsg="OK!", currOffset=current, maxOffset=end
        )
