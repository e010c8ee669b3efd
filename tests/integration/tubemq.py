"""Helpers for the TubeMQ tests: a broker with both TubeMQ listeners, and a consumer
that follows the master's rebalance events as TubeMQ's SDKs do."""

from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol.tubemq import Method, Service
from trionsq.protocol.tubemq_formats import ErrCode, EventType, parse_subscribe_info
from trionsq.protocol.tubemq_proto import broker_pb2, master_pb2
from trionsq.tubemq.client import TubeClient, open_client

if TYPE_CHECKING:
    from trionsq.config import NsqdOptions
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.protocol.tubemq_formats import PartitionRef

TUBEMQ = NsqdConfig.loopback(
    tubemq_master_address="127.0.0.1:0", tubemq_broker_address="127.0.0.1:0"
)


async def start_tubemq(nursery: trio.Nursery, **changes: Unpack[NsqdOptions]) -> BoundAddresses:
    options: NsqdOptions = {
        "tubemq_master_address": "127.0.0.1:0",
        "tubemq_broker_address": "127.0.0.1:0",
    }
    options.update(changes)
    config = NsqdConfig.loopback(**options)
    addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
    return addresses


class TubeClients:
    """Opens TubeMQ connections and closes them all when the test ends."""

    def __init__(self) -> None:
        self.opened: list[TubeClient] = []

    async def open(self, address: tuple[str, int] | None) -> TubeClient:
        assert address is not None
        client = await open_client(address)
        self.opened.append(client)
        return client

    async def pair(self, addresses: BoundAddresses) -> tuple[TubeClient, TubeClient]:
        """A master connection and a broker connection."""
        return await self.open(addresses.tubemq_master), await self.open(addresses.tubemq_broker)

    async def close_all(self) -> None:
        for client in self.opened:
            await trio.aclose_forcefully(client.stream)


async def send_all(
    broker: TubeClient, producer: str, topic: str, messages: list[tuple[int, bytes]]
) -> list[broker_pb2.SendMessageResponseB2P]:
    """SendMessage calls pipelined (as the SDKs' async send does), replies in order."""
    serials = []
    for partition, data in messages:
        request = TubeClient.message_request(producer, topic, partition, data)
        serials.append(await broker.send(Service.BROKER_WRITE, Method.SEND_MESSAGE, request))
    replies = []
    for serial in serials:
        reply = await broker.reply(serial)
        assert isinstance(reply.body, broker_pb2.SendMessageResponseB2P), reply
        replies.append(reply.body)
    return replies


class TubeConsumer:
    """One TubeMQ consumer: registers with the master, does each rebalance event the
    heartbeat replies carry (register or unregister partitions at the broker) and
    reports it in the next heartbeat, as TubeMQ's SDKs do."""

    def __init__(
        self, master: TubeClient, broker: TubeClient, consumer_id: str, group: str
    ) -> None:
        self.master = master
        self.broker = broker
        self.consumer_id = consumer_id
        self.group = group
        self.held: list[PartitionRef] = []
        self.done: master_pb2.EventProto | None = None
        self.events: list[master_pb2.EventProto] = []
        self.refused: list[broker_pb2.RegisterResponseB2C] = []

    async def register(self, topics: list[str]) -> master_pb2.RegisterResponseM2C:
        return await self.master.register_consumer(self.consumer_id, self.group, topics)

    async def heartbeat(self) -> master_pb2.HeartResponseM2C:
        reply = await self.master.consumer_heartbeat(
            self.consumer_id, self.group, self.held, self.done
        )
        assert reply.success, reply
        if self.held:  # the SDKs keep their partitions at the broker the same way
            beat = await self.broker.broker_heartbeat(self.consumer_id, self.group, self.held)
            assert beat.success, beat
            assert not beat.hasPartFailure, beat
        self.done = None
        if reply.HasField("event"):
            self.events.append(reply.event)
            await self._do(reply.event)
        return reply

    async def _do(self, event: master_pb2.EventProto) -> None:
        refs = [parse_subscribe_info(text).partition for text in event.subscribeInfo]
        if event.opType == EventType.CONNECT:
            for ref in refs:
                answer = await self.broker.register_partition(self.consumer_id, self.group, ref)
                if answer.success:
                    self.held.append(ref)
                else:
                    self.refused.append(answer)
        else:
            for ref in refs:
                await self.broker.register_partition(
                    self.consumer_id, self.group, ref, read_status=1, unregister=True
                )
                self.held = [h for h in self.held if h != ref]
        done = master_pb2.EventProto()
        done.CopyFrom(event)
        done.status = 2
        self.done = done

    async def settle(self, count: int, *, rounds: int = 20) -> None:
        """Heartbeat (one a second, in virtual time) until it holds ``count`` partitions
        and has nothing left to do."""
        for _ in range(rounds):
            reply = await self.heartbeat()
            if len(self.held) == count and not reply.HasField("event") and self.done is None:
                return
            await trio.sleep(1)
        raise AssertionError(f"{self.consumer_id} holds {self.held} after {rounds} rounds")

    async def pull(
        self, ref: PartitionRef, *, last_consumed: bool = False
    ) -> broker_pb2.GetMessageResponseB2C:
        return await self.broker.get_message(
            self.consumer_id, self.group, ref, last_consumed=last_consumed
        )

    async def drain(self, ref: PartitionRef) -> list[bytes]:
        """Pull and confirm until the partition has nothing more; the bodies confirmed."""
        confirmed: list[bytes] = []
        while True:
            reply = await self.pull(ref)
            if reply.errCode == ErrCode.NOT_FOUND:
                return confirmed
            assert reply.success, reply
            commit = await self.broker.commit(self.consumer_id, self.group, ref)
            assert commit.success, commit
            confirmed += [m.payLoadData for m in reply.messages]
