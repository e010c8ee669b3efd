"""Addresses in either shape (issue 34): ``(host, port)`` as the fixtures and
``BoundAddresses`` give them, or ``"host:port"`` as NSQ's tools write them, wherever
an address is taken: the client, the fixtures' helpers, ``NsqdConfig`` /
``LookupdConfig`` and so ``serve_nsqd``; ``trionsq.normalize_address`` turns either
into the string third-party clients want."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import trionsq
from trionsq import NsqdConfig, normalize_address, serve_nsqd
from trionsq.client import open_consumer, open_producer
from trionsq.client.blocking import connect_producer
from trionsq.lookupd.config import LookupdConfig
from trionsq.protocol import Pub
from trionsq.testing import ProtocolClient, wait_until

if TYPE_CHECKING:
    import trio

    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses


def test_normalize_address_gives_host_port_for_either_shape() -> None:
    assert normalize_address(("127.0.0.1", 4150)) == "127.0.0.1:4150"
    assert normalize_address(("::1", 4150)) == "[::1]:4150"
    assert normalize_address("broker.example:4150") == "broker.example:4150"
    assert normalize_address("[::1]:4150") == "[::1]:4150"
    assert trionsq.normalize_address is normalize_address


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("127.0.0.1", "'127.0.0.1' is not <addr>:<port>"),
        ("127.0.0.1:65536", "'127.0.0.1:65536' is not <addr>:<port>"),
        (
            ("127.0.0.1", "4150"),
            "('127.0.0.1', '4150') is not (host, port) with a port in [0,65535]",
        ),
        (("127.0.0.1", 70000), "('127.0.0.1', 70000) is not (host, port) with a port in [0,65535]"),
        (4150, "4150 is not <host>:<port> or (host, port)"),
    ],
)
def test_a_bad_address_is_one_clear_value_error(address: object, message: str) -> None:
    with pytest.raises(ValueError, match=r"^[^\n]+$") as raised:
        normalize_address(address)  # type: ignore[arg-type]
    assert str(raised.value) == message


async def test_the_client_takes_the_fixture_s_tuple(nsqd: BoundAddresses) -> None:
    async with open_producer(nsqd.tcp) as producer:
        await producer.publish("shapes", b"by tuple")
    async with open_consumer("shapes", "c", nsqd.tcp) as consumer:
        message = await anext(consumer)
        message.finish()
    assert message.body == b"by tuple"
    async with open_producer([nsqd.tcp]) as producer:  # a list of tuples too
        await producer.publish("shapes", b"in a list")
    async with open_consumer("shapes", "c", [normalize_address(nsqd.tcp)]) as consumer:
        message = await anext(consumer)
        message.finish()
    assert message.body == b"in a list"


async def test_the_client_finds_lookupd_by_a_tuple(
    nursery: trio.Nursery, lookupd: LookupdAddresses
) -> None:
    config = NsqdConfig.loopback(lookupd_tcp_addresses=[lookupd.tcp])  # a list of tuples
    broker: BoundAddresses = await nursery.start(serve_nsqd, config)
    async with open_producer(broker.tcp) as producer:
        await producer.publish("found", b"through lookupd")
    assert broker.broker.config.lookupd_tcp_addresses == (normalize_address(lookupd.tcp),)
    await wait_until(lambda: bool(lookupd.registry.topics()), "the topic registered")
    async with open_consumer("found", "c", lookupd=lookupd.http) as consumer:
        message = await anext(consumer)
        message.finish()
    assert message.body == b"through lookupd"


def test_the_blocking_client_takes_a_tuple(nsqd_thread: BoundAddresses) -> None:
    with connect_producer(nsqd_thread.tcp) as producer:
        producer.publish("blocking", b"by tuple")


async def test_protocol_client_takes_host_port(nsqd: BoundAddresses) -> None:
    client = await ProtocolClient.connect(normalize_address(nsqd.tcp))
    try:
        await client.send(Pub("raw", b"m"))
        [reply] = await client.read(1)
    finally:
        await client.aclose()
    assert reply.data == b"OK"  # type: ignore[union-attr]


async def test_configurations_take_tuples(nursery: trio.Nursery) -> None:
    config = NsqdConfig.loopback(tcp_address=("127.0.0.1", 0), http_address=("127.0.0.1", 0))
    assert (config.tcp_address, config.http_address) == ("127.0.0.1:0", "127.0.0.1:0")
    broker: BoundAddresses = await nursery.start(serve_nsqd, config)
    assert broker.tcp[0] == "127.0.0.1"
    lookupd = LookupdConfig.loopback(tcp_address=("127.0.0.1", 0))
    assert lookupd.tcp_address == "127.0.0.1:0"
