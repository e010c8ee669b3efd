"""Pull consumption over real sockets (issue 20, TubeMQ's pull model over NSQ's
protocol): ``PULL n`` asks for up to n more messages, once; FINs do not renew it as
they renew RDY's window, and RDY goes back to pushing. docs/extensions.md, "Pull
consumption"."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

from trionsq.client import ConsumerSettings, open_consumer
from trionsq.protocol import Fin, Pub, Pull, Rdy, Sub
from trionsq.protocol.client import MessageFrame
from trionsq.testing import ProtocolClient

from .raw import LOCAL, bodies, next_error, next_frame, ok, publish, quiet, start, stats_channel

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from trionsq.client import Consumer
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients


async def subscribed(
    clients: Clients, nursery: trio.Nursery, clock: trio.testing.MockClock, count: int
) -> tuple[BoundAddresses, ProtocolClient]:
    clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"m%d" % i) for i in range(count)))
    consumer = await clients.connect(addresses.tcp)
    await consumer.send(Sub("t", "c"))
    assert ok(await next_frame(consumer))
    return addresses, consumer


async def ready_count(addresses: BoundAddresses) -> int:
    clients = (await stats_channel(addresses, "t"))["clients"]
    assert isinstance(clients, list)
    count = clients[0]["ready_count"]
    assert isinstance(count, int)
    return count


async def test_pull_sends_what_was_asked_once_and_fins_do_not_renew_it(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, consumer = await subscribed(clients, nursery, autojump_clock, 10)
    await consumer.send(Pull(3))
    first = await quiet(consumer, 1)
    assert bodies(first) == [b"m0", b"m1", b"m2"]
    await consumer.send(*(Fin(f.message.id) for f in first if isinstance(f, MessageFrame)))
    assert await quiet(consumer, 2) == []  # finished, and nothing more was asked for
    assert await ready_count(addresses) == 0
    await consumer.send(Pull(2), Pull(2))  # credits add up
    assert bodies(await quiet(consumer, 1)) == [b"m3", b"m4", b"m5", b"m6"]
    await consumer.send(Rdy(10))  # back to pushing: the rest, in its window
    assert bodies(await quiet(consumer, 1)) == [b"m7", b"m8", b"m9"]


async def test_a_pull_waits_for_messages_published_later(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, consumer = await subscribed(clients, nursery, autojump_clock, 0)
    await consumer.send(Pull(2))
    await trio.sleep(1)
    assert await ready_count(addresses) == 2
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("t", b"late-1"), Pub("t", b"late-2"), Pub("t", b"late-3"))
    assert bodies(await quiet(consumer, 1)) == [b"late-1", b"late-2"]


async def test_pull_refusals_are_nsqd_style(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    early = await clients.connect(addresses.tcp)
    await early.stream.send_all(b"PULL 1\n")
    assert (await next_error(early)).error.text == "E_INVALID cannot PULL in current state"
    for wire, text in (
        (b"PULL\n", "E_INVALID PULL insufficient number of params"),
        (b"PULL 2501\n", "E_INVALID PULL count 2501 out of range 0-2500"),
    ):
        consumer = await clients.connect(addresses.tcp)
        await consumer.send(Sub("t", "c"))
        assert ok(await next_frame(consumer))
        await consumer.stream.send_all(wire)
        assert (await next_error(consumer)).error.text == text


async def test_the_trionsq_client_fetches_from_the_partitions_its_group_member_owns(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """TubeMQ's "fetch N from my partitions": two pulling members of a group over
    four partitions each fetch only their own."""
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery, attrs.evolve(LOCAL, group_rebalance_delay=0.0))
    addresses.broker.topic("t", partitions=4)
    producer = await ProtocolClient.connect(addresses.tcp)
    await publish(producer, *(Pub("t", b"p%d-%d" % (p, i), p) for p in range(4) for i in range(5)))
    got: dict[str, list[bytes]] = {}
    async with pulling(addresses, "a") as a, pulling(addresses, "b") as b:
        for name, consumer in (("a", a), ("b", b)):
            first = await consumer.fetch(4, wait=1)
            assert len(first) == 4
            rest = await consumer.fetch(10, wait=1)
            got[name] = [m.body for m in first + rest]
            for message in first + rest:
                message.finish()
            assert await consumer.fetch(1, wait=1) == []
        with pytest.raises(RuntimeError, match="use fetch"):
            await a.handle(handler)
    assert sorted(got["a"]) == sorted(b"p%d-%d" % (p, i) for p in (0, 1) for i in range(5))
    assert sorted(got["b"]) == sorted(b"p%d-%d" % (p, i) for p in (2, 3) for i in range(5))
    await producer.stream.aclose()


def pulling(addresses: BoundAddresses, member: str) -> AbstractAsyncContextManager[Consumer]:
    host, port = addresses.tcp
    settings = ConsumerSettings(pull=True, group_member=member)
    return open_consumer("t", "c", f"{host}:{port}", partitions=range(4), settings=settings)


async def handler(message: object) -> None:
    raise AssertionError(f"a pulling consumer ran a handler on {message}")


async def test_fetch_needs_a_pulling_consumer(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    host, port = addresses.tcp
    async with open_consumer("t", "c", f"{host}:{port}") as consumer:
        with pytest.raises(RuntimeError, match="pull=True"):
            await consumer.fetch(1)
