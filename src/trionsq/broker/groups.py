"""Consumer groups: which member of a channel's group consumes which partition.

TubeMQ's model over NSQ's protocol (docs/extensions.md "Consumer groups"): a
consumer that sends IDENTIFY ``group_member`` joins the group of the channel it
subscribes to, under that name. A member holds one connection per partition it can
read (the trionsq client opens one per partition, as for any partitioned topic);
the broker gives each partition to exactly one member, and only that member's
connection there gets messages. The others stand by: when a member leaves (its
connections close, or its session times out), its partitions are dealt again and
the standby connections of their new owners take over from the channel's cursor,
so nothing is skipped and only unfinished messages are sent twice.

The deal is sticky, as Kafka's cooperative-sticky assignor (issue 30, item 7): it
starts from the previous assignment, so a member that leaves moves only its own
partitions and a member that joins takes only the fewest that even the counts out.
A deal that depends only on the member names cannot be both sticky and even (a
per-partition ranking of the names is the only way to keep every survivor's
partitions whatever member leaves, and no ranking keeps every subset of names
even), so the previous assignment is an input, and brokers that each hold some of
a topic's partitions must deal from the same one. :func:`deal` is built for that:
it covers every partition of the topic, not only the broker's, and a broker that
deals after others applied their shares of a deal gets the same deal (the facts
that moved are the deal's own), so brokers that learn the assignment as it is now
(lookupd's ``GET /group``) agree however their rebalances interleave.

Pure state, no clock: the broker decides when a change has settled (its rebalance
delay) and calls :meth:`ConsumerGroup.rebalance`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

__all__ = ["ConsumerGroup", "GroupView", "deal"]


def deal(previous: Mapping[int, str], members: Collection[str], partitions: int) -> dict[int, str]:
    """Partitions ``0..partitions-1`` over ``members``, keeping what ``previous`` gave.

    Each member may keep ``q = partitions // n`` partitions, and ``partitions % n`` of
    them one more: first those already holding more than ``q`` (by name), then the
    others by name. A member keeps its lowest-numbered partitions up to that quota;
    the rest, with the partitions of members gone and those nobody had, go in
    partition order to the members below their quota, in name order.

    Every choice depends on the previous owners only through counts that the deal's
    own moves leave where they were, which is why dealing again from a state where
    some of the moves were made gives the same deal (tests/unit/broker/test_groups.py).
    """
    names = sorted(members)
    if not names:
        return {}
    quota, extra = divmod(partitions, len(names))
    owned: dict[str, list[int]] = {name: [] for name in names}
    for partition in range(partitions):
        owner = previous.get(partition)
        if owner in owned:
            owned[owner].append(partition)
    fuller = [name for name in names if len(owned[name]) > quota]
    others = [name for name in names if len(owned[name]) <= quota]
    more = set((fuller + others)[:extra])
    owners: dict[int, str] = {}
    wanting: list[str] = []
    for name in names:
        share = quota + (name in more)
        kept = owned[name][:share]
        owners.update(dict.fromkeys(kept, name))
        wanting += [name] * (share - len(kept))
    free = [partition for partition in range(partitions) if partition not in owners]
    owners.update(zip(free, wanting, strict=True))
    return owners


@attrs.frozen
class GroupView:
    """The whole group as another source sees it now (lookupd's ``GET /group``, which
    asks every broker of the topic): each known partition's owner, and the members
    connected to any broker."""

    owners: dict[int, str]
    members: frozenset[str]


class ConsumerGroup:
    """The members of one channel's group on this broker, and who owns what."""

    def __init__(self, topic: str, channel: str) -> None:
        self.topic = topic
        self.channel = channel
        self.connections: dict[str, dict[int, int]] = {}
        """member -> partition -> its connections subscribed there (normally one)."""
        self.owners: dict[int, str] = {}
        """partition -> its member, for every partition of the topic (this broker's
        from the last rebalance; others' as last learned or dealt)."""
        self.generation = 0
        """Rebalances made (the admin stream and /stats show it)."""
        self.pending = False
        """A change waits for the rebalance delay."""
        self.rechecks = 0
        """Rebalances made again since the last change because another broker saw
        other members (its own rebalance was still to come)."""

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

    def held(self) -> set[int]:
        """The partitions some member is subscribed to here (this broker's share)."""
        return {partition for held in self.connections.values() for partition in held}

    def rebalance(self, partitions: int, learned: GroupView | None = None) -> dict[int, str]:
        """Deal the topic's ``partitions`` over the members now, from the previous
        assignment; returns the partitions whose owner changed, with the new owner
        ("" for none).

        ``learned``: the group as the other brokers have it. Their partitions' owners
        replace this broker's idea of them, and a member connected to any broker is
        a member here too: one still connecting here (or restarting with this
        broker) keeps its partitions waiting for it, and one that left here first
        keeps them until the other brokers see it gone as well, so that every
        broker deals over the same members."""
        previous = dict(self.owners)
        members = set(self.connections)
        if learned is not None:
            held = self.held()
            previous.update((p, o) for p, o in learned.owners.items() if p not in held)
            members |= learned.members
        owners = deal(previous, members, partitions)
        changed = {p: owners.get(p, "") for p in self.owners.keys() | owners.keys()}
        changed = {p: owner for p, owner in changed.items() if self.owners.get(p, "") != owner}
        self.owners = owners
        self.generation += 1
        self.pending = False
        return changed

    def assignment(self) -> dict[str, list[int]]:
        """member -> the partitions it consumes here (members with none included)."""
        result: dict[str, list[int]] = {member: [] for member in sorted(self.connections)}
        held = self.held()
        for partition, owner in sorted(self.owners.items()):
            if partition in held:
                result.setdefault(owner, []).append(partition)
        return result
