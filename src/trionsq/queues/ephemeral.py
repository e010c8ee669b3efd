"""What an ``#ephemeral`` channel reads instead of a cursor: its own bounded queue.

nsqd gives an ephemeral channel a memory queue of ``mem-queue-size`` and a backend
that discards, so a message that finds the queue full is dropped for that channel
(the newest go; the publish still succeeds). A cursor over the shared partition log
cannot drop the newest records for one channel without pinning everything after its
position, so an ephemeral channel is fed references to new records instead and the
log does not wait for it: an idle ``nsq_tail`` costs at most mem-queue-size messages.
The feed offers the same reading methods as :class:`~trionsq.queues.cursor.ChannelCursor`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .record import Record

__all__ = ["EphemeralFeed"]


class EphemeralFeed:
    """Records handed to one ephemeral channel, at most ``capacity`` waiting."""

    def __init__(self, capacity: int, next_offer_id: int) -> None:
        self.capacity = capacity
        self.next_offer_id = next_offer_id
        """The first log id not yet offered (the partition offers from here on)."""
        self.dropped = 0
        """Records refused because the queue was full."""
        self._queue: deque[Record] = deque()

    @property
    def backlog(self) -> int:
        """Records waiting to be read."""
        return len(self._queue)

    @property
    def read_id(self) -> int:
        """The id the next read would start at (the oldest waiting, else the next offer)."""
        return self._queue[0].internal_id if self._queue else self.next_offer_id

    @property
    def confirmed_id(self) -> int:
        """Where the log may be released up to: what was offered is the feed's own now."""
        return self.next_offer_id

    def offer(self, records: Sequence[Record]) -> int:
        """Queue what fits, drop the rest; returns how many were dropped."""
        if records:
            self.next_offer_id = records[-1].internal_id + 1
        room = max(0, self.capacity - len(self._queue))
        self._queue.extend(records[:room])
        dropped = max(0, len(records) - room)
        self.dropped += dropped
        return dropped

    def position_after(self, count: int) -> int:
        """The read position once ``count`` more records have been read (ids have gaps
        where records were dropped)."""
        queue = self._queue
        return queue[count].internal_id if 0 <= count < len(queue) else self.next_offer_id

    def take(self, max_count: int, stop_id: int | None = None) -> list[Record]:
        """Read up to ``max_count`` records, oldest first, none from ``stop_id`` on."""
        queue = self._queue
        count = min(max_count, len(queue))
        if stop_id is None:
            return [queue.popleft() for _ in range(count)]
        taken: list[Record] = []
        while len(taken) < count and queue[0].internal_id < stop_id:
            taken.append(queue.popleft())
        return taken

    def finish(self, internal_id: int) -> None:
        """Nothing to confirm: the feed holds no position in the log."""

    def finish_many(self, internal_ids: list[int]) -> None:
        """Nothing to confirm, as :meth:`finish`."""

    def move_to(self, internal_id: int) -> None:
        """Channel empty: drop every waiting record below ``internal_id``."""
        queue = self._queue
        while queue and queue[0].internal_id < internal_id:
            queue.popleft()
        self.next_offer_id = max(self.next_offer_id, internal_id)
