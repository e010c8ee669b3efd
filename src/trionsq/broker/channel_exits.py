"""How a message leaves a channel other than by its consumer's FIN (issue 20).

Part of :class:`~trionsq.broker.channel.Channel`, kept apart so the channel's own
module stays about delivery: the attempt count of each message (kept only for
messages put back: a first delivery costs no entry, issue 19), and the dead-letter
bound and the messages past it (:mod:`.dead_letters`: the broker moves them); the
TTL is :mod:`.channel_ttl`'s. Pure state, time passed in.

Counts survive a restart (issue 30): the persister writes them with the cursor's
state (:meth:`ChannelExits.delivery_counts`), and a channel with a bound also
journals the counts of each routing pass before its frames go out
(:meth:`ChannelExits.journal_deliveries`, ``queues/delivery_journal.py``), so after
a kill -9 no message is delivered more than ``max_attempts`` times. A message that
leaves for the dead-letter topic stays unfinished in the cursor (its count kept)
until the move is done (:meth:`ChannelExits.dead_letters_moved`): until then a
crash finds it in the channel, never nowhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..queues.delivery_journal import runs_of
from .dead_letters import MAX_ATTEMPTS_REASON, DeadLetter, dead_topic_name

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..queues.delivery_journal import DeliveryJournal
    from ..queues.inflight import InFlightTable
    from ..queues.record import Record
    from .consumers import Consumer, Delivery

__all__ = ["MAX_ATTEMPTS", "ChannelExits"]

MAX_ATTEMPTS: Final = 0xFFFF
"""The attempts field of a message frame is two bytes: counts stop there."""


class ChannelExits:
    """Attempts and dead letters of a channel (a base of ``Channel``)."""

    if TYPE_CHECKING:  # the channel's, which these rules use

        @property
        def topic(self) -> str: ...

        consumers: dict[int, Consumer]
        in_flight: InFlightTable[Record]

        def _forget(self, internal_id: int) -> None: ...

        def _put_back(self, records: Sequence[Record]) -> None: ...

    def __init__(self, journal: DeliveryJournal | None) -> None:
        """``journal``: a durable channel's delivery journal (None: in memory)."""
        self._attempts: dict[int, int] = {}
        """Deliveries of each unfinished message put back (or restored) so far."""
        self.attempt_changes = 0
        """Counts changed since start (the persister's fingerprint of the channel)."""
        self.unchecked: set[int] = set()
        """Restored counts not yet held against the bound: an IDENTIFY bound is known
        only once its consumers are back, so that is done when they would get one."""
        self.journal = journal
        self.max_attempts = 0
        """Dead-letter bound set over HTTP (``/channel/dead_letter``, persisted): a
        message delivered this many times and put back again (REQ, timeout, its
        consumer gone) goes to :meth:`dead_topic` instead. 0: the consumers' IDENTIFY
        bound, if any (:meth:`attempts_bound`)."""
        self.dead_letter_topic = ""
        """Where dead letters go; empty: ``<topic>.dead``."""
        self.dead_letter_count = 0
        """Messages that left for the dead-letter topic since start (/stats)."""
        self.dead_letters: list[DeadLetter] = []
        """Left the channel, not yet in the dead-letter topic; still unfinished in the
        cursor. The broker moves them after each routing pass."""

    def _attempt(self, internal_id: int) -> int:
        """The attempt number of a delivery. Only messages put back have a count kept
        (:meth:`_delivered_once`): a first delivery costs no entry (issue 19)."""
        attempts = self._attempts
        before = attempts.get(internal_id)
        if before is None:
            return 1
        count = min(before + 1, MAX_ATTEMPTS)
        attempts[internal_id] = count
        self.attempt_changes += 1
        return count

    def _delivered_once(self, internal_id: int) -> None:
        """A message leaves flight without a FIN (REQ, timeout, its consumer gone): its
        count is kept from now on (one attempt if none was kept)."""
        if internal_id not in self._attempts:
            self._attempts[internal_id] = 1
            self.attempt_changes += 1

    def delivery_counts(self) -> list[tuple[int, int]]:
        """(id, deliveries) of every unfinished message delivered at least once: those
        in flight for the first time (1) and those with a count kept."""
        counts = dict.fromkeys(self.in_flight.keys(), 1)
        counts.update(self._attempts)
        return list(counts.items())

    def restore_attempts(self, counts: Mapping[int, int]) -> None:
        """After a restart: the counts of unfinished messages (the state's and the
        journal's); each goes on from there."""
        attempts = self._attempts
        for internal_id, deliveries in counts.items():
            if deliveries > attempts.get(internal_id, 0):
                attempts[internal_id] = min(deliveries, MAX_ATTEMPTS)
        self.unchecked.update(counts)

    def restored_counts(self) -> list[tuple[int, int]]:
        """(id, deliveries) of the counts restored and not yet held against a bound."""
        attempts = self._attempts
        return [(internal_id, attempts.get(internal_id, 0)) for internal_id in self.unchecked]

    def journal_deliveries(self, deliveries: Mapping[int, list[Delivery]]) -> None:
        """A routing pass handed these out: on a channel with a bound, their counts
        reach the journal (one write) before the frames are sent."""
        journal = self.journal
        if journal is None or not deliveries or not self.attempts_bound():
            return
        runs: list[tuple[int, int, int]] = []
        first_only = not self._attempts  # nothing put back: each went out the first time
        for sent in deliveries.values():
            if first_only:
                ids = [delivery.record.internal_id for delivery in sent]
                low = min(ids)
                if max(ids) - low + 1 == len(ids):  # distinct ids: one run (the usual)
                    runs.append((low, len(ids), 1))
                    continue
            pairs = sorted((delivery.record.internal_id, delivery.attempts) for delivery in sent)
            runs += runs_of(pairs)
        journal.delivered(runs)

    def attempts_bound(self) -> int:
        """The dead-letter bound in force: the channel's own, else the lowest a
        subscribed consumer asked for in IDENTIFY, else 0 (none: nsqd's behaviour)."""
        if self.max_attempts:
            return self.max_attempts
        asked = [c.max_attempts for c in self.consumers.values() if c.max_attempts]
        return min(asked) if asked else 0

    def check_restored(self, records: list[Record]) -> list[Record]:
        """Of messages about to be delivered, those a restart did not bring back at
        their bound: a message delivered ``max_attempts`` times before the restart
        (which put it back) leaves for the dead-letter topic instead."""
        unchecked = self.unchecked
        bound = self.attempts_bound()
        kept: list[Record] = []
        for record in records:
            internal_id = record.internal_id
            if internal_id in unchecked:
                unchecked.discard(internal_id)
                deliveries = self._attempts.get(internal_id, 0)
                if bound and deliveries >= bound:
                    self.leave_for_dead_letters(record, deliveries)
                    continue
            kept.append(record)
        return kept

    def leave_for_dead_letters(
        self, record: Record, deliveries: int, reason: str = MAX_ATTEMPTS_REASON
    ) -> None:
        """``record`` leaves the channel for the dead-letter topic (unfinished until
        the move is done)."""
        self.dead_letters.append(DeadLetter(record, deliveries, reason))
        self.dead_letter_count += 1

    def dead_letters_moved(self, letters: Sequence[DeadLetter]) -> None:
        """These are in the dead-letter topic now: the channel lets them go."""
        for letter in letters:
            self._forget(letter.record.internal_id)

    def take_back_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Dead letters the dead-letter topic refused: back in the channel, delivered
        again (their counts kept)."""
        self.dead_letter_count -= len(letters)
        self._put_back([letter.record for letter in letters])

    def dead_topic(self) -> str:
        """The dead-letter topic's name."""
        return dead_topic_name(self.topic, self.dead_letter_topic)

    def _below_bound(self, records: Sequence[Record]) -> Sequence[Record]:
        """Of messages about to be put back, those still below the dead-letter bound;
        the others leave the channel for :attr:`dead_letters`."""
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
            self.leave_for_dead_letters(record, deliveries)
        return kept
