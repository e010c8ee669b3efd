"""A small TubeMQ RPC client on the sans-IO codec: for tests, tools and benchmarks.

Not an SDK: it sends the calls TubeMQ's SDKs send, over one connection, and gives
back the replies as messages; the tests drive the master and broker services with
it over real sockets, and ``benchmarks/tubemq.py`` measures them with it. Calls may
be pipelined (:meth:`TubeClient.send` then :meth:`TubeClient.replies`), as the SDKs
multiplex theirs by serialNo.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Final, TypedDict, TypeVar, Unpack

import trio

from ..protocol.tubemq import (
    Frame,
    FrameError,
    FrameReader,
    Method,
    Reply,
    Service,
    decode_reply,
    encode_request,
)
from ..protocol.tubemq_formats import REGISTER, UNREGISTER, PartitionRef, SubscribeInfo
from ..protocol.tubemq_proto import broker_pb2, master_pb2

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["RemoteError", "SendOptions", "TubeClient", "open_client"]

_M = TypeVar("_M", bound="Message")
MAX_REPLY: Final = 64 * 1024 * 1024


def service_of(method: Method) -> Service:
    """The service an SDK sends ``method`` to: the master's calls to the master, a
    send to the broker's write service, the consumer's broker calls to its read one."""
    if method <= Method.CONSUMER_CLOSE:
        return Service.MASTER
    return Service.BROKER_WRITE if method == Method.SEND_MESSAGE else Service.BROKER_READ


class SendOptions(TypedDict, total=False):
    """The keyword options of a SendMessage call (:meth:`TubeClient.send_message`)."""

    flag: int
    """TubeMQ's message flag: 1 when the data starts with an attribute section (0)."""
    msg_type: str
    """``msgType``, the message's type for consumers' filters (none when empty)."""


class _Producer(TypedDict):
    """What a producer tells the master when it registers and in every heartbeat."""

    clientId: str
    topicList: list[str]
    brokerCheckSum: int
    hostName: str


def _producer(client_id: str, topics: list[str], check_sum: int) -> _Producer:
    return {
        "clientId": client_id,
        "topicList": topics,
        "brokerCheckSum": check_sum,
        "hostName": "127.0.0.1",
    }


class _Reader(TypedDict):
    """Who reads which partition: what a consumer's calls to the broker name."""

    clientId: str
    groupName: str
    topicName: str
    partitionId: int


def _reader(client_id: str, group: str, ref: PartitionRef) -> _Reader:
    return {
        "clientId": client_id,
        "groupName": group,
        "topicName": ref.topic,
        "partitionId": ref.partition,
    }


