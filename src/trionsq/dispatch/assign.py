"""Which ready consumer gets which message: the router's decision, as pure code.

Design §4 and spec tcp-protocol §8.7. A channel's router task takes a batch from its
cursor and calls :func:`assign` once; the result says, per consumer, the messages to
append to its outbound buffer, and which messages must wait. Nothing here awaits.

Rules:
- A *tag queue* exists for tag T while at least one subscribed consumer has
  ``desired_tag`` T (ready or not).
- A message whose dispatch tag has a tag queue goes only to consumers with that tag;
  it waits while none of them has room.
- Every other message (no tag, or a tag nobody holds) goes only to untagged
  consumers; it waits while none has room, even if tagged consumers are idle.
- Among eligible consumers, messages go round-robin (one per consumer per turn), so
  a consumer with more free RDY keeps receiving longer: weighted by room.
- Waiting messages keep their order; tags are only looked at while a tag queue exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["Assignment", "ConsumerSlot", "assign"]

M = TypeVar("M")


@attrs.frozen
class ConsumerSlot:
    """What the router knows about one subscribed consumer at decision time."""

    client_id: int
    room: int
    """Messages it may receive now: RDY minus in flight (0 when paused or closing)."""
    tag: str | None = None
    """``desired_tag`` on an ext topic; None for an untagged consumer."""


@attrs.frozen
class Assignment(Generic[M]):
    """The outcome of one routing pass."""

    deliveries: dict[int, list[M]]
    """client id -> its messages, in channel order."""
    waiting: list[M]
    """Messages no eligible consumer had room for, in channel order."""
    next_turn: int
    """Where the next pass should start its round-robin, so no consumer is favoured."""


class _Rotation:
    """Round-robin over the consumers that still have room."""

    def __init__(self, slots: list[ConsumerSlot], turn: int) -> None:
        live = [s for s in slots if s.room > 0]
        if live:
            turn %= len(live)
            live = live[turn:] + live[:turn]
        self.clients = [s.client_id for s in live]
        self.room = [s.room for s in live]
        self.position = 0

    def take(self) -> int | None:
        """The next consumer with room (spending one of its room), or None."""
        clients = self.clients
        if not clients:
            return None
        position = self.position % len(clients)
        client = clients[position]
        self.room[position] -= 1
        if self.room[position] == 0:
            del clients[position]
            del self.room[position]
            self.position = position
        else:
            self.position = position + 1
        return client


def assign(
    messages: Sequence[M],
    consumers: Sequence[ConsumerSlot],
    tag_of: Callable[[M], str | None],
    *,
    turn: int = 0,
) -> Assignment[M]:
    """Place ``messages`` (in channel order) on ``consumers`` by the rules above."""
    if all(c.tag is None for c in consumers):
        striped = _striped(messages, consumers, turn)
        if striped is not None:
            return striped
    untagged = [c for c in consumers if c.tag is None]
    by_tag: dict[str, list[ConsumerSlot]] = {}
    for consumer in consumers:
        if consumer.tag is not None:
            by_tag.setdefault(consumer.tag, []).append(consumer)
    deliveries: dict[int, list[M]] = {}
    waiting: list[M] = []
    default = _Rotation(untagged, turn)
    rotations = {tag: _Rotation(slots, turn) for tag, slots in by_tag.items()}
    for message in messages:
        rotation = default
        if rotations:  # tags are only parsed while someone holds one
            tag = tag_of(message)
            if tag is not None:
                rotation = rotations.get(tag, default)
        client = rotation.take()
        if client is None:
            waiting.append(message)
        else:
            deliveries.setdefault(client, []).append(message)
    return Assignment(deliveries, waiting, turn + 1)


def _striped(
    messages: Sequence[M], consumers: Sequence[ConsumerSlot], turn: int
) -> Assignment[M] | None:
    """The round-robin's outcome by slicing, when no consumer runs out of room before
    the messages do (the common case: untagged consumers with room to spare); None
    when the rotation must be walked. Same result, without a step per message."""
    rotation = _Rotation(list(consumers), turn)
    clients, room = rotation.clients, rotation.room
    count = len(clients)
    if not count:
        return None
    if count == 1:
        take = min(room[0], len(messages))
        deliveries = {clients[0]: list(messages[:take])} if take else {}
        return Assignment(deliveries, list(messages[take:]), turn + 1)
    total = len(messages)
    if min(room) < -(-total // count):  # someone would run out: walk it
        return None
    deliveries = {}
    for position, client in enumerate(clients[:total]):
        deliveries[client] = list(messages[position::count])
    return Assignment(deliveries, [], turn + 1)
