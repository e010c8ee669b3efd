"""One registry of who gets what (issue 33): a consumer's outbox lives on its
``Consumer`` in ``Channel.consumers``, and the router, a channel delete, an ext
upgrade, a group fence and a rebalance all find it there; nothing beside the channel
is kept in step by hand."""

from __future__ import annotations

import trio
import trio.testing

from trionsq.broker.broker import Broker
from trionsq.broker.channel import Consumer, Delivery
from trionsq.config import NsqdConfig
from trionsq.dispatch.router import ChannelRunner


class Inbox:
    """One consumer's connection, as the router and the broker see it."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.told: list[str] = []

    def push(self, deliveries: list[Delivery]) -> None:
        self.received.extend(delivery.record.internal_id for delivery in deliveries)

    def close(self) -> None:
        self.told.append("close")

    def topic_now_ext(self) -> None:
        self.told.append("ext")

    def leadership_lost(self) -> None:
        self.told.append("not leader")

    def group_owner(self) -> None:
        self.told.append("owner")


async def subscribed(
    nursery: trio.Nursery, *members: str | None
) -> tuple[Broker, list[Inbox], list[Consumer]]:
    """A broker with one consumer of t/c per member given (None: no group), RDY 5."""
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    inboxes = [Inbox() for _ in members]
    consumers = [
        Consumer(client_id, msg_timeout=60.0, member=member)
        for client_id, member in enumerate(members, start=1)
    ]
    for consumer, inbox in zip(consumers, inboxes, strict=True):
        subscription = await broker.subscribe("t", "c", consumer, inbox)
        subscription.ready(5)
    return broker, inboxes, consumers


async def test_the_router_finds_each_outbox_on_the_channel_s_consumer(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    broker, inboxes, consumers = await subscribed(nursery, None, None)
    runner = broker.driver("t", 0, "c")
    assert runner is not None
    assert not hasattr(runner, "outboxes")  # no second registry to keep in step
    assert [c.outbox for c in runner.channel.consumers.values()] == inboxes
    broker.unsubscribe(runner, consumers[0].client_id)
    assert consumers[0].client_id not in runner.channel.consumers
    broker.publish("t", [b"a", b"b", b"c"], 0)
    await trio.testing.wait_all_tasks_blocked()
    assert (inboxes[0].received, inboxes[1].received) == ([], [1, 2, 3])


async def test_a_channel_delete_and_an_ext_upgrade_reach_every_outbox(
    nursery: trio.Nursery,
) -> None:
    broker, inboxes, _ = await subscribed(nursery, None, None)
    broker.topic("t", ext=True)
    assert [inbox.told for inbox in inboxes] == [["ext"], ["ext"]]
    broker.delete_channel("t", 0, "c")
    assert [inbox.told for inbox in inboxes] == [["ext", "close"], ["ext", "close"]]


async def test_a_rebalance_and_a_fence_reach_only_their_member_s_connections(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    members = ("m1", "m2", "m1")
    broker, inboxes, _ = await subscribed(nursery, *members)
    await trio.sleep(broker.config.group_rebalance_delay + 1)  # dealt: the owner is told
    owner = broker.topics["t"].partitions[0].channels["c"].group.owner
    assert owner in members
    told = [["owner"] if member == owner else [] for member in members]
    assert [inbox.told for inbox in inboxes] == told
    broker.group_coordinator.fence("t", "c", "m1")
    closed = [["close"] if member == "m1" else [] for member in members]
    assert [inbox.told for inbox in inboxes] == [a + b for a, b in zip(told, closed, strict=True)]
