"""Durable storage across restarts: what a broker on --data-path keeps (issue 5)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq import NsqdConfig, serve_nsqd
from trionsq.broker.storage import PERSIST_INTERVAL
from trionsq.protocol import MAGIC_V2, Dpub, Fin, Mpub, Rdy, Sub
from trionsq.protocol.client import (
    ClientConnection,
    Frame,
    MessageFrame,
    Response,
    encode_command,
)
from trionsq.queues.cursor_state import load_state, state_path
from trionsq.server.stats import stats_document

from .raw import bodies, next_message, publish, quiet

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients


async def test_a_restart_keeps_unfinished_deferred_and_paused(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1  # real sockets and file threads
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        sent = await load_and_leave(clients, addresses)
        first.cancel_scope.cancel()  # a graceful stop: everything is persisted
    await clients.close_all()
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    (channel,) = again.broker.find_channel("orders", "billing")
    assert channel.paused
    assert len(channel.deferred) == 1  # the DPUB still waits for its hour
    assert channel.depth == 8  # 10 published, 2 finished; the one in flight comes back
    again.broker.set_channel_paused("orders", "billing", paused=False)
    reader = await clients.connect(again.tcp)
    await reader.send(Sub("orders", "billing"), Rdy(100))
    assert bodies(await quiet(reader, 2)) == sent[2:]


async def load_and_leave(clients: Clients, addresses: BoundAddresses) -> list[bytes]:
    """Publish 10 and a DPUB, finish 2, leave 1 in flight, pause the channel."""
    consumer = await clients.connect(addresses.tcp)
    await consumer.send(Sub("orders", "billing"))
    await quiet(consumer, 1)
    producer = await clients.connect(addresses.tcp)
    sent = [b"m%d" % i for i in range(10)]
    await publish(producer, Mpub("orders", tuple(sent)), Dpub("orders", 3_600_000, b"later"))
    await consumer.send(Rdy(3))
    delivered = [await next_message(consumer) for _ in range(3)]
    await consumer.send(Fin(delivered[0].id), Fin(delivered[1].id))  # the third stays in flight
    await quiet(consumer, 1)
    addresses.broker.set_channel_paused("orders", "billing", paused=True)
    return sent


async def test_metadata_behind_the_log_is_repaired_from_it(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A crash right after a topic appeared: metadata.json does not list it yet."""
    autojump_clock.autojump_threshold = 0.1
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        consumer = await clients.subscribe(addresses.tcp, "fresh", "audit")
        producer = await clients.connect(addresses.tcp)
        await publish(producer, Mpub("fresh", (b"a", b"b", b"c")))
        await consumer.send(Rdy(1))
        (first_message,) = [await next_message(consumer)]
        await consumer.send(Fin(first_message.id))
        await quiet(consumer, 2)  # long enough for the persister to write the channel
        first.cancel_scope.cancel()
    await clients.close_all()
    (tmp_path / "metadata.json").write_bytes(b'{"version":1,"topics":[]}')  # an older one
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    assert "fresh" in again.broker.topics
    (channel,) = again.broker.find_channel("fresh", "audit")
    assert channel.depth == 2  # its position came back with it: "a" stays finished
    reader = await clients.subscribe(again.tcp, "fresh", "audit", rdy=10)
    assert bodies(await quiet(reader, 1)) == [b"b", b"c"]


