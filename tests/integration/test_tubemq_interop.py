"""TubeMQ and NSQ clients on the same topics, over real sockets: what a TubeMQ producer
sends, pynsq reads (the same bodies) and an NSQ ext consumer reads with the attributes
as its JSON header; what pynsq or an NSQ ext producer publishes, a TubeMQ consumer
pulls (header fields as attributes). docs/tubemq.md, "Interop"."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import TYPE_CHECKING

import orjson
import trio

from trionsq.protocol import ExtMessage, IdentifyRequest, PubExt, Rdy
from trionsq.protocol.tubemq_formats import (
    ATTRIBUTES_FLAG,
    checksum,
    join_payload,
    parse_attributes,
    split_payload,
)

from .raw import next_message, publish
from .tubemq import TubeConsumer, start_tubemq

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients
    from .tubemq import TubeClients

SCRIPT = pathlib.Path(__file__).parents[1] / "e2e" / "clients" / "pynsq_tubemq.py"
BODIES = [b"plain", b"\x00\x01binary\xff", "caf\u00e9".encode(), b"x" * 3000]


async def pynsq(*args: str) -> dict[str, list[str]]:
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, str(SCRIPT), *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    summary: dict[str, list[str]] = json.loads(result.stdout.decode().splitlines()[-1])
    return summary


async def tubemq_consumer(
    addresses: BoundAddresses, tube_clients: TubeClients, topic: str
) -> TubeConsumer:
    master, broker = await tube_clients.pair(addresses)
    consumer = TubeConsumer(master, broker, "tq-consumer", "tq-group")
    assert (await consumer.register([topic])).success
    await consumer.settle(1)
    return consumer


async def test_pynsq_reads_what_a_tubemq_producer_sent(
    nursery: trio.Nursery, tube_clients: TubeClients
) -> None:
    addresses = await start_tubemq(nursery, group_rebalance_delay=0)
    addresses.broker.topic("tq_plain")
    broker = await tube_clients.open(addresses.tubemq_broker)
    for body in BODIES:  # attributes too: a plain topic keeps the payload alone
        data, flag = join_payload("k=v", body)
        sent = await broker.send_message("producer", "tq_plain", 0, data, flag=flag)
        assert sent.success, sent
    host, port = addresses.tcp
    summary = await pynsq("read", f"{host}:{port}", "tq_plain", "nsq", str(len(BODIES)))
    assert [bytes.fromhex(body) for body in summary["bodies"]] == BODIES


async def test_an_nsq_ext_consumer_sees_the_attributes_as_its_header(
    nursery: trio.Nursery, tube_clients: TubeClients, clients: Clients
) -> None:
    addresses = await start_tubemq(nursery)
    addresses.broker.topic("tq_ext", ext=True)
    broker = await tube_clients.open(addresses.tubemq_broker)
    data, flag = join_payload("region=eu,$msgTime$=202611270800", b"click")
    sent = await broker.send_message("producer", "tq_ext", 0, data, flag=flag, msg_type="clicks")
    assert sent.success, sent
    consumer = await clients.subscribe(
        addresses.tcp, "tq_ext", "nsq", identify=IdentifyRequest(extend_support=True)
    )
    consumer.decoder.extended = True
    await consumer.send(Rdy(1))
    message = await next_message(consumer)
    assert message.body == b"click"
    assert orjson.loads(message.ext) == {
        "region": "eu",
        "$msgTime$": "202611270800",
        "$msgType$": "clicks",
        "##client_dispatch_tag": "clicks",
    }


async def test_a_tubemq_consumer_pulls_what_pynsq_published(
    nursery: trio.Nursery, tube_clients: TubeClients
) -> None:
    addresses = await start_tubemq(nursery, group_rebalance_delay=0)
    addresses.broker.topic("nsq_plain")
    host, port = addresses.tcp
    summary = await pynsq("publish", f"{host}:{port}", "nsq_plain", *(b.hex() for b in BODIES))
    assert summary["results"] == ["ok"]
    consumer = await tubemq_consumer(addresses, tube_clients, "nsq_plain")
    pack = await consumer.pull(consumer.held[0])
    assert pack.success, pack
    assert [m.payLoadData for m in pack.messages] == BODIES
    assert [m.flag for m in pack.messages] == [0] * len(BODIES)
    assert [m.messageId for m in pack.messages] == [1, 2, 3, 4]
    assert all(m.checkSum == checksum(m.payLoadData) for m in pack.messages)
    assert (await consumer.broker.commit("tq-consumer", "tq-group", consumer.held[0])).success


async def test_a_tubemq_consumer_pulls_an_ext_message_with_its_header_as_attributes(
    nursery: trio.Nursery, tube_clients: TubeClients, clients: Clients
) -> None:
    addresses = await start_tubemq(nursery, group_rebalance_delay=0)
    addresses.broker.topic("nsq_ext", ext=True)
    producer = await clients.connect(addresses.tcp)
    header = orjson.dumps({"region": "eu", "##client_dispatch_tag": "clicks", "n": 3})
    await publish(producer, PubExt("nsq_ext", ExtMessage(header, b"click")))
    consumer = await tubemq_consumer(addresses, tube_clients, "nsq_ext")
    pack = await consumer.pull(consumer.held[0])
    assert pack.success, pack
    [message] = pack.messages
    assert message.flag == ATTRIBUTES_FLAG
    assert message.checkSum == checksum(message.payLoadData)
    attributes, payload = split_payload(message.payLoadData, message.flag)
    assert payload == b"click"
    assert parse_attributes(attributes) == {"region": "eu", "n": "3", "$msgType$": "clicks"}
