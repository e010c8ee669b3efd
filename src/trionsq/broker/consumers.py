"""A subscribed consumer as a channel sees it, where its messages go, and a message
on its way to one.

The channel (``channel.py``) and its parts (``channel_exits.py``, ``partition_owner.py``),
the router and the connections all speak of these; they live here so that those parts
need not import the channel that is built from them.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from ..queues.record import Record
from .rate_limits import RateLimit

__all__ = ["Consumer", "Delivery", "Outbox"]


class Outbox(Protocol):
    """Where a consumer's messages go: its connection's outbound buffer."""

    def push(self, deliveries: list[Delivery]) -> None:
        """Take a batch for sending; must not block (the router never awaits here)."""

    def close(self) -> None:
        """The channel is gone (deleted), or the consumer's group member was fenced:
        end the connection, as nsqd closes its clients."""

    def group_owner(self) -> None:
        """The consumer's group member now owns the partition (broker/groups.py)."""

    def leadership_lost(self) -> None:
        """This broker no longer leads the replicated partition: say so as Youzan's
        brokers do (a fatal ``E_FAILED_ON_NOT_LEADER``) and end the connection."""

    def topic_now_ext(self) -> None:
        """The topic was upgraded to ext: a consumer that did not IDENTIFY with
        ``extend_support`` cannot decode what comes next (spec §8.8)."""


@attrs.define(eq=False)
class Consumer:
    """One subscribed connection, as the channel sees it."""

    client_id: int
    msg_timeout: float
    """Seconds a delivered message stays in flight before it is requeued."""
    outbox: Outbox | None = None
    """Its connection, where the router pushes its batches; set by
    ``Broker.subscribe``. The channel's ``consumers`` is thus the one registry of
    who gets what (None: a channel driven without connections, in unit tests)."""
    tag: str | None = None
    """``desired_tag`` on an ext topic (tag dispatch); None: untagged."""
    sample_rate: int = 0
    """1..99: deliver about that percentage, drop the rest for this channel."""
    ordered_window: int = 1
    """SUB_ORDERED: messages of the partition it may hold at once, in order (IDENTIFY
    ``ordered_window``, trionsq's extension; 1 is Youzan's one at a time)."""
    max_attempts: int = 0
    """IDENTIFY ``max_attempts`` (trionsq's extension): the dead-letter bound it asks
    for while the channel has none of its own (0: none)."""
    member: str | None = None
    """IDENTIFY ``group_member`` (trionsq's extension): the consumer-group member this
    connection belongs to; it gets messages only while its member owns the partition
    (broker/groups.py). None: an ordinary NSQ consumer."""
    rate_limit: RateLimit | None = None
    """IDENTIFY ``max_msgs_per_sec``/``max_bytes_per_sec`` (trionsq's extension): this
    consumer's own bucket (None: unlimited, nsqd's behaviour)."""
    rdy: int = 0
    credit: int | None = None
    """PULL (trionsq's pull consumption): messages still to send before the consumer
    asks again; None: RDY's window, renewed by FINs (nsqd's push)."""
    closing: bool = False
    message_count: int = 0
    finish_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0


@attrs.define
class Delivery:
    """A message on its way to a consumer, with its attempt number.

    Not frozen, for speed only (one per message delivered; see ``Record``)."""

    record: Record
    attempts: int