async def test_a_consumer_far_behind_reads_the_backlog_from_disk(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """1,000,000 messages published, the broker restarted (so it holds only the last
    1,024 in memory), then one consumer reads them all, in order, from disk."""
    config = NsqdConfig.loopback(data_path=str(tmp_path), mem_queue_size=100)
    total, batch = 1_000_000, 1000
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        await publish_numbered(addresses.tcp, total, batch)
        first.cancel_scope.cancel()
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    (partition,) = again.broker.topics["backlog"].partitions
    assert partition.log.read(1, 1) == []  # the oldest are on disk only
    with trio.fail_after(120):
        assert await consume_numbered(again.tcp, total) == total


async def publish_numbered(address: tuple[str, int], total: int, batch: int) -> None:
    """MPUBs of ``batch`` bodies "0".."total-1", each answered before the next."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        codec = ClientConnection()
        await stream.send_all(MAGIC_V2)
        for start in range(0, total, batch):
            bodies = tuple(b"%d" % i for i in range(start, start + batch))
            await stream.send_all(encode_command(Mpub("backlog", bodies)))
            frames: list[Frame] = []
            while not frames:
                frames = codec.receive_data(await stream.receive_some(4096))
            assert isinstance(frames[0], Response)
            assert frames[0].is_ok


async def consume_numbered(address: tuple[str, int], total: int) -> int:
    """Read the first channel with RDY 2500, FIN each read's messages in one write, and
    check the bodies come in order; returns how many arrived."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        codec = ClientConnection()
        await stream.send_all(MAGIC_V2 + encode_command(Sub("backlog", "late")) + b"RDY 2500\n")
        expected = 0
        while expected < total:
            data = await stream.receive_some(65536)
            assert data
            fins = []
            for frame in codec.receive_data(data):
                if isinstance(frame, MessageFrame):
                    assert frame.message.body == b"%d" % expected
                    expected += 1
                    fins.append(b"FIN " + frame.message.id + b"\n")
            if fins:
                await stream.send_all(b"".join(fins))
    return expected


async def test_a_damaged_record_is_skipped_counted_and_shown_in_stats(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    sent = [bytes([65 + i]) * 100 for i in range(5)]
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        producer = await clients.connect(addresses.tcp)
        await publish(producer, Mpub("damaged", tuple(sent)))
        first.cancel_scope.cancel()
    await clients.close_all()
    flip_a_byte_of(tmp_path, sent[2])
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    document = stats_document(
        again.broker,
        version="test",
        started_at=0.0,
        health="OK",
        topic="damaged",
        channel=None,
        include_clients=False,
        include_mem=False,
    )
    topics = document["topics"]
    assert isinstance(topics, list)
    (topic,) = topics
    assert topic["lost_count"] == 1
    assert topic["disk_bytes"] > 0
    reader = await clients.subscribe(again.tcp, "damaged", "c", rdy=10)
    assert bodies(await quiet(reader, 1)) == [sent[0], sent[1], sent[3], sent[4]]


def flip_a_byte_of(data_path: Path, body: bytes) -> None:
    """Damage one byte in the middle of ``body`` where the segment file holds it."""
    (segment,) = data_path.glob("damaged-0.*.log")
    data = bytearray(segment.read_bytes())
    data[data.index(body) + 50] ^= 0xFF
    segment.write_bytes(bytes(data))


async def test_consumed_segments_are_deleted(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1
    config = NsqdConfig.loopback(data_path=str(tmp_path), max_bytes_per_file=4096)
    addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
    producer = await clients.connect(addresses.tcp)
    for batch in range(20):
        await publish(producer, Mpub("spent", tuple(b"%d-%d" % (batch, i) * 20 for i in range(10))))
    assert count_segments(tmp_path) > 5
    consumer = await clients.subscribe(addresses.tcp, "spent", "c", rdy=2500)
    for _ in range(200):
        message = await next_message(consumer)
        await consumer.send(Fin(message.id))
    await quiet(consumer, 3)  # the persister saves the position, then releases
    assert count_segments(tmp_path) == 1  # only the active segment is left


def count_segments(data_path: Path) -> int:
    return len(list(data_path.glob("spent-0.*.log")))


async def test_a_channel_state_is_written_only_when_it_changed(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The persister looks every second but rewrites a state file only when what it
    holds moved (each write replaces the file: a new inode), even with a deferred
    message, whose due time is stored on the wall clock."""
    autojump_clock.autojump_threshold = 0.1  # real sockets and file threads
    addresses: BoundAddresses = await nursery.start(
        serve_nsqd, NsqdConfig.loopback(data_path=str(tmp_path))
    )
    await load_and_leave(clients, addresses)  # a DPUB deferred, one in flight
    path = state_path(tmp_path, "orders", 0, "billing")
    await trio.sleep(2 * PERSIST_INTERVAL + 0.5)
    written = path.stat().st_ino
    await trio.sleep(5 * PERSIST_INTERVAL)
    assert path.stat().st_ino == written  # five idle ticks, no write
    addresses.broker.set_channel_paused("orders", "billing", paused=False)
    await trio.sleep(2 * PERSIST_INTERVAL)
    assert path.stat().st_ino != written  # the pause is persisted state
    saved = load_state(path)
    assert saved is not None
    assert saved.paused is False


async def test_an_idle_broker_persists_nothing_and_a_fin_is_written_within_a_second(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The persister waits for a change (a routing pass, an admin change) instead of
    looking every second: idle, it does not run at all; a FIN is on disk a second
    after it."""
    autojump_clock.autojump_threshold = 0.1  # real sockets and file threads
    addresses: BoundAddresses = await nursery.start(
        serve_nsqd, NsqdConfig.loopback(data_path=str(tmp_path))
    )
    storage = addresses.broker.storage
    assert storage is not None
    persisted: list[float] = []
    persist = storage.persist

    async def counted(broker: object) -> None:
        persisted.append(trio.current_time())
        await persist(broker)  # type: ignore[arg-type]

    storage.persist = counted  # type: ignore[method-assign]
    consumer = await clients.connect(addresses.tcp)
    await consumer.send(Sub("t", "c"), Rdy(1))
    await quiet(consumer, 1)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("t", (b"one",)))
    message = await next_message(consumer)
    await trio.sleep(3 * PERSIST_INTERVAL)
    persisted.clear()
    await trio.sleep(30 * PERSIST_INTERVAL)
    assert persisted == []  # thirty idle seconds: the persister never ran
    await consumer.send(Fin(message.id))
    fin_at = trio.current_time()
    await trio.sleep(2 * PERSIST_INTERVAL)
    assert len(persisted) == 1
    assert fin_at < persisted[0] <= fin_at + PERSIST_INTERVAL + 0.2
    saved = load_state(state_path(tmp_path, "t", 0, "c"))
    assert saved is not None
    assert saved.confirmed_id >= 1  # the one message is confirmed on disk


async def test_a_failed_state_write_is_tried_again_with_nothing_else_changing(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The persister waits for changes, but a write the file system refused stays
    due: it is retried every second until it works, and health comes back to OK."""
    autojump_clock.autojump_threshold = 0.1  # real sockets and file threads
    addresses: BoundAddresses = await nursery.start(
        serve_nsqd, NsqdConfig.loopback(data_path=str(tmp_path))
    )
    consumer = await clients.connect(addresses.tcp)
    await consumer.send(Sub("t", "c"), Rdy(2))
    await quiet(consumer, 1)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("t", (b"one", b"two")))
    first = await next_message(consumer)
    await trio.sleep(2 * PERSIST_INTERVAL)
    path = state_path(tmp_path, "t", 0, "c")
    path.unlink()
    path.mkdir()  # the state can no longer be written over it
    await consumer.send(Fin(first.id))
    await trio.sleep(2 * PERSIST_INTERVAL)
    assert addresses.broker.health != "OK"
    path.rmdir()  # the file system works again; no command follows
    await trio.sleep(3 * PERSIST_INTERVAL)
    assert addresses.broker.health == "OK"
    saved = load_state(path)
    assert saved is not None
    assert saved.confirmed_id >= 1  # the FIN made during the fault is on disk
