"""TubeMQ's master service: producers and consumers register, heartbeat and close.

A producer learns the broker list (``brokerInfos``, resent only when its
``brokerCheckSum`` is stale) and, in each heartbeat reply, the partition table of
its topics (``topicInfos``). A consumer joins its group (one seat per partition of
each topic, see :mod:`.groups`); the group engine deals the partitions, and each
heartbeat reply carries at most one rebalance event: DISCONNECT from partitions the
consumer holds but no longer owns, else CONNECT to partitions it owns and does not
hold yet (and no other consumer holds at the broker). The consumer reports the event
done and what it holds in its next heartbeat, as TubeMQ's SDKs do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeAlias

from ..protocol.tubemq import Service
from ..protocol.tubemq_formats import (
    ErrCode,
    EventType,
    SubscribeInfo,
    parse_subscribe_info,
    topic_info,
)
from ..protocol.tubemq_proto import master_pb2
from .checks import MAX_CLIENT_ID, MAX_GROUP, MAX_HOST, MAX_TOPICS, bad_group, missing
from .node import ConsumerSession, RebalanceEvent

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from .node import TubeNode

    # the two calls of each kind of client that carry the same fields, and their replies
    _ProducerCall: TypeAlias = master_pb2.RegisterRequestP2M | master_pb2.HeartRequestP2M
    _ProducerReply: TypeAlias = master_pb2.RegisterResponseM2P | master_pb2.HeartResponseM2P
    _ConsumerCall: TypeAlias = master_pb2.RegisterRequestC2M | master_pb2.HeartRequestC2M
    _ConsumerReply: TypeAlias = master_pb2.RegisterResponseM2C | master_pb2.HeartResponseM2C

__all__ = ["MasterService"]

UNDEFINED: Final = -2
"""TubeMQ's META_VALUE_UNDEFINED: "no flow-control rule" in its replies."""


def _topics(names: list[str]) -> tuple[str, ...]:
    return tuple(sorted({name.strip() for name in names if name.strip()}))


