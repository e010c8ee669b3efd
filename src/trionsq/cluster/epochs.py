"""Where each leader epoch begins in a partition's log (Kafka's leader epoch cache). Sans-IO.

A leader that takes over at epoch ``e`` with its log ending at id ``n`` records
``(e, n)``: its records from ``n`` on are epoch ``e``'s. A follower copies the
entries as the records arrive. When a follower (re)starts following, it tells the
leader the epoch of its last record; the leader answers with the newest epoch it
holds that is not later (:meth:`answer`) and where that epoch ends in *its* log.
When the follower holds records of that epoch too, it cuts its log at the smaller
of the two ends (:meth:`cut_point`); when it does not, it asks again with the
newest epoch it holds below that one (:meth:`next_question`), and so on down:
KIP-101 with KIP-279's fix. This finds the exact point where two logs
diverge, where cutting back to the high watermark could drop records a new leader
had committed, or keep ones it never had.
"""

from __future__ import annotations

import bisect

import orjson

__all__ = ["EpochHistory"]


class EpochHistory:
    """(epoch, start id) pairs, both increasing."""

    __slots__ = ("entries",)

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.entries: list[tuple[int, int]] = list(entries or [])

    def held(self, log_end: int) -> list[int]:
        """The epochs the log holds records of (below ``log_end``), oldest first."""
        entries = self.entries
        stops = [min(start, log_end) for _, start in entries[1:]]
        stops.append(log_end)
        return [epoch for (epoch, start), stop in zip(entries, stops, strict=False) if start < stop]

    def last_epoch(self, log_end: int) -> int:
        """The epoch of the last record below ``log_end`` (0: none)."""
        held = self.held(log_end)
        return held[-1] if held else 0

    def next_question(self, answered: int, log_end: int) -> int | None:
        """A follower given the leader's ``answered`` epoch: None when it may cut now
        (it holds records of that epoch, or the answer is 0), else the epoch to ask
        about next (the newest it holds below ``answered``, or 0)."""
        held = self.held(log_end)
        if answered == 0 or answered in held:
            return None
        older = [epoch for epoch in held if epoch < answered]
        return older[-1] if older else 0

    def begin(self, epoch: int, start_id: int) -> bool:
        """Records from ``start_id`` on are ``epoch``'s; whether anything changed.

        An entry for an older or equal epoch is ignored; entries starting at or after
        ``start_id`` give way (their records were cut).
        """
        if self.entries and epoch <= self.entries[-1][0]:
            return False
        self.truncate(start_id)
        self.entries.append((epoch, start_id))
        return True

    def end_of(self, epoch: int, log_end: int) -> int:
        """Where records of epochs up to ``epoch`` end in this log: the start of the
        first later epoch, or ``log_end``."""
        index = bisect.bisect_right(self.entries, epoch, key=lambda entry: entry[0])
        if index < len(self.entries):
            return self.entries[index][1]
        return log_end

    def answer(self, last_epoch: int, log_end: int) -> tuple[int, int]:
        """A leader's reply to a follower whose last record is of ``last_epoch``: the
        newest epoch held that is not later (0: none) and where it ends here."""
        index = bisect.bisect_right(self.entries, last_epoch, key=lambda entry: entry[0])
        epoch = self.entries[index - 1][0] if index else 0
        return epoch, self.end_of(epoch, log_end)

    def cut_point(self, epoch: int, leader_end: int, log_end: int) -> int:
        """A follower's cut, given the leader's :meth:`answer`: the records below it
        are the same in both logs."""
        return min(leader_end, self.end_of(epoch, log_end), log_end)

    def epoch_at(self, internal_id: int) -> int:
        """The epoch of the record ``internal_id`` (0 before any entry)."""
        index = bisect.bisect_right(self.entries, internal_id, key=lambda entry: entry[1])
        return self.entries[index - 1][0] if index else 0

    def next_start(self, internal_id: int) -> int | None:
        """Where the epoch after ``internal_id``'s begins (None: it is the last)."""
        index = bisect.bisect_right(self.entries, internal_id, key=lambda entry: entry[1])
        return self.entries[index][1] if index < len(self.entries) else None

    def truncate(self, end: int) -> None:
        """The log was cut at ``end``: forget epochs that start at or after it."""
        while self.entries and self.entries[-1][1] >= end:
            self.entries.pop()

    def dumps(self) -> bytes:
        """JSON for the partition's epochs file."""
        return orjson.dumps(self.entries)

    @classmethod
    def loads(cls, data: bytes) -> EpochHistory:
        """From :meth:`dumps`'s bytes; anything unreadable gives an empty history
        (the follower then cuts back to the leader's first epoch and fetches again)."""
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError:
            return cls()
        if not isinstance(raw, list):
            return cls()
        return cls(
            [
                (item[0], item[1])
                for item in raw
                if isinstance(item, list) and len(item) == 2 and all(type(x) is int for x in item)
            ]
        )
