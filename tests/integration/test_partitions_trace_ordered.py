"""Youzan partitions, traced publishes and ordered consumption over real sockets.

Spec tcp-protocol §8.2-§8.4 (partition arguments, PUB_TRACE/MPUB_TRACE and the
30-byte traced reply), §8.6 (SUB rules 4-5, SUB_ORDERED), §8.8 (the detail layout),
§9 (default partition, REQ on an ordered channel); http-api §3/§5.3 (partition_num).
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

import httpx
import orjson
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.protocol import (
    Fin,
    IdentifyRequest,
    InternalCreateTopic,
    Mpub,
    MpubTrace,
    Pub,
    PubTrace,
    Rdy,
    Req,
    Sub,
    SubOrdered,
    TracedMessage,
)
from trionsq.protocol.client import MessageFrame, Response, encode_identify
from trionsq.protocol.message import parse_binary_id

from .raw import bodies, next_error, next_frame, next_message, ok, publish, quiet, start

if TYPE_CHECKING:
    import pytest

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.protocol.client import Frame
    from trionsq.protocol.message import Message
    from trionsq.testing import ProtocolClient

    from .raw import Clients

_TRACED = struct.Struct(">2sQQQI")


def autojump(clock: trio.testing.MockClock) -> None:
    clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight


async def consumer(
    clients: Clients,
    addresses: BoundAddresses,
    command: Sub | SubOrdered,
    *,
    rdy: int = 10,
    identify: IdentifyRequest | None = None,
) -> ProtocolClient:
    """A subscribed consumer; SUB_ORDERED ones decode the detail layout."""
    client = await clients.connect(addresses.tcp)
    if identify is not None:
        await client.stream.send_all(encode_identify(identify))
        assert ok(await next_frame(client))
    client.decoder.detail = isinstance(command, SubOrdered)
    await client.send(command)
    assert ok(await next_frame(client))
    if rdy:
        await client.send(Rdy(rdy))
    return client


async def traced_reply(client: ProtocolClient) -> tuple[bytes, int, int, int, int]:
    frame = await next_frame(client)
    assert isinstance(frame, Response), frame
    assert len(frame.data) == 30
    fields: tuple[bytes, int, int, int, int] = _TRACED.unpack(frame.data)
    return fields


async def read_exact(client: ProtocolClient, count: int) -> bytes:
    """The next ``count`` bytes from the socket, undecoded."""
    data = b""
    while len(data) < count:
        chunk = await client.stream.receive_some(count - len(data))
        assert chunk, "the server closed the connection"
        data += chunk
    return data


def messages(frames: list[Frame]) -> list[Message]:
    return [f.message for f in frames if isinstance(f, MessageFrame)]


def internal_id(message: Message) -> int:
    return parse_binary_id(message.id)[0]


# ---------------------------------------------------------------- creating partitions


async def test_http_topic_create_partition_num_gives_that_many_partitions(
    nursery: trio.Nursery,
) -> None:
    addresses = await start(nursery)
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        assert (await http.post("/topic/create?topic=one")).status_code == 200
        assert (await http.post("/topic/create?topic=p&partition_num=3")).status_code == 200
        # an existing topic grows to partition_num and never shrinks
        assert (await http.post("/topic/create?topic=one&partition_num=2")).status_code == 200
        assert (await http.post("/topic/create?topic=p&partition_num=1")).status_code == 200
        assert (await http.post("/topic/create?topic=max&partition_num=255")).status_code == 200
        for bad in ("0", "256", "-1", "abc", ""):
            response = await http.post(f"/topic/create?topic=bad&partition_num={bad}")
            assert response.status_code == 400, bad
            assert orjson.loads(response.content) == {"message": "INVALID_ARG_TOPIC_PARTITION_NUM"}
    counts = {name: len(t.partitions) for name, t in addresses.broker.topics.items()}
    assert counts == {"one": 2, "p": 3, "max": 255}


async def test_internal_create_topic_with_a_partition_adds_partitions_up_to_it(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    await publish(
        client,
        InternalCreateTopic("t", 0),
        InternalCreateTopic("t", 2),
        InternalCreateTopic("t", 1),  # idempotent: already there
    )
    assert len(addresses.broker.topics["t"].partitions) == 3
    await client.send(InternalCreateTopic("t", 255))
    error = await next_error(client)
    assert error.error.text == "E_CREATE_TOPIC_FAILED partition 255 out of range 0-254"
    assert not error.fatal


# ---------------------------------------------------------------- partitions in PUB/SUB


async def test_pub_and_mpub_with_a_partition_go_to_that_partitions_channel_only(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2)
    zero = await consumer(clients, addresses, Sub("t", "c", 0))
    one = await consumer(clients, addresses, Sub("t", "c", 1))
    producer = await clients.connect(addresses.tcp)
    await producer.stream.send_all(b"PUB t 1\n" + struct.pack(">i", 2) + b"p1")
    assert ok(await next_frame(producer))
    await publish(producer, Mpub("t", (b"m1", b"m2"), 1), Pub("t", b"d0"), Pub("t", b"z0", 0))
    assert bodies(await quiet(one, 0.5)) == [b"p1", b"m1", b"m2"]
    assert bodies(await quiet(zero, 0.5)) == [b"d0", b"z0"]  # no partition: the lowest
    logs = [len(p.log) for p in addresses.broker.topics["t"].partitions]
    assert logs == [2, 3]


async def test_pubs_in_one_read_to_different_partitions_each_reach_their_own(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=3)
    producer = await clients.connect(addresses.tcp)
    await publish(
        producer,
        Pub("t", b"a", 2),
        Pub("t", b"b", 2),
        Pub("t", b"c", 1),
        Pub("t", b"d"),
        Pub("t", b"e", 2),
    )
    partitions = addresses.broker.topics["t"].partitions
    stored = [[r.body for r in p.log.read(p.log.start_id, len(p.log))] for p in partitions]
    assert stored == [[b"d"], [b"c"], [b"a", b"b", b"e"]]


async def test_pub_to_a_missing_partition_is_fatal_e_topic_not_exist(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2)
    for command in (Pub("t", b"x", 2), Mpub("t", (b"x",), 5), Pub("missing", b"x", 0)):
        client = await clients.connect(addresses.tcp)
        await client.send(command)
        error = await next_error(client)
        assert error.error.text == "E_TOPIC_NOT_EXIST "
        assert error.fatal
        await client.wait_closed()
    assert "missing" not in addresses.broker.topics


async def test_sub_to_a_missing_partition_is_fatal_e_topic_not_exist(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2)
    for command in (Sub("t", "c", 2), Sub("missing", "c", 0), SubOrdered("missing", "c")):
        client = await clients.connect(addresses.tcp)
        await client.send(command)
        error = await next_error(client)
        assert error.error.text == "E_TOPIC_NOT_EXIST "
        assert error.fatal
        await client.wait_closed()
    assert "missing" not in addresses.broker.topics


async def test_bad_partition_argument_is_fatal_e_bad_partition(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2)
    for line, text in (
        (b"SUB t c abc\n", 'topic partition is not valid: strconv.Atoi: parsing "abc"'),
        (b"PUB t -2\n", "partition should not less than 0"),
    ):
        client = await clients.connect(addresses.tcp)
        await client.stream.send_all(line)
        error = await next_error(client)
        assert error.error.code == "E_BAD_PARTITION"
        assert (error.error.description or "").startswith(text)
        assert error.fatal


async def test_publish_without_partition_to_an_ordered_topic_is_fatal_e_bad_partition(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2, ordered=True)
    for command in (Pub("t", b"x"), Mpub("t", (b"x",)), PubTrace("t", 1, b"x")):
        client = await clients.connect(addresses.tcp)
        await client.send(command)
        error = await next_error(client)
        assert (
            error.error.text
            == "E_BAD_PARTITION topic partition is not valid for multi partition: -1"
        )
        assert error.fatal
        await client.wait_closed()
    assert all(len(p.log) == 0 for p in addresses.broker.topics["t"].partitions)


async def test_stats_sum_every_partition_of_a_topic(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"a", 0), Pub("t", b"bb", 1), Pub("t", b"c", 1))
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        stats = orjson.loads((await http.get("/stats?format=json")).content)
    (topic,) = stats["topics"]
    assert (topic["topic_name"], topic["message_count"], topic["depth"]) == ("t", 3, 3)
    assert topic["message_bytes"] == 4


# ---------------------------------------------------------------- PUB_TRACE / MPUB_TRACE


async def test_pub_trace_answers_the_30_byte_traced_reply(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2)
    producer = await clients.connect(addresses.tcp)
    trace = 0x0A200A200A200A20
    # the command as bytes: PUB_TRACE <topic> <partition>, [size][8-byte trace id][body]
    body = b"hello"
    await producer.stream.send_all(
        b"PUB_TRACE t 1\n" + struct.pack(">iQ", 8 + len(body), trace) + body
    )
    raw = await read_exact(producer, 4 + 4 + 30)
    log = addresses.broker.topics["t"].partitions[1].log
    (record,) = log.read(log.start_id, 1)
    assert raw == struct.pack(
        ">ii2sQQQI", 4 + 30, 0, b"OK", record.internal_id, trace, record.offset, record.raw_size
    )
    assert record.trace_id == trace
    # the next record starts where this one ends
    await producer.send(PubTrace("t", 7, b"again", 1))
    ok_text, second_id, second_trace, offset, raw_size = await traced_reply(producer)
    assert (ok_text, second_id, second_trace) == (b"OK", record.internal_id + 1, 7)
    assert offset == record.offset + record.raw_size
    assert raw_size == log.read(second_id, 1)[0].raw_size


async def test_mpub_trace_reply_names_the_batch_with_trace_id_zero(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t")
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"before"))
    messages = (TracedMessage(11, b"a"), TracedMessage(12, b"bb"), TracedMessage(13, b"ccc"))
    await producer.send(MpubTrace("t", messages))
    ok_text, first_id, trace, offset, raw_size = await traced_reply(producer)
    log = addresses.broker.topics["t"].partitions[0].log
    records = log.read(first_id, 3)
    assert (ok_text, trace) == (b"OK", 0)
    assert [r.body for r in records] == [b"a", b"bb", b"ccc"]
    assert [r.trace_id for r in records] == [11, 12, 13]
    assert offset == records[0].offset
    assert raw_size == sum(r.raw_size for r in records)


async def test_pub_trace_id_reaches_consumers_in_the_binary_message_id(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t")
    reader = await consumer(clients, addresses, Sub("t", "c", 0))
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubTrace("t", 99, b"x"))
    _, published_id, _, _, _ = await traced_reply(producer)
    message = await next_message(reader)
    assert parse_binary_id(message.id) == (published_id, 99)


async def test_pub_trace_to_a_missing_topic_is_fatal_e_topic_not_exist(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubTrace("t", 1, b"x"))
    error = await next_error(producer)
    assert error.error.text == "E_TOPIC_NOT_EXIST "
    assert error.fatal
    assert "t" not in addresses.broker.topics


# ---------------------------------------------------------------- SUB_ORDERED


async def test_plain_sub_to_an_ordered_topic_is_fatal_e_sub_order_is_must(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2, ordered=True)
    for command in (Sub("t", "c"), Sub("t", "c", 1)):
        client = await clients.connect(addresses.tcp)
        await client.send(command)
        error = await next_error(client)
        assert error.error.text == (
            "E_SUB_ORDER_IS_MUST this topic is configured only allow ordered sub"
        )
        assert error.fatal
        await client.wait_closed()


async def test_sub_ordered_sends_the_detail_layout_with_offset_and_raw_size(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t")
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubTrace("t", 5, b"body"))
    _, published_id, _, offset, raw_size = await traced_reply(producer)
    client = await clients.connect(addresses.tcp)
    await client.send(SubOrdered("t", "c", 0))
    assert ok(await next_frame(client))
    await client.send(Rdy(1))  # only now: the message cannot share a read with the OK
    want = 4 + 4 + 8 + 2 + 16 + 8 + 4 + 4
    data = await read_exact(client, want)
    size, frame_type, _timestamp, attempts = struct.unpack_from(">iiQH", data)
    assert (size, frame_type, attempts) == (want - 4, 2, 1)
    assert data[18:34] == struct.pack(">QQ", published_id, 5)
    assert struct.unpack_from(">QI", data, 34) == (offset, raw_size)
    assert data[46:] == b"body"


async def test_sub_ordered_keeps_one_message_in_flight_per_partition_whatever_the_rdy(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2, ordered=True)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"a%d" % i, 0) for i in range(3)))
    await publish(producer, *(Pub("t", b"b%d" % i, 1) for i in range(2)))
    first = await consumer(clients, addresses, SubOrdered("t", "c", 0), rdy=100)
    second = await consumer(clients, addresses, SubOrdered("t", "c", 0), rdy=100)
    other = await consumer(clients, addresses, SubOrdered("t", "c", 1), rdy=100)
    for expected in (b"a0", b"a1", b"a2"):
        to_first = messages(await quiet(first, 0.5))
        to_second = messages(await quiet(second, 0.5))
        # one in flight for the channel's partition, however many consumers and RDY
        assert [m.body for m in to_first + to_second] == [expected]
        owner, (message,) = (first, to_first) if to_first else (second, to_second)
        await owner.send(Fin(message.id))
    assert await quiet(first, 0.5) == []
    assert await quiet(second, 0.5) == []
    assert bodies(await quiet(other, 0.5)) == [b"b0"]  # its partition has its own one


async def test_sub_ordered_offsets_and_ids_increase_across_req_and_timeouts(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=1, ordered=True)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"m%d" % i, 0) for i in range(4)))
    client = await consumer(
        clients,
        addresses,
        SubOrdered("t", "c", 0),
        rdy=50,
        identify=IdentifyRequest(msg_timeout=1000),
    )
    deliveries: list[Message] = []

    async def receive() -> Message:
        message = await next_message(client)
        deliveries.append(message)
        return message

    m0 = await receive()
    await client.send(Req(m0.id, 5000))  # ignored on an ordered channel: no answer, still ours
    assert await quiet(client, 0.5) == []
    await client.send(Req(m0.id, 0))  # back at once, before anything newer
    again = await receive()
    assert (again.id, again.attempts) == (m0.id, 2)
    await client.send(Fin(again.id))
    m1 = await receive()
    before = trio.current_time()
    m1_again = await receive()  # not finished: times out after msg_timeout, comes back first
    assert trio.current_time() - before >= 1.0
    assert (m1_again.id, m1_again.attempts) == (m1.id, 2)
    await client.send(Fin(m1_again.id))
    for _ in range(2):
        await client.send(Fin((await receive()).id))
    assert await quiet(client, 0.5) == []
    firsts = [m for m in deliveries if m.attempts == 1]
    assert [m.body for m in firsts] == [b"m0", b"m1", b"m2", b"m3"]
    offsets = [m.offset for m in firsts]
    ids = [internal_id(m) for m in firsts]
    assert all(o is not None for o in offsets)
    assert offsets == sorted(set(offsets))  # type: ignore[type-var]
    assert ids == sorted(set(ids))
    # every delivery, redeliveries included, never goes back past a newer message
    assert [internal_id(m) for m in deliveries] == sorted(internal_id(m) for m in deliveries)


async def test_sub_ordered_without_partition_uses_the_lowest_partition(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=2, ordered=True)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"zero", 0), Pub("t", b"one", 1))
    client = await consumer(clients, addresses, SubOrdered("t", "c"))
    frames = await quiet(client, 0.5)
    assert [f.message.body for f in frames if isinstance(f, MessageFrame)] == [b"zero"]


async def test_sub_ordered_sends_each_message_at_once_not_after_the_buffer_timeout(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """With its one message in flight the consumer counts as not ready, so the output
    buffer is flushed at once (nsqd's rule) instead of after output_buffer_timeout."""
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", partitions=1, ordered=True)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"m%d" % i, 0) for i in range(3)))
    client = await consumer(clients, addresses, SubOrdered("t", "c", 0), rdy=100)
    for expected in (b"m0", b"m1", b"m2"):
        t0 = trio.current_time()
        frame = await next_frame(client)
        assert isinstance(frame, MessageFrame)
        assert frame.message.body == expected
        assert trio.current_time() - t0 < 0.1  # the default buffer timeout is 0.25 s
        await client.send(Fin(frame.message.id))


# ---------------------------------------------------------------- the trace log


async def test_trace_log_has_a_line_per_traced_publish_and_delivery(
    clients: Clients, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trionsq.trace")
    addresses = await start(nursery, NsqdConfig.loopback(trace_log=True))
    addresses.broker.topic("t")
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubTrace("t", 77, b"traced"))
    _, internal, _, offset, raw_size = await traced_reply(producer)
    await publish(producer, Pub("t", b"plain"))  # no trace id: no line
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=5)
    assert sorted([(await next_message(consumer)).body for _ in range(2)]) == [b"plain", b"traced"]
    host, port = producer.stream.socket.getsockname()[:2]
    lines = [r.getMessage() for r in caplog.records if r.name == "trionsq.trace"]
    assert lines[0] == (
        f"PUB topic=t partition=0 id={internal} trace_id=77 offset={offset} size={raw_size}"
        f" client={host}:{port}"
    )
    host, port = consumer.stream.socket.getsockname()[:2]
    assert lines[1] == (
        f"DELIVER topic=t partition=0 channel=c id={internal} trace_id=77 offset={offset}"
        f" attempts=1 client={host}:{port}"
    )
    assert len(lines) == 2


