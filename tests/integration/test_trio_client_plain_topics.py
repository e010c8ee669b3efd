"""A plain NSQ topic on several brokers, found through trionsq's lookupd (issue 31
item 1): trionsq.client consumes it from every broker and its producer spreads over
them, as NSQ clients do, next to trionsq brokers (Youzan's registration form) and a
broker registered as nsqd 1.3 registers (raw V1 bytes from a test peer, since Go's
nsqd cannot be installed here); pynsq through the same lookupd reads everything."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import httpx
import pytest
import trio

from trionsq import NsqdConfig
from trionsq.client import ConsumerSettings, Target, open_consumer, open_producer
from trionsq.protocol import Mpub
from trionsq.protocol.lookupd import PeerInfo
from trionsq.testing import wait_until

from ..e2e.test_cluster_clients import run_reader
from .lookupd_peers import RawPeer
from .raw import publish, start

if TYPE_CHECKING:
    from trionsq.client import Consumer
    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import NsqCluster

    from .raw import Clients

TOPIC: Final = "lk"
PER_BROKER: Final = 500
FAST: Final = ConsumerSettings(lookup_interval=0.5)


def bodies_of(broker: int) -> list[bytes]:
    return [b"b%d-%d" % (broker, i) for i in range(PER_BROKER)]


def every_body(brokers: int) -> list[bytes]:
    return sorted(body for broker in range(brokers) for body in bodies_of(broker))


async def publish_on(clients: Clients, broker: BoundAddresses, index: int) -> None:
    """The broker's share, published to it directly (a plain NSQ topic)."""
    client = await clients.connect(broker.tcp)
    await publish(client, Mpub(TOPIC, tuple(bodies_of(index))))


async def read(consumer: Consumer, count: int) -> list[bytes]:
    """Up to ``count`` bodies, each finished; fewer when nothing more comes."""
    received: list[bytes] = []
    with trio.move_on_after(10):
        async for message in consumer:
            received.append(message.body)
            message.finish()
            if len(received) == count:
                break
    return received


def published(broker: BoundAddresses) -> int:
    return broker.broker.topics[TOPIC].statistics().message_count


def published_bodies(brokers: int) -> list[bytes]:
    return [b"p%d" % i for i in range(10 * brokers)]


async def check_the_trio_client(lookupd: str, brokers: list[BoundAddresses]) -> None:
    """Every message of every broker on one connection each; publishes on each."""
    async with open_consumer(TOPIC, "trionsq", lookupd=lookupd, settings=FAST) as consumer:
        connections = consumer.connections
        received = await read(consumer, PER_BROKER * len(brokers))
    assert (connections, len(received)) == (len(brokers), PER_BROKER * len(brokers))
    assert sorted(received) == every_body(len(brokers))
    async with open_producer(lookupd=lookupd) as producer:
        for body in published_bodies(len(brokers)):
            await producer.publish(TOPIC, body)
    counts = [published(broker) - PER_BROKER for broker in brokers]
    assert sum(counts) == 10 * len(brokers)
    assert all(counts), counts  # spread over every producer (in turn, today: 10 each)


async def trionsq_broker_and_nsqd(
    nursery: trio.Nursery, lookupd: LookupdAddresses
) -> tuple[BoundAddresses, BoundAddresses]:
    """A broker registered with ``lookupd``, and one that registers nothing itself
    (the nsqd 1.3 a test peer speaks for)."""
    tcp_address = f"{lookupd.tcp[0]}:{lookupd.tcp[1]}"
    config = NsqdConfig.loopback(
        lookupd_tcp_addresses=(tcp_address,), broadcast_address="127.0.0.1"
    )
    return await start(nursery, config), await start(nursery, NsqdConfig.loopback())


async def registered_as_nsqd_1_3(
    lookupd: LookupdAddresses, nsqd: BoundAddresses, registrations: bytes
) -> RawPeer:
    """A V1 connection that IDENTIFYs with ``nsqd``'s ports, as nsqd 1.3 does, and sends
    ``registrations`` (nsqd 1.3's bytes); each is answered OK."""
    assert nsqd.http is not None
    peer = await RawPeer.connect(lookupd)
    identity = PeerInfo("1.3.0", nsqd.tcp[1], nsqd.http[1], "go-nsqd", "127.0.0.1")
    assert (await peer.identify(identity)).startswith(b"{")
    await peer.send(registrations)
    for _ in range(registrations.count(b"\n")):
        assert await peer.reply() == b"OK"
    return peer


@pytest.mark.nsq_cluster(brokers=2, lookupds=1)
async def test_two_trionsq_brokers_are_both_consumed_and_published_to(
    nsq_cluster: NsqCluster, clients: Clients
) -> None:
    for index, broker in enumerate(nsq_cluster.brokers):
        await broker.broker.create_channel(TOPIC, "trionsq")
        await publish_on(clients, broker, index)
    await nsq_cluster.wait_registered()
    (lookupd,) = nsq_cluster.lookupd_http_addresses
    await check_the_trio_client(lookupd, nsq_cluster.brokers)


