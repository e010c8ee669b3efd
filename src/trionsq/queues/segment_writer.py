"""Appending to the active segment: writing a batch all or nothing, rolling, syncing.

An acknowledged publish must survive ``kill -9``: :meth:`_SegmentWriter.append`
hands the whole batch to the kernel with one ``os.write`` before it returns, and
undoes a partial write; :meth:`_SegmentWriter.sync` adds fsync for power loss.
Only the appending thread writes; ``sync`` may run in a worker thread meanwhile.
"""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_left
from typing import TYPE_CHECKING

from .log_state import _LogState
from .record import FIXED_SIZE, Record
from .record_codec import _append_record, _encode_batch, write_whole
from .segment_format import (
    HEADER_SIZE,
    _Check,
    _encode_header,
    _fsync_directory,
    _Segment,
    segment_name,
    storage_log,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .record_runs import CopyScan


class _SegmentWriter(_LogState):
    """The write side of :class:`~trionsq.queues.topic_log.TopicLog`."""

    # -- writing --------------------------------------------------------------------

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

        The batch is in the kernel (one ``os.write``) when this returns, so it survives
        the broker being killed; :meth:`sync` makes it survive a power loss. On an
        error nothing is appended (the partial write is truncated off).
        """
        count = len(bodies)
        if not count:
            return []
        if self._closed:
            raise ValueError(f"TOPICLOG({self.name}) is closed")
        if (trace_ids is not None and len(trace_ids) < count) or (
            ext_version and exts is not None and len(exts) < count
        ):
            raise ValueError("trace_ids and exts need one entry per body")
        first_id = self.next_id
        offset = self.next_offset
        data, records, offsets = _encode_batch(
            bodies, timestamp, first_id, offset, trace_ids, ext_version, exts, deliver_at
        )
        self._put(data, first_id, offsets, timestamp, None, records)
        return records

    def append_one(self, body: bytes, timestamp: int) -> Record:
        """``append([body], timestamp)[0]`` in fewer steps (a PUB, issue 37): the
        record is encoded and written by one call (compiled where built) and no list
        is made for it, unless it needs a roll or a segment header (then
        :meth:`append` takes it). The same guarantees: in the kernel on return,
        nothing appended on an error."""
        segment = self._active
        size = FIXED_SIZE + len(body)
        if (
            segment is None
            or segment.end <= HEADER_SIZE
            or segment.end + size > self.max_bytes_per_file
            or self._force_roll
            or self._closed
            or type(body) is not bytes
        ):
            return self.append((body,), timestamp)[0]
        handle = self._handle
        assert handle is not None  # noqa: S101 - set together with _active
        fd = handle.descriptor()
        first_id = self.next_id
        offset = self.next_offset
        try:
            record = _append_record(fd, body, timestamp, first_id, offset, Record)
        except OSError as error:
            self._undo_write(segment, fd, error)
            raise
        offsets = (offset, offset + size)
        self._written(segment, self._active_check, size, first_id, offsets, timestamp, [record])
        return record

    def append_verbatim(
        self, data: bytes, scan: CopyScan, records: list[Record] | None = None
    ) -> None:
        """Append the records ``scan`` found in ``data``, their bytes exactly as this
        log encodes them (a replica's copy of its leader's log: docs/replication.md),
        with :meth:`append`'s guarantees; the caller checked that they continue the
        log. ``records``: their Records, kept in the tail cache when the caller made
        them anyway; without them the cache starts again after this batch (reads of
        the copies come from the files)."""
        if not scan.count:
            return
        if self._closed:
            raise ValueError(f"TOPICLOG({self.name}) is closed")
        self._put(data, scan.first_id, scan.offsets, scan.stamps[-1], scan.stamps, records)

    def _put(
        self,
        data: bytes,
        first_id: int,
        offsets: Sequence[int],
        timestamp: int,
        stamps: Sequence[int] | None,
        records: list[Record] | None,
    ) -> None:
        """Write a batch's bytes to the active segment (rolled first if full) and
        account for it: index, tail cache, sizes. ``offsets``: its records' offsets,
        then its end; ``timestamp``: the batch's greatest; ``stamps``: the greatest up
        to each record, when they differ (None: one timestamp for all); ``records``:
        for the tail cache (None: the cache starts again after this batch)."""
        segment = self._active
        check = self._active_check
        if (
            segment is None
            or self._force_roll
            or (segment.end > HEADER_SIZE and segment.end + len(data) > self.max_bytes_per_file)
        ):
            segment = self._roll()
            check = self._active_check
        if segment.end == 0:
            data = _encode_header(segment.first_offset, segment.first_id) + data
        self._write(segment, data)
        self._written(segment, check, len(data), first_id, offsets, timestamp, records, stamps)

    def _written(
        self,
        segment: _Segment,
        check: _Check,
        size: int,
        first_id: int,
        offsets: Sequence[int],
        timestamp: int,
        records: list[Record] | None,
        stamps: Sequence[int] | None = None,
    ) -> None:
        """Account for a batch of ``size`` bytes just written to the active segment:
        its end, index, tail cache, sizes (the arguments: as :meth:`_put`'s)."""
        count = len(offsets) - 1
        # Committed: readers in other threads go by ``end``, so it moves first.
        segment.end += size
        segment.next_id = first_id + count
        if offsets[-2] >= self._mark:
            self._index(segment, check, offsets, first_id, timestamp, stamps)
        if timestamp > check.timestamp_max:
            check.timestamp_max = timestamp
        self.next_id = first_id + count
        self.next_offset = offsets[-1]
        self._disk_bytes += size
        if records is None:
            self._cache_restart()
        else:
            self._cache_append(records)
        with self._lock:
            self.unsynced += count

    def _index(
        self,
        segment: _Segment,
        check: _Check,
        offsets: Sequence[int],
        first_id: int,
        timestamp: int,
        stamps: Sequence[int] | None,
    ) -> None:
        """Add the sparse index entries due in a batch just written (``offsets``: the
        batch's record offsets, then its end; ``timestamp``, ``stamps``: as
        :meth:`_put`'s)."""
        last = len(offsets) - 1
        position_base = HEADER_SIZE - segment.first_offset
        mark = self._mark
        at = bisect_left(offsets, mark, 0, last)
        index = check.index
        while at < last:
            if at == 0:
                before = check.timestamp_max
            else:
                before = max(check.timestamp_max, timestamp if stamps is None else stamps[at - 1])
            index.append((first_id + at, offsets[at] + position_base, before))
            mark = offsets[at] + self.index_interval
            at = bisect_left(offsets, mark, at + 1, last)
        self._mark = mark

    def _write(self, segment: _Segment, data: bytes) -> None:
        """All of ``data`` to the active segment, or nothing (then re-raise).

        The segment's file is opened again first if the descriptor budget closed
        it while idle (an OSError then, with nothing written)."""
        handle = self._handle
        assert handle is not None  # noqa: S101 - set together with _active
        fd = handle.descriptor()
        try:
            write_whole(fd, data)
        except OSError as error:
            self._undo_write(segment, fd, error)
            raise

    def _undo_write(self, segment: _Segment, fd: int, error: OSError) -> None:
        """A write to the active segment failed: name its file in ``error`` and cut
        off what part of the batch reached it (if that fails too, the next batch
        goes to a new segment)."""
        if error.errno is not None and error.filename is None:
            error.filename = segment.path
        try:
            os.ftruncate(fd, segment.end)
        except OSError as undo:
            # The file may end in part of this batch: never write after it.
            self._force_roll = True
            storage_log.error(
                "TOPICLOG(%s) could not undo a failed write to %s: %s",
                self.name,
                segment.path,
                undo.strerror or undo,
            )

    def _roll(self) -> _Segment:
        """Start a new segment at ``next_id`` / ``next_offset``; its header goes out
        with the first batch."""
        seq = self._next_seq
        path = str(self.directory / segment_name(self.name, seq))
        handle = self._files.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        self._next_seq = seq + 1
        check = _Check([])
        segment = _Segment(
            seq, path, self.next_id, self.next_offset, next_id=self.next_id, check=check
        )
        old = self._active
        with self._lock:
            if self._handle is not None:
                self._pending.append(self._handle)
            self._handle = handle
            self._directory_dirty = True
        if old is not None:
            old.closed_at = self._clock()
        self._segments = (*self._segments, segment)
        self._active = segment
        self._active_check = check
        self._mark = segment.first_offset
        self._force_roll = False
        return segment

    def sync(self) -> None:
        """fsync what was written: rolled segments, the active one, the directory.

        A segment the descriptor budget closed since it was written is opened for
        its fsync (the kernel syncs the file's pages whichever descriptor wrote
        them), so closing idle files never skips a sync that was due.

        Blocks (milliseconds): may run in a worker thread while the event loop
        appends, but not at the same time as another ``sync`` or ``close``.
        """
        with self._lock:
            pending = self._pending
            self._pending = []
            handle = self._handle
            written = self.unsynced
            directory_dirty = self._directory_dirty
            self._directory_dirty = False
            self.unsynced = 0
        failure: OSError | None = None
        for old in pending:  # each is closed, even after a failed fsync
            try:
                old.fsync()
            except OSError as error:
                failure = failure or error
            finally:
                old.close()
        try:
            if handle is not None and (written or handle.fd is not None):
                handle.fsync()
            if directory_dirty:
                _fsync_directory(self.directory)
        except OSError as error:
            failure = failure or error
        if failure is not None:
            with self._lock:  # still due: the directory entry, the active segment
                self._directory_dirty = self._directory_dirty or directory_dirty
                self.unsynced += written
            if failure.errno is not None and failure.filename is None:
                failure.filename = self.name
            raise failure

    def close(self, *, sync: bool = True) -> None:
        """Stop taking writes; fsync first unless ``sync`` is False."""
        if self._closed:
            return
        if sync:
            self.sync()
        self._closed = True
        with self._lock:
            handles = [*self._pending, *([self._handle] if self._handle is not None else [])]
            self._pending = []
            self._handle = None
        for handle in handles:
            handle.close()

    def delete_files(self) -> None:
        """Close and remove every segment file (topic or channel deleted)."""
        self.close(sync=False)
        for segment in self._segments:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(segment.path)
        self._segments = ()
        self._disk_bytes = 0