async def test_trace_log_is_off_by_default(
    clients: Clients, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trionsq.trace")
    addresses = await start(nursery)
    addresses.broker.topic("t")
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubTrace("t", 77, b"traced"))
    await traced_reply(producer)
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=5)
    assert (await next_message(consumer)).body == b"traced"
    assert [r for r in caplog.records if r.name == "trionsq.trace"] == []


# ---------------------------------------------------------------- stats per partition


async def test_stats_report_each_partition_with_its_channels_positions(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("p", partitions=3)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("p", (b"a", b"b"), 1), Pub("p", b"c", 2))
    sub = await consumer(clients, addresses, Sub("p", "c", 1), rdy=1)  # b only after the FIN
    first = await next_message(sub)
    await sub.send(Fin(first.id))
    await next_message(sub)
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        (topic,) = (await http.get("/stats?format=json&topic=p")).json()["topics"]
    assert topic["message_count"] == 3
    by_index = {p["partition"]: p for p in topic["partitions"]}
    assert [by_index[i]["message_count"] for i in range(3)] == [0, 2, 1]
    assert [by_index[i]["end_count"] for i in range(3)] == [0, 2, 1]
    assert by_index[2]["depth"] == 1  # no channel in partition 2: the topic holds it
    (channel,) = by_index[1]["channels"]
    assert channel["channel_name"] == "c"
    assert channel["in_flight_count"] == 1
    assert channel["confirmed_count"] == 1  # "a" finished; msgcount:1 resumes after it
    assert by_index[0]["channels"] == []
