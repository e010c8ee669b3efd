"""Youzan ext topics over real sockets: creation, PUB_EXT/MPUB_EXT, SUB rules, tag dispatch.

Spec tcp-protocol §8.2-§8.3 (publishing headers), §8.6 rule 6 and 9 (who may SUB),
§8.7 (tag dispatch) and §8.8 (the extended layout); http-api §3 and §9 (creation).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import httpx
import orjson
import trio
import trio.testing

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import (
    ExtMessage,
    Fin,
    IdentifyRequest,
    InternalCreateTopic,
    MpubExt,
    Pub,
    PubExt,
    Rdy,
    Sub,
)
from trionsq.protocol.client import MessageFrame, Response, encode_identify
from trionsq.protocol.frames import MAGIC_V2

from .raw import (
    bodies,
    next_error,
    next_frame,
    next_message,
    ok,
    publish,
    quiet,
    start,
)

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import ProtocolClient

    from .raw import Clients

EXTEND = IdentifyRequest(extend_support=True)


def tagged(body: bytes, tag: str | None = None, **extra: str) -> ExtMessage:
    """A PUB_EXT message whose header carries ``##client_dispatch_tag`` when given."""
    header: dict[str, str] = dict(extra)
    if tag is not None:
        header["##client_dispatch_tag"] = tag
    return ExtMessage(orjson.dumps(header), body)


async def ext_consumer(
    clients: Clients,
    addresses: BoundAddresses,
    topic: str,
    *,
    tag: str = "",
    rdy: int = 10,
) -> ProtocolClient:
    """An extend_support consumer (optionally tagged) decoding the extended layout."""
    identify = IdentifyRequest(extend_support=True, desired_tag=tag)
    client = await clients.subscribe(addresses.tcp, topic, "c", identify=identify)
    client.decoder.extended = True
    if rdy:
        await client.send(Rdy(rdy))
    return client


async def ext_publish(
    clients: Clients, addresses: BoundAddresses, *messages: PubExt | MpubExt
) -> None:
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *messages)


def autojump(clock: trio.testing.MockClock) -> None:
    clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight


# ---------------------------------------------------------------- creation


