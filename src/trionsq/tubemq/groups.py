"""The TubeMQ face's hold on the broker's consumer groups, kept to a few calls.

A TubeMQ group is a channel, and its consumers are members of that channel's group
(broker/groups.py): the same engine deals a topic's partitions whether the members
speak NSQ (IDENTIFY ``group_member``) or TubeMQ, so the two may share a group. The
engine changes on its own schedule (its deal, its timeouts), so this module is the
only place that calls it: a consumer's seat on each partition is a standby
subscription of the member (:meth:`GroupAdapter.join`), and who owns a partition is
read back from the channel (:meth:`GroupAdapter.owner`). Everything else goes
through the :class:`~trionsq.broker.subscription.Subscription` a seat holds.

A :class:`Seat` is also the seat's :class:`~trionsq.broker.driver.Outbox`: the
channel's router pushes the messages a pull asked for into it, and it hands them to
the waiting pull (:mod:`.pulls`), with no await on the way.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from ..broker.consumers import Consumer, Delivery
from ..broker.statistics import ClientStatistics
from ..broker.subscription import Subscription

if TYPE_CHECKING:
    from ..broker.broker import Broker
    from ..broker.channel import Channel

__all__ = ["GroupAdapter", "Seat"]


class GroupAdapter:
    """The few broker calls the TubeMQ services make about groups and channels."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def topic_partitions(self, topic: str) -> int | None:
        """How many partitions the topic has (None: no such topic)."""
        found = self._broker.topics.get(topic)
        return None if found is None else len(found.partitions)

    def group_exists(self, topic: str, group: str) -> bool:
        """The topic has the channel already (a group that consumed before)."""
        return bool(self._broker.find_channel(topic, group))

    async def join(self, seat: Seat, max_msg_timeout: float) -> None:
        """Seat a member on one partition: a standby subscription of its group's channel
        (created as needed), which the group's next deal counts."""
        consumer = Consumer(seat.client_id, max_msg_timeout, member=seat.member)
        seat.subscription = await self._broker.subscribe(
            seat.topic, seat.group, consumer, seat, partition=seat.partition
        )

    def owner(self, seat: Seat) -> str:
        """The member the group's last deal gave the seat's partition ("" : none yet)."""
        subscription = seat.subscription
        return subscription.channel.group.owner if subscription is not None else ""


@attrs.define(eq=False)
class Seat:
    """A TubeMQ consumer's place on one partition of its group: the standby
    subscription, what the router delivered that no pull has taken yet, and the pack
    the consumer holds unconfirmed. Listed in /stats as a client of its channel
    (``version: tubemq``), as an NSQ group member's connection to a partition is."""

    client_id: int
    """The broker's client id of this seat (/stats, the channel's consumer key)."""
    consumer_id: str
    group: str
    topic: str
    partition: int
    host: str = attrs.field(kw_only=True)
    remote_address: str = attrs.field(kw_only=True)
    subscription: Subscription | None = attrs.field(init=False, default=None)
    buffered: deque[Delivery] = attrs.field(init=False, factory=deque)
    """Delivered by the router for a pull, not sent yet."""
    pack: list[int] = attrs.field(init=False, factory=list)
    """Ids sent in pulls and not confirmed (TubeMQ's one outstanding pack)."""
    on_delivery: Callable[[Seat], None] | None = attrs.field(init=False, default=None)
    """Set while a pull waits for the router."""
    connected_at: int = attrs.field(init=False, factory=lambda: int(time.time()))

    @property
    def member(self) -> str:
        return self.consumer_id

    @property
    def channel(self) -> Channel | None:
        subscription = self.subscription
        return subscription.channel if subscription is not None else None

    # ---- Outbox (the channel's router calls these; none may block)

    def push(self, deliveries: list[Delivery]) -> None:
        self.buffered.extend(deliveries)
        waiting = self.on_delivery
        if waiting is not None:
            self.on_delivery = None
            waiting(self)

    def close(self) -> None:
        """The channel was deleted: what it delivered is gone with it."""
        self.buffered.clear()
        self.pack.clear()
        self.subscription = None

    def topic_now_ext(self) -> None:
        """Nothing to do: a TubeMQ consumer reads ext headers as attributes."""

    def group_owner(self) -> None:
        """Nothing to say: a TubeMQ consumer learns its partitions from the master's
        heartbeat replies, not from a notice on the broker's connection."""

    def leadership_lost(self) -> None:
        """As when the channel goes: TubeMQ's topics are not replicated."""
        self.close()

    # ---- /stats

    def statistics(self) -> ClientStatistics:
        subscription = self.subscription
        consumer = subscription.consumer if subscription is not None else None
        return ClientStatistics(
            client_id=str(self.client_id),
            hostname=self.host,
            version="tubemq",
            remote_address=self.remote_address,
            state=3,
            ready_count=(consumer.credit or 0) if consumer is not None else 0,
            in_flight_count=subscription.in_flight() if subscription is not None else 0,
            message_count=consumer.message_count if consumer is not None else 0,
            finish_count=consumer.finish_count if consumer is not None else 0,
            requeue_count=consumer.requeue_count if consumer is not None else 0,
            connect_ts=self.connected_at,
            user_agent=f"tubemq consumer {self.consumer_id}",
            group_member=self.consumer_id,
        )
