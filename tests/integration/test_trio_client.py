"""trionsq.client against a real broker over real sockets: publishing (concurrent,
batched, deferred, traced, ext with tags), consuming with FIN/REQ, partitions, and
recovery from a broker restart with nothing lost."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from trionsq import NsqdConfig, normalize_address, serve_nsqd
from trionsq.client import (
    ConnectionOptions,
    NsqError,
    ProducerSettings,
    open_connection,
    open_consumer,
    open_producer,
)
from trionsq.protocol.commands import ExtMessage, Sub
from trionsq.protocol.identify import IdentifyRequest

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.client import Consumer
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import ClientKit


def tcp(addresses: BoundAddresses) -> str:
    return f"{addresses.tcp[0]}:{addresses.tcp[1]}"


async def take(consumer: Consumer, count: int, *, finish: bool = True) -> list[bytes]:
    """The next ``count`` bodies, each finished."""
    bodies = []
    with trio.fail_after(20):
        async for message in consumer:
            bodies.append(message.body)
            if finish:
                message.finish()
            if len(bodies) == count:
                break
    return bodies


async def test_concurrent_batched_and_deferred_publishes_are_all_consumed(
    nsqd: BoundAddresses,
) -> None:
    async with open_producer(tcp(nsqd)) as producer:
        async with trio.open_nursery() as publishers:
            for task in range(20):

                async def publish_fifty(task: int = task) -> None:
                    for i in range(50):
                        await producer.publish("t", b"%d-%d" % (task, i))

                publishers.start_soon(publish_fifty)
        await producer.publish_many("t", [b"batch-%d" % i for i in range(100)])
        await producer.publish_deferred("t", b"later", 0.2)
    async with open_consumer("t", "c", tcp(nsqd), max_in_flight=100) as consumer:
        bodies = await take(consumer, 1101)
    assert len(set(bodies)) == 1101
    assert bodies[-1] == b"later"  # deferred behind everything else
    (channel,) = nsqd.broker.find_channel("t", "c")
    await trio.sleep(0.2)  # the FINs of the last read
    assert channel.depth == 0
    assert len(channel.in_flight) == 0


async def test_requeue_redelivers_with_more_attempts(nsqd: BoundAddresses) -> None:
    async with open_producer(tcp(nsqd)) as producer:
        await producer.publish("t", b"again")
    async with open_consumer("t", "c", tcp(nsqd), max_in_flight=1) as consumer:
        first = await consumer.__anext__()
        first.requeue()
        second = await consumer.__anext__()
        second.finish()
    assert (first.body, first.attempts) == (b"again", 1)
    assert (second.body, second.attempts) == (b"again", 2)


async def test_an_error_answer_is_raised_and_the_producer_goes_on(nsqd: BoundAddresses) -> None:
    async with open_producer(tcp(nsqd)) as producer:
        with pytest.raises(NsqError) as refused:
            await producer.publish("bad!topic", b"x")
        assert refused.value.code == "E_BAD_TOPIC"
        await producer.publish("t", b"after")  # a fresh connection after the fatal one
    assert nsqd.broker.topics["t"].partitions[0].message_count == 1


async def test_traced_publishes_report_where_each_message_went(nsqd: BoundAddresses) -> None:
    nsqd.broker.topic("traced")
    async with open_producer(tcp(nsqd)) as producer:
        first = await producer.publish_traced("traced", b"a" * 10, trace_id=77)
        second = await producer.publish_traced("traced", b"b" * 10, trace_id=78)
    assert first.trace_id == 77
    assert second.trace_id == 78
    assert second.offset == first.offset + first.raw_size
    assert second.internal_id == first.internal_id + 1


async def test_ext_headers_and_desired_tag_end_to_end(nsqd: BoundAddresses) -> None:
    nsqd.broker.topic("ext", ext=True)
    tagged = ConnectionOptions(IdentifyRequest(extend_support=True, desired_tag="red"))
    async with open_producer(tcp(nsqd), options=tagged) as producer:
        await producer.publish_ext("ext", ExtMessage(b'{"##client_dispatch_tag":"blue"}', b"b"))
        await producer.publish_ext("ext", ExtMessage(b'{"##client_dispatch_tag":"red"}', b"r"))
    async with open_consumer("ext", "c", tcp(nsqd), options=tagged) as consumer:
        message = await consumer.__anext__()
        message.finish()
    assert message.body == b"r"  # the blue one waits for a blue consumer
    assert message.message.ext == b'{"##client_dispatch_tag":"red"}'


async def test_one_connection_per_partition_consumes_them_all(nsqd: BoundAddresses) -> None:
    nsqd.broker.topic("parts", partitions=3)
    async with open_producer(tcp(nsqd)) as producer:
        for partition in range(3):
            await producer.publish_many(
                "parts", [b"p%d-%d" % (partition, i) for i in range(10)], partition=partition
            )
    async with open_consumer("parts", "c", tcp(nsqd), partitions=[0, 1, 2]) as consumer:
        bodies = await take(consumer, 30)
    assert sorted(bodies) == sorted(b"p%d-%d" % (p, i) for p in range(3) for i in range(10))


async def run_broker(
    config: NsqdConfig,
    *,
    task_status: trio.TaskStatus[
        tuple[BoundAddresses, trio.CancelScope]
    ] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A broker that the test can stop by cancelling the scope it hands back."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as inner:
            addresses: BoundAddresses = await inner.start(serve_nsqd, config)
            task_status.started((addresses, scope))


async def test_a_broker_restart_mid_stream_loses_nothing(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    first, stop_first = await nursery.start(run_broker, config)
    address = tcp(first)
    sent = [b"m%d" % i for i in range(300)]
    async with open_producer(address) as producer:
        await producer.publish_many("t", sent[:150])
    received: list[bytes] = []
    async with open_consumer("t", "c", address, max_in_flight=10) as consumer:
        received += await take(consumer, 50)
        stop_first.cancel()  # the broker stops; the consumer reconnects when it is back
        await trio.sleep(0.5)
        restarted = NsqdConfig.loopback(data_path=str(tmp_path), tcp_address=address)
        await nursery.start(run_broker, restarted)
        async with open_producer(address) as producer:
            await producer.publish_many("t", sent[150:])
        with trio.fail_after(30):
            async for message in consumer:
                received.append(message.body)
                message.finish()
                if set(received) >= set(sent):
                    break
    assert set(received) == set(sent)  # at-least-once: nothing lost
    assert consumer.reconnects >= 1
    duplicates = len(received) - len(set(received))
    assert duplicates <= 10  # at most what was in flight when the broker stopped


async def test_the_client_fixture_publishes_and_takes(client: ClientKit) -> None:
    await client.publish("fixture", b"a", b"b")
    await client.producer.publish("fixture", b"c")
    taken = await client.take("fixture", "c", 3)
    assert sorted(message.body for message in taken) == [b"a", b"b", b"c"]
    async with client.consumer("fixture", "c", max_in_flight=1) as consumer:
        await client.publish("fixture", b"d")
        assert (await consumer.__anext__()).body == b"d"


async def test_a_pool_of_connections_per_nsqd_shares_the_publishes(nsqd: BoundAddresses) -> None:
    settings = ProducerSettings(connections_per_nsqd=3, batching=False)
    async with open_producer(tcp(nsqd), settings=settings) as producer:
        async with trio.open_nursery() as publishers:
            for i in range(30):
                publishers.start_soon(producer.publish, "pool", b"%d" % i)
        pool = list(producer._connections.values())
    assert len(pool) == 3
    assert len({id(connection) for connection in pool}) == 3
    assert nsqd.broker.topics["pool"].partitions[0].message_count == 30


async def test_a_frame_the_parser_refuses_ends_the_connection_not_its_owner(
    nursery: trio.Nursery,
) -> None:
    """A broker (faked here) that answers IDENTIFY and SUB, then sends a frame of an
    impossible size: the connection is lost, as if the broker had closed it."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]

    async def corrupt_broker() -> None:
        async with listener:
            stream = await listener.accept()
        async with stream:
            await stream.receive_some(65536)  # magic + IDENTIFY
            await stream.send_all(b"\x00\x00\x00\x06\x00\x00\x00\x00OK")
            await stream.receive_some(65536)  # SUB
            await stream.send_all(b"\x00\x00\x00\x06\x00\x00\x00\x00OK\x00\x00\x00\x01\x00")
            await trio.sleep_forever()

    nursery.start_soon(corrupt_broker)
    with trio.fail_after(10):
        async with open_connection(f"127.0.0.1:{port}") as connection:
            await connection.request(Sub("t", "c"))
            await connection.wait_closed()
    assert connection.closed


