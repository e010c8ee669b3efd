"""Consumer groups at a takeover (issue 30, items 6, 8 and 9): a partition whose
member died goes to another with its unfinished messages first; a member that stops
answering is timed out after its group session timeout and fenced; the client's
ordered mode knows a takeover from a skip. docs/extensions.md, "Consumer groups".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq.client import ConsumerSettings, open_consumer
from trionsq.protocol import IdentifyRequest, Nop, Pub, Rdy, Sub
from trionsq.protocol.client import MessageFrame, Response, encode_identify
from trionsq.testing import ProtocolClient

from .raw import LOCAL, message_by, next_frame, ok, publish
from .test_consumer_groups import DELAY, PARTITIONS, join, started

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pytest

    from trionsq.protocol.message import Message

    from .raw import Clients


def newer_before_older(order: Sequence[int]) -> int:
    """How many messages came before an older one of their partition."""
    return sum(1 for i, seen in enumerate(order) if any(later < seen for later in order[i + 1 :]))


async def test_a_new_owner_gets_the_partition_s_put_back_messages_first(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The dead member's unfinished messages go out before the partition's newer
    ones (nsqd puts a redelivery behind what waits: up to 10,000 newer messages)."""
    addresses = await started(nursery, autojump_clock)
    owner = await join(clients, addresses, "a", rdy=5)
    await owner.collect(DELAY + 1)  # alone: it owns every partition
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("g", b"%d" % i, 0) for i in range(30)))
    await owner.collect(DELAY)
    assert [int(m.body) for m in owner.received[0]] == list(range(5))  # 25 more wait
    heir = await join(clients, addresses, "b", rdy=100)
    await heir.collect(DELAY + 1)
    assert heir.received[0] == []  # "a" keeps partition 0
    for link in owner.links.values():  # "a" dies holding five
        await trio.aclose_forcefully(link.stream)
    await heir.collect(DELAY + 1)
    order = [int(m.body) for m in heir.received[0]]
    assert sorted(order) == list(range(30))
    assert newer_before_older(order) == 0, order
    assert [m.attempts for m in heir.received[0][:5]] == [2] * 5


async def answering(link: ProtocolClient, until: float, got: list[tuple[float, Message]]) -> None:
    """A live member's connection: answer heartbeats, note each message and when."""
    while (message := await message_by(link, until)) is not None:
        got.append((trio.current_time(), message))


