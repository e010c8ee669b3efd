"""Which consumer-group member may receive one channel's messages of a partition.

broker/groups.py deals a channel's partitions over its group's members; this is the
deal's part that one :class:`~trionsq.broker.channel.Channel` (one partition) keeps:
the owner, and the connections of previous owners that still hold its messages.
A member's connection gets room only while its member owns the partition and
nobody else holds a message of it (release before assign: no message of the
partition is out with two members). Pure state, as the channel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..queues.inflight import InFlightTable
    from ..queues.record import Record
    from .channel import Consumer

__all__ = ["PartitionOwner"]


class PartitionOwner:
    """The group member that consumes a channel's partition, and who must release first."""

    __slots__ = ("owner", "releasing")

    def __init__(self) -> None:
        self.owner = ""
        """The member that consumes the partition (empty: none yet). Connections of
        other members stand by."""
        self.releasing: set[int] = set()
        """Connections of the partition's previous owners still holding its messages."""

    def holds_back(self, member: str, in_flight: InFlightTable[Record]) -> bool:
        """Whether a connection of ``member`` must get nothing now: another member owns
        the partition, or a previous owner still holds some of its messages."""
        if member != self.owner:
            return True
        if not self.releasing:
            return False
        count_for = in_flight.count_for
        self.releasing = {client for client in self.releasing if count_for(client)}
        return bool(self.releasing)

    def change(
        self, owner: str, consumers: Iterable[Consumer], in_flight: InFlightTable[Record]
    ) -> None:
        """A rebalance gave the partition to ``owner``: the connections of other members
        that still hold messages of it release them (FIN, REQ, timeout, leaving)
        before the owner's get any."""
        self.owner = owner
        count_for = in_flight.count_for
        self.releasing = {
            c.client_id
            for c in consumers
            if c.member is not None and c.member != owner and count_for(c.client_id)
        }
