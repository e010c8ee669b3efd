"""trionsq.client finding brokers through nsqlookupd and using what the design adds:
partitions spread over a cluster found and all consumed, keys hashed to partitions,
ordered consumption checked across a reconnect, handler mode with retries and
give-up, RDY moved among more connections than max_in_flight, batching with
back-pressure, and trace logs."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from functools import partial
from typing import TYPE_CHECKING

import httpx
import orjson
import pytest
import trio

from trionsq import NsqdConfig
from trionsq.broker.rate_limits import Rates
from trionsq.client import (
    ConnectionOptions,
    ConsumerSettings,
    NsqError,
    ProducerSettings,
    open_consumer,
    open_producer,
    partition_for_key,
)
from trionsq.protocol import IdentifyRequest
from trionsq.protocol.commands import OffsetSpec
from trionsq.testing import wait_until

from .test_trio_client import run_broker, take, tcp

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.client import ClientMessage
    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import NsqCluster

FAST = ConsumerSettings(lookup_interval=0.5)


def http_address(addresses: LookupdAddresses) -> str:
    return f"{addresses.http[0]}:{addresses.http[1]}"


async def create_topic(lookupd: str, query: str) -> None:
    async with httpx.AsyncClient(base_url=f"http://{lookupd}") as http:
        response = await http.post(f"/topic/create?{query}")
    assert response.status_code == 200, response.content


@pytest.mark.nsq_cluster(brokers=3, lookupds=1)
async def test_partitions_over_a_cluster_are_found_keyed_and_all_consumed(
    nsq_cluster: NsqCluster,
) -> None:
    (lookupd,) = nsq_cluster.lookupd_http_addresses
    await create_topic(lookupd, "topic=orders&partition_num=6&replicator=1")
    keys = [f"order-{i}" for i in range(300)]
    async with open_producer(lookupd=lookupd) as producer:
        async with trio.open_nursery() as publishers:
            for key in keys:
                publishers.start_soon(partial(producer.publish, "orders", key.encode(), key=key))
        await producer.publish_many("orders", [b"unkeyed-%d" % i for i in range(60)])
    async with open_consumer("orders", "c", lookupd=lookupd, settings=FAST) as consumer:
        assert consumer.connections == 6
        assert {link.target.partition for link in consumer.readiness.links} == set(range(6))
        assert len({link.target.address for link in consumer.readiness.links}) == 3
        seen: dict[bytes, int | None] = {}
        with trio.fail_after(20):
            async for message in consumer:
                seen[message.body] = message.partition
                message.finish()
                if len(seen) == 360:
                    break
    for key in keys:  # every key on the partition its hash names, as a Go producer puts it
        assert seen[key.encode()] == partition_for_key(key, 6)
    assert len({seen[b"unkeyed-%d" % i] for i in range(60)}) == 1  # one MPUB, one partition


async def test_consumer_and_producer_recover_from_a_broker_restart_through_lookupd(
    nursery: trio.Nursery, lookupd: LookupdAddresses, tmp_path: Path
) -> None:
    host, port = lookupd.tcp
    config = NsqdConfig.loopback(
        data_path=str(tmp_path),
        lookupd_tcp_addresses=(f"{host}:{port}",),
        broadcast_address="127.0.0.1",
    )
    first, stop = await nursery.start(run_broker, config)
    address = tcp(first)
    config = NsqdConfig.loopback(
        data_path=str(tmp_path),
        lookupd_tcp_addresses=(f"{host}:{port}",),
        broadcast_address="127.0.0.1",
        tcp_address=address,
    )
    lookup = http_address(lookupd)
    sent = [b"m%d" % i for i in range(400)]
    received: list[bytes] = []
    async with open_producer(lookupd=lookup) as producer:
        await producer.publish_many("t", sent[:200])  # creates the topic (lookupd's /nodes)
        async with open_consumer("t", "c", lookupd=lookup, settings=FAST) as consumer:
            assert consumer.connections == 1
            received += await take(consumer, 100)
            stop.cancel()
            await trio.sleep(0.3)
            await nursery.start(run_broker, config)
            for body in sent[200:]:  # the producer's connection was lost: it reconnects
                await producer.publish("t", body)
            with trio.fail_after(30):
                async for message in consumer:
                    received.append(message.body)
                    message.finish()
                    if set(received) >= set(sent):
                        break
    assert set(received) == set(sent)
    assert consumer.reconnects >= 1
    assert len(received) - len(set(received)) <= 200  # duplicates: unfinished at the stop


async def test_ordered_consumption_stays_in_order_across_a_reconnect(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    first, stop = await nursery.start(run_broker, config)
    address = tcp(first)
    first.broker.topic("seq", partitions=2, ordered=True)
    settings = ProducerSettings(partition_count=2)
    async with open_producer(address, settings=settings) as producer:
        for i in range(60):
            await producer.publish("seq", b"%d" % i, key=b"k%d" % (i % 4))
    per_partition: dict[int | None, list[int]] = defaultdict(list)
    async with open_consumer(
        "seq", "c", address, partitions=[0, 1], ordered=True, max_in_flight=8
    ) as consumer:
        for message in await _take_messages(consumer, 30):
            per_partition[message.partition].append(int(message.body))
        stop.cancel()
        await trio.sleep(0.3)
        restarted = NsqdConfig.loopback(data_path=str(tmp_path), tcp_address=address)
        await nursery.start(run_broker, restarted)
        with trio.fail_after(20):
            async for message in consumer:
                per_partition[message.partition].append(int(message.body))
                message.finish()
                if {n for numbers in per_partition.values() for n in numbers} == set(range(60)):
                    break
    for numbers in per_partition.values():
        # in publish order within each partition; a message whose FIN was lost with the
        # broker comes again first after the reconnect (at-least-once), never later
        once = [n for i, n in enumerate(numbers) if i == 0 or numbers[i - 1] != n]
        assert once == sorted(set(numbers))
        assert len(numbers) - len(once) <= 1
    assert not consumer.offsets.skips
    assert consumer.reconnects >= 1


async def _take_messages(consumer: object, count: int) -> list[ClientMessage]:
    from trionsq.client import Consumer

    assert isinstance(consumer, Consumer)
    taken: list[ClientMessage] = []
    with trio.fail_after(20):
        async for message in consumer:
            taken.append(message)
            message.finish()
            if len(taken) == count:
                break
    return taken


async def test_handler_mode_finishes_requeues_backs_off_and_gives_up(nsqd: BoundAddresses) -> None:
    address = tcp(nsqd)
    async with open_producer(address) as producer:
        await producer.publish_many("h", [b"ok-1", b"bad", b"ok-2"])
    handled: Counter[bytes] = Counter()
    given_up: list[tuple[bytes, int]] = []
    settings = ConsumerSettings(
        max_in_flight=10, max_attempts=3, requeue_delay=0.0, backoff_unit=0.05
    )

    async def handler(message: ClientMessage) -> None:
        handled[message.body] += 1
        if message.body == b"bad":
            raise RuntimeError("cannot handle this one")

    async def give_up(message: ClientMessage) -> None:
        given_up.append((message.body, message.attempts))
        done.set()

    done = trio.Event()
    async with (
        open_consumer("h", "c", address, settings=settings) as consumer,
        trio.open_nursery() as handlers,
    ):
        handlers.start_soon(partial(consumer.handle, handler, concurrency=2, on_give_up=give_up))
        with trio.fail_after(20):
            await done.wait()
        handlers.cancel_scope.cancel()
    assert handled == {b"ok-1": 1, b"ok-2": 1, b"bad": 3}
    assert given_up == [(b"bad", 4)]
    assert consumer.failed == 3
    assert consumer.given_up == 1
    (channel,) = nsqd.broker.find_channel("h", "c")
    # the give-up's FIN, written as the consumer closed
    await wait_until(lambda: not channel.depth and not channel.in_flight, "all finished")


async def test_dead_letter_lets_the_broker_keep_max_attempts(nsqd: BoundAddresses) -> None:
    """``dead_letter=True``: the broker keeps the bound (IDENTIFY ``max_attempts``): the
    third failure sends the message to ``<topic>.dead``, where a consumer reads it with
    its origin and delivery count; the give-up hook is never needed."""
    address = tcp(nsqd)
    async with open_producer(address) as producer:
        await producer.publish("dl", b"bad")
    settings = ConsumerSettings(
        max_attempts=3, dead_letter=True, requeue_delay=0.0, backoff_unit=0.05
    )
    failures = 0

    async def handler(message: ClientMessage) -> None:
        nonlocal failures
        failures += 1
        raise RuntimeError("cannot handle this one")

    async def give_up(message: ClientMessage) -> None:
        raise AssertionError("the broker dead-letters it first")

    async with (
        open_consumer("dl", "c", address, settings=settings) as consumer,
        trio.open_nursery() as handlers,
    ):
        handlers.start_soon(partial(consumer.handle, handler, on_give_up=give_up))
        (channel,) = nsqd.broker.find_channel("dl", "c")
        with trio.fail_after(20):
            await wait_until(lambda: channel.dead_letter_count == 1, "dead-lettered")
        handlers.cancel_scope.cancel()
    assert failures == 3
    ext = ConnectionOptions(IdentifyRequest(extend_support=True))
    async with open_consumer("dl.dead", "r", address, options=ext) as reader:
        message = await reader.__anext__()
        message.finish()
    assert message.body == b"bad"
    headers = orjson.loads(message.message.ext or b"{}")
    assert (headers["##dead_attempts"], headers["##dead_from_channel"]) == ("3", "c")
    refused = ConsumerSettings(max_attempts=0, dead_letter=True)
    with pytest.raises(ValueError, match="max_attempts of 1 to 65535"):
        async with open_consumer("dl", "c", address, settings=refused):
            pass


async def test_more_connections_than_max_in_flight_still_drain_every_partition(
    nsqd: BoundAddresses,
) -> None:
    address = tcp(nsqd)
    nsqd.broker.topic("wide", partitions=4)
    async with open_producer(address) as producer:
        for partition in range(4):
            await producer.publish_many(
                "wide", [b"%d-%d" % (partition, i) for i in range(5)], partition=partition
            )
    settings = ConsumerSettings(
        max_in_flight=2, redistribute_interval=0.1, idle_before_redistribute=0.1
    )
    async with open_consumer(
        "wide", "c", address, partitions=range(4), settings=settings
    ) as consumer:
        assert sorted(link.rdy for link in consumer.readiness.links) == [0, 0, 1, 1]
        bodies = await take(consumer, 20)
    assert sorted(bodies) == sorted(b"%d-%d" % (p, i) for p in range(4) for i in range(5))


async def test_concurrent_publishes_are_batched_with_bounded_waiting(
    nsqd: BoundAddresses,
) -> None:
    address = tcp(nsqd)
    settings = ProducerSettings(max_batch=50, max_waiting=100)
    async with open_producer(address, settings=settings) as producer:
        async with trio.open_nursery() as publishers:
            for task in range(200):

                async def publish_ten(task: int = task) -> None:
                    for i in range(10):
                        await producer.publish("b", b"%d-%d" % (task, i))

                publishers.start_soon(publish_ten)
        (batcher,) = producer._batchers.values()
        async with trio.open_nursery() as publishers:  # one bad body fails alone
            for i in range(100):
                publishers.start_soon(producer.publish, "b", b"fine-%d" % i)
            with pytest.raises(NsqError) as refused:
                await producer.publish("b", b"")
    assert refused.value.code == "E_BAD_MESSAGE"
    assert nsqd.broker.topics["b"].partitions[0].message_count == 2100
    assert batcher.batches < 2100 / 10  # most went out in MPUBs
    assert batcher.peak_waiting <= 100


async def test_tracing_logs_each_publish_and_delivery(
    nsqd: BoundAddresses, caplog: pytest.LogCaptureFixture
) -> None:
    address = tcp(nsqd)
    nsqd.broker.topic("traced", partitions=1)
    caplog.set_level(logging.INFO, logger="trionsq.client.trace")
    async with open_producer(address, trace=True) as producer:
        reply = await producer.publish_traced("traced", b"one", 4242)
        await producer.publish("traced", b"two")
    async with open_consumer(
        "traced", "c", address, ordered=True, partitions=[0], trace=True
    ) as consumer:
        await take(consumer, 2)
    lines = [r.getMessage() for r in caplog.records if r.name == "trionsq.client.trace"]
    published = [line for line in lines if line.startswith("published")]
    consumed = [line for line in lines if line.startswith("consumed")]
    assert len(published) == 2
    assert len(consumed) == 2
    assert f"id={reply.internal_id} trace_id=4242 offset={reply.offset}" in published[0]
    assert f"id={reply.internal_id} trace_id=4242 partition=0 offset={reply.offset} " in consumed[0]
    assert f"remote=127.0.0.1:{nsqd.tcp[1]}" in consumed[0]


async def test_sub_advanced_starts_the_channel_at_a_message_count(nsqd: BoundAddresses) -> None:
    address = tcp(nsqd)
    async with open_producer(address) as producer:
        await producer.publish_many("adv", [b"%d" % i for i in range(10)])
    start = OffsetSpec("msgcount", 6)
    async with open_consumer("adv", "c", address, start_at=start) as consumer:
        messages = await _take_messages(consumer, 4)
    assert [m.body for m in messages] == [b"6", b"7", b"8", b"9"]
    offsets = [m.offset for m in messages if m.offset is not None]
    assert len(offsets) == 4
    assert offsets == sorted(offsets)
    assert consumer.offsets.checked == 4
    assert not consumer.offsets.skips


async def test_an_ordered_window_stays_in_order_when_a_message_is_requeued(
    nursery: trio.Nursery,
) -> None:
    """``ordered_window`` 5: the broker streams five at a time; a requeued message comes
    back before anything after it, which the consumer had already been sent and drops."""
    first, _ = await nursery.start(run_broker, NsqdConfig.loopback())
    address = tcp(first)
    first.broker.topic("seq", partitions=1, ordered=True)
    async with open_producer(address) as producer:
        for i in range(20):
            await producer.publish("seq", b"%d" % i, partition=0)
    settings = ConsumerSettings(ordered=True, ordered_window=5, max_in_flight=10)
    handled: list[tuple[int, int]] = []
    channel = None
    async with open_consumer("seq", "c", address, partitions=[0], settings=settings) as consumer:
        with trio.fail_after(20):
            async for message in consumer:
                number = int(message.body)
                handled.append((number, message.attempts))
                if number == 7 and message.attempts == 1:
                    channel = first.broker.topics["seq"].partitions[0].channels["c"]
                    assert [c.ordered_window for c in channel.consumers.values()] == [5]
                    assert len(channel.in_flight) > 1  # the window is in use
                    message.requeue(0, backoff=False)  # REQ 0: the window goes back to it
                else:
                    message.finish()
                if number == 19:
                    break
    assert channel is not None
    assert [number for number, _ in handled] == [*range(8), *range(7, 20)]  # never ahead
    assert handled[8] == (7, 2)
    assert not consumer.offsets.skips  # the planned rewind is not reported as a skip
    assert consumer.received > len(handled)  # what was sent past 7 before it went back: dropped


async def test_rate_limits_from_the_client_side(nsqd: BoundAddresses) -> None:
    """A consumer's ``max_msgs_per_sec`` reaches the broker in IDENTIFY; a producer
    over its topic's publish limit (throttling, the default) is held and publishes on
    the same connection, with no error to retry."""
    address = tcp(nsqd)
    nsqd.broker.topic("limited")
    nsqd.broker.set_publish_limit("limited", Rates(msgs_per_sec=2))  # one token a burst
    settings = ConsumerSettings(max_msgs_per_sec=50, max_bytes_per_sec=10_000)
    async with open_consumer("limited", "c", address, settings=settings):
        (channel,) = nsqd.broker.find_channel("limited", "c")
        await wait_until(lambda: bool(channel.consumers), "subscribed")
        (consumer,) = channel.consumers.values()
        assert consumer.rate_limit is not None
        assert consumer.rate_limit.rates == Rates(50, 10_000)
    async with open_producer(address) as producer:
        await producer.publish("limited", b"first")
        await producer.publish("limited", b"second")  # held until a token (0.5 s)
        await producer.publish("limited", b"third")
        assert (producer.retries, producer.rate_limited) == (0, 0)  # one connection, no error
    assert nsqd.broker.topics["limited"].statistics().message_count == 3
    with pytest.raises(ValueError, match="max_msgs_per_sec"):
        async with open_consumer(
            "limited", "c", address, settings=ConsumerSettings(max_msgs_per_sec=-1)
        ):
            pass