async def test_http_topic_create_with_ext_true_makes_an_ext_topic(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        for query in ("topic=plain", "topic=e1&ext=true", "topic=e2&extend=true"):
            response = await http.post(f"/topic/create?{query}")
            assert response.status_code == 200
            assert response.content == b""
        # an existing plain topic is upgraded; creating again without ext never downgrades
        assert (await http.post("/topic/create?topic=plain&ext=true")).status_code == 200
        assert (await http.post("/topic/create?topic=e1")).status_code == 200
        assert (await http.post("/topic/create?topic=o&ordered=true")).status_code == 200
        assert (await http.post("/topic/create?topic=p&ext=maybe")).status_code == 200
    topics = addresses.broker.topics
    flags = {name: (topic.ext, topic.ordered) for name, topic in topics.items()}
    assert flags == {
        "plain": (True, False),
        "e1": (True, False),
        "e2": (True, False),
        "o": (False, True),
        "p": (False, False),  # only true/1 switch it on
    }


async def test_internal_create_topic_creates_an_ext_topic_and_answers_ok(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    await client.send(InternalCreateTopic("t", 0, ext=True), InternalCreateTopic("plain", 0))
    assert ok(await next_frame(client))
    assert ok(await next_frame(client))
    assert addresses.broker.topics["t"].ext
    assert not addresses.broker.topics["plain"].ext
    await client.send(InternalCreateTopic("t", 0))  # idempotent, stays ext
    assert ok(await next_frame(client))
    assert addresses.broker.topics["t"].ext


async def test_internal_create_topic_of_a_partition_past_the_limit_is_refused_non_fatal(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    await client.send(InternalCreateTopic("t", 255, ext=True), InternalCreateTopic("t", 1))
    error = await next_error(client)
    assert error.error.code == "E_CREATE_TOPIC_FAILED"
    assert not error.fatal
    assert ok(await next_frame(client))
    assert len(addresses.broker.topics["t"].partitions) == 2


async def test_internal_create_topic_with_a_bad_ext_is_e_bad_ext(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    await client.stream.send_all(b"INTERNAL_CREATE_TOPIC t 0 maybe\n")
    error = await next_error(client)
    assert error.error.text == (
        'E_BAD_EXT topic ext is not valid: strconv.ParseBool: parsing "maybe": invalid syntax'
    )
    await client.wait_closed()
    assert "t" not in addresses.broker.topics


async def test_ext_and_ordered_flags_survive_a_restart(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump(autojump_clock)
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        addresses.broker.topic("e", ext=True)
        addresses.broker.topic("o", ordered=True)
        addresses.broker.topic("plain")
        await ext_publish(clients, addresses, PubExt("e", tagged(b"kept", "a")))
        first.cancel_scope.cancel()  # a graceful stop: metadata is written
    await clients.close_all()
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    topics = again.broker.topics
    flags = {name: (topic.ext, topic.ordered) for name, topic in topics.items()}
    assert flags == {"e": (True, False), "o": (False, True), "plain": (False, False)}
    consumer = await ext_consumer(clients, again, "e")
    message = await next_message(consumer)
    assert (message.body, message.ext_version, message.ext) == (
        b"kept",
        4,
        b'{"##client_dispatch_tag":"a"}',
    )


# ---------------------------------------------------------------- PUB_EXT / MPUB_EXT


async def test_pub_ext_header_stored_as_sent_and_delivered_in_extended_layout_bytes(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    header = b'{ "k" : "v",  "##client_dispatch_tag":"x" }'  # spacing kept exactly
    producer = await clients.connect(addresses.tcp)
    payload = struct.pack(">H", len(header)) + header + b"body"
    await producer.stream.send_all(b"PUB_EXT t\n" + struct.pack(">i", len(payload)) + payload)
    assert ok(await next_frame(producer))
    await producer.send(Pub("t", b"plain"))  # a plain PUB to an ext topic: ext version 0
    assert ok(await next_frame(producer))

    stream = await trio.open_tcp_stream(*addresses.tcp)
    with trio.fail_after(10):
        await stream.send_all(MAGIC_V2 + encode_identify(EXTEND) + b"SUB t c\nRDY 5\n")
        ok_frame = struct.pack(">ii", 6, 0) + b"OK"
        first = len(header) + 4 + 4 + 26 + 3 + len(b"body")
        second = 4 + 4 + 26 + 1 + len(b"plain")
        want = 2 * len(ok_frame) + first + second
        data = b""
        while len(data) < want:
            chunk = await stream.receive_some(65536)
            assert chunk
            data += chunk
    await stream.aclose()
    assert data[: 2 * len(ok_frame)] == ok_frame * 2
    frame = data[2 * len(ok_frame) : 2 * len(ok_frame) + first]
    timestamp = frame[8:16]
    assert frame == (
        struct.pack(">ii", first - 4, 2)
        + timestamp
        + struct.pack(">H", 1)  # attempts
        + struct.pack(">QQ", 1, 0)  # binary id: internal id 1, trace id 0
        + b"\x04"
        + struct.pack(">H", len(header))
        + header
        + b"body"
    )
    frame = data[2 * len(ok_frame) + first :]
    assert frame == (
        struct.pack(">ii", second - 4, 2)
        + frame[8:16]
        + struct.pack(">H", 1)
        + struct.pack(">QQ", 2, 0)
        + b"\x00"  # ext version 0: no length, no header
        + b"plain"
    )


async def test_pub_ext_with_trace_id_gets_the_traced_reply(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    producer = await clients.connect(addresses.tcp)
    await producer.send(
        PubExt("t", tagged(b"one")), PubExt("t", tagged(b"two", **{"##trace_id": "99"}))
    )
    assert ok(await next_frame(producer))
    reply = await next_frame(producer)
    assert isinstance(reply, Response)
    record = addresses.broker.topics["t"].partitions[0].log.read(2, 1)[0]
    assert reply.data == b"OK" + struct.pack(">QQQI", 2, 99, record.offset, record.raw_size)
    assert record.trace_id == 99
    consumer = await ext_consumer(clients, addresses, "t")
    messages = [await next_message(consumer) for _ in range(2)]
    assert [m.id for m in messages] == [struct.pack(">QQ", 1, 0), struct.pack(">QQ", 2, 99)]


async def test_mpub_ext_stores_each_header_and_answers_ok(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    sent = (tagged(b"a", "x"), tagged(b"b", k="v"), tagged(b"c"))
    await ext_publish(clients, addresses, MpubExt("t", sent))
    consumer = await ext_consumer(clients, addresses, "t")
    messages = [await next_message(consumer) for _ in range(3)]
    assert [(m.body, m.ext_version, m.ext) for m in messages] == [
        (s.body, 4, s.header) for s in sent
    ]
    await consumer.send(*(Fin(m.id) for m in messages))
    assert await quiet(consumer, 0.3) == []


async def test_pub_ext_to_a_missing_topic_is_e_topic_not_exist_fatal(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubExt("nope", tagged(b"x")))
    error = await next_error(producer)
    assert error.error.text == "E_TOPIC_NOT_EXIST "
    assert error.fatal
    await producer.wait_closed()
    assert "nope" not in addresses.broker.topics


async def test_pub_ext_to_a_missing_partition_is_e_topic_not_exist(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubExt("t", tagged(b"x"), partition=3))
    assert (await next_error(producer)).error.text == "E_TOPIC_NOT_EXIST "
    await producer.wait_closed()


async def test_mpub_ext_to_a_missing_topic_is_e_topic_not_exist(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await producer.send(MpubExt("nope", (tagged(b"x"),)))
    assert (await next_error(producer)).error.text == "E_TOPIC_NOT_EXIST "
    await producer.wait_closed()


async def test_header_to_a_non_ext_topic_is_e_ext_not_support_non_fatal(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("plain")
    producer = await clients.connect(addresses.tcp)
    await producer.send(
        PubExt("plain", tagged(b"x", **{"##trace_id": "1"})),  # even only ## keys
        MpubExt("plain", (tagged(b"y", k="v"),)),
        Pub("plain", b"still fine"),
    )
    for _ in range(2):
        error = await next_error(producer)
        assert error.error.text == "E_EXT_NOT_SUPPORT ext content not supported in topic plain"
        assert not error.fatal
    assert ok(await next_frame(producer))
    assert addresses.broker.topics["plain"].partitions[0].message_count == 1


async def test_pub_ext_bad_json_header_is_e_invalid_json_header_non_fatal(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubExt("t", ExtMessage(b"{nope", b"x")), PubExt("t", tagged(b"y")))
    error = await next_error(producer)
    assert error.error.code == "E_INVALID_JSON_HEADER"
    assert error.error.text.startswith("E_INVALID_JSON_HEADER fail to parse json header:")
    assert not error.fatal
    assert ok(await next_frame(producer))
    assert addresses.broker.topics["t"].partitions[0].message_count == 1


async def test_pub_ext_trace_id_not_a_string_is_invalid_trace_id_non_fatal(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    producer = await clients.connect(addresses.tcp)
    await producer.send(
        PubExt("t", ExtMessage(b'{"##trace_id":5}', b"x")),
        PubExt("t", ExtMessage(b'{"##trace_id":"x5"}', b"x")),
    )
    assert (await next_error(producer)).error.text == (
        "INVALID_TRACE_ID passin trace id should be string"
    )
    assert (await next_error(producer)).error.text == "INVALID_TRACE_ID invalid trace id"
    assert addresses.broker.topics["t"].partitions[0].message_count == 0


async def test_pub_ext_body_size_2_is_e_bad_body_fatal(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    producer = await clients.connect(addresses.tcp)
    await producer.stream.send_all(b"PUB_EXT t\n" + struct.pack(">iH", 2, 0))
    error = await next_error(producer)
    assert error.error.text == "E_BAD_BODY invalid body size 2 with ext json header enabled"
    assert error.fatal
    await producer.wait_closed()


# ---------------------------------------------------------------- SUB rules (§8.6)


async def test_sub_ext_topic_without_extend_support_is_e_sub_extend_need(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    client = await clients.connect(addresses.tcp)
    await client.send(Sub("t", "c"))
    error = await next_error(client)
    assert error.error.text == (
        "E_SUB_EXTEND_NEED this topic is extended and should identify as extend support."
    )
    assert error.fatal
    await client.wait_closed()
    assert not addresses.broker.topics["t"].partitions[0].channels


async def test_sub_non_ext_topic_with_extend_support_is_e_sub_extend_forbiddon(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    addresses.broker.topic("plain")
    for topic in ("plain", "missing"):
        client = await clients.connect(addresses.tcp)
        await client.stream.send_all(encode_identify(EXTEND))
        assert ok(await next_frame(client))
        await client.send(Sub(topic, "c"))
        error = await next_error(client)
        assert error.error.text == (
            "E_SUB_EXTEND_FORBIDDON this topic is not extended and should not identify as"
            " extend support."
        )
        assert error.fatal
        await client.wait_closed()
    assert "missing" not in addresses.broker.topics


async def test_desired_tag_is_ignored_on_a_non_ext_topic(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    tagged_client = await clients.subscribe(
        addresses.tcp, "plain", "c", rdy=10, identify=IdentifyRequest(desired_tag="a")
    )
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("plain", b"one"), Pub("plain", b"two"))
    messages = [await next_message(tagged_client) for _ in range(2)]
    assert [m.body for m in messages] == [b"one", b"two"]
    assert messages[0].id == b"0000000000000001"  # standard layout, hex ids
    (channel,) = addresses.broker.find_channel("plain", "c")
    assert [c.tag for c in channel.consumers.values()] == [None]


# ---------------------------------------------------------------- tag dispatch (§8.7)


async def test_tag_dispatch_two_tags_and_untagged_consumers(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    a = await ext_consumer(clients, addresses, "t", tag="a")
    b = await ext_consumer(clients, addresses, "t", tag="b")
    plain = await ext_consumer(clients, addresses, "t")
    await ext_publish(
        clients,
        addresses,
        PubExt("t", tagged(b"a1", "a")),
        PubExt("t", tagged(b"b1", "b")),
        PubExt("t", tagged(b"none1")),
        PubExt("t", tagged(b"c1", "c")),  # nobody holds c: the default queue
        PubExt("t", tagged(b"a2", "a")),
        PubExt("t", tagged(b"b2", "b")),
    )
    assert bodies(await quiet(a, 0.5)) == [b"a1", b"a2"]
    assert bodies(await quiet(b, 0.5)) == [b"b1", b"b2"]
    assert bodies(await quiet(plain, 0.5)) == [b"none1", b"c1"]


async def test_tag_dispatch_a_tag_consumer_joining_late_takes_its_waiting_messages(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    plain = await ext_consumer(clients, addresses, "t", rdy=0)  # no room: messages wait
    await ext_publish(
        clients, addresses, PubExt("t", tagged(b"a1", "a")), PubExt("t", tagged(b"a2", "a"))
    )
    assert await quiet(plain, 0.5) == []
    late = await ext_consumer(clients, addresses, "t", tag="a")
    assert bodies(await quiet(late, 0.5)) == [b"a1", b"a2"]
    await plain.send(Rdy(10))
    assert await quiet(plain, 0.5) == []


async def test_tag_dispatch_last_tag_consumer_leaving_requeues_in_flight_to_untagged(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    a = await ext_consumer(clients, addresses, "t", tag="a")
    plain = await ext_consumer(clients, addresses, "t")
    await ext_publish(
        clients,
        addresses,
        PubExt("t", tagged(b"a1", "a")),
        PubExt("t", tagged(b"a2", "a")),
        PubExt("t", tagged(b"none")),
    )
    assert bodies(await quiet(a, 0.5)) == [b"a1", b"a2"]  # in flight, never finished
    assert bodies(await quiet(plain, 0.5)) == [b"none"]
    await a.aclose()
    frames = await quiet(plain, 0.5)
    assert bodies(frames) == [b"a1", b"a2"]
    assert [f.message.attempts for f in frames if isinstance(f, MessageFrame)] == [2, 2]


async def test_tag_dispatch_untagged_messages_wait_when_only_tagged_consumers_exist(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    a = await ext_consumer(clients, addresses, "t", tag="a")
    await ext_publish(
        clients,
        addresses,
        PubExt("t", tagged(b"none1")),
        PubExt("t", tagged(b"a1", "a")),
        PubExt("t", tagged(b"c1", "c")),
    )
    assert bodies(await quiet(a, 0.5)) == [b"a1"]
    (channel,) = addresses.broker.find_channel("t", "c")
    assert channel.depth == 2
    plain = await ext_consumer(clients, addresses, "t")
    assert bodies(await quiet(plain, 0.5)) == [b"none1", b"c1"]
    assert await quiet(a, 0.3) == []


async def test_tag_dispatch_a_long_wait_in_one_queue_does_not_hold_back_another(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("t", ext=True)
    a = await ext_consumer(clients, addresses, "t", tag="a", rdy=100)
    untagged = MpubExt("t", tuple(tagged(b"none%d" % n) for n in range(1000)))
    await ext_publish(clients, addresses, untagged, PubExt("t", tagged(b"a1", "a")))
    assert bodies(await quiet(a, 0.5)) == [b"a1"]  # behind 1,000 that wait for others
    (channel,) = addresses.broker.find_channel("t", "c")
    assert channel.depth == 1000
    plain = await ext_consumer(clients, addresses, "t", rdy=1000)
    frames = await quiet(plain, 0.5)
    assert bodies(frames) == [b"none%d" % n for n in range(1000)]  # still in order


# ---------------------------------------------------------------- standard clients


async def test_standard_client_on_a_plain_topic_beside_an_ext_topic(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    addresses = await start(nursery)
    addresses.broker.topic("ext", ext=True)
    standard = await clients.connect(addresses.tcp)
    await standard.stream.send_all(
        encode_identify(IdentifyRequest(feature_negotiation=True, user_agent="pynsq/0.9.1"))
    )
    reply = await next_frame(standard)
    assert isinstance(reply, Response)
    assert b"desired_tag" not in reply.data
    await standard.send(Sub("plain", "c"), Rdy(10))
    assert ok(await next_frame(standard))
    youzan = await ext_consumer(clients, addresses, "ext", tag="a")
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("plain", b"p1"), PubExt("ext", tagged(b"e1", "a")))
    message = await next_message(standard)
    assert (message.body, message.id, message.attempts) == (b"p1", b"0000000000000001", 1)
    await standard.send(Fin(message.id))
    assert await quiet(standard, 0.3) == []
    ext_message = await next_message(youzan)
    assert (ext_message.body, ext_message.ext_version) == (b"e1", 4)


# ---------------------------------------------------------------- upgrade to ext (§8.8)


async def test_upgrade_to_ext_closes_a_plain_consumer_at_its_next_delivery(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    plain = await clients.subscribe(addresses.tcp, "t", "c", rdy=5)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"before"))
    before = await next_message(plain)
    await plain.send(Fin(before.id))
    await producer.send(InternalCreateTopic("t", 0, ext=True))
    assert ok(await next_frame(producer))
    assert await quiet(plain, 0.02) == []  # nothing to deliver: still connected
    await publish(producer, Pub("t", b"after"))
    await plain.wait_closed()  # closed instead of getting a layout it cannot decode
    again = await clients.connect(addresses.tcp)
    await again.send(Sub("t", "c"))
    assert (await next_error(again)).error.text.startswith("E_SUB_EXTEND_NEED ")
    extended = await ext_consumer(clients, addresses, "t")
    message = await next_message(extended)
    assert message.body == b"after"  # requeued when the plain consumer left
