"""Consuming from an offset: SUB_ADVANCED over real sockets (spec §8.6 rule 12, §8.8).

Every offset kind works standalone here (Youzan's own standalone nsqd takes only
``special:-1``, spec §9). Messages are published through the broker with chosen
timestamps where the test needs time, and over TCP elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import orjson
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.protocol import Cls, Fin, OffsetSpec, Pub, PubTrace, Rdy, SubAdvanced
from trionsq.protocol.client import Response
from trionsq.protocol.message import parse_binary_id

from .raw import next_error, next_frame, next_message, ok, publish, quiet, start

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.protocol.message import Message
    from trionsq.testing import ProtocolClient

    from .raw import Clients

SECOND = 1_000_000_000


async def advanced(
    clients: Clients, addresses: BoundAddresses, command: SubAdvanced, *, rdy: int = 100
) -> ProtocolClient:
    """A SUB_ADVANCED consumer (detail layout), OK checked, RDY sent."""
    client = await clients.connect(addresses.tcp)
    client.decoder.detail = True
    await client.send(command)
    assert ok(await next_frame(client))
    if rdy:
        await client.send(Rdy(rdy))
    return client


async def received(client: ProtocolClient, count: int) -> list[Message]:
    return [await next_message(client) for _ in range(count)]


def ids(messages: list[Message]) -> list[int]:
    return [parse_binary_id(m.id)[0] for m in messages]


async def fill(clients: Clients, addresses: BoundAddresses, count: int) -> None:
    """``count`` messages ``m1..`` in topic t, and channel c made to consume them all."""
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"m%d" % n) for n in range(1, count + 1)))
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=count)
    finished = [Fin(m.id) for m in [await next_message(consumer) for _ in range(count)]]
    await consumer.send(*finished, Cls())
    assert await next_frame(consumer) == Response(b"CLOSE_WAIT")  # the FINs came first
    (channel,) = addresses.broker.find_channel("t", "c")
    assert channel.cursor.confirmed_id == count + 1
    await consumer.aclose()
    with trio.fail_after(5):
        while channel.consumers:  # the server sees the close when its reader wakes
            await trio.testing.wait_all_tasks_blocked(cushion=0.001)


async def test_sub_advanced_special_minus_one_skips_the_backlog(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"old 1"), Pub("t", b"old 2"))
    consumer = await advanced(
        clients, addresses, SubAdvanced("t", "c", None, OffsetSpec("special", -1))
    )
    assert await quiet(consumer, 0.05) == []
    await publish(producer, Pub("t", b"new"))
    message = await next_message(consumer)
    assert message.body == b"new"
    assert message.offset is not None  # the detail layout: offset and raw size
    assert message.raw_size is not None


async def test_sub_advanced_msgcount_replays_from_that_count(
    clients: Clients, nursery: trio.Nursery, tmp_path: Path
) -> None:
    addresses = await start(nursery, NsqdConfig.loopback(data_path=str(tmp_path)))
    await fill(clients, addresses, 5)  # consumed and finished: only the log has them
    consumer = await advanced(
        clients, addresses, SubAdvanced("t", "c", 0, OffsetSpec("msgcount", 2))
    )
    messages = await received(consumer, 3)
    assert [m.body for m in messages] == [b"m3", b"m4", b"m5"]
    assert ids(messages) == [3, 4, 5]
    assert await quiet(consumer, 0.05) == []


async def test_sub_advanced_virtual_queue_starts_at_a_traced_offset(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t")
    producer = await clients.connect(addresses.tcp)
    offsets = []
    for n in range(4):
        await producer.send(PubTrace("t", 100 + n, b"m%d" % n))
        frame = await next_frame(producer)
        offsets.append(int.from_bytes(frame.data[18:26], "big"))  # type: ignore[union-attr]
    consumer = await advanced(
        clients, addresses, SubAdvanced("t", "c", 0, OffsetSpec("virtual_queue", offsets[2]))
    )
    messages = await received(consumer, 2)
    assert [m.body for m in messages] == [b"m2", b"m3"]
    assert [m.offset for m in messages] == offsets[2:]
    assert [parse_binary_id(m.id)[1] for m in messages] == [102, 103]  # trace ids kept


async def test_sub_advanced_timestamp_starts_at_the_first_message_that_late(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    broker = addresses.broker
    for second in (1000, 2000, 3000):
        broker.publish("t", [b"at %d" % second], second * SECOND)
    consumer = await advanced(
        clients, addresses, SubAdvanced("t", "c", 0, OffsetSpec("timestamp", 1500))
    )
    assert [m.body for m in await received(consumer, 2)] == [b"at 2000", b"at 3000"]
    assert await quiet(consumer, 0.05) == []


async def test_sub_advanced_moves_the_channel_only_for_its_only_consumer(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"m%d" % n) for n in range(3)))
    first = await clients.subscribe(addresses.tcp, "t", "c")  # holds the channel, RDY 0
    second = await advanced(clients, addresses, SubAdvanced("t", "c", 0, OffsetSpec("special", -1)))
    # not applied: the backlog is still there for both consumers
    assert [m.body for m in await received(second, 3)] == [b"m0", b"m1", b"m2"]
    assert await quiet(first, 0.02) == []


async def test_sub_advanced_bad_offset_is_fatal_e_invalid_and_moves_nothing(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"a"), Pub("t", b"b"))
    for spec, text in (
        (
            OffsetSpec("msgcount", 9),
            "consume offset msgcount:9 out of range: the queue has 2 messages",
        ),
        (
            OffsetSpec("virtual_queue", 3),
            "consume offset virtual_queue:3 is not the start of a message",
        ),
    ):
        client = await clients.connect(addresses.tcp)
        await client.send(SubAdvanced("t", "c", 0, spec))
        error = await next_error(client)
        assert error.error.text == f"E_INVALID {text}"
        assert error.fatal
        await client.wait_closed()
    (channel,) = addresses.broker.find_channel("t", "c")
    assert channel.cursor.read_id == 1
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=10)
    assert [(await next_message(consumer)).body for _ in range(2)] == [b"a", b"b"]


async def test_sub_advanced_bad_offset_spec_is_refused_by_the_parser(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t")
    client = await clients.connect(addresses.tcp)
    await client.stream.send_all(b"SUB_ADVANCED t c 0 special:5\n")
    error = await next_error(client)
    assert error.error.text == "E_INVALID invalid consume offset: special:5"
    assert "t" not in {c for p in addresses.broker.topics["t"].partitions for c in p.channels}


async def test_sub_advanced_never_creates_a_topic(clients: Clients, nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    await client.send(SubAdvanced("missing", "c"))
    assert (await next_error(client)).error.text == "E_TOPIC_NOT_EXIST "
    assert "missing" not in addresses.broker.topics


async def test_sub_advanced_on_an_ordered_topic_is_e_sub_order_is_must(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", ordered=True)
    client = await clients.connect(addresses.tcp)
    await client.send(SubAdvanced("t", "c", 0))
    error = await next_error(client)
    assert error.error.text.startswith("E_SUB_ORDER_IS_MUST ")


async def test_sub_advanced_without_offset_reads_on_with_the_detail_layout(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"x"))
    consumer = await advanced(clients, addresses, SubAdvanced("t", "c", 0))
    message = await next_message(consumer)
    assert (message.body, message.offset) == (b"x", 0)
    assert message.raw_size is not None
    assert message.raw_size > len(b"x")


async def test_set_offset_drops_what_was_in_flight_and_delivers_from_there(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"m%d" % n) for n in range(3)))
    broker = addresses.broker
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=3)
    held = [await next_message(consumer) for _ in range(3)]
    assert await broker.set_channel_offset("t", 0, "c", OffsetSpec("msgcount", 1))
    again = [await next_message(consumer) for _ in range(2)]
    assert [(m.body, m.attempts) for m in again] == [(b"m1", 1), (b"m2", 1)]
    await consumer.send(Fin(held[0].id))  # m0 is before the new position: not in flight
    error = await next_error(consumer)
    assert error.error.text.startswith("E_FIN_FAILED ")
    assert not error.fatal
    (channel,) = broker.find_channel("t", "c")
    assert channel.cursor.confirmed_id == 2


async def test_sub_advanced_on_one_channel_leaves_other_channels_alone_by_sub_advanced_elsewhere(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"a"))
    other = await clients.subscribe(addresses.tcp, "t", "other", rdy=1)
    await advanced(clients, addresses, SubAdvanced("t", "c", 0, OffsetSpec("special", -1)))
    assert (await next_message(other)).body == b"a"


# ---------------------------------------------------------------- HTTP /channel/setoffset


async def setoffset(addresses: BoundAddresses, query: str, body: bytes) -> httpx.Response:
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        return await http.post(f"/channel/setoffset?{query}", content=body)


async def test_http_setoffset_moves_the_channel_even_with_consumers_attached(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"m%d" % n) for n in range(5)))
    first = await clients.subscribe(addresses.tcp, "t", "c")
    second = await clients.subscribe(addresses.tcp, "t", "c")
    response = await setoffset(addresses, "topic=t&channel=c", b"msgcount:3")
    assert (response.status_code, response.content) == (200, b"")
    await first.send(Rdy(2))  # not ready once both are in flight: flushed at once
    assert [(await next_message(first)).body for _ in range(2)] == [b"m3", b"m4"]
    assert await quiet(second, 0.02) == []


async def test_http_setoffset_accepts_every_spec_kind(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    broker = addresses.broker
    records = [broker.publish("t", [b"at %d" % s], s * SECOND)[0] for s in (10, 20, 30)]
    await broker.create_channel("t", "c")
    (channel,) = broker.find_channel("t", "c")
    for body, read_id in (
        (b"timestamp:20", 2),
        (b"virtual_queue:%d" % records[2].offset, 3),
        (b"msgcount:0", 1),
        (b"special:-1", 4),
    ):
        response = await setoffset(addresses, "topic=t&channel=c&partition=0", body)
        assert response.status_code == 200, (body, response.content)
        assert channel.cursor.read_id == read_id, body


async def test_http_setoffset_errors_move_nothing(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    addresses.broker.publish("t", [b"a", b"b"], SECOND)
    await addresses.broker.create_channel("t", "c")
    (channel,) = addresses.broker.find_channel("t", "c")
    for query, body, status, message in (
        ("topic=t&channel=c", b"", 406, "MSG_EMPTY"),
        ("topic=t&channel=c", b'{"offset":1}', 400, 'invalid consume offset:{"offset":1}'),
        ("topic=t&channel=c", b"special:5", 400, "invalid consume offset:special:5"),
        (
            "topic=t&channel=c",
            b"msgcount:7",
            400,
            ("consume offset msgcount:7 out of range: the queue has 2 messages"),
        ),
        (
            "topic=t&channel=c",
            b"virtual_queue:1",
            400,
            ("consume offset virtual_queue:1 is not the start of a message"),
        ),
        ("topic=missing&channel=c", b"special:-1", 404, "E_TOPIC_NOT_EXIST"),
        ("topic=t&channel=c&partition=1", b"special:-1", 404, "E_TOPIC_NOT_EXIST"),
        ("topic=t&channel=other", b"special:-1", 404, "CHANNEL_NOT_FOUND"),
        (
            "topic=t&channel=c&partition=x",
            b"special:-1",
            400,
            ('strconv.Atoi: parsing "x": invalid syntax'),
        ),
        ("channel=c", b"special:-1", 400, "MISSING_ARG_TOPIC"),
        ("topic=t", b"special:-1", 400, "MISSING_ARG_CHANNEL"),
    ):
        response = await setoffset(addresses, query, body)
        assert response.status_code == status, (query, body, response.content)
        assert orjson.loads(response.content) == {"message": message}, (query, body)
    assert channel.cursor.read_id == 1
