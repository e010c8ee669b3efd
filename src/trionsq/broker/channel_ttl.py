"""A channel's messages past their TTL leave when they expire (issues 20 and 30).

Part of :class:`~trionsq.broker.channel.Channel`. A message past its TTL (the topic's
or its own ``##ttl``, counted from its publish time: :mod:`.ttl`) leaves the channel
unseen, counted in ``expired_count``, or, with ``--ttl-dead-letter`` on a channel with
a dead-letter bound, for the dead-letter topic with ``##dead_reason: ttl``. It leaves:

- at delivery, if a routing pass would hand it out (:meth:`ChannelTtl.drop_expired`);
- at the latest :data:`SWEEP_SLACK` after it expires, whether or not anyone
  consumes (:meth:`ChannelTtl.sweep_ttl`): the channel's expiry timer, the same
  cancel-scope deadline as its in-flight timeouts, also sleeps until
  :attr:`ChannelTtl.ttl_due_ns`, the earliest expiry among what waits in the channel
  (no polling). Publishes and put-backs lower it; each sweep sets it again.

What a sweep looks at: every message put back or waiting for a tag (each has its
record), and the records the cursor has not read. Those are taken in log order while
the first is expired: with a topic TTL their publish times, so their expiry times, are
in order, and the first one not expired says when to look again. A record on disk
that the log's memory does not hold is read in first (the channel's router reads the
chunk, as for a consumer), so an expired backlog on disk leaves in publish order, a
chunk at a time. A message with a ``##ttl`` of its own shorter than the messages
before it leaves from behind them while it is among the first ``SWEEP_SCAN`` unread
records in memory; further on, when the cursor gets there. An ``#ephemeral`` channel's
unread messages (at most ``--mem-queue-size``) leave at delivery only.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

from ..queues.cursor import ChannelCursor
from .channel_exits import ChannelExits
from .dead_letters import TTL_REASON
from .ttl import TopicTtl

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..queues.cursor import ChannelCursor as _Cursor
    from ..queues.delivery_journal import DeliveryJournal
    from ..queues.ephemeral import EphemeralFeed
    from ..queues.partition_log import PartitionLog
    from ..queues.record import Record

__all__ = ["SWEEP_SCAN", "SWEEP_SLACK", "ChannelTtl"]

SWEEP_SLACK: Final = 250_000_000
"""Nanoseconds: sweeps come at most this often, so what expires in a burst leaves in
one sweep, at most this late (issue 30 asks for a second)."""
SWEEP_SCAN: Final = 10_000
"""Unread records in memory a sweep looks at beyond the expired ones at the head,
for a ``##ttl`` of their own (only once the topic has seen one)."""
_READ_STEP: Final = 256


