"""Redelivery order over real sockets (design §6, issue 13): a message that times out,
or is REQ'd with no delay, goes behind the messages already waiting in the channel, as
in nsqd; a client suite checks this with RDY 1 and two messages."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

import trio
import trio.testing
from ansq import ConnectionFeatures, ConnectionOptions, create_reader

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import MAGIC_V2, Fin, IdentifyRequest, Mpub, Rdy, Req, Sub
from trionsq.protocol.client import ClientConnection, Frame, MessageFrame, Response, encode_command

from .raw import bodies, next_message, publish, quiet, start

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients


async def ansq_consume(
    address: str, topic: str, *, deliveries: int, req_first: bool
) -> list[tuple[bytes, int]]:
    """ansq at RDY 1 (its default) with msg_timeout 1 s: leave the first message in
    flight (or REQ it with no delay), FIN every later one; the bodies and attempts seen."""
    options = ConnectionOptions(features=ConnectionFeatures(msg_timeout=1000))
    reader = await create_reader(
        topic=topic, channel="workers", nsqd_tcp_addresses=[address], connection_options=options
    )
    seen: list[tuple[bytes, int]] = []
    try:
        first = await asyncio.wait_for(reader.wait_for_message(), 10)
        assert first is not None
        seen.append((first.body, first.attempts))
        if req_first:
            await first.req(0)
        while len(seen) < deliveries:
            message = await asyncio.wait_for(reader.wait_for_message(), 10)
            assert message is not None
            seen.append((message.body, message.attempts))
            await message.fin()
    finally:
        await reader.close()
    return seen


async def run_ansq(
    addresses: BoundAddresses, topic: str, *, deliveries: int, req_first: bool
) -> list[tuple[bytes, int]]:
    host, port = addresses.tcp
    scenario = ansq_consume(f"{host}:{port}", topic, deliveries=deliveries, req_first=req_first)
    return await trio.to_thread.run_sync(functools.partial(asyncio.run, scenario))


async def test_ansq_a_timed_out_message_comes_back_after_the_waiting_one(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("timeouts", (b"first", b"second")))
    seen = await run_ansq(addresses, "timeouts", deliveries=3, req_first=False)
    assert seen == [(b"first", 1), (b"second", 1), (b"first", 2)]
    (channel,) = addresses.broker.find_channel("timeouts", "workers")
    assert (channel.timeout_count, channel.depth, len(channel.in_flight)) == (1, 0, 0)


async def test_ansq_req_without_delay_goes_behind_the_waiting_messages(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("requeues", (b"first", b"second", b"third")))
    seen = await run_ansq(addresses, "requeues", deliveries=4, req_first=True)
    assert seen == [(b"first", 1), (b"second", 1), (b"third", 1), (b"first", 2)]
    (channel,) = addresses.broker.find_channel("requeues", "workers")
    assert (channel.requeue_count, channel.depth, len(channel.in_flight)) == (1, 0, 0)


async def test_timeout_and_req_order_on_the_virtual_clock(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The same rule with exact times: the timeout fires at msg_timeout, the waiting
    message goes out then, and something published after a REQ goes behind it."""
    autojump_clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("q", (b"a", b"b")))
    consumer = await clients.subscribe(
        addresses.tcp, "q", "c", rdy=1, identify=IdentifyRequest(msg_timeout=5000)
    )
    a = await next_message(consumer)
    t0 = trio.current_time()
    b = await next_message(consumer)  # a timed out: b was waiting, so b first
    assert 4.9 <= trio.current_time() - t0 <= 5.1
    assert (a.body, a.attempts, b.body, b.attempts) == (b"a", 1, b"b", 1)
    await consumer.send(Req(b.id, 0))
    await publish(producer, Mpub("q", (b"c",)))  # published after the REQ: behind b
    got = [await next_message(consumer)]
    for _ in range(2):
        await consumer.send(Fin(got[-1].id))
        got.append(await next_message(consumer))
    await consumer.send(Fin(got[-1].id))
    assert [(m.body, m.attempts) for m in got] == [(b"a", 2), (b"b", 2), (b"c", 1)]
    assert await quiet(consumer, 0.5) == []


async def test_a_deep_backlog_on_disk_lets_one_window_go_first(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """30,000 messages on disk (restarted, so cold): a REQ 0 at RDY 100 comes back
    behind the next 10,000 unread records (REDELIVERY_WINDOW), not behind all of them."""
    config = NsqdConfig.loopback(data_path=str(tmp_path), mem_queue_size=100)
    total = 30_000
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        await publish_numbered(addresses.tcp, "deep", total)
        first.cancel_scope.cancel()
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    order: list[tuple[int, int]] = []
    with trio.fail_after(60):
        stream = await trio.open_tcp_stream(*again.tcp)
        async with stream:
            codec = ClientConnection()
            await stream.send_all(MAGIC_V2 + encode_command(Sub("deep", "c")) + b"RDY 100\n")
            while len(order) < 10_102:
                answers = []
                for frame in codec.receive_data(await stream.receive_some(65536)):
                    if not isinstance(frame, MessageFrame):
                        continue
                    message = frame.message
                    order.append((int(message.body), message.attempts))
                    command = Req(message.id, 0) if order == [(0, 1)] else Fin(message.id)
                    answers.append(encode_command(command))
                await stream.send_all(b"".join(answers))
    # the REQ reached the broker with 1..99 in flight and ids 1..100 read: the records
    # 100..10099 were the window waiting ahead of it, the rest came behind
    expected = [(0, 1)] + [(n, 1) for n in range(1, 10_100)] + [(0, 2), (10_100, 1)]
    assert order[:10_102] == expected


async def test_a_put_back_message_survives_a_restart(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Waiting behind others is not finished: the saved cursor keeps it, so a restart
    delivers every unfinished message once and loses none."""
    autojump_clock.autojump_threshold = 0.1  # real sockets and file threads
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    sent = [b"m%d" % i for i in range(5)]
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        producer = await clients.connect(addresses.tcp)
        await publish(producer, Mpub("kept", tuple(sent)))
        consumer = await clients.subscribe(addresses.tcp, "kept", "c", rdy=1)
        m0 = await next_message(consumer)
        await consumer.send(Req(m0.id, 0))
        m1 = await next_message(consumer)  # m0 waits behind m1..m4
        await consumer.send(Fin(m1.id))
        assert (await next_message(consumer)).body == b"m2"  # in flight at the stop
        first.cancel_scope.cancel()  # a graceful stop: the cursor is saved
    await clients.close_all()
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    (channel,) = again.broker.find_channel("kept", "c")
    assert channel.depth == 4  # all but m1
    reader = await clients.connect(again.tcp)
    await reader.send(Sub("kept", "c"), Rdy(10))
    assert bodies(await quiet(reader, 2)) == [b"m0", b"m2", b"m3", b"m4"]


async def publish_numbered(address: tuple[str, int], topic: str, total: int) -> None:
    """MPUBs of 1,000 bodies "0".."total-1", each answered before the next."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        codec = ClientConnection()
        await stream.send_all(MAGIC_V2)
        for start_at in range(0, total, 1000):
            batch = tuple(b"%d" % i for i in range(start_at, start_at + 1000))
            await stream.send_all(encode_command(Mpub(topic, batch)))
            frames: list[Frame] = []
            while not frames:
                frames = codec.receive_data(await stream.receive_some(4096))
            assert isinstance(frames[0], Response)
            assert frames[0].is_ok
