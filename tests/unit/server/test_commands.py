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


async def test_a_run_of_fins_is_finished_at_once_and_each_refusal_answered_in_order(
    nursery: trio.Nursery,
) -> None:
    """FINs read together go through the channel as one run (one router wake-up); the
    ones refused still get nsqd's E_FIN_FAILED each, in the order they were sent."""
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    consumer = layer_for(broker, client_id=7)
    await send(consumer, Sub("t", "c"), Rdy(3), preamble=MAGIC)
    await send(layer_for(broker, client_id=8), Mpub("t", (b"a", b"b", b"c")), preamble=MAGIC)
    await trio.testing.wait_all_tasks_blocked()
    frames = ClientConnection().receive_data(consumer.outbound.take())
    ids = [frame.message.id for frame in frames if isinstance(frame, MessageFrame)]
    assert len(ids) == 3
    unknown = b"%016x" % 999
    frames = await send(consumer, Fin(ids[0]), Fin(unknown), Fin(ids[1]), Fin(ids[0]), Fin(ids[2]))
    assert [(f.code, f.error.text) for f in frames if isinstance(f, ErrorReply)] == [
        ("E_FIN_FAILED", f"E_FIN_FAILED FIN {unknown.decode()} failed ID not in flight"),
        ("E_FIN_FAILED", f"E_FIN_FAILED FIN {ids[0].decode()} failed ID not in flight"),
    ]
    assert len(frames) == 2
    channel = broker.topics["t"].partitions[0].channels["c"]
    assert len(channel.in_flight) == 0
    assert channel.finish_count == 3
    assert channel.cursor.confirmed_id == channel.cursor.read_id  # all three confirmed