class MasterService:
    """Answers the master calls (service type 1) of producers and consumers."""

    services: Final = frozenset({Service.MASTER})

    def __init__(self, node: TubeNode) -> None:
        self.node = node

    async def handle(self, body: Message, remote_address: str) -> Message:
        """The reply message to one call (the request's type says which)."""
        match body:
            case master_pb2.RegisterRequestP2M():
                return await self._producer_register(body, remote_address)
            case master_pb2.HeartRequestP2M():
                return await self._producer_heartbeat(body, remote_address)
            case master_pb2.CloseRequestP2M():
                _, refused = await self._auth(body, remote_address, [])
                if refused is not None:
                    code, text = refused
                    return master_pb2.CloseResponseM2P(success=False, errCode=code, errMsg=text)
                self.node.drop_producer(body.clientId.strip())
                return master_pb2.CloseResponseM2P(
                    success=True, errCode=ErrCode.SUCCESS, errMsg="OK!"
                )
            case master_pb2.RegisterRequestC2M():
                return await self._consumer_register(body, remote_address)
            case master_pb2.HeartRequestC2M():
                return await self._consumer_heartbeat(body, remote_address)
            case master_pb2.CloseRequestC2M():
                return await self._consumer_close(body, remote_address)
        raise TypeError(f"not a master call: {type(body).__name__}")

    async def _auth(
        self,
        request: master_pb2.RegisterRequestP2M
        | master_pb2.HeartRequestP2M
        | master_pb2.CloseRequestP2M
        | master_pb2.RegisterRequestC2M
        | master_pb2.HeartRequestC2M
        | master_pb2.CloseRequestC2M,
        remote_address: str,
        wanted: list[tuple[str, str, str]],
    ) -> tuple[str, tuple[int, str] | None]:
        """AUTH (when on) for a master call: the token to hand back, or the refusal."""
        certificate = request.authInfo if request.HasField("authInfo") else None
        return await self.node.auth.at_master(certificate, remote_address, wanted)

    def _succeeded(self, reply: _ProducerReply | _ConsumerReply, token: str) -> None:
        """A register or heartbeat succeeded: what every such reply says then."""
        reply.success, reply.errCode, reply.errMsg = True, ErrCode.SUCCESS, "OK!"
        reply.authorizedInfo.visitAuthorizedToken = self.node.identity.visit_token
        if token:
            reply.authorizedInfo.authAuthorizedToken = token

    # ---------------------------------------------------------------- producers

    async def _producer_checks(
        self,
        request: _ProducerCall,
        reply: _ProducerReply,
        remote_address: str,
    ) -> tuple[tuple[str, ...], str] | None:
        """A producer call's fields and AUTH: its topics and the token, or None when it
        is refused (``reply`` then says why)."""
        problem = missing(
            ("clientId", request.clientId, MAX_CLIENT_ID), ("hostName", request.hostName, MAX_HOST)
        )
        topics = _topics(list(request.topicList))
        if not problem and len(topics) > MAX_TOPICS:
            problem = f"Booked topic's count over max value, required max count is {MAX_TOPICS}"
        refused: tuple[int, str] | None = (ErrCode.BAD_REQUEST, problem) if problem else None
        token = ""
        if refused is None:
            wanted = [("PUB", t, "") for t in topics]
            token, refused = await self._auth(request, remote_address, wanted)
        if refused is not None:
            reply.errCode, reply.errMsg = refused
            return None
        return topics, token

    def _producer_ok(self, reply: _ProducerReply, request: _ProducerCall, token: str) -> None:
        """A producer's register or heartbeat succeeded: the reply's common fields."""
        self._succeeded(reply, token)
        reply.brokerCheckSum = self.node.identity.checksum
        if request.HasField("appdConfig"):
            reply.appdConfig.configId = self.node.identity.checksum
            reply.appdConfig.maxMsgSize = self.node.config.max_msg_size

    async def _producer_register(
        self, request: master_pb2.RegisterRequestP2M, remote_address: str
    ) -> master_pb2.RegisterResponseM2P:
        reply = master_pb2.RegisterResponseM2P(success=False, brokerCheckSum=-1)
        checked = await self._producer_checks(request, reply, remote_address)
        if checked is not None:
            topics, token = checked
            host = request.hostName.strip()
            session = self.node.producer(request.clientId.strip(), host, remote_address)
            session.topics = set(topics)
            reply.brokerInfos.append(self.node.identity.info)
            self._producer_ok(reply, request, token)
        return reply

    async def _producer_heartbeat(
        self, request: master_pb2.HeartRequestP2M, remote_address: str
    ) -> master_pb2.HeartResponseM2P:
        reply = master_pb2.HeartResponseM2P(success=False, brokerCheckSum=-1)
        checked = await self._producer_checks(request, reply, remote_address)
        if checked is None:
            return reply
        topics, token = checked
        producer_id = request.clientId.strip()
        session = self.node.producers.get(producer_id)
        if session is None:
            reply.errCode = ErrCode.HB_NO_NODE
            reply.errMsg = f"Invalid node id:{producer_id}, you have to append node first!"
            return reply
        self.node.renew(("producer", producer_id))
        session.topics = set(topics)
        identity = self.node.identity
        if request.brokerCheckSum != identity.checksum:
            reply.brokerInfos.append(identity.info)
        for topic in topics:
            count = self.node.groups.topic_partitions(topic)
            if count:
                reply.topicInfos.append(
                    topic_info(topic, identity.broker_id, count, self.node.config.max_msg_size)
                )
        self._producer_ok(reply, request, token)
        return reply

    # ---------------------------------------------------------------- consumers

    async def _consumer_checks(
        self,
        request: master_pb2.HeartRequestC2M | master_pb2.CloseRequestC2M,
        remote_address: str,
    ) -> tuple[str, tuple[int, str] | None]:
        """A consumer call's ids and AUTH (no topic named): the token, or the refusal."""
        problem = missing(
            ("clientId", request.clientId, MAX_CLIENT_ID),
            ("groupName", request.groupName, MAX_GROUP),
        )
        if problem:
            return "", (ErrCode.BAD_REQUEST, problem)
        return await self._auth(request, remote_address, [])

    def _consumer_ok(self, reply: _ConsumerReply, request: _ConsumerCall, token: str) -> None:
        """A consumer's register or heartbeat succeeded: the reply's common fields."""
        self._succeeded(reply, token)
        reply.notAllocated = False
        self._flow_fields(
            reply, request.HasField("defFlowCheckId") or request.HasField("groupFlowCheckId")
        )

    async def _consumer_register(
        self, request: master_pb2.RegisterRequestC2M, remote_address: str
    ) -> master_pb2.RegisterResponseM2C:
        reply = master_pb2.RegisterResponseM2C(success=False)
        problem = missing(
            ("clientId", request.clientId, MAX_CLIENT_ID),
            ("hostName", request.hostName, MAX_HOST),
            ("groupName", request.groupName, MAX_GROUP),
        ) or bad_group(request.groupName.strip())
        topics = _topics(list(request.topicList))
        if not problem and not topics:
            problem = "Request miss necessary subscribed topicList data!"
        if not problem and len(topics) > MAX_TOPICS:
            problem = (
                f"Subscribed topicList size over max value, required max count is {MAX_TOPICS}"
            )
        if problem:
            reply.errCode, reply.errMsg = ErrCode.BAD_REQUEST, problem
            return reply
        absent = [t for t in topics if self.node.groups.topic_partitions(t) is None]
        if absent:
            reply.errCode = ErrCode.TOPIC_NOT_DEPLOYED
            reply.errMsg = f"Requested topic [[{', '.join(absent)}]] not deployed!"
            return reply
        node = self.node
        consumer_id, group = request.clientId.strip(), request.groupName.strip()
        wanted = [("SUB", topic, group) for topic in topics]
        token, refused = await self._auth(request, remote_address, wanted)
        if refused is not None:
            reply.errCode, reply.errMsg = refused
            return reply
        session = node.consumers.get((group, consumer_id))
        if session is None:
            session = ConsumerSession(consumer_id, group, request.hostName.strip(), remote_address)
            node.consumers[(group, consumer_id)] = session
        node.renew(("consumer", group, consumer_id))
        await node.seat_consumer(session, topics)
        session.held = self._reported(session, list(request.subscribeInfo))
        self._consumer_ok(reply, request, token)
        return reply

    async def _consumer_heartbeat(
        self, request: master_pb2.HeartRequestC2M, remote_address: str
    ) -> master_pb2.HeartResponseM2C:
        reply = master_pb2.HeartResponseM2C(success=False)
        token, refused = await self._consumer_checks(request, remote_address)
        if refused is not None:
            reply.errCode, reply.errMsg = refused
            return reply
        node = self.node
        consumer_id, group = request.clientId.strip(), request.groupName.strip()
        session = node.consumers.get((group, consumer_id))
        if session is None:
            reply.errCode = ErrCode.HB_NO_NODE
            if not any(g == group for g, _ in node.consumers):
                reply.errMsg = f"Not found groupName {group} in holder!"
            else:
                reply.errMsg = (
                    "Update consumer node exception:Invalid node id:"
                    f"{consumer_id}@{group}, you have to append node first!"
                )
            return reply
        node.renew(("consumer", group, consumer_id))
        await node.seat_consumer(session, session.topics)  # partitions added since
        event = session.event
        if (
            event is not None
            and request.HasField("event")
            and request.event.rebalanceId == event.rebalance_id
        ):
            session.event = None  # reported done
        if request.reportSubscribeInfo:
            session.held = self._reported(session, list(request.subscribeInfo))
        if session.event is None:
            session.event = self._next_event(session)
            if session.event is not None:
                reply.event.CopyFrom(self._event_proto(session, session.event))
        self._consumer_ok(reply, request, token)
        return reply

    async def _consumer_close(
        self, request: master_pb2.CloseRequestC2M, remote_address: str
    ) -> master_pb2.CloseResponseM2C:
        _, refused = await self._consumer_checks(request, remote_address)
        if refused is not None:
            code, text = refused
            return master_pb2.CloseResponseM2C(success=False, errCode=code, errMsg=text)
        session = self.node.consumers.get((request.groupName.strip(), request.clientId.strip()))
        if session is not None:
            self.node.drop_consumer(session)
        return master_pb2.CloseResponseM2C(success=True, errCode=ErrCode.SUCCESS, errMsg="OK!")

    # ---------------------------------------------------------------- rebalancing

    def _reported(self, session: ConsumerSession, infos: list[str]) -> set[tuple[str, int]]:
        """The partitions a consumer says it consumes (entries of other consumers,
        other groups or unreadable ones are left out)."""
        held: set[tuple[str, int]] = set()
        for text in infos:
            try:
                info = parse_subscribe_info(text)
            except ValueError:
                continue
            if info.consumer_id == session.consumer_id and info.group == session.group:
                held.add((info.partition.topic, info.partition.partition))
        return held

    def _next_event(self, session: ConsumerSession) -> RebalanceEvent | None:
        """What the consumer must do to match the group's deal (None: nothing)."""
        node = self.node
        owned = {
            key
            for key, seat in session.seats.items()
            if node.groups.owner(seat) == session.consumer_id
        }
        gone = sorted(session.held - owned)
        if gone:
            return RebalanceEvent(node.next_rebalance_id(), EventType.DISCONNECT, gone)
        free = []
        for topic, partition in sorted(owned - session.held):
            hold = node.holds.get((session.group, topic, partition))
            if hold is None or hold.consumer is session:
                free.append((topic, partition))
        if free:
            return RebalanceEvent(node.next_rebalance_id(), EventType.CONNECT, free)
        return None

    def _event_proto(
        self, session: ConsumerSession, event: RebalanceEvent
    ) -> master_pb2.EventProto:
        identity = self.node.identity
        return master_pb2.EventProto(
            rebalanceId=event.rebalance_id,
            opType=event.op,
            subscribeInfo=[
                str(SubscribeInfo(session.consumer_id, session.group, identity.partition(t, p)))
                for t, p in event.partitions
            ],
        )

    def _flow_fields(self, reply: _ConsumerReply, asked: bool) -> None:
        """Flow-control ids when the consumer sent its own: TubeMQ's "no rule" values.

        A channel's rate limit (``/channel/rate_limit``) is enforced at the broker
        instead: a pull it holds back is answered SERVER_CONSUME_SPEED_LIMIT with the
        wait, which every SDK honours (docs/tubemq.md).
        """
        if not asked:
            return
        reply.ssdStoreId = UNDEFINED
        reply.defFlowCheckId = UNDEFINED
        reply.groupFlowCheckId = UNDEFINED
        reply.qryPriorityId = UNDEFINED
        reply.defFlowControlInfo = " "
        reply.groupFlowControlInfo = " "
