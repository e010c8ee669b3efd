"""A plain PUB's short path to the durable log (issue 37), over real sockets: what it
takes must behave as every other publish does, pipelined, cut short or mixed with
errors, and with a consumer reading while it goes."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest
import trio

from trionsq import NsqdConfig
from trionsq.protocol import Fin, Pub, Rdy
from trionsq.protocol.client import ErrorReply, MessageFrame, encode_commands
from trionsq.queues.topic_log import TopicLog

from .raw import Clients, http, next_frame, next_message, ok, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses


def durable(tmp_path: Path) -> NsqdConfig:
    """A broker with durable logs and small limits, so a too-big body is cheap."""
    return NsqdConfig.loopback(data_path=str(tmp_path), max_msg_size=100)


def stored(addresses: BoundAddresses, topic: str) -> list[bytes]:
    """The bodies the topic's log holds, read back from its segment files."""
    log = addresses.broker.topics[topic].partitions[0].log
    assert isinstance(log, TopicLog)
    return [record.body for record in log.read_cold(log.start_id, 10_000, 1 << 30)]


@pytest.fixture
async def running(
    nursery: trio.Nursery, tmp_path: Path
) -> AsyncIterator[tuple[BoundAddresses, Clients]]:
    """A durable broker, and the test's clients, closed when it ends."""
    addresses = await start(nursery, durable(tmp_path))
    clients = Clients()
    yield addresses, clients
    await clients.close_all()


def sized(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


async def test_pipelined_pubs_in_one_read_are_each_answered_and_stored_in_order(
    running: tuple[BoundAddresses, Clients],
) -> None:
    addresses, clients = running
    producer = await clients.connect(addresses.tcp)
    await producer.send(Pub("t", b"first"))  # the topic exists: the next ones go short
    assert ok(await next_frame(producer))
    bodies = [b"m%03d" % i for i in range(60)]
    await producer.send(*(Pub("t", body) for body in bodies))
    frames = await producer.read(60)
    assert all(ok(frame) for frame in frames), frames
    assert stored(addresses, "t") == [b"first", *bodies]


async def test_a_pub_split_across_reads_at_every_byte_is_stored_once(
    running: tuple[BoundAddresses, Clients],
) -> None:
    addresses, clients = running
    producer = await clients.connect(addresses.tcp)
    command = encode_commands([Pub("t", b"split body")])
    expected: list[bytes] = []
    for cut in range(len(command) + 1):
        await producer.stream.send_all(command[:cut])
        await trio.sleep(0.005)  # the broker reads the first part on its own
        await producer.stream.send_all(command[cut:])
        assert ok(await next_frame(producer))
        expected.append(b"split body")
    assert stored(addresses, "t") == expected
    assert addresses.broker.topics["t"].partitions[0].message_count == len(expected)


async def fatal_in_the_middle(
    addresses: BoundAddresses, clients: Clients, bad: bytes, expected: str, topic: str
) -> None:
    """Two good PUBs, ``bad``, one more good PUB in one write: two OKs, nsqd's error,
    then the connection closes and the PUB after it is not stored."""
    producer = await clients.connect(addresses.tcp)
    good = encode_commands([Pub(topic, b"a"), Pub(topic, b"b")])
    after = encode_commands([Pub(topic, b"after")])
    await producer.stream.send_all(good + bad + after)
    assert ok(await next_frame(producer))
    assert ok(await next_frame(producer))
    error = await next_frame(producer)
    assert isinstance(error, ErrorReply), error
    assert error.error.text == expected
    await producer.wait_closed()
    assert stored(addresses, topic)[-2:] == [b"a", b"b"]


async def test_an_invalid_pub_in_a_pipeline_answers_as_nsqd(
    running: tuple[BoundAddresses, Clients],
) -> None:
    addresses, clients = running
    cases = [
        (b"PUB a*b\n" + sized(b"x"), 'E_BAD_TOPIC PUB topic name "a*b" is not valid'),
        (b"PUB t\n" + struct.pack(">I", 101), "E_BAD_MESSAGE PUB message too big 101 > 100"),
        (b"PUB t\n" + struct.pack(">I", 0), "E_BAD_MESSAGE PUB invalid message body size 0"),
    ]
    for bad, expected in cases:
        await fatal_in_the_middle(addresses, clients, bad, expected, "t")
    assert stored(addresses, "t") == [b"a", b"b"] * len(cases)


async def test_a_consumer_gets_every_short_path_pub_once(
    running: tuple[BoundAddresses, Clients],
) -> None:
    addresses, clients = running
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=50)
    producer = await clients.connect(addresses.tcp)
    sent = [b"n%03d" % i for i in range(150)]
    received: list[bytes] = []
    for body in sent:  # one PUB per round trip, as bench_pub
        await producer.send(Pub("t", body))
        assert ok(await next_frame(producer))
    with trio.fail_after(10):
        while len(received) < len(sent):
            frame = await next_frame(consumer)
            assert isinstance(frame, MessageFrame), frame
            received.append(frame.message.body)
            await consumer.send(Fin(frame.message.id))
    assert received == sent
    await consumer.send(Rdy(50))
    assert await consumer.drain(quiet=0.2) == []  # nothing a second time
    partition = addresses.broker.topics["t"].partitions[0]
    assert partition.message_count == len(sent)


async def test_http_pubs_take_the_short_way_too_and_a_deferred_one_does_not(
    running: tuple[BoundAddresses, Clients],
) -> None:
    addresses, clients = running
    consumer = await clients.subscribe(addresses.tcp, "t", "c", rdy=10)
    for body in (b"h1", b"h2"):
        assert (await http(addresses, "POST", "/pub?topic=t", body)).text == "OK"
    assert (await http(addresses, "POST", "/pub?topic=t&defer=100", b"later")).text == "OK"
    received = [(await next_message(consumer)).body for _ in range(3)]
    assert received == [b"h1", b"h2", b"later"]
    assert stored(addresses, "t") == [b"h1", b"h2", b"later"]


async def test_pubs_naming_a_partition_one_round_trip_each_land_in_that_partition(
    running: tuple[BoundAddresses, Clients],
) -> None:
    """A Youzan client (trionsq.client too) names a partition in every PUB: on one
    broker those take the short way as well, each into the partition it names, counted
    there; a partition the topic lacks is still nsqd's fatal E_TOPIC_NOT_EXIST."""
    addresses, clients = running
    addresses.broker.topic("p", partitions=3)
    producer = await clients.connect(addresses.tcp)
    sent = [(b"q%02d" % i, (i * 7) % 3) for i in range(30)]
    for body, named in sent:  # one PUB per round trip: each turn is a lone PUB
        await producer.send(Pub("p", body, named))
        assert ok(await next_frame(producer))
    partitions = addresses.broker.topics["p"].partitions
    for index, each in enumerate(partitions):
        log = each.log
        assert isinstance(log, TopicLog)
        bodies = [record.body for record in log.read_cold(log.start_id, 100, 1 << 20)]
        assert bodies == [body for body, named in sent if named == index]
        assert each.message_count == len(bodies)
    await producer.send(Pub("p", b"nowhere", 3))
    error = await next_frame(producer)
    assert isinstance(error, ErrorReply), error
    assert error.error.text == "E_TOPIC_NOT_EXIST "
    await producer.wait_closed()
    assert sum(each.message_count for each in partitions) == len(sent)
