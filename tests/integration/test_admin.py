"""Pause, empty, delete and ephemeral bounds, driven through the live broker over sockets.

The admin calls go straight to ``BoundAddresses.broker`` (the HTTP API comes later);
what the consumers see is checked on their real connections. Semantics: spec
semantics.md §3, §4 and §10.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio

from trionsq.protocol import Fin, Mpub, Pub, Rdy

from .raw import LOCAL, bodies, next_error, next_message, publish, quiet, start

if TYPE_CHECKING:
    import trio.testing

    from trionsq.broker.channel import Channel
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients


def only_channel(addresses: BoundAddresses, topic: str, channel: str) -> Channel:
    (found,) = addresses.broker.find_channel(topic, channel)
    return found


async def test_topic_pause_holds_new_messages_until_unpaused(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    broker = addresses.broker
    consumers = [
        await clients.subscribe(addresses.tcp, "p", name, rdy=10) for name in ("one", "two")
    ]
    producer = await clients.connect(addresses.tcp)
    assert broker.set_topic_paused("p", True)
    await publish(producer, Pub("p", b"a"), Mpub("p", (b"b", b"c")))  # publishing still works
    for consumer in consumers:
        assert bodies(await quiet(consumer, 5)) == []
    assert broker.set_topic_paused("p", False)
    for consumer in consumers:
        assert [(await next_message(consumer)).body for _ in range(3)] == [b"a", b"b", b"c"]
    assert not broker.set_topic_paused("missing", True)


async def test_topic_pause_keeps_what_channels_already_hold(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Pausing stops the topic's fan-out; what reached a channel before is the channel's."""
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    consumer = await clients.subscribe(addresses.tcp, "p", "c")  # RDY 0: it holds nothing
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("p", (b"before", b"pause")))
    addresses.broker.set_topic_paused("p", True)
    await publish(producer, Pub("p", b"during"))
    await consumer.send(Rdy(10))
    assert bodies(await quiet(consumer, 5)) == [b"before", b"pause"]
    addresses.broker.set_topic_paused("p", False)
    assert (await next_message(consumer)).body == b"during"


async def test_channel_pause_stops_one_channel_and_in_flight_can_still_finish(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    broker = addresses.broker
    paused = await clients.subscribe(addresses.tcp, "p", "paused", rdy=10)
    running = await clients.subscribe(addresses.tcp, "p", "running", rdy=10)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("p", b"first"))
    held = await next_message(paused)
    assert (await next_message(running)).body == b"first"
    assert broker.set_channel_paused("p", "paused", True)
    await publish(producer, Mpub("p", (b"second", b"third")))
    assert [(await next_message(running)).body for _ in range(2)] == [b"second", b"third"]
    await paused.send(Fin(held.id))  # FIN still works on a paused channel: no error back
    assert bodies(await quiet(paused, 5)) == []
    channel = only_channel(addresses, "p", "paused")
    assert (channel.depth, len(channel.in_flight), channel.statistics().paused) == (2, 0, True)
    assert broker.set_channel_paused("p", "paused", False)
    assert [(await next_message(paused)).body for _ in range(2)] == [b"second", b"third"]
    assert not broker.set_channel_paused("p", "missing", True)


async def test_empty_channel_drops_queued_and_in_flight(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    consumer = await clients.subscribe(addresses.tcp, "e", "c", rdy=2)
    other = await clients.subscribe(addresses.tcp, "e", "other")
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("e", tuple(b"%d" % i for i in range(5))))
    delivered = [await next_message(consumer) for _ in range(2)]
    channel = only_channel(addresses, "e", "c")
    assert (channel.depth, len(channel.in_flight)) == (3, 2)
    assert addresses.broker.empty_channel("e", "c")
    assert (channel.depth, len(channel.in_flight), len(channel.deferred)) == (0, 0, 0)
    await consumer.send(Fin(delivered[0].id))
    error = await next_error(consumer)
    assert not error.fatal
    assert (
        error.error.text == f"E_FIN_FAILED FIN {delivered[0].id.decode()} failed ID not in flight"
    )
    assert bodies(await quiet(consumer, 5)) == []  # the queued three are gone too
    await publish(producer, Pub("e", b"new"))  # and the RDY window is free again
    assert (await next_message(consumer)).body == b"new"
    await other.send(Rdy(10))  # another channel of the topic keeps everything
    assert len(bodies(await quiet(other, 2))) == 6
    assert not addresses.broker.empty_channel("e", "missing")


