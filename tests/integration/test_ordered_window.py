"""trionsq's ordered window over real sockets: IDENTIFY ``ordered_window`` N lets a
SUB_ORDERED consumer hold N messages of its partition at once, still in order, and a
message going back (REQ, timeout) takes everything sent after it back with it.

docs/extensions.md ("Ordered window"); issue 19: one message per round trip per
partition held ordered consumption near 15k msg/s over 4 partitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import trio
import trio.testing

from trionsq.protocol import Fin, IdentifyRequest, Pub, Rdy, Req, SubOrdered, Touch
from trionsq.protocol.client import MessageFrame, Response, encode_identify
from trionsq.protocol.message import parse_binary_id

from .raw import next_error, next_frame, ok, publish, quiet, start

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.protocol.client import Frame
    from trionsq.protocol.message import Message
    from trionsq.testing import ProtocolClient

    from .raw import Clients


def autojump(clock: trio.testing.MockClock) -> None:
    clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight


async def ordered_consumer(
    clients: Clients,
    addresses: BoundAddresses,
    window: int,
    *,
    msg_timeout: int = 0,
    rdy: int = 100,
) -> ProtocolClient:
    client = await clients.connect(addresses.tcp)
    identify = IdentifyRequest(ordered_window=window, msg_timeout=msg_timeout)
    await client.stream.send_all(encode_identify(identify))
    assert ok(await next_frame(client))
    client.decoder.detail = True
    await client.send(SubOrdered("t", "c", 0))
    assert ok(await next_frame(client))
    if rdy:
        await client.send(Rdy(rdy))
    return client


async def filled(clients: Clients, nursery: trio.Nursery, count: int) -> BoundAddresses:
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=1, ordered=True)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"m%d" % i, 0) for i in range(count)))
    return addresses


def messages(frames: list[Frame]) -> list[Message]:
    return [f.message for f in frames if isinstance(f, MessageFrame)]


def seen(frames: list[Frame]) -> list[tuple[bytes, int]]:
    return [(m.body, m.attempts) for m in messages(frames)]


async def test_identify_answers_the_window_and_refuses_one_out_of_range(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    asked = IdentifyRequest(feature_negotiation=True, ordered_window=7)
    await client.stream.send_all(encode_identify(asked))
    frame = await next_frame(client)
    assert isinstance(frame, Response)
    assert orjson.loads(frame.data)["ordered_window"] == 7  # the client knows it holds
    plain = await clients.connect(addresses.tcp)
    await plain.stream.send_all(encode_identify(IdentifyRequest(feature_negotiation=True)))
    frame = await next_frame(plain)
    assert isinstance(frame, Response)
    assert "ordered_window" not in orjson.loads(frame.data)  # nsqd's reply, unchanged
    for window in (-1, 2501):  # above --max-rdy-count
        bad = await clients.connect(addresses.tcp)
        await bad.stream.send_all(encode_identify(IdentifyRequest(ordered_window=window)))
        error = await next_error(bad)
        assert error.error.text == f"E_BAD_BODY IDENTIFY ordered window ({window}) is invalid"
        assert error.fatal


async def test_a_window_holds_that_many_in_order_and_refills_as_they_are_finished(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await filled(clients, nursery, 6)
    client = await ordered_consumer(clients, addresses, 3)
    first = messages(await quiet(client, 0.5))
    assert [m.body for m in first] == [b"m0", b"m1", b"m2"]  # three of RDY 100
    offsets = [m.offset or 0 for m in first]  # the detail layout always has one
    assert offsets == sorted(offsets)
    assert offsets[0] < offsets[1] < offsets[2]
    await client.send(Fin(first[0].id))
    assert seen(await quiet(client, 0.5)) == [(b"m3", 1)]
    await client.send(Fin(first[1].id), Fin(first[2].id))  # one run of FINs
    assert seen(await quiet(client, 0.5)) == [(b"m4", 1), (b"m5", 1)]


async def test_a_requeue_sends_it_and_everything_sent_after_it_again_in_order(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await filled(clients, nursery, 4)
    client = await ordered_consumer(clients, addresses, 4)
    held = messages(await quiet(client, 0.5))
    assert [m.body for m in held] == [b"m0", b"m1", b"m2", b"m3"]
    await client.send(Req(held[1].id, 0))
    again = await quiet(client, 0.5)
    assert seen(again) == [(b"m1", 2), (b"m2", 2), (b"m3", 2)]  # nothing newer before m1
    await client.send(Fin(held[0].id), *(Fin(m.id) for m in messages(again)))
    assert await quiet(client, 0.5) == []  # every FIN was taken: no E_FIN_FAILED


async def test_a_timeout_takes_the_window_back_to_the_earliest_that_timed_out(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await filled(clients, nursery, 3)
    client = await ordered_consumer(clients, addresses, 3, msg_timeout=1000)
    held = messages(await quiet(client, 0.2))
    assert [m.body for m in held] == [b"m0", b"m1", b"m2"]
    await client.send(Fin(held[0].id), Touch(held[2].id))
    await trio.sleep(0.6)
    await client.send(Touch(held[2].id))  # m2 is kept alive, m1 is not
    back = await quiet(client, 0.8)
    assert seen(back) == [(b"m1", 2), (b"m2", 2)]  # m2 goes back behind m1 all the same
    assert [parse_binary_id(m.id)[0] for m in messages(back)] == [
        parse_binary_id(m.id)[0] for m in held[1:]
    ]


async def test_a_second_consumer_on_the_partition_brings_the_window_back_to_one(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await filled(clients, nursery, 4)
    first = await ordered_consumer(clients, addresses, 4, rdy=0)
    second = await ordered_consumer(clients, addresses, 4, rdy=0)
    await first.send(Rdy(100))
    await second.send(Rdy(100))
    got = messages(await quiet(first, 0.5)) + messages(await quiet(second, 0.5))
    assert [m.body for m in got] == [b"m0"]  # Youzan's one at a time for a shared partition
