"""The command layer with no socket: bytes become events, events become broker calls,
and the answers are read back from the connection's outbound buffer."""

from __future__ import annotations

import trio
import trio.testing

from trionsq.broker.broker import Broker
from trionsq.config import NsqdConfig
from trionsq.dispatch.router import ChannelRunner
from trionsq.protocol.client import (
    ClientConnection,
    ErrorReply,
    MessageFrame,
    Response,
    encode_commands,
)
from trionsq.protocol.commands import Command, ExtMessage, Fin, Mpub, Nop, Pub, PubExt, Rdy, Sub
from trionsq.server.commands import MAX_COMMANDS_PER_TURN, CommandLayer
from trionsq.version import NSQD_RELEASE

MAGIC = b"  V2"


def layer_for(broker: Broker, client_id: int = 1) -> CommandLayer:
    settings = broker.config.server_settings(NSQD_RELEASE)
    return CommandLayer(client_id, broker, settings, "127.0.0.1:50000")


async def send(
    layer: CommandLayer, *commands: Command, preamble: bytes = b""
) -> list[Response | ErrorReply | MessageFrame]:
    """Apply ``commands`` as one read and decode everything the layer answered."""
    data = preamble + encode_commands(commands)
    await layer.apply(layer.protocol.receive_data(data, MAX_COMMANDS_PER_TURN))
    reader = ClientConnection(extended=layer.outbound.extended, detail=layer.outbound.detail)
    return reader.receive_data(layer.outbound.take())


async def test_publishes_are_stored_and_each_gets_its_ok(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    layer = layer_for(broker)
    frames = await send(
        layer, Pub("t", b"a"), Pub("t", b"b"), Mpub("t", (b"c", b"d")), preamble=MAGIC
    )
    assert frames == [Response(b"OK")] * 3
    assert broker.topics["t"].partitions[0].message_count == 4
    assert layer.pub_counts == {"t": 4}


async def test_youzan_publish_to_a_missing_topic_is_refused_and_nothing_created(
    nursery: trio.Nursery,
) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    layer = layer_for(broker)
    frames = await send(layer, PubExt("nowhere", ExtMessage(b"{}", b"body")), preamble=MAGIC)
    assert len(frames) == 1
    assert isinstance(frames[0], ErrorReply)
    assert frames[0].code == "E_TOPIC_NOT_EXIST"
    assert "nowhere" not in broker.topics


async def test_a_subscriber_gets_a_message_pushed_and_a_bad_fin_is_refused(
    nursery: trio.Nursery,
) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    consumer = layer_for(broker, client_id=7)
    assert await send(consumer, Sub("t", "c"), Rdy(1), preamble=MAGIC) == [Response(b"OK")]
    producer = layer_for(broker, client_id=8)
    await send(producer, Pub("t", b"hello"), preamble=MAGIC)
    await trio.testing.wait_all_tasks_blocked()  # the channel's router pushes to us
    frames = ClientConnection().receive_data(consumer.outbound.take())
    assert len(frames) == 1
    assert isinstance(frames[0], MessageFrame)
    message = frames[0].message
    assert message.body == b"hello"
    frames = await send(consumer, Fin(message.id), Fin(message.id), Nop())
    assert len(frames) == 1  # the first FIN is silent, the second one is refused
    assert isinstance(frames[0], ErrorReply)
    assert frames[0].code == "E_FIN_FAILED"
    assert not frames[0].fatal
