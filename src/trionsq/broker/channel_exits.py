"""How a message leaves a channel other than by its consumer's FIN (issue 20).

Part of :class:`~trionsq.broker.channel.Channel`, kept apart so the channel's own
module stays about delivery: the attempt count of each message (kept only for
messages put back: a first delivery costs no entry, issue 19), the dead-letter bound
and the messages past it (:mod:`.dead_letters`: the broker publishes them), and the
topic's TTL (:mod:`.ttl`), past which a message leaves unseen. Pure state, time
passed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .dead_letters import dead_topic_name
from .ttl import TopicTtl

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..queues.record import Record
    from .channel import Consumer

__all__ = ["MAX_ATTEMPTS", "ChannelExits"]

MAX_ATTEMPTS: Final = 0xFFFF
"""The attempts field of a message frame is two bytes: counts stop there."""


class ChannelExits:
    """Attempts, dead letters and TTL of a channel (a base of ``Channel``)."""

    if TYPE_CHECKING:  # the channel's, which these rules use

        @property
        def topic(self) -> str: ...

        consumers: dict[int, Consumer]

        def _forget(self, internal_id: int) -> None: ...

        def _put_back(self, records: Sequence[Record]) -> None: ...

    def __init__(self, ttl: TopicTtl | None) -> None:
        """``ttl``: the topic's TTL rules, shared with its other channels (none:
        never expires)."""
        self._attempts: dict[int, int] = {}
        self.max_attempts = 0
        """Dead-letter bound set over HTTP (``/channel/dead_letter``, persisted): a
        message delivered this many times and put back again (REQ, timeout, its
        consumer gone) goes to :meth:`dead_topic` instead. 0: the consumers' IDENTIFY
        bound, if any (:meth:`attempts_bound`)."""
        self.dead_letter_topic = ""
        """Where dead letters go; empty: ``<topic>.dead``."""
        self.dead_letter_count = 0
        """Messages that left for the dead-letter topic since start (/stats)."""
        self.ttl = ttl if ttl is not None else TopicTtl()
        """The topic's TTL rules (broker/ttl.py)."""
        self.expired_count = 0
        """Messages skipped at delivery past their TTL since start (/stats)."""
        self.dead_letters: list[tuple[Record, int]] = []
        """Left the channel, not yet published to the dead-letter topic: (record,
        deliveries). The broker takes them after each routing pass."""

    def _attempt(self, internal_id: int) -> int:
        """The attempt number of a delivery. Only messages put back have a count kept
        (:meth:`_delivered_once`): a first delivery costs no entry (issue 19)."""
        attempts = self._attempts
        before = attempts.get(internal_id)
        if before is None:
            return 1
        count = min(before + 1, MAX_ATTEMPTS)
        attempts[internal_id] = count
        return count

    def _delivered_once(self, internal_id: int) -> None:
        """A message leaves flight without a FIN (REQ, timeout, its consumer gone): its
        count is kept from now on (one attempt if none was kept)."""
        self._attempts.setdefault(internal_id, 1)

    def attempts_bound(self) -> int:
        """The dead-letter bound in force: the channel's own, else the lowest a
        subscribed consumer asked for in IDENTIFY, else 0 (none: nsqd's behaviour)."""
        if self.max_attempts:
            return self.max_attempts
        asked = [c.max_attempts for c in self.consumers.values() if c.max_attempts]
        return min(asked) if asked else 0

    def drop_expired(self, records: list[Record], wall_ns: int) -> list[Record]:
        """Of messages about to be delivered, those within their TTL (the topic's or
        their ``##ttl``, from the publish time); the others leave the channel unseen,
        counted in :attr:`expired_count`."""
        rules = self.ttl
        kept: list[Record] = []
        for record in records:
            limit = rules.limit_ns(record)
            if limit and wall_ns - record.timestamp >= limit:
                self.expired_count += 1
                self._forget(record.internal_id)
            else:
                kept.append(record)
        return kept

    def take_back_dead_letters(self, letters: Sequence[tuple[Record, int]]) -> None:
        """Dead letters the dead-letter topic refused: back in the channel, delivered
        again (their counts restored)."""
        for record, deliveries in letters:
            self._attempts[record.internal_id] = deliveries
        self.dead_letter_count -= len(letters)
        self._put_back([record for record, _ in letters])

    def dead_topic(self) -> str:
        """The dead-letter topic's name."""
        return dead_topic_name(self.topic, self.dead_letter_topic)

    def _below_bound(self, records: Sequence[Record]) -> Sequence[Record]:
        """Of messages about to be put back, those still below the dead-letter bound;
        the others leave the channel for :attr:`dead_letters` (finished here)."""
        bound = self.attempts_bound()
        if not bound or not records:
            return records
        kept: list[Record] = []
        attempts = self._attempts
        for record in records:
            deliveries = attempts.get(record.internal_id, 1)
            if deliveries < bound:
                kept.append(record)
                continue
            self.dead_letters.append((record, deliveries))
            self.dead_letter_count += 1
            self._forget(record.internal_id)
        return kept
