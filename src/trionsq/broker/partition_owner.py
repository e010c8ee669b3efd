"""Which consumer-group member may receive one channel's messages of a partition.

broker/groups.py deals a channel's partitions over its group's members; this is the
deal's part that one :class:`~trionsq.broker.channel.Channel` (one partition) keeps:
the owner, and the connections of previous owners that still hold its messages.
A member's connection gets room only while its member owns the partition and
nobody else holds a message of it (release before assign: no message of the
partition is out with two members). Pure state, as the channel.

A takeover hands the partition over in order: when the new owner starts, every
message put back (the previous owner's unfinished ones above all) goes out before
anything newer, oldest first, where nsqd would put a redelivery behind up to
:data:`~trionsq.broker.channel.REDELIVERY_WINDOW` newer messages; so each member
reads its partitions in order across takeovers (issue 30, item 6).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..queues.inflight import InFlightTable
    from ..queues.record import Record
    from .consumers import Consumer

__all__ = ["OwnedChannel", "PartitionOwner"]


class OwnedChannel(Protocol):
    """What the owner reads and reorders of its channel: who holds which message,
    and the messages put back (the channel, without this depending on it)."""

    requeued: deque[tuple[int, Record]]

    @property
    def consumers(self) -> Mapping[int, Consumer]:
        """The channel's subscribed connections, by client id."""
        ...

    @property
    def in_flight(self) -> InFlightTable[Record]:
        """The messages out with consumers."""
        ...


class PartitionOwner:
    """The group member that consumes a channel's partition, and who must release first."""

    __slots__ = ("handing_over", "owner", "releasing")

    def __init__(self) -> None:
        self.owner = ""
        """The member that consumes the partition (empty: none yet). Connections of
        other members stand by."""
        self.releasing: set[int] = set()
        """Connections of the partition's previous owners still holding its messages."""
        self.handing_over = False
        """The owner changed and has not started yet: when it does, what was put back
        goes first (:meth:`hand_over`)."""

    def holds_back(self, member: str, channel: OwnedChannel) -> bool:
        """Whether a connection of ``member`` must get nothing now: another member owns
        the partition, or a previous owner still holds some of its messages."""
        if member != self.owner:
            return True
        if self.releasing:
            count_for = channel.in_flight.count_for
            self.releasing = {client for client in self.releasing if count_for(client)}
            if self.releasing:
                return True
        if self.handing_over:
            self.hand_over(channel)
        return False

    def change(self, owner: str, channel: OwnedChannel) -> None:
        """A rebalance gave the partition to ``owner``: the connections of other members
        that still hold messages of it release them (FIN, REQ, timeout, leaving)
        before the owner's get any, and the owner starts with what was put back."""
        self.owner = owner
        count_for = channel.in_flight.count_for
        self.releasing = {
            c.client_id
            for c in channel.consumers.values()
            if c.member is not None and c.member != owner and count_for(c.client_id)
        }
        self.handing_over = True

    def hand_over(self, channel: OwnedChannel) -> None:
        """Whoever reads the partition next starts with every message put back, oldest
        first, before anything the cursor has not read."""
        self.handing_over = False
        if channel.requeued:
            records = sorted([record for _, record in channel.requeued], key=_record_id)
            channel.requeued = deque([(0, record) for record in records])


def _record_id(record: Record) -> int:
    return record.internal_id
