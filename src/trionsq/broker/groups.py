"""Consumer groups: which member of a channel's group consumes which partition.

TubeMQ's model over NSQ's protocol (docs/extensions.md "Consumer groups"): a
consumer that sends IDENTIFY ``group_member`` joins the group of the channel it
subscribes to, under that name. A member holds one connection per partition it can
read (the trionsq client opens one per partition, as for any partitioned topic);
the broker gives each partition to exactly one member, and only that member's
connection there gets messages. The others stand by: when a member leaves (its
connections close, or miss their heartbeats), its partitions are dealt again and
the standby connections of their new owners take over from the channel's cursor,
so nothing is skipped and only unfinished messages are sent twice.

Pure state, no clock: the broker decides when a change has settled (its rebalance
delay) and calls :meth:`ConsumerGroup.rebalance`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ConsumerGroup", "deal"]


def deal(partitions: Iterable[int], members: Mapping[str, Iterable[int]]) -> dict[int, str]:
    """Each partition to one member connected to it: round robin by partition number.

    Partition ``p`` goes to member ``p mod n`` of the ``n`` sorted names, or, if that
    member has no connection there, to the next one that has. It depends on nothing
    but the partition's number and the names, so brokers that each hold some of a
    topic's partitions (placed by lookupd), dealing alone over the same members,
    together give every member its share: with every member connected everywhere
    the counts differ by at most one over the whole topic.
    """
    names = sorted(members)
    count = len(names)
    reach = [frozenset(members[name]) for name in names]
    owners: dict[int, str] = {}
    for partition in sorted(partitions):
        for step in range(count):
            rank = (partition + step) % count
            if partition in reach[rank]:
                owners[partition] = names[rank]
                break
    return owners


class ConsumerGroup:
    """The members of one channel's group on this broker, and who owns what."""

    def __init__(self, topic: str, channel: str) -> None:
        self.topic = topic
        self.channel = channel
        self.connections: dict[str, dict[int, int]] = {}
        """member -> partition -> its connections subscribed there (normally one)."""
        self.owners: dict[int, str] = {}
        """partition -> the member consuming it (from the last rebalance)."""
        self.generation = 0
        """Rebalances made (the admin stream and /stats show it)."""
        self.pending = False
        """A change waits for the rebalance delay."""

    def join(self, member: str, partition: int) -> None:
        """A member's connection subscribed to ``partition``."""
        held = self.connections.setdefault(member, {})
        held[partition] = held.get(partition, 0) + 1

    def leave(self, member: str, partition: int) -> None:
        """A member's connection on ``partition`` is gone."""
        held = self.connections.get(member)
        if held is None or partition not in held:
            return
        held[partition] -= 1
        if not held[partition]:
            del held[partition]
        if not held:
            del self.connections[member]

    @property
    def empty(self) -> bool:
        """No member has a connection left."""
        return not self.connections

    def rebalance(self, partitions: Iterable[int]) -> dict[int, str]:
        """Deal ``partitions`` (those this broker holds) over the members now; returns
        the partitions whose owner changed, with the new owner ("" for none)."""
        owners = deal(partitions, self.connections)
        changed = {p: owners.get(p, "") for p in self.owners.keys() | owners.keys()}
        changed = {p: owner for p, owner in changed.items() if self.owners.get(p, "") != owner}
        self.owners = owners
        self.generation += 1
        self.pending = False
        return changed

    def assignment(self) -> dict[str, list[int]]:
        """member -> the partitions it consumes (members with none included)."""
        result: dict[str, list[int]] = {member: [] for member in sorted(self.connections)}
        for partition, owner in sorted(self.owners.items()):
            result.setdefault(owner, []).append(partition)
        return result
