"""What a channel and its topic need from a partition's log, in memory or on disk.

:class:`~trionsq.queues.memory_log.MemoryLog` and the durable
:class:`~trionsq.queues.topic_log.TopicLog` both provide it, so dispatch and channel
semantics do not know which one they read (design §2: the durable log slots in
without touching dispatch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .key_journal import KeyJournal
    from .record import Record
    from .record_runs import CopyScan

__all__ = ["PartitionLog"]


class PartitionLog(Protocol):
    """Records by contiguous id (holes allowed on disk), appended in batches."""

    next_id: int
    next_offset: int
    on_disk: bool
    """Whether records may have to be read from files (:meth:`read_cold`, blocking:
    in a worker thread); False for a log held wholly in memory."""

    @property
    def start_id(self) -> int:
        """The oldest id still held."""

    @property
    def start_offset(self) -> int:
        """The offset of the oldest record held."""

    @property
    def bytes_held(self) -> int:
        """Body bytes of the records held."""

    @property
    def earliest_id(self) -> int:
        """The oldest id a channel can be moved back to (``setoffset``)."""

    def rewind(self, internal_id: int) -> None:
        """Make records from ``internal_id`` (≥ ``earliest_id``) readable again."""

    def open_keys(self, window: int, *, create: bool) -> tuple[KeyJournal | None, bytes]:
        """The idempotency key journal kept with the log and the entries it held at
        open (queues/key_journal.py); (None, b"") when there is none (nor ``create``)."""

    def offset_of(self, internal_id: int, *, floor: int | None = None) -> int:
        """The offset of the first record from ``internal_id`` on (``next_offset`` if none)."""

    def seek_offset(self, offset: int, *, floor: int | None = None) -> int:
        """The id of the record at ``offset`` or the first after it (``next_id`` if none)."""

    def seek_timestamp(self, timestamp: int, *, floor: int | None = None) -> int:
        """The first id with a timestamp (ns) at or after ``timestamp`` (``next_id`` if none)."""

    def __len__(self) -> int: ...

    # a twin on purpose: MemoryLog and TopicLog (segment_writer.py) write this
    # signature out again, as a protocol's implementations do; forwarding through
    # **kwargs would put a dict on the publish path
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
        """Append a batch; returns its records."""

    def append_one(self, body: bytes, timestamp: int) -> Record:
        """``append([body], timestamp)[0]``, the way a PUB takes (issue 37)."""

    def append_verbatim(
        self, data: bytes, scan: CopyScan, records: list[Record] | None = None
    ) -> None:
        """Append records already encoded, ``data`` their bytes (a replica's copy of
        its leader's log, checked by :func:`~trionsq.queues.record_runs.scan_copies`),
        as they are; ``records``: their Records if the caller made them (a log that
        keeps Records makes them itself otherwise)."""

    def read(self, from_id: int, max_count: int) -> list[Record]:
        """Up to ``max_count`` records from ``from_id`` on, from memory only."""

    def get(self, internal_id: int) -> Record | None:
        """One record, if held in memory."""

    def discard_before(self, internal_id: int) -> int:
        """Let go of records below ``internal_id``."""

    def is_cold(self, from_id: int) -> bool:
        """Whether reading from ``from_id`` needs :meth:`read_cold` first."""

    def read_cold(
        self,
        from_id: int,
        max_records: int,
        max_bytes: int = ...,
        *,
        floor: int | None = None,
    ) -> list[Record]:
        """Up to ``max_records`` records (about ``max_bytes``) from ``from_id`` on, read
        from the files (blocking; any thread); pass them to :meth:`install_chunk` to
        serve them. Nothing below ``floor`` (default ``start_id``; at least
        ``earliest_id``) is read."""

    def install_chunk(self, from_id: int, records: list[Record]) -> None:
        """Keep what :meth:`read_cold` returned so :meth:`read` serves it."""

    def chunk_stop(self, from_id: int) -> int | None:
        """Where the installed chunk holding ``from_id`` ends (None: none holds it)."""
