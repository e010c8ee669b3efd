"""A topic partition's durable log: append-only segment files and a tail cache (design §2).

The broker's :class:`~trionsq.queues.memory_log.MemoryLog` methods, backed by files,
so that an acknowledged publish survives ``kill -9``: :meth:`TopicLog.append` hands
the whole batch to the kernel with ``os.write`` before it returns (no userspace
buffer); :meth:`TopicLog.sync` adds fsync for power loss, on the broker's
``--sync-every`` / ``--sync-timeout`` schedule.

Files, in ``directory``: ``<name>.<seq:06d>.log``, ``seq`` counting up from 0. Each
segment is a 32-byte header followed by records back to back, each encoded exactly
as :func:`~trionsq.queues.record.encode_record` does (size, crc32, fields, body)::

    header: [8 magic "TNSQSEG1"][8 first offset][8 first id][4 version = 0]
            [4 crc32 of the 28 bytes before it]

The header makes each segment self-describing: a record's position in its file is
``32 + offset - first offset``, and the segments that remain after retention deleted
older ones (or after a damaged one was set aside) still know their ids and virtual
offsets. A segment is rolled before a batch that would take it past
``max_bytes_per_file``; a batch is never split, so one bigger than that gets a
segment of its own.

Reads. The last ``cache_records`` records stay in memory, so a consumer that keeps up
never reads a file; :meth:`TopicLog.read` and :meth:`TopicLog.get` answer only from
memory (the tail cache and the chunks installed with :meth:`TopicLog.install_chunk`)
and never block. For an older id they return nothing and :meth:`TopicLog.is_cold`
says so; the caller then runs :meth:`TopicLog.read_cold` in a worker thread and
installs what it returns. See :meth:`TopicLog.read_cold` for what may run in another
thread.

Ids may have holes: a record recovery had to skip (damaged) keeps its id unused,
and :meth:`TopicLog.read` simply goes past it. :attr:`TopicLog.holes` counts them.
A damaged record is never trusted for where the next one starts (its size field
may be the damaged byte): the walk over a segment resynchronises at the next
intact record (:func:`~trionsq.queues.segment_walk._resync`), the bytes in between
stay in place as a gap that readers jump over, and a copy goes to
``<segment>.<start>-<stop>.bad``.

Recovery (:meth:`TopicLog.open`) costs the last segment plus one header per segment,
whatever the backlog: only the last segment (the one appends go on in) is read
record by record. A sealed segment (one a later segment follows) is checked by its
header and its size alone; the next segment's header says exactly where it ends.
Its records are verified, and its sparse index built, by the first read or seek
that needs it (:meth:`TopicLog.read_cold`, in a worker thread). What recovery or a
first read cannot read is never dropped silently: each loss is logged on
``trionsq.storage`` and counted, in the :class:`RecoveryReport` at open, in
:attr:`TopicLog.holes` and :attr:`TopicLog.late_missing_ids` once a read found it.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_right
from operator import attrgetter
from typing import TYPE_CHECKING, Final

from .cold_reads import COLD_CHUNK_BYTES, _ColdReads
from .key_journal import KeyJournal
from .log_state import CACHE_BYTES, MAX_CHUNKS
from .recovery import RecoveryReport, _Tally
from .retention import _Retention
from .segment_format import (
    HEADER_SIZE,
    INDEX_INTERVAL,
    SEGMENT_MAGIC,
    _fsync_directory,
    _open_to_read,
    segment_name,
)
from .segment_writer import _SegmentWriter

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..descriptors import DescriptorBudget

__all__ = [
    "COLD_CHUNK_BYTES",
    "HEADER_SIZE",
    "INDEX_INTERVAL",
    "SEGMENT_MAGIC",
    "RecoveryReport",
    "TopicLog",
    "segment_name",
]

_first_offset: Final = attrgetter("first_offset")


class TopicLog(_ColdReads, _SegmentWriter, _Retention):
    """One topic partition's records in segment files, with MemoryLog's methods.

    Create with :meth:`open`. ``append``, ``read``, ``get``, ``is_cold``,
    ``install_chunk``, ``discard_before``, ``expire`` and ``close`` belong to one
    thread (the event loop's); ``read_cold``, the seeks and ``offset_of`` may run in
    other threads at the same time (see :meth:`read_cold`), and so may ``sync``.

    Its methods come from one class per concern, all over the attributes of
    :class:`~trionsq.queues.log_state._LogState` (which also reads from memory):
    :mod:`~trionsq.queues.recovery`, :mod:`~trionsq.queues.cold_reads`,
    :mod:`~trionsq.queues.segment_writer` and :mod:`~trionsq.queues.retention`.
    This class opens the log, recovers it with them, and reports on its size.
    """

    on_disk = True
    """Records past the tail cache are read from the segment files."""
    _keys: KeyJournal | None = None

    # -- opening and recovery -------------------------------------------------------

    # a twin on purpose: the settings of _LogState.__init__ (log_state.py), forwarded
    # by name so that a caller of open() gets them typed and checked
    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        name: str,
        *,
        max_bytes_per_file: int,
        cache_records: int,
        retention: float = 0.0,
        clock: Callable[[], float] = time.time,
        index_interval: int = INDEX_INTERVAL,
        max_chunks: int = MAX_CHUNKS,
        cache_bytes: int = CACHE_BYTES,
        files: DescriptorBudget | None = None,
    ) -> tuple[TopicLog, RecoveryReport]:
        """Open (creating the directory if needed) and recover the log ``name``.

        Rules. Every segment's header is read, and files are taken in order:

        - a zero-length file is removed: it was created and never written;
        - a file with a damaged header, or one whose header starts before the one
          before it, is renamed ``.bad`` (logged in nsqd's words: "jump to next file
          and saving bad file as"); a last file too short for a header is removed
          (a torn header);
        - a sealed segment (one a later segment follows) is not read: it must end
          where the next one's header starts (position ``32 + next first offset -
          its first offset``), and holds ids [first id, next first id).

          - Longer: the bytes past that point are a write that failed and could
            not be undone, then a roll (the later segment holds what was
            acknowledged); they are saved as ``<file>.bad`` and cut. A segment
            left with no record is removed.
          - Shorter (the segment after it was set aside, or it was cut before):
            it is read record by record at open, and the ids it lacks become
            holes. What follows its last intact record is saved as ``.bad`` and
            cut; with no intact record it is set aside.
          - Otherwise its records are verified by the first read or seek that
            needs them (:meth:`_checked`): damage found then is skipped, copied,
            logged and counted once (:attr:`late_missing_ids`), its ids holes, as
            at open. A damaged rest with no intact record after it stays in the
            file unread (and is copied), its ids holes: a read never changes a
            segment;

        - the last segment is read record by record. Damaged bytes (a bad
          checksum, bad fields, an impossible size field) followed by an intact
          record are skipped where they are: the walk resynchronises at the first
          intact record after them (:func:`~trionsq.queues.segment_walk._resync`),
          their ids become holes, a copy goes to ``<segment>.<start>-<stop>.bad``,
          one warning per range.
          What follows the last intact record (a torn write, or damage with
          nothing intact after it, which cannot be told from one) is truncated
          and not counted as lost. A segment whose header says it
          starts inside the one before cuts that one back to there;
        - ids of missing records between segments become holes;
        - ids continue after the last intact record, offsets after its end.

        The tail cache is filled with the last records of the segments read (a
        sealed one is not read for it). The logical start is the first segment's
        first id: the caller moves it on with :meth:`discard_before` from what its
        channels have confirmed.
        """
        log = cls(
            directory,
            name,
            max_bytes_per_file=max_bytes_per_file,
            cache_records=cache_records,
            retention=retention,
            clock=clock,
            index_interval=index_interval,
            max_chunks=max_chunks,
            cache_bytes=cache_bytes,
            files=files,
        )
        return log, log._recover()

    def _recover(self) -> RecoveryReport:
        self.directory.mkdir(parents=True, exist_ok=True)
        found = self._segment_files()
        tally = _Tally()
        heads = self._read_headers(found, tally)
        segments = self._chain_segments(heads, tally)
        self._segments = tuple(segments)
        self._disk_bytes = sum(segment.end for segment in segments)
        if segments:
            self._take_segments(segments)
        self._cache_base = self.next_id
        if self._directory_dirty:
            _fsync_directory(self.directory)
            self._directory_dirty = False
        self._load_tail()
        return self._report(segments, tally)

    def _load_tail(self) -> None:
        """Fill the tail cache from disk: the last contiguous ids, up to the cache size,
        from the segments read at open."""
        if not self.cache_records or self.next_id <= self._start_id:
            return
        first = max(self._start_id, self.next_id - self.cache_records)
        if self._holes:
            first = max(first, self._holes[-1][1])
        for segment in reversed(self._segments):
            if segment.check is None:  # sealed: reading it would verify it all
                first = max(first, segment.next_id)
                break
        floor = self.next_offset - self.cache_bytes  # no more than the byte bound either
        if self._segments and floor > self._segments[-1].first_offset:
            first = max(first, self.seek_offset(floor, floor=first))
        if first >= self.next_id:
            return
        records = self.read_cold(first, self.cache_records, max_bytes=1 << 62)
        if not records or records[-1].internal_id != self.next_id - 1:
            return
        start = len(records) - 1
        while start and records[start - 1].internal_id == records[start].internal_id - 1:
            start -= 1
        self._cache = records[start:]
        self._cache_base = records[start].internal_id

    # -- the idempotency key journal ------------------------------------------------

    def open_keys(self, window: int, *, create: bool) -> tuple[KeyJournal | None, bytes]:
        """This log's idempotency key journal (queues/key_journal.py) and the entries it
        held at open; (None, b"") when it has none and not ``create``. Synced, closed
        and deleted with the log."""
        if self._keys is not None:
            return self._keys, b""
        journal, entries = KeyJournal.open(
            self.directory / f"{self.name}.keys", window, create=create, files=self._files
        )
        self._keys = journal
        return journal, entries

    def sync(self) -> None:
        super().sync()
        if self._keys is not None:
            self._keys.sync()

    def close(self, *, sync: bool = True) -> None:
        super().close(sync=sync)
        if self._keys is not None:
            if sync:
                self._keys.sync()
            self._keys.close()

    def delete_files(self) -> None:
        super().delete_files()
        journal = self._keys or KeyJournal(self.directory / f"{self.name}.keys", 1, self._files)
        journal.delete()
        self._keys = None

    # -- the bytes, for replicas ------------------------------------------------------

    def read_encoded(self, offset: int, stop: int) -> bytes:
        """The log's bytes from ``offset`` (where a record starts) to ``stop`` or the
        end of the one segment that holds ``offset``, whichever comes first (b"" if
        none does): a leader ships its records to its replicas as they are
        (docs/replication.md). The caller checks that whole records came back.
        Blocking; the thread-safety contract of :meth:`read_cold`."""
        segments = self._segments
        number = bisect_right(segments, offset, key=_first_offset) - 1
        if number < 0:
            return b""
        segment = segments[number]
        base = HEADER_SIZE - segment.first_offset
        position, end = offset + base, min(stop + base, segment.end)
        if position >= end:
            return b""
        fd = _open_to_read(segment.path)
        if fd is None:
            return b""
        try:
            return os.pread(fd, end - position, position)
        finally:
            os.close(fd)

    # -- sizes ----------------------------------------------------------------------

    @property
    def start_id(self) -> int:
        """The oldest id still held (== ``next_id`` when empty)."""
        return self._start_id

    @property
    def start_offset(self) -> int:
        """The offset of the oldest record held (== ``next_offset`` when empty).

        Known in memory unless the start moved to a record neither cached nor in an
        installed chunk; then one bounded read (at most an index interval) finds it.
        """
        if self._start_offset is None:
            self._start_offset = self.offset_of(self._start_id)
        return self._start_offset

    @property
    def earliest_id(self) -> int:
        """The oldest id still in a segment file: below ``start_id`` while retention
        (or a partly released first segment) keeps it, so a channel can replay it."""
        segments = self._segments
        return min(segments[0].first_id, self._start_id) if segments else self._start_id

    def rewind(self, internal_id: int) -> None:
        """Move the logical start back to ``internal_id`` (not below
        :attr:`earliest_id`), for a channel set to replay from there.

        Those records are read from disk again; holes found before the earlier
        release are not remembered, so ``len`` may count them until they are read.
        """
        target = max(internal_id, self.earliest_id)
        if target < self._start_id:
            self._start_id = target
            self._start_offset = None

    def __len__(self) -> int:
        return self.next_id - self._start_id - self._missing(self._start_id, self.next_id)

    @property
    def holes(self) -> int:
        """Ids from ``start_id`` on with no record (recovery or a first read skipped
        them)."""
        return self._missing(self._start_id, self.next_id)

    @property
    def late_missing_ids(self) -> int:
        """Ids found missing after open, by the first read of a sealed segment
        (damaged records, an unreadable part); logged, and counted in :attr:`holes`
        as well while they are at or after ``start_id``."""
        with self._lock:
            return self._late_missing

    @property
    def bytes_held(self) -> int:
        """Record bytes held in memory: the tail cache and installed cold chunks."""
        held = 0
        if self._cache_skip < len(self._cache):
            held = self.next_offset - self._cache[self._cache_skip].offset
        for chunk in self._chunks:
            held += chunk.records[-1].end - chunk.records[0].offset
        return held

    @property
    def disk_bytes(self) -> int:
        """Bytes of the segment files (headers included)."""
        return self._disk_bytes

    @property
    def segment_count(self) -> int:
        return len(self._segments)