async def test_get_waits_for_the_next_message_at_most_timeout_seconds(
    client: ClientKit, autojump_clock: trio.testing.MockClock
) -> None:
    """The async consumer's ``get(timeout)``, as the blocking consumer has (issue 34)."""
    autojump_clock.autojump_threshold = 0.1  # real sockets
    async with client.consumer("got", "c") as consumer:
        started = trio.current_time()
        assert await consumer.get(timeout=5) is None
        assert trio.current_time() - started == pytest.approx(5)
        await client.producer.publish_deferred("got", b"in 3 s", 3)
        message = await consumer.get(timeout=10)
        assert message is not None
        assert message.body == b"in 3 s"
        message.finish()
        await client.publish("got", b"now")
        message = await consumer.get()  # no timeout: as async for
        assert message is not None
        assert message.body == b"now"
        message.finish()


async def test_e_topic_not_exist_names_the_topic(nsqd: BoundAddresses) -> None:
    """The broker's E_TOPIC_NOT_EXIST has no description (Youzan's nsqd sends none);
    the client's NsqError says which topic and partition, and where (issue 34)."""
    nsqd.broker.topic("ext", ext=True)
    where = normalize_address(nsqd.tcp)
    async with open_producer(nsqd.tcp) as producer:
        with pytest.raises(NsqError) as missing:
            await producer.publish_ext("no-such-topic", ExtMessage(b"{}", b"x"))
        with pytest.raises(NsqError) as partition:
            await producer.publish_ext("ext", ExtMessage(b"{}", b"x"), partition=3)
    assert missing.value.code == partition.value.code == "E_TOPIC_NOT_EXIST"
    assert str(missing.value) == (
        f"E_TOPIC_NOT_EXIST topic 'no-such-topic' does not exist on {where}"
    )
    assert str(partition.value) == (f"E_TOPIC_NOT_EXIST topic 'ext' has no partition 3 on {where}")