async def test_empty_topic_drops_what_no_channel_has_taken(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("e", (b"old", b"older")))
    assert addresses.broker.empty_topic("e")
    consumer = await clients.subscribe(addresses.tcp, "e", "c", rdy=10)
    assert bodies(await quiet(consumer, 2)) == []
    await publish(producer, Pub("e", b"new"))
    assert (await next_message(consumer)).body == b"new"
    await consumer.send(Rdy(0))
    await publish(producer, Pub("e", b"kept"))
    assert addresses.broker.empty_topic("e")  # fanned out already: the channel keeps it
    await consumer.send(Rdy(10))
    assert (await next_message(consumer)).body == b"kept"
    assert not addresses.broker.empty_topic("missing")


async def test_delete_channel_closes_its_consumers_and_drops_its_messages(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    broker = addresses.broker
    doomed = [await clients.subscribe(addresses.tcp, "d", "c", rdy=1) for _ in range(2)]
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("d", (b"1", b"2", b"3")))
    assert [(await next_message(c)).body for c in doomed] in ([b"1", b"2"], [b"2", b"1"])
    assert broker.delete_channel("d", 0, "c") is not None
    for consumer in doomed:
        await consumer.wait_closed()  # closed without an error frame
        assert bodies(consumer.frames) == []
    assert broker.find_channel("d", "c") == []
    again = await clients.subscribe(addresses.tcp, "d", "c", rdy=10)  # a new, empty channel
    assert bodies(await quiet(again, 2)) == []
    await publish(producer, Pub("d", b"4"))
    assert (await next_message(again)).body == b"4"


async def test_delete_topic_closes_every_consumer_and_starts_over(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery)
    broker = addresses.broker
    consumers = [await clients.subscribe(addresses.tcp, "d", name) for name in ("a", "b")]
    bystander = await clients.subscribe(addresses.tcp, "kept", "c", rdy=10)
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("d", (b"old", b"older")))
    assert broker.delete_topic("d")
    for consumer in consumers:
        await consumer.wait_closed()
    assert "d" not in broker.topics
    assert not broker.delete_topic("d")
    await publish(producer, Pub("d", b"new"), Pub("kept", b"still served"))
    assert (await next_message(bystander)).body == b"still served"
    fresh = await clients.subscribe(addresses.tcp, "d", "a", rdy=10)
    assert bodies(await quiet(fresh, 2)) == [b"new"]  # a new topic: nothing from before


async def test_ephemeral_channel_keeps_at_most_mem_queue_size(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Past mem-queue-size an ephemeral queue drops new messages (nsqd's discard backend)."""
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery, attrs.evolve(LOCAL, mem_queue_size=5))
    consumer = await clients.subscribe(addresses.tcp, "e#ephemeral", "c#ephemeral")
    producer = await clients.connect(addresses.tcp)
    sent = [b"%d" % i for i in range(20)]
    await publish(producer, Mpub("e#ephemeral", tuple(sent[:12])))  # reported as success
    await publish(producer, *(Pub("e#ephemeral", body) for body in sent[12:]))
    assert only_channel(addresses, "e#ephemeral", "c#ephemeral").depth == 5
    await consumer.send(Rdy(100))
    received = [await next_message(consumer) for _ in range(5)]
    await consumer.send(*(Fin(m.id) for m in received))
    assert [m.body for m in received] == sent[:5]  # the oldest stay, the newest are dropped
    assert bodies(await quiet(consumer, 2)) == []
    await publish(producer, Mpub("e#ephemeral", (b"room", b"again")))  # a bound, not a total
    assert bodies(await quiet(consumer, 2)) == [b"room", b"again"]


async def test_ephemeral_topic_without_channel_keeps_at_most_mem_queue_size(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery, attrs.evolve(LOCAL, mem_queue_size=5))
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Mpub("t#ephemeral", tuple(b"%d" % i for i in range(9))))
    consumer = await clients.subscribe(addresses.tcp, "t#ephemeral", "c", rdy=100)
    assert bodies(await quiet(consumer, 2)) == [b"%d" % i for i in range(5)]


async def test_ephemeral_channel_on_a_durable_topic_is_bounded_and_others_lose_nothing(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Each ephemeral channel has its own bound, like nsqd's per-channel memory queue."""
    autojump_clock.autojump_threshold = 0.1
    addresses = await start(nursery, attrs.evolve(LOCAL, mem_queue_size=5))
    tail = await clients.subscribe(addresses.tcp, "keep", "tail#ephemeral")
    durable = await clients.subscribe(addresses.tcp, "keep", "archive")
    producer = await clients.connect(addresses.tcp)
    sent = [b"%d" % i for i in range(20)]
    await publish(producer, Mpub("keep", tuple(sent)))
    assert only_channel(addresses, "keep", "tail#ephemeral").depth == 5
    assert only_channel(addresses, "keep", "archive").depth == 20
    await tail.send(Rdy(100))
    await durable.send(Rdy(100))
    assert bodies(await quiet(tail, 2)) == sent[:5]
    assert bodies(await quiet(durable, 2)) == sent