class ChannelTtl(ChannelExits):
    """TTL sweeps of a channel (a base of ``Channel``)."""

    if TYPE_CHECKING:  # the channel's, which a sweep uses
        log: PartitionLog
        cursor: _Cursor | EphemeralFeed
        requeued: deque[tuple[int, Record]]
        waiting: dict[str | None, deque[Record]]
        waiting_count: int
        tags: dict[int, str | None]
        _ahead: dict[int, bool]

        def intake(self) -> int: ...

        def read_into(
            self, batch: list[Record], room: int, stop_id: int | None, now: float, wall_ns: int
        ) -> None: ...

    def __init__(self, ttl: TopicTtl | None, journal: DeliveryJournal | None) -> None:
        """``ttl``: the topic's TTL rules, shared with its other channels (none:
        never expires); ``journal``: as :class:`ChannelExits`."""
        super().__init__(journal)
        self.ttl = ttl if ttl is not None else TopicTtl()
        """The topic's TTL rules (broker/ttl.py)."""
        self.expired_count = 0
        """Messages that left past their TTL since start (/stats)."""
        self.ttl_due_ns: int | None = 0 if self.ttl.active else None
        """Wall-clock nanoseconds of the next sweep (None: nothing can expire); 0: at
        once (a channel made on a topic with a TTL, or restored, looks at its backlog)."""
        self.ttl_read = False
        """The last sweep stopped at an unread record only on disk: the router reads
        it in (``cold_read_from``), then the channel sweeps again."""

    def drop_expired(self, records: list[Record], wall_ns: int) -> list[Record]:
        """Of messages about to be delivered, those within their TTL; the others leave
        the channel unseen (or for the dead-letter topic: the module docstring)."""
        expires_ns = self.ttl.expires_ns
        kept: list[Record] = []
        expired: list[Record] = []
        for record in records:
            due = expires_ns(record)
            if due and due <= wall_ns:
                expired.append(record)
            else:
                kept.append(record)
        if expired:
            self._leave_expired(expired)
        return kept

    def ttl_arrived(self, records: Sequence[Record], *, in_order: bool) -> None:
        """Messages entered the channel (``in_order``: a publish; else put back): the
        next sweep comes by the earliest of their expiry times."""
        expires_ns = self.ttl.expires_ns
        if in_order and not self.ttl.headers:  # the topic's TTL alone: the first
            records = records[:1]
        soonest = self.ttl_due_ns
        for record in records:
            due = expires_ns(record)
            if due and (soonest is None or due < soonest):
                soonest = due
        self.ttl_due_ns = soonest

    def sweep_ttl(self, now: float, wall_ns: int) -> int:
        """Take what is past its TTL out of the channel; how many left. Sets
        :attr:`ttl_due_ns` for the next sweep."""
        self.ttl_due_ns = None
        self.ttl_read = False
        if not self.ttl.active:
            return 0
        gone, soonest = self._sweep_put_back(wall_ns)
        waiting_gone, waiting_soonest = self._sweep_waiting(wall_ns)
        unread_gone, unread_soonest = self._sweep_unread(now, wall_ns)
        soonest = _sooner(_sooner(soonest, waiting_soonest or 0), unread_soonest or 0)
        if soonest is not None:
            self.ttl_due_ns = max(soonest, wall_ns + SWEEP_SLACK)
        return gone + waiting_gone + unread_gone

    def _sweep_put_back(self, wall_ns: int) -> tuple[int, int | None]:
        expires_ns = self.ttl.expires_ns
        kept: deque[tuple[int, Record]] = deque()
        expired: list[Record] = []
        soonest: int | None = None
        for item in self.requeued:
            due = expires_ns(item[1])
            if due and due <= wall_ns:
                expired.append(item[1])
                continue
            kept.append(item)
            soonest = _sooner(soonest, due)
        if expired:
            self.requeued = kept
            self._leave_expired(expired)
        return len(expired), soonest

    def _sweep_waiting(self, wall_ns: int) -> tuple[int, int | None]:
        expires_ns = self.ttl.expires_ns
        expired: list[Record] = []
        soonest: int | None = None
        for key, queue in list(self.waiting.items()):
            kept: deque[Record] = deque()
            for record in queue:
                due = expires_ns(record)
                if due and due <= wall_ns:
                    expired.append(record)
                    self.tags.pop(record.internal_id, None)
                else:
                    kept.append(record)
                    soonest = _sooner(soonest, due)
            if len(kept) != len(queue):
                if kept:
                    self.waiting[key] = kept
                else:
                    del self.waiting[key]
        if expired:
            self.waiting_count -= len(expired)
            self._leave_expired(expired)
        return len(expired), soonest

    def _sweep_unread(self, now: float, wall_ns: int) -> tuple[int, int | None]:
        """The unread records: the expired ones at the head, in log order (read from
        memory a step at a time); then, with ``##ttl`` headers about, expired ones
        further on. Returns how many left and the soonest expiry of those looked at."""
        cursor = self.cursor
        if not isinstance(cursor, ChannelCursor):
            return 0, None
        log = self.log
        expires_ns = self.ttl.expires_ns
        gone = 0
        while True:
            available = self.intake()
            if not available:
                return gone, None
            if log.on_disk and log.is_cold(cursor.read_id):
                self.ttl_read = True  # the router reads it in, then we come back
                return gone, None
            records = log.read(cursor.read_id, min(available, _READ_STEP))
            head = 0
            for record in records:
                due = expires_ns(record)
                if not due or due > wall_ns:
                    break
                head += 1
            if head:
                taken: list[Record] = []
                self.read_into(taken, head, None, now, wall_ns)  # DPUBs still defer
                self._leave_expired(taken)
                gone += len(taken)
            if head < len(records) or not records:
                break
        rest = log.read(cursor.read_id, min(self.intake(), SWEEP_SCAN))
        if not rest:
            return gone, None
        if not self.ttl.headers:  # in publish order: the first says when
            return gone, expires_ns(rest[0]) or None
        behind, soonest = self._sweep_behind(rest, wall_ns)
        return gone + behind, soonest

    def _sweep_behind(self, records: list[Record], wall_ns: int) -> tuple[int, int | None]:
        """Unread records past the head with a ``##ttl`` that ran out: they leave from
        where they are (the cursor skips them when it gets there)."""
        expires_ns = self.ttl.expires_ns
        ahead = self._ahead
        expired: list[Record] = []
        soonest: int | None = None
        for record in records:
            if record.internal_id in ahead:
                continue  # deferred at publish, or gone already
            due = expires_ns(record)
            if due and due <= wall_ns:
                expired.append(record)
            else:
                soonest = _sooner(soonest, due)
        for record in expired:
            ahead[record.internal_id] = False  # out of order: finished when it is gone
        self._leave_expired(expired)
        return len(expired), soonest

    def _leave_expired(self, records: list[Record]) -> None:
        """Expired messages leave: for the dead-letter topic with ``--ttl-dead-letter``
        and a bound, else finished unseen."""
        self.expired_count += len(records)
        if self.ttl.dead_letter and self.attempts_bound():
            attempts = self._attempts
            for record in records:
                self.leave_for_dead_letters(record, attempts.get(record.internal_id, 0), TTL_REASON)
        else:
            for record in records:
                self._forget(record.internal_id)


def _sooner(soonest: int | None, due: int) -> int | None:
    """The earlier of two expiry times (0 and None: never)."""
    if not due:
        return soonest
    return due if soonest is None or due < soonest else soonest
