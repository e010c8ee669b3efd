"""The broker's consumer groups: membership from subscriptions, and the rebalances.

A consumer's connections join and leave its channel's group (broker/groups.py) as
they subscribe and go; a change waits ``--group-rebalance-delay`` (changes meanwhile
are dealt with it), then the partitions are dealt again and every channel whose
owner changed is told (broker/partition_owner.py) and routed again.
docs/extensions.md, "Consumer groups".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .groups import ConsumerGroup

if TYPE_CHECKING:
    from collections.abc import Callable

    from .broker import Broker
    from .channel import Channel

__all__ = ["GroupCoordinator"]

log = logging.getLogger("trionsq")


class GroupCoordinator:
    """Every consumer group of one broker, by (topic, channel)."""

    def __init__(
        self, broker: Broker, nursery: trio.Nursery, wake: Callable[[Channel], None]
    ) -> None:
        """``nursery``: the broker's, where a rebalance waits for its delay; ``wake``:
        the broker's, to route a channel again (and persist) after its owner changed."""
        self._broker = broker
        self._nursery = nursery
        self._wake = wake
        self.groups: dict[tuple[str, str], ConsumerGroup] = {}
        """Consumer groups by (topic, channel), while they have members."""

    def joined(self, channel: Channel, member: str) -> None:
        """A connection of ``member`` subscribed to ``channel`` (one partition)."""
        key = (channel.topic, channel.name)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = ConsumerGroup(channel.topic, channel.name)
        group.join(member, channel.partition)
        owner = group.owners.get(channel.partition, "")
        if channel.group.owner != owner:  # a channel made again since the deal
            channel.group.change(owner, channel)
        self._changed(group)

    def left(self, channel: Channel, member: str) -> None:
        """A connection of ``member`` on ``channel`` is gone."""
        group = self.groups.get((channel.topic, channel.name))
        if group is not None:
            group.leave(member, channel.partition)
            self._changed(group)

    def _changed(self, group: ConsumerGroup) -> None:
        """A member joined or left: deal the partitions again once the rebalance delay
        has passed (changes meanwhile are dealt with it), or at once with no delay."""
        if group.pending:
            return
        group.pending = True
        delay = self._broker.config.group_rebalance_delay
        if delay <= 0:
            self._rebalance(group)
        else:
            self._nursery.start_soon(self._rebalance_after, group, delay)

    async def _rebalance_after(self, group: ConsumerGroup, delay: float) -> None:
        await trio.sleep(delay)
        self._rebalance(group)

    def _rebalance(self, group: ConsumerGroup) -> None:
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
        group.rebalance(p.index for p in topic.partitions)
        for partition in topic.partitions:  # a channel made again since gets its owner too
            channel = partition.channels.get(group.channel)
            owner = group.owners.get(partition.index, "")
            if channel is not None and channel.group.owner != owner:
                channel.group.change(owner, channel)
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