class RemoteError(Exception):
    """The server answered with an exception reply."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(f"{reply.exception}: {reply.text}")
        self.reply = reply


class TubeClient:
    """One connection to a TubeMQ master or broker service."""

    def __init__(self, stream: trio.SocketStream, *, protocol_version: int = 2) -> None:
        self.stream = stream
        self.protocol_version = protocol_version
        self._serials = itertools.count(1)
        self._reader = FrameReader(MAX_REPLY)
        self._early: dict[int, Reply] = {}

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def send(self, service: int, method: int, message: Message) -> int:
        """Send one call; its serialNo."""
        serial = next(self._serials)
        data = encode_request(
            serial, service, method, message, protocol_version=self.protocol_version
        )
        await self.stream.send_all(data)
        return serial

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def next_frame(self) -> Frame | None:
        """The next whole frame from the server; None when it closed the connection."""
        while True:
            frames = self._reader.next_frames(1)
            if frames:
                frame = frames[0]
                return None if isinstance(frame, FrameError) else frame
            if self._reader.closed:
                return None
            data = await self.stream.receive_some(65536)
            self._reader.receive_data(data)

    async def reply(self, serial: int) -> Reply:
        """The reply to call ``serial`` (others that come first are kept).

        Raises:
            EOFError: the server closed the connection.
        """
        while serial not in self._early:
            frame = await self.next_frame()
            if frame is None:
                raise EOFError("the server closed the connection")
            reply = decode_reply(frame)
            self._early[reply.serial_no] = reply
        return self._early.pop(serial)

    async def call(self, service: int, method: int, message: Message, kind: type[_M]) -> _M:
        """One call and its reply message.

        Raises:
            RemoteError: an exception reply.
        """
        reply = await self.reply(await self.send(service, method, message))
        if not isinstance(reply.body, kind):
            raise RemoteError(reply)
        return reply.body

    async def ask(self, method: Method, request: Message, kind: type[_M]) -> _M:
        """:meth:`call` to the service that serves ``method`` (as the SDKs address it)."""
        return await self.call(service_of(method), method, request, kind)

    # ---- the SDKs' calls: one a call, each naming its request's fields as the SDKs
    # fill them (a table would hide which field is which)

    async def register_producer(
        self, client_id: str, topics: list[str], check_sum: int = -1
    ) -> master_pb2.RegisterResponseM2P:
        request = master_pb2.RegisterRequestP2M(**_producer(client_id, topics, check_sum))
        return await self.ask(Method.PRODUCER_REGISTER, request, master_pb2.RegisterResponseM2P)

    async def producer_heartbeat(
        self, client_id: str, topics: list[str], check_sum: int
    ) -> master_pb2.HeartResponseM2P:
        request = master_pb2.HeartRequestP2M(**_producer(client_id, topics, check_sum))
        return await self.ask(Method.PRODUCER_HEARTBEAT, request, master_pb2.HeartResponseM2P)

    async def send_message(
        self,
        client_id: str,
        topic: str,
        partition: int,
        data: bytes,
        **options: Unpack[SendOptions],
    ) -> broker_pb2.SendMessageResponseB2P:
        request = self.message_request(client_id, topic, partition, data, **options)
        return await self.ask(Method.SEND_MESSAGE, request, broker_pb2.SendMessageResponseB2P)

    @staticmethod
    def message_request(
        client_id: str, topic: str, partition: int, data: bytes, **options: Unpack[SendOptions]
    ) -> broker_pb2.SendMessageRequestP2B:
        request = broker_pb2.SendMessageRequestP2B(
            clientId=client_id,
            topicName=topic,
            partitionId=partition,
            data=data,
            flag=options.get("flag", 0),
            checkSum=-1,
            sentAddr=0x7F000001,
        )
        if msg_type := options.get("msg_type", ""):
            request.msgType = msg_type
        return request

    async def register_consumer(
        self, client_id: str, group: str, topics: list[str], held: list[str] | None = None
    ) -> master_pb2.RegisterResponseM2C:
        request = master_pb2.RegisterRequestC2M(
            clientId=client_id,
            groupName=group,
            hostName="127.0.0.1",
            topicList=topics,
            subscribeInfo=held or [],
            defFlowCheckId=-2,
            groupFlowCheckId=-2,
            qryPriorityId=-2,
        )
        return await self.ask(Method.CONSUMER_REGISTER, request, master_pb2.RegisterResponseM2C)

    async def consumer_heartbeat(
        self,
        client_id: str,
        group: str,
        held: list[PartitionRef],
        event: master_pb2.EventProto | None = None,
    ) -> master_pb2.HeartResponseM2C:
        request = master_pb2.HeartRequestC2M(
            clientId=client_id,
            groupName=group,
            reportSubscribeInfo=True,
            subscribeInfo=[str(SubscribeInfo(client_id, group, ref)) for ref in held],
        )
        if event is not None:
            request.event.CopyFrom(event)
        return await self.ask(Method.CONSUMER_HEARTBEAT, request, master_pb2.HeartResponseM2C)

    async def close_consumer(self, client_id: str, group: str) -> master_pb2.CloseResponseM2C:
        request = master_pb2.CloseRequestC2M(clientId=client_id, groupName=group)
        return await self.ask(Method.CONSUMER_CLOSE, request, master_pb2.CloseResponseM2C)

    async def register_partition(
        self,
        client_id: str,
        group: str,
        ref: PartitionRef,
        *,
        read_status: int = 0,
        offset: int | None = None,
        unregister: bool = False,
    ) -> broker_pb2.RegisterResponseB2C:
        request = broker_pb2.RegisterRequestC2B(
            opType=UNREGISTER if unregister else REGISTER,
            **_reader(client_id, group, ref),
            readStatus=read_status,
        )
        if offset is not None:
            request.currOffset = offset
        return await self.ask(
            Method.BROKER_CONSUMER_REGISTER, request, broker_pb2.RegisterResponseB2C
        )

    async def get_message(
        self, client_id: str, group: str, ref: PartitionRef, *, last_consumed: bool = False
    ) -> broker_pb2.GetMessageResponseB2C:
        request = broker_pb2.GetMessageRequestC2B(
            **_reader(client_id, group, ref),
            lastPackConsumed=last_consumed,
            manualCommitOffset=False,
            escFlowCtrl=False,
        )
        return await self.ask(Method.GET_MESSAGE, request, broker_pb2.GetMessageResponseB2C)

    async def commit(
        self, client_id: str, group: str, ref: PartitionRef, *, consumed: bool = True
    ) -> broker_pb2.CommitOffsetResponseB2C:
        request = broker_pb2.CommitOffsetRequestC2B(
            **_reader(client_id, group, ref), lastPackConsumed=consumed
        )
        return await self.ask(Method.COMMIT_OFFSET, request, broker_pb2.CommitOffsetResponseB2C)

    async def broker_heartbeat(
        self, client_id: str, group: str, refs: list[PartitionRef]
    ) -> broker_pb2.HeartBeatResponseB2C:
        request = broker_pb2.HeartBeatRequestC2B(
            clientId=client_id, groupName=group, readStatus=0, partitionInfo=[str(r) for r in refs]
        )
        return await self.ask(
            Method.BROKER_CONSUMER_HEARTBEAT, request, broker_pb2.HeartBeatResponseB2C
        )


async def open_client(address: tuple[str, int], *, protocol_version: int = 2) -> TubeClient:
    stream = await trio.open_tcp_stream(*address)
    return TubeClient(stream, protocol_version=protocol_version)
