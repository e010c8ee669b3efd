"""The broker's consumer groups: membership from subscriptions, and the rebalances.

A consumer's connections join and leave its channel's group (broker/groups.py) as
they subscribe and go; a change waits ``--group-rebalance-delay`` (changes meanwhile
are dealt with it), then the partitions are dealt again and every channel whose
owner changed is told (broker/partition_owner.py) and routed again.
docs/extensions.md, "Consumer groups".

The deal starts from the previous assignment of every partition of the topic, and
brokers each hold some of them: before dealing, the coordinator asks what the
others hold now (:attr:`GroupCoordinator.learn`, lookupd's ``GET /group``; without
a lookupd it deals from its own last deal). Since a deal made again from a state
where some of its moves were made is the same deal, brokers that rebalance one
after another agree. When the answer shows other members than this broker sees (a
departure another broker has not timed out yet, a member still connecting), the
group is dealt again a little later, up to :data:`RECHECKS` times, so that the
broker whose view changes last does not leave the others' deals behind.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, Protocol

import trio

from .groups import ConsumerGroup, GroupView

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..config import NsqdConfig
    from .channel import Channel
    from .consumers import Outbox
    from .events import EventHub
    from .topic import Topic

__all__ = ["RECHECKS", "GroupCoordinator", "GroupHost", "GroupLearner"]

log = logging.getLogger("trionsq")
RECHECKS: Final = 10
"""Deals made again, at most, while another broker sees other members."""
RECHECK_AFTER: Final = 1.0
"""Seconds at least between such deals (the rebalance delay if longer)."""


class GroupLearner(Protocol):
    """Where a broker learns a group's whole assignment (server/group_views.py)."""

    async def __call__(self, topic: str, channel: str) -> GroupView | None:
        """The group now, as every broker of the topic deals it; None: not known."""
        ...


class GroupHost(Protocol):
    """What the coordinator reads of the broker: its topics (whose channels' consumers
    carry their outboxes), the rebalance delay, and where events go (the broker,
    without the coordinator depending on it)."""

    @property
    def topics(self) -> Mapping[str, Topic]:
        """Every topic, by name."""
        ...

    @property
    def config(self) -> NsqdConfig:
        """The broker's settings (``group_rebalance_delay``)."""
        ...

    @property
    def events(self) -> EventHub:
        """The admin stream's hub, told of each rebalance."""
        ...