async def test_a_trionsq_broker_and_an_nsqd_1_3_are_both_consumed_and_published_to(
    nursery: trio.Nursery, lookupd: LookupdAddresses, clients: Clients
) -> None:
    """The nsqd 1.3 is a broker that registers nothing itself: a test peer IDENTIFYs
    with its ports and sends what nsqd 1.3 sends for a topic with two channels."""
    trionsq_broker, nsqd = await trionsq_broker_and_nsqd(nursery, lookupd)
    brokers = [trionsq_broker, nsqd]
    for index, broker in enumerate(brokers):
        for channel in ("trionsq", "pynsq"):
            await broker.broker.create_channel(TOPIC, channel)
        await publish_on(clients, broker, index)
    peer = await registered_as_nsqd_1_3(lookupd, nsqd, b"REGISTER lk trionsq\nREGISTER lk pynsq\n")
    try:
        registry = lookupd.registry
        await wait_until(lambda: len(registry.find_producers("topic", TOPIC, "")) == 2, "both")
        http = f"{lookupd.http[0]}:{lookupd.http[1]}"
        await check_the_trio_client(http, brokers)
        count = PER_BROKER * len(brokers) + 20
        summary = await run_reader("pynsq_cluster.py", [http], TOPIC, "pynsq", count)
    finally:
        await peer.aclose()
    everything = every_body(2) + published_bodies(2)  # its channel got both, each once
    assert sorted(summary["bodies"]) == sorted(body.decode() for body in everything)
    assert summary["connections"] == sorted(f"127.0.0.1:{b.tcp[1]}" for b in brokers)


async def test_a_partitioned_topic_and_an_nsqd_holding_it_plain_are_all_read(
    nursery: trio.Nursery, lookupd: LookupdAddresses, clients: Clients
) -> None:
    """Three partitions on a trionsq broker, the same topic plain on an nsqd 1.3: the
    lookupd lists the partitions (one broker leads them) and both brokers as
    producers; the consumer reads each partition, and the nsqd without one."""
    trionsq_broker, nsqd = await trionsq_broker_and_nsqd(nursery, lookupd)
    trionsq_broker.broker.topic(TOPIC, partitions=3)
    for broker in (trionsq_broker, nsqd):
        await broker.broker.create_channel(TOPIC, "trionsq")
    await publish_on(clients, trionsq_broker, 0)  # all to partition 0
    await publish_on(clients, nsqd, 1)
    peer = await registered_as_nsqd_1_3(lookupd, nsqd, b"REGISTER lk trionsq\n")
    try:
        registry = lookupd.registry
        await wait_until(lambda: len(registry.partitions(TOPIC)) == 3, "three partitions")
        http = f"{lookupd.http[0]}:{lookupd.http[1]}"
        async with open_consumer(TOPIC, "trionsq", lookupd=http, settings=FAST) as consumer:
            targets = {link.target for link in consumer.readiness.links}
            received = await read(consumer, 2 * PER_BROKER)
    finally:
        await peer.aclose()
    leader, plain = f"127.0.0.1:{trionsq_broker.tcp[1]}", f"127.0.0.1:{nsqd.tcp[1]}"
    assert targets == {Target(leader, 0), Target(leader, 1), Target(leader, 2), Target(plain)}
    assert sorted(received) == every_body(2)


async def test_the_lookupd_lists_no_partition_for_a_plain_topic_on_several_brokers(
    lookupd: LookupdAddresses,
) -> None:
    """No partition a writer must address: ``partitions`` is empty, as Youzan's lookupd
    answers for nsqds without partitions, so Youzan's producers spread over
    ``producers`` and its consumers read each as a plain nsqd. One broker alone keeps
    its partition 0. The registrations are raw V1 bytes: a trionsq broker's (Youzan's
    form) and nsqd 1.3's."""
    trionsq_broker, nsqd = await RawPeer.connect(lookupd), await RawPeer.connect(lookupd)
    try:
        for port, peer in ((4150, trionsq_broker), (4250, nsqd)):
            info = PeerInfo("1.3.0", port, port + 1, "h", "127.0.0.1")
            assert (await peer.identify(info)).startswith(b"{")
        await trionsq_broker.send(b"REGISTER lk 0\nREGISTER lk 0 ch\n")
        assert [await trionsq_broker.reply(), await trionsq_broker.reply()] == [b"OK", b"OK"]
        alone = (await lookup(lookupd, "r")).json()
        assert [peer["tcp_port"] for peer in alone["partitions"].values()] == [4150]
        await nsqd.send(b"REGISTER lk\n")
        assert await nsqd.reply() == b"OK"
        for access in ("r", "w"):
            document = (await lookup(lookupd, access)).json()
            assert document["partitions"] == {}, access
            assert [peer["tcp_port"] for peer in document["producers"]] == [4150, 4250]
            assert document["meta"]["partition_num"] == 1
            assert document["channels"] == ["ch"]
    finally:
        await trionsq_broker.aclose()
        await nsqd.aclose()


async def lookup(lookupd: LookupdAddresses, access: str) -> httpx.Response:
    """Youzan's question (``.json()`` gives the answer)."""
    host, port = lookupd.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        answer = await client.get(f"/lookup?topic={TOPIC}&access={access}&metainfo=true")
    assert answer.status_code == 200, answer.text
    return answer
