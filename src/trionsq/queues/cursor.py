"""A channel's position over its partition log (design §2).

The cursor reads forward by id; FIN marks ids finished, and the confirmed position
advances over the contiguous finished prefix (Youzan's "confirm"). Everything below
the confirmed position is done for this channel, which is what retention and crash
recovery need. Redelivery (requeue, timeouts, deferral) is the channel's business;
the cursor only knows what has been read and what has been finished.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from .partition_log import PartitionLog
    from .record import Record

__all__ = ["ChannelCursor", "CursorStatistics"]


@attrs.frozen
class CursorStatistics:
    """A snapshot for /stats and for persisting."""

    read_id: int
    confirmed_id: int
    confirmed_offset: int
    finished_ahead: int
    """Ids finished out of order, waiting for the ones before them."""
    backlog: int
    """Records in the log not yet read by this channel."""


class ChannelCursor:
    """Read position, confirmed position and the out-of-order finished set."""

    def __init__(self, log: PartitionLog, start_id: int) -> None:
        """Start at ``start_id``: the log's oldest record for a topic's first channel,
        its next id for any later channel (nsqd's semantics)."""
        self.log = log
        self.read_id = start_id
        self.confirmed_id = start_id
        """Every id below this is finished for the channel."""
        self._finished: set[int] = set()

    @property
    def backlog(self) -> int:
        """Records appended and not yet read."""
        return self.log.next_id - self.read_id

    def position_after(self, count: int) -> int:
        """The read position once ``count`` more records have been read (at most the
        log's end): where a redelivered message is put back (see the channel)."""
        return min(self.read_id + max(count, 0), self.log.next_id)

    def take(self, max_count: int, stop_id: int | None = None) -> list[Record]:
        """Read up to ``max_count`` new records, none from ``stop_id`` on, and move past them.

        A durable log may have holes (a record recovery had to skip): their ids
        count as finished, so the confirmed position moves over them.
        """
        first = self.read_id
        if stop_id is not None:
            max_count = min(max_count, stop_id - first)
            if max_count <= 0:
                return []
        records = self.log.read(first, max_count)
        if records:
            last = records[-1].internal_id
            if stop_id is not None and last >= stop_id:  # read over a hole past the stop
                records = records[: bisect_left(records, stop_id, key=_record_id)]
                last = stop_id - 1
            self.read_id = last + 1
            if last - first + 1 != len(records):
                present = {record.internal_id for record in records}
                for missing in range(first, last + 1):
                    if missing not in present:
                        self.finish(missing)
        return records

    def finish(self, internal_id: int) -> None:
        """The channel is done with ``internal_id`` (FIN, or dropped by sampling)."""
        if internal_id < self.confirmed_id or internal_id >= self.read_id:
            return
        if internal_id == self.confirmed_id:
            confirmed = internal_id + 1
            finished = self._finished
            while confirmed in finished:
                finished.remove(confirmed)
                confirmed += 1
            self.confirmed_id = confirmed
        else:
            self._finished.add(internal_id)

    def is_finished(self, internal_id: int) -> bool:
        """Whether the channel is done with ``internal_id`` as far as the cursor knows."""
        return internal_id < self.confirmed_id or internal_id in self._finished

    def finish_many(self, internal_ids: list[int]) -> None:
        """:meth:`finish` of each id, in bulk. A run that starts at the confirmed id
        and counts up by one (a consumer's FINs in delivery order) moves the
        confirmed id in one step, checked by one list comparison; any other run (two
        connections' FINs interleave) goes into the finished set in one update and
        the confirmed id moves over it once."""
        if not internal_ids:
            return
        count = len(internal_ids)
        confirmed = self.confirmed_id
        read_id = self.read_id
        finished = self._finished
        if (
            internal_ids[0] == confirmed
            and confirmed + count <= read_id
            and internal_ids == list(range(confirmed, confirmed + count))
        ):
            confirmed += count
            if finished:
                finished.difference_update(internal_ids)
        elif min(internal_ids) >= confirmed and max(internal_ids) < read_id:
            finished.update(internal_ids)
        else:  # ids already confirmed or never read are ignored, as finish does
            finished.update(i for i in internal_ids if confirmed <= i < read_id)
        while confirmed in finished:
            finished.remove(confirmed)
            confirmed += 1
        self.confirmed_id = confirmed

    def move_to(self, internal_id: int) -> None:
        """Jump (channel empty, ``setoffset``): everything before is treated as finished."""
        self.read_id = internal_id
        self.confirmed_id = internal_id
        self._finished.clear()

    @property
    def confirmed_offset(self) -> int:
        """The log offset below which the channel has finished everything."""
        record = self.log.get(self.confirmed_id)
        if record is not None:
            return record.offset
        if self.confirmed_id >= self.log.next_id:
            return self.log.next_offset
        return self.log.start_offset

    @property
    def finished_count(self) -> int:
        """Ids finished out of order, past the confirmed one."""
        return len(self._finished)

    def statistics(self) -> CursorStatistics:
        """A frozen snapshot."""
        return CursorStatistics(
            self.read_id,
            self.confirmed_id,
            self.confirmed_offset,
            len(self._finished),
            self.backlog,
        )


def _record_id(record: Record) -> int:
    return record.internal_id
