"""TubeMQ consumers in one group over real sockets: the master deals a topic's
partitions through the broker's consumer-group engine, pulls and confirms take each
message exactly once, and when a consumer leaves (closes, or goes silent past its
lease) the others take its partitions and pull again what it had not confirmed."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq.protocol.tubemq_formats import ErrCode, EventType, PartitionRef

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

from .tubemq import TubeClients, TubeConsumer, send_all, start_tubemq

COUNT = 10_000


async def produce(
    nursery: trio.Nursery, tube_clients: TubeClients, count: int = COUNT
) -> tuple[BoundAddresses, list[bytes]]:
    addresses = await start_tubemq(nursery)
    addresses.broker.topic("orders", partitions=4)
    master, broker = await tube_clients.pair(addresses)
    registered = await master.register_producer("producer-1", ["orders"])
    assert registered.success
    bodies = [b"order-%05d" % i for i in range(count)]
    replies = await send_all(
        broker, "producer-1", "orders", [(i % 4, b) for i, b in enumerate(bodies)]
    )
    assert all(r.success and r.errCode == ErrCode.SUCCESS for r in replies)
    # each partition numbers its messages from 1, as NSQ's ids, and says where it put them
    assert [r.messageId for r in replies[:8]] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert [r.errMsg for r in replies[:4]] == ["1", "1", "1", "1"]
    assert replies[4].appendOffset > replies[0].appendOffset == 0
    return addresses, bodies


async def two_consumers(
    addresses: BoundAddresses, tube_clients: TubeClients
) -> tuple[TubeConsumer, TubeConsumer]:
    consumers = []
    for name in ("consumer-a", "consumer-b"):
        master, broker = await tube_clients.pair(addresses)
        consumer = TubeConsumer(master, broker, name, "billing")
        registered = await consumer.register(["orders"])
        assert registered.success, registered
        consumers.append(consumer)
    a, b = consumers
    await a.settle(2)
    await b.settle(2)
    assert sorted(r.partition for r in a.held + b.held) == [0, 1, 2, 3]
    return a, b


async def test_two_consumers_take_two_partitions_each_and_confirm_everything_once(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, tube_clients: TubeClients
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses, bodies = await produce(nursery, tube_clients)
    a, b = await two_consumers(addresses, tube_clients)
    # the CONNECT event names this broker's partitions in TubeMQ's subscribeInfo form
    event = a.events[0]
    assert event.opType == EventType.CONNECT
    assert event.rebalanceId > 0
    identity = addresses.tubemq_broker
    assert identity is not None
    node_id = addresses.broker.config.node_id
    assert sorted(event.subscribeInfo) == sorted(
        f"consumer-a@billing#{node_id}:{identity[0]}:{identity[1]}#orders:{r.partition}"
        for r in a.held
    )
    confirmed: list[bytes] = []
    for consumer in (a, b):
        for ref in consumer.held:
            confirmed += await consumer.drain(ref)
    assert Counter(confirmed) == Counter(bodies)  # every message, each once
    # nothing is left: another pull finds the end, at the partition's end offset
    last = await a.pull(a.held[0])
    assert (last.success, last.errCode, last.errMsg) == (
        False,
        ErrCode.NOT_FOUND,
        "The request offset reached maxOffset!",
    )
    assert last.currOffset == last.maxOffset > 0


async def leave_with_an_unconfirmed_pack(
    nursery: trio.Nursery, tube_clients: TubeClients, *, silently: bool, count: int = COUNT
) -> tuple[TubeConsumer, list[bytes], list[bytes], list[bytes]]:
    addresses, bodies = await produce(nursery, tube_clients, count)
    a, b = await two_consumers(addresses, tube_clients)
    confirmed: list[bytes] = []
    for ref in a.held:
        confirmed += await a.drain(ref)
    kept, dropped = b.held
    confirmed += await b.drain(kept)
    pack = await b.pull(dropped)
    assert pack.success
    assert len(pack.messages) == 256
    unconfirmed = [m.payLoadData for m in pack.messages]
    if silently:  # no heartbeat, no pull: the master drops it after its lease (30 s)
        for _ in range(7):
            await a.heartbeat()
            await trio.sleep(5)
    else:
        closed = await b.master.close_consumer("consumer-b", "billing")
        assert (closed.success, closed.errCode, closed.errMsg) == (True, 200, "OK!")
    await a.settle(4)
    taken = [r for r in a.held if r.partition in (kept.partition, dropped.partition)]
    assert len(taken) == 2
    for ref in taken:
        confirmed += await a.drain(ref)
    return b, bodies, confirmed, unconfirmed


async def test_a_consumer_that_closes_leaves_its_partitions_and_its_pack_to_the_other(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, tube_clients: TubeClients
) -> None:
    autojump_clock.autojump_threshold = 0.1
    _, bodies, confirmed, unconfirmed = await leave_with_an_unconfirmed_pack(
        nursery, tube_clients, silently=False
    )
    assert Counter(confirmed) == Counter(bodies)
    assert set(unconfirmed) <= set(confirmed)  # pulled again by the survivor


async def test_a_silent_consumer_loses_its_partitions_after_its_lease(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, tube_clients: TubeClients
) -> None:
    autojump_clock.autojump_threshold = 0.1
    b, bodies, confirmed, unconfirmed = await leave_with_an_unconfirmed_pack(
        nursery, tube_clients, silently=True, count=2_000
    )
    assert Counter(confirmed) == Counter(bodies)
    assert set(unconfirmed) <= set(confirmed)
    # the master forgot it: its heartbeat is refused as TubeMQ refuses an unknown node
    late = await b.master.consumer_heartbeat("consumer-b", "billing", [])
    assert (late.success, late.errCode) == (False, ErrCode.HB_NO_NODE)
    assert late.errMsg == (
        "Update consumer node exception:Invalid node id:consumer-b@billing,"
        " you have to append node first!"
    )


async def test_a_partition_is_exclusive_in_its_group(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, tube_clients: TubeClients
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses, _ = await produce(nursery, tube_clients, 100)
    a, b = await two_consumers(addresses, tube_clients)
    theirs = a.held[0]
    refused = await b.broker.register_partition("consumer-b", "billing", theirs)
    assert (refused.success, refused.errCode) == (False, ErrCode.PARTITION_OCCUPIED)
    node_id = addresses.broker.config.node_id
    assert refused.errMsg == (
        f"[Duplicated Register] Partition {node_id}#billing:orders:{theirs.partition}"
        " has been registered by consumer-a"
    )
    pulled = await b.pull(theirs)
    assert (pulled.success, pulled.errCode) == (False, ErrCode.DUPLICATE_PARTITION)
    committed = await b.broker.commit("consumer-b", "billing", theirs)
    assert (committed.errCode, committed.errMsg) == (
        ErrCode.UNAUTHORIZED,
        "The partition has been registered by other consumer: consumer-a",
    )
    beat = await b.broker.broker_heartbeat("consumer-b", "billing", [theirs, b.held[0]])
    assert beat.success
    assert beat.hasPartFailure
    assert list(beat.failureInfo) == [f"412:{theirs}"]
    stranger = PartitionRef(node_id, "127.0.0.1", 1, "orders", theirs.partition)
    nobody = await b.broker.get_message("nobody", "billing", stranger)
    assert (nobody.errCode, nobody.errMsg) == (
        ErrCode.DUPLICATE_PARTITION,
        f"[Duplicated Request] Partition=billing:orders:{theirs.partition} of Broker={node_id}"
        " has been consumed by consumer-a;Current consumer nobody",
    )