async def test_a_member_that_stops_answering_is_fenced_after_its_session_timeout(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """A hung member (nothing read from it for IDENTIFY ``group_session_timeout``,
    10 s by default) has its connections closed, so it can finish nothing late, and
    its partitions move with the messages it held; a live member that only answers
    heartbeats (every third of its session) keeps its own."""
    addresses = await started(nursery, autojump_clock)
    hung = await join(clients, addresses, "a", rdy=5, identify=IdentifyRequest(group_member="a"))
    silent_from = trio.current_time()  # "a" sends nothing from now on
    live = await join(clients, addresses, "b", rdy=50, identify=IdentifyRequest(group_member="b"))
    producer = await clients.connect(addresses.tcp)
    await publish(producer, *(Pub("g", b"%d" % i, 0) for i in range(20)))
    held = await message_by(hung.links[0], trio.current_time() + DELAY + 1)
    assert held is not None  # "a" owns partition 0 and holds five of it
    got: list[tuple[float, Message]] = []
    closed_at: list[float] = []

    async def closed(link: ProtocolClient) -> None:
        await link.wait_closed()
        closed_at.append(trio.current_time())

    end = silent_from + 20
    async with trio.open_nursery() as watchers:
        for partition, link in live.links.items():
            watchers.start_soon(answering, link, end, got if partition == 0 else [])
        for link in hung.links.values():
            watchers.start_soon(closed, link)
    assert len(closed_at) == PARTITIONS  # fenced: every connection of "a", at its timeout
    assert silent_from + 10 <= min(closed_at) <= max(closed_at) <= silent_from + 10.1
    assert [int(m.body) for _, m in got] == list(range(20))  # the held five first
    assert [m.attempts for _, m in got[:5]] == [2] * 5
    moved_at = got[0][0] - silent_from
    assert moved_at <= 10 + DELAY + LOCAL.output_buffer_timeout + 0.1
    for link in live.links.values():  # "b" idled 20 s answering heartbeats: still there
        await link.send(Nop())
        assert await message_by(link, trio.current_time() + 1) is None


async def test_a_member_that_resumes_after_its_session_drops_what_it_held(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """trionsq.client: a process stopped past its session timeout (the clock jumps
    while nothing runs) hands none of the messages it held to the application when
    it resumes (the broker gave them to the partition's next owner: here itself,
    again, once it has reconnected), and counts them."""
    addresses = await started(nursery, autojump_clock, delay=0.0)
    host, port = addresses.tcp
    settings = ConsumerSettings(group_member="solo", group_session_timeout=3, max_in_flight=5)
    async with open_consumer(
        "g", "c", f"{host}:{port}", partitions=[0], settings=settings
    ) as consumer:
        producer = await ProtocolClient.connect(addresses.tcp)
        await publish(producer, *(Pub("g", b"%d" % i, 0) for i in range(5)))
        first = await consumer.__anext__()
        first.finish()
        await trio.testing.wait_all_tasks_blocked()  # the other four wait in the client
        autojump_clock.jump(4)  # stopped for longer than the session: nothing ran
        again = await consumer.__anext__()
        assert (again.body, again.attempts) == (b"1", 2)  # redelivered, not the held one
        assert consumer.fenced == 4
        await producer.aclose()


async def test_the_ordered_client_knows_a_takeover_from_a_skip(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """trionsq.client in ordered mode checks that each partition's offsets follow on.
    A partition that comes back to a member after another member read some of it
    starts where the channel stands (the broker says ``_group_owner_`` first): not a
    skip. Messages an operator emptied while the member owned the partition are."""
    addresses = await started(nursery, autojump_clock, delay=0.0)
    host, port = addresses.tcp
    producer = await ProtocolClient.connect(addresses.tcp)
    handled: dict[str, list[bytes]] = {}

    async def member(name: str, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            settings = ConsumerSettings(group_member=name, ordered=True)
            async with open_consumer(
                "g", "c", f"{host}:{port}", partitions=range(PARTITIONS), settings=settings
            ) as consumer:
                task_status.started(scope)
                async for message in consumer:
                    handled.setdefault(name, []).append(message.body)
                    message.finish()

    async def publish_to(partition: int, *bodies: bytes) -> None:
        await publish(producer, *(Pub("g", body, partition) for body in bodies))
        await trio.sleep(1)

    with caplog.at_level(logging.WARNING, logger="trionsq.client"):
        await nursery.start(member, "one")  # alone: every partition
        await publish_to(3, b"a", b"b")
        second = await nursery.start(member, "two")  # takes 3, 4 and 5
        await publish_to(3, b"c", b"d")
        second.cancel()  # partition 3 goes back to "one", past what "two" read
        await trio.sleep(1)
        await publish_to(3, b"e", b"f")
        assert handled == {"one": [b"a", b"b", b"e", b"f"], "two": [b"c", b"d"]}
        assert not [r for r in caplog.records if "offset" in r.getMessage()]
        await publish_to(0, b"x")
        assert addresses.broker.set_channel_paused("g", "c", True)  # "one" owns partition 0
        await publish_to(0, b"g", b"h")
        assert addresses.broker.empty_channel("g", "c")  # nobody gets these two
        assert addresses.broker.set_channel_paused("g", "c", False)
        await publish_to(0, b"i")
    await producer.aclose()
    assert handled["one"][-1] == b"i"
    skips = [r.getMessage() for r in caplog.records if "offset" in r.getMessage()]
    assert len(skips) == 1
    assert "partition 0: skipped from offset" in skips[0]


async def test_group_notices_come_only_to_members_that_asked_after_the_sub_s_ok(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses = await started(nursery, autojump_clock, delay=0.0)
    asked = await clients.connect(addresses.tcp)
    identify = IdentifyRequest(group_member="a", group_notices=True, group_session_timeout=60_000)
    await asked.stream.send_all(encode_identify(identify))
    assert ok(await next_frame(asked))
    await asked.send(Sub("g", "c", 0))
    assert ok(await next_frame(asked))  # then: it owns partition 0 (the first member)
    notice = await next_frame(asked)
    assert isinstance(notice, Response)
    assert notice.is_group_owner
    plain = await clients.connect(addresses.tcp)
    await plain.stream.send_all(encode_identify(IdentifyRequest(group_member="a")))
    assert ok(await next_frame(plain))
    await plain.send(Sub("g", "c", 1), Rdy(1))
    assert ok(await next_frame(plain))
    producer = await clients.connect(addresses.tcp)
    await publish(producer, Pub("g", b"m", 1))
    assert isinstance(await next_frame(plain), MessageFrame)  # no notice before it
