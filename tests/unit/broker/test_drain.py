"""Stopping with a grace period: deliveries stop at once, the broker waits for what
consumers hold (an event per channel, no polling) and no longer than the grace."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq.broker.broker import Broker
from trionsq.broker.channel import Consumer, Delivery
from trionsq.broker.driver import Outbox
from trionsq.config import NsqdConfig
from trionsq.dispatch.router import ChannelRunner

if TYPE_CHECKING:
    from trionsq.broker.subscription import Subscription


class Inbox(Outbox):
    """What the router pushed to one consumer."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def push(self, deliveries: list[Delivery]) -> None:
        self.received.extend(delivery.record.internal_id for delivery in deliveries)

    def close(self) -> None:
        pass

    def topic_now_ext(self) -> None:
        pass

    def leadership_lost(self) -> None:
        pass

    def group_owner(self) -> None:
        pass


async def holding_broker(nursery: trio.Nursery, inbox: Inbox) -> tuple[Broker, Subscription]:
    """A broker whose one consumer holds two messages in flight (RDY 2)."""
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    subscription = await broker.subscribe("t", "c", Consumer(1, msg_timeout=60.0), inbox)
    subscription.ready(2)
    broker.publish("t", [b"a", b"b", b"c"], 0)
    await trio.testing.wait_all_tasks_blocked()
    assert len(inbox.received) == 2
    return broker, subscription


async def test_drain_waits_for_the_fins_and_delivers_nothing_new(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    inbox = Inbox()
    broker, subscription = await holding_broker(nursery, inbox)
    left: list[int] = []
    finished_at: list[float] = []

    async def stop() -> None:
        left.append(await broker.drain(30.0))
        finished_at.append(trio.current_time())

    start = trio.current_time()
    nursery.start_soon(stop)
    await trio.sleep(1)
    subscription.finish(inbox.received[0])
    await trio.sleep(1)
    assert not left  # one still held
    assert len(inbox.received) == 2  # the freed slot got nothing new (3 published)
    subscription.finish(inbox.received[1])
    await trio.testing.wait_all_tasks_blocked()
    assert left == [0]
    assert finished_at == [start + 2]  # at the last FIN, not at the grace
    assert len(inbox.received) == 2


async def test_drain_gives_up_at_the_grace_and_counts_what_is_held(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    inbox = Inbox()
    broker, _ = await holding_broker(nursery, inbox)
    start = trio.current_time()
    assert await broker.drain(5.0) == 2
    assert trio.current_time() == start + 5


async def test_drain_with_nothing_in_flight_returns_at_once(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    await broker.subscribe("t", "c", Consumer(1, msg_timeout=60.0), Inbox())
    with trio.fail_after(1):
        assert await broker.drain(30.0) == 0
