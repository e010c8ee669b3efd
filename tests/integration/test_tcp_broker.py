"""The broker over real sockets on 127.0.0.1, port 0."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import Cls, Fin, IdentifyRequest, Mpub, Nop, Pub, Rdy, Req, Sub, Touch
from trionsq.protocol.client import ErrorReply, MessageFrame, Response, encode_identify

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

LOCAL = NsqdConfig.loopback()


async def start(nursery: trio.Nursery, config: NsqdConfig = LOCAL) -> BoundAddresses:
    addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
    return addresses


def ok(frame: object) -> bool:
    return isinstance(frame, Response) and frame.is_ok


async def test_pub_then_sub_gets_the_backlog_and_fin(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await producer.send(Pub("t", b"hello"), Mpub("t", (b"a", b"b")))
    assert all(ok(f) for f in await producer.read(2))
    consumer = await clients.connect(addresses.tcp)
    await consumer.send(Sub("t", "c"), Rdy(10))
    frames = await consumer.read(4)
    assert ok(frames[0])
    messages = [f.message for f in frames[1:] if isinstance(f, MessageFrame)]
    assert [m.body for m in messages] == [b"hello", b"a", b"b"]
    assert [m.attempts for m in messages] == [1, 1, 1]
    assert messages[0].id == b"0000000000000001"
    await consumer.send(*(Fin(m.id) for m in messages), Fin(messages[0].id))
    (error,) = await consumer.read(1)
    assert isinstance(error, ErrorReply)
    assert error.error.text == "E_FIN_FAILED FIN 0000000000000001 failed ID not in flight"
    assert not error.fatal


async def test_identify_reply_and_heartbeats(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    await client.stream.send_all(
        encode_identify(
            IdentifyRequest(feature_negotiation=True, heartbeat_interval=1000, tls_v1=True)
        )
    )
    (reply,) = await client.read(1)
    assert isinstance(reply, Response)
    assert b'"tls_v1":false' in reply.data  # no certificate: TLS is not offered
    t0 = trio.current_time()
    (beat,) = await client.read(1)
    assert isinstance(beat, Response)
    assert beat.is_heartbeat
    assert 0.9 <= trio.current_time() - t0 <= 1.1
    await client.send(Nop())
    t1 = trio.current_time()
    await client.wait_closed()  # open while answered; closed after two silent intervals
    assert 1.9 <= trio.current_time() - t1 <= 2.1


async def test_competing_consumers_and_fan_out(clients: Clients, nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    consumers = []
    for channel in ("one", "one", "two"):
        client = await clients.connect(addresses.tcp)
        await client.send(Sub("fan", channel), Rdy(100))
        assert ok((await client.read(1))[0])
        consumers.append(client)
    producer = await clients.connect(addresses.tcp)
    await producer.send(Mpub("fan", tuple(b"%d" % i for i in range(20))))
    assert ok((await producer.read(1))[0])
    two = await consumers[2].read(20)
    assert sorted(f.message.body for f in two if isinstance(f, MessageFrame)) == sorted(
        b"%d" % i for i in range(20)
    )
    shares = [
        [f.message.body for f in await client.drain() if isinstance(f, MessageFrame)]
        for client in consumers[:2]
    ]
    assert sorted(shares[0] + shares[1]) == sorted(b"%d" % i for i in range(20))  # each once
    assert all(shares)  # and both consumers of "one" got some


async def test_req_timeout_and_disconnect_requeue(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await producer.send(Pub("q", b"job"))
    await producer.read(1)
    first = await clients.connect(addresses.tcp)
    await first.stream.send_all(encode_identify(IdentifyRequest(msg_timeout=5000)))
    await first.send(Sub("q", "w"), Rdy(1))
    frames = await first.read(3)
    (message,) = [f.message for f in frames if isinstance(f, MessageFrame)]
    t0 = trio.current_time()
    await first.send(Req(message.id, 2000))
    (again,) = await first.read(1)
    assert isinstance(again, MessageFrame)
    assert again.message.attempts == 2
    assert 1.9 <= trio.current_time() - t0 <= 2.1  # REQ delay, on the virtual clock
    t1 = trio.current_time()
    await first.send(Touch(again.message.id))
    (timed_out,) = await first.read(1)
    assert isinstance(timed_out, MessageFrame)
    assert timed_out.message.attempts == 3
    assert 4.9 <= trio.current_time() - t1 <= 5.1  # msg_timeout 5 s, then requeued
    second = await clients.connect(addresses.tcp)
    await second.send(Sub("q", "w"), Rdy(1))
    assert ok((await second.read(1))[0])
    await first.aclose()  # in flight to the first: requeued at once, not after 5 s
    t2 = trio.current_time()
    (moved,) = await second.read(1)
    assert isinstance(moved, MessageFrame)
    assert moved.message.attempts == 4
    assert trio.current_time() - t2 < 0.1
    await second.send(Fin(moved.message.id), Cls())
    (close_wait,) = await second.read(1)
    assert isinstance(close_wait, Response)
    assert close_wait.is_close_wait


async def test_bad_input_gets_its_error_and_others_keep_going(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    bad = await clients.connect(addresses.tcp)
    await bad.stream.send_all(b"BOGUS\n")
    (error,) = await bad.read(1)
    assert isinstance(error, ErrorReply)
    assert error.error.text == "E_INVALID invalid command BOGUS"
    await bad.wait_closed()
    good = await clients.connect(addresses.tcp)
    await good.send(Pub("t", b"x"))
    assert ok((await good.read(1))[0])


async def _held_then_resubscribe(
    clients: Clients, address: tuple[str, int], topic: str, channel: str
) -> list[bytes]:
    """Publish with a consumer holding RDY 0, drop it, then see what a new consumer gets."""
    first = await clients.connect(address)
    await first.send(Sub(topic, channel))
    assert ok((await first.read(1))[0])
    producer = await clients.connect(address)
    await producer.send(Pub(topic, b"held"))
    assert ok((await producer.read(1))[0])
    await first.stream.send_eof()  # the only consumer leaves...
    await first.wait_closed()  # ...and the broker has closed its side: it has unsubscribed it
    second = await clients.connect(address)
    await second.send(Sub(topic, channel), Rdy(1))
    frames = await second.drain()
    return [f.message.body for f in frames if isinstance(f, MessageFrame)]


async def test_ephemeral_channel_and_topic_go_with_their_last_consumer(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    durable = await _held_then_resubscribe(clients, addresses.tcp, "keep", "c")
    assert durable == [b"held"]  # a durable channel keeps its messages for the next consumer
    ephemeral = await _held_then_resubscribe(
        clients, addresses.tcp, "gone#ephemeral", "c#ephemeral"
    )
    assert ephemeral == []  # channel and topic were deleted when the consumer left


async def test_pipelined_pubs_are_answered_in_order_and_stored_in_order(
    clients: Clients, nursery: trio.Nursery
) -> None:
    """PUBs that arrive together are appended together; each still gets its OK."""
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    sent = [b"%03d" % i for i in range(50)]
    await producer.send(*(Pub("piped", body) for body in sent[:25]), Pub("other", b"x"))
    await producer.send(*(Pub("piped", body) for body in sent[25:]))
    replies = await producer.read(51)
    assert all(ok(frame) for frame in replies)
    (partition,) = addresses.broker.topics["piped"].partitions
    assert [record.body for record in partition.log.read(1, 100)] == sent
    assert addresses.broker.topics["other"].partitions[0].message_count == 1
