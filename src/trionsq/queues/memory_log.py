"""A partition log held in memory: real ids and offsets, no files.

Design §2 lets the broker run on this until the durable log lands behind the same
methods. Records are kept in a list indexed by ``internal_id - base``; discarding
consumed records advances ``start_id`` and compacts the list now and then.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import islice
from typing import TYPE_CHECKING

from .record import Record, record_size
from .record_runs import decode_all

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .key_journal import KeyJournal
    from .record_runs import CopyScan

__all__ = ["MemoryLog"]


class MemoryLog:
    """One topic partition's records, appended in batches and read by id."""

    on_disk = False
    """Everything is in memory: nothing is ever cold."""

    def __init__(self, *, first_id: int = 1, first_offset: int = 0) -> None:
        self._records: list[Record] = []
        self._base_id = first_id
        """The id of ``_records[0]``."""
        self._skip = 0
        """Leading list entries already discarded (compacted lazily)."""
        self.next_id = first_id
        self.next_offset = first_offset
        self.bytes_held = 0
        """Body bytes of the records held (for /stats and memory bounds)."""

    @property
    def start_id(self) -> int:
        """The oldest id still held (== ``next_id`` when empty)."""
        return self._base_id + self._skip

    @property
    def start_offset(self) -> int:
        """The offset of the oldest record held (== ``next_offset`` when empty)."""
        index = self._skip
        return self._records[index].offset if index < len(self._records) else self.next_offset

    @property
    def earliest_id(self) -> int:
        """Released records are gone from memory: the same as ``start_id``."""
        return self.start_id

    def rewind(self, internal_id: int) -> None:
        """Nothing to do: a memory log cannot give back what it released."""

    def open_keys(self, window: int, *, create: bool) -> tuple[KeyJournal | None, bytes]:
        """No key journal: nothing of a memory log outlives the process."""
        return None, b""

    def __len__(self) -> int:
        return len(self._records) - self._skip

    # PartitionLog.append's signature, written out (see the note there)
    def append(
        self,
        bodies: Sequence[bytes],
        timestamp: int,
        *,
        trace_ids: Sequence[int] | None = None,
        ext_version: int = 0,
        exts: Sequence[bytes] | None = None,
        deliver_at: int = 0,
    ) -> list[Record]:
        """Append a batch (one PUB, or all of an MPUB) and return its records.

        ``deliver_at`` (ns since the epoch) holds a DPUB back until then.
        """
        records: list[Record] = []
        append = records.append
        internal_id = self.next_id
        offset = self.next_offset
        held = 0
        for index, body in enumerate(bodies):
            ext = exts[index] if exts is not None else b""
            size = record_size(len(body), ext_version, len(ext), deferred=deliver_at != 0)
            trace_id = trace_ids[index] if trace_ids is not None else 0
            append(
                Record(
                    offset,
                    size,
                    internal_id,
                    timestamp,
                    body,
                    trace_id,
                    ext_version,
                    ext,
                    deliver_at,
                )
            )
            internal_id += 1
            offset += size
            held += len(body)
        self._records.extend(records)
        self.next_id = internal_id
        self.next_offset = offset
        self.bytes_held += held
        return records

    def append_one(self, body: bytes, timestamp: int) -> Record:
        """``append([body], timestamp)[0]`` (the durable log has a shorter way)."""
        return self.append((body,), timestamp)[0]

    def append_verbatim(
        self, data: bytes, scan: CopyScan, records: list[Record] | None = None
    ) -> None:
        """Append a replica's copies of its leader's records (which the caller checked
        continue this log): a memory log keeps their Records, not their bytes."""
        if not scan.count:
            return
        if records is None:
            records = decode_all(data, scan.offsets[0])
        self._records.extend(records)
        self.next_id = scan.first_id + scan.count
        self.next_offset = scan.offsets[-1]
        self.bytes_held += scan.body_bytes

    def read(self, from_id: int, max_count: int) -> list[Record]:
        """Up to ``max_count`` records from ``from_id`` on (ids before ``start_id`` are gone)."""
        first = max(from_id, self.start_id) - self._base_id
        return self._records[first : first + max_count]

    def get(self, internal_id: int) -> Record | None:
        """The record with this id, if still held."""
        if not self.start_id <= internal_id < self.next_id:
            return None
        return self._records[internal_id - self._base_id]

    def discard_before(self, internal_id: int) -> int:
        """Drop records with ids below ``internal_id``; returns how many went."""
        stop = min(internal_id, self.next_id) - self._base_id
        if stop <= self._skip:
            return 0
        dropped = self._records[self._skip : stop]
        self.bytes_held -= sum(len(r.body) for r in dropped)
        self._skip = stop
        if self._skip > 1024 and self._skip * 2 > len(self._records):
            del self._records[: self._skip]
            self._base_id += self._skip
            self._skip = 0
        return len(dropped)

    def truncate(self, end_id: int) -> int:
        """Drop the records from ``end_id`` on (a replica's uncommitted tail after a
        leader change, docs/replication.md); returns how many went."""
        if end_id >= self.next_id:
            return 0
        keep = max(end_id, self.start_id) - self._base_id
        cut = self._records[keep:]
        del self._records[keep:]
        self.bytes_held -= sum(len(r.body) for r in cut)
        self.next_id = max(end_id, self.start_id)
        self.next_offset = cut[0].offset if cut else self.next_offset
        return len(cut)

    def is_cold(self, from_id: int) -> bool:
        """Never: every record held is in memory."""
        return False

    def read_cold(
        self,
        from_id: int,
        max_records: int,
        max_bytes: int = 0,
        *,
        floor: int | None = None,
    ) -> list[Record]:
        """Nothing is on disk."""
        del max_bytes, floor
        return []

    def install_chunk(self, from_id: int, records: list[Record]) -> None:
        """Nothing to keep: reads come from memory."""

    def chunk_stop(self, from_id: int) -> int | None:
        """No chunks: nothing is read from disk."""
        return None

    def offset_of(self, internal_id: int, *, floor: int | None = None) -> int:
        """The offset of the first record from ``internal_id`` on (``next_offset`` if none)."""
        del floor
        record = self.get(max(internal_id, self.start_id))
        return record.offset if record is not None else self.next_offset

    def seek_offset(self, offset: int, *, floor: int | None = None) -> int:
        """The id of the record at ``offset`` or the first after it (``next_id`` if none)."""
        del floor  # nothing below start_id is held
        records = self._records
        at = bisect_left(records, offset, lo=self._skip, key=_record_offset)
        return records[at].internal_id if at < len(records) else self.next_id

    def seek_timestamp(self, timestamp: int, *, floor: int | None = None) -> int:
        """The first id whose timestamp is at or after ``timestamp`` (``next_id`` if
        none). A scan, not a bisection: the wall clock may have gone back."""
        del floor
        for record in islice(self._records, self._skip, None):
            if record.timestamp >= timestamp:
                return record.internal_id
        return self.next_id


def _record_offset(record: Record) -> int:
    return record.offset