class GroupCoordinator:
    """Every consumer group of one broker, by (topic, channel)."""

    def __init__(
        self, broker: GroupHost, nursery: trio.Nursery, wake: Callable[[Channel], None]
    ) -> None:
        """``nursery``: the broker's, where a rebalance waits for its delay; ``wake``:
        the broker's, to route a channel again (and persist) after its owner changed."""
        self._broker = broker
        self._nursery = nursery
        self._wake = wake
        self.groups: dict[tuple[str, str], ConsumerGroup] = {}
        """Consumer groups by (topic, channel), while they have members."""
        self._shipped: dict[tuple[str, str], dict[int, str]] = {}
        """Owners of replicated partitions this broker follows, as their leaders
        shipped them (broker/replica_state.py): a group made here starts from them."""
        self.learn: GroupLearner | None = None
        """How to learn the group's whole assignment now (topic, channel): what the
        other brokers hold. None (no lookupd): deal from this broker's last deal."""

    def joined(self, channel: Channel, member: str) -> None:
        """A connection of ``member`` subscribed to ``channel`` (one partition)."""
        key = (channel.topic, channel.name)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = ConsumerGroup(channel.topic, channel.name)
            group.owners.update(self._shipped.get(key, {}))
        group.join(member, channel.partition)
        owner = group.owners.get(channel.partition, "")
        if channel.group.owner != owner:  # a channel made again since the deal
            channel.group.change(owner, channel)
        self._changed(group)

    def shipped_owner(self, topic: str, channel: str, partition: int, owner: str) -> None:
        """A follower learns who owns ``partition`` in the channel's group on its
        leader ("": nobody), for a deal here after a failover."""
        owners = self._shipped.setdefault((topic, channel), {})
        if owner:
            owners[partition] = owner
        else:
            owners.pop(partition, None)
            if not owners:
                del self._shipped[(topic, channel)]

    def shipped_owners(self, topic: str, channel: str) -> dict[int, str]:
        """The owners leaders shipped here for the channel's group (a copy)."""
        return dict(self._shipped.get((topic, channel), {}))

    def left(self, channel: Channel, member: str) -> None:
        """A connection of ``member`` on ``channel`` is gone."""
        group = self.groups.get((channel.topic, channel.name))
        if group is not None:
            group.leave(member, channel.partition)
            self._changed(group)

    def fence(self, topic: str, channel_name: str, member: str) -> None:
        """``member``'s session is over (a connection silent for its session timeout):
        close all its connections to the group here, so that what they hold goes to
        the next owners and nothing it still holds can be finished late."""
        found = self._broker.topics.get(topic)
        if found is None:
            return
        for partition in found.partitions:
            channel = partition.channels.get(channel_name)
            if channel is not None:
                for outbox in _outboxes_of(channel, member):
                    outbox.close()

    def _changed(self, group: ConsumerGroup, delay: float | None = None) -> None:
        """A member joined or left: deal the partitions again once the rebalance delay
        has passed (changes meanwhile are dealt with it)."""
        if group.pending:
            return
        group.pending = True
        if delay is None:
            delay = self._broker.config.group_rebalance_delay
            group.rechecks = 0
        # a task even with no delay: a rebalance is not made inside the SUB that caused
        # it, so a new owner's notice follows the SUB's OK
        self._nursery.start_soon(self._rebalance_after, group, delay)

    async def _rebalance_after(self, group: ConsumerGroup, delay: float) -> None:
        await trio.sleep(delay)
        learned = None
        if self.learn is not None and self.groups.get((group.topic, group.channel)) is group:
            try:
                learned = await self.learn(group.topic, group.channel)
            except Exception:  # never the broker's end: deal from what it knows
                log.exception(
                    "GROUP(%s/%s): learning the assignment failed", group.topic, group.channel
                )
        self._rebalance(group, learned)
        if (
            learned is not None
            and learned.members != set(group.connections)
            and group.rechecks < RECHECKS
            and not group.empty
        ):
            group.rechecks += 1
            self._changed(group, max(RECHECK_AFTER, self._broker.config.group_rebalance_delay))

    def _rebalance(self, group: ConsumerGroup, learned: GroupView | None) -> None:
        """Deal the group's partitions over its members now; the channels whose owner
        changed route again (a new owner starts once the old one holds nothing)."""
        key = (group.topic, group.channel)
        if self.groups.get(key) is not group:
            return
        broker = self._broker
        topic = broker.topics.get(group.topic)
        if topic is None:  # deleted: its members are gone or going
            del self.groups[key]
            return
        group.rebalance(len(topic.partitions), learned)
        for partition in topic.partitions:  # a channel made again since gets its owner too
            channel = partition.channels.get(group.channel)
            owner = group.owners.get(partition.index, "")
            if channel is not None and channel.group.owner != owner:
                channel.group.change(owner, channel)
                # the new owner's connections hear it (those that asked): what comes
                # next starts where the channel stands
                for outbox in _outboxes_of(channel, owner):
                    outbox.group_owner()
                self._wake(channel)
        if group.empty:
            del self.groups[key]
        assignment = group.assignment()
        log.info(
            "GROUP(%s/%s): rebalance %d: %s",
            group.topic,
            group.channel,
            group.generation,
            ", ".join(f"{m}={parts}" for m, parts in assignment.items()) or "no members",
        )
        broker.events.emit(
            "channel",
            "group_rebalanced",
            group.topic,
            channel=group.channel,
            generation=group.generation,
            assignment=assignment,
        )


def _outboxes_of(channel: Channel, member: str) -> list[Outbox]:
    """The connections of ``member`` on the channel (a list: closing one may
    unsubscribe it)."""
    return [
        consumer.outbox
        for consumer in channel.consumers.values()
        if consumer.member == member and consumer.outbox is not None
    ]
