"""Recovering segments: at open, and at the first read of a sealed segment.

At open every segment's header is read, sealed segments are checked by their size
against the next header, and the last segment is walked record by record
(:func:`~trionsq.queues.segment_walk._walk_records`); a sealed segment is walked
by the first read that needs it (:meth:`_SegmentRecovery._checked`). Nothing is
dropped silently: damaged ranges are skipped and copied to ``.bad`` files, whole
unreadable segments and tails are set aside as ``.bad``, and every loss is logged
on ``trionsq.storage`` and counted, in the :class:`RecoveryReport` at open or in
the late counts after.
"""

from __future__ import annotations

import contextlib
import os
import re

import attrs

from .log_state import _LogState
from .record_codec import _frames, _intact, _Walk
from .segment_format import (
    _NO_LIMIT,
    _O_CLOEXEC,
    _SCAN_CHUNK,
    HEADER_SIZE,
    _bad_path,
    _Check,
    _copy_bytes,
    _decode_header,
    _open_to_read,
    _Segment,
    _spans,
    storage_log,
)
from .segment_walk import _Found, _walk_records


@attrs.frozen
class RecoveryReport:
    """What :meth:`TopicLog.open` found, and every loss it had to accept."""

    segments: int
    """Segment files in use after recovery."""
    records: int
    """Records held: the intact ones of the segments read, plus every id of the
    sealed segments not read at open (verified by their first read)."""
    next_id: int
    next_offset: int
    truncated_bytes: int
    """A torn tail cut from the last segment (a write the crash interrupted)."""
    skipped_records: int
    """Records lost to damaged bytes between intact records (the ids the damaged
    range held), left in place, skipped, and copied to a ``.bad`` file."""
    skipped_bytes: int
    missing_ids: int
    """Ids with no record between the first and the last intact one: skipped, or in a
    part of a segment that could not be read."""
    bad_files: tuple[str, ...]
    """``.bad`` files: whole unreadable segments, unreadable segment tails (moved),
    and copies of the damaged ranges skipped (``<segment>.<start>-<stop>.bad``)."""
    bad_bytes: int
    """Bytes moved to ``.bad`` files (the copies of skipped ranges are in
    :attr:`skipped_bytes`)."""
    empty_files_removed: int
    """Zero-length segment files (created, never written): removed, nothing lost."""
    verified_lazily: int = 0
    """Sealed segments whose records were not read at open: their header and size
    were right; their first read verifies them (and counts what it finds in
    :attr:`TopicLog.late_missing_ids`)."""

    @property
    def lossless(self) -> bool:
        """Whether recovery found everything intact."""
        return not (
            self.truncated_bytes
            or self.skipped_records
            or self.missing_ids
            or self.bad_bytes
            or self.bad_files
        )


@attrs.frozen
class _Head:
    """A segment file whose header was read at open."""

    seq: int
    path: str
    size: int
    first_offset: int
    first_id: int
    mtime: float


@attrs.define
class _Tally:
    """Counts recovery builds up (then frozen into a RecoveryReport)."""

    records: int = 0
    truncated_bytes: int = 0
    skipped_records: int = 0
    skipped_bytes: int = 0
    missing_ids: int = 0
    bad_files: list[str] = attrs.Factory(list)
    bad_bytes: int = 0
    empty_files_removed: int = 0


def _log_holes(name: str, path: str, found: _Found) -> None:
    """Log the ids a walk found missing between two intact records that touch."""
    for lo, hi in found.holes:
        storage_log.warning("TOPICLOG(%s) ids %d to %d are missing in %s", name, lo, hi - 1, path)


def _overlaps(header: tuple[int, int], segment: _Segment) -> bool:
    """Whether a segment with this (first offset, first id) starts inside ``segment``."""
    return header[1] < segment.next_id or header[0] < segment.end_offset


class _SegmentRecovery(_LogState):
    """The recovery side of :class:`~trionsq.queues.topic_log.TopicLog`: what
    :meth:`~trionsq.queues.topic_log.TopicLog.open` and the first reads of sealed
    segments do to the files."""

    # -- opening and recovery -------------------------------------------------------

    def _segment_files(self) -> list[tuple[int, str]]:
        """(seq, path) of the log's segment files, in order; new segments are numbered
        after every file of the log, ``.bad`` ones included."""
        pattern = re.compile(re.escape(self.name) + r"\.(\d{6,})\.log(\.bad(\.\d+)?)?")
        found: list[tuple[int, str]] = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                match = pattern.fullmatch(entry.name)
                if match is None:
                    continue
                seq = int(match[1])
                # new segments never reuse the number of one set aside as .bad
                self._next_seq = max(self._next_seq, seq + 1)
                if match[2] is None and entry.is_file(follow_symlinks=False):
                    found.append((seq, entry.path))
        found.sort()
        return found

    def _chain_segments(self, heads: list[_Head], tally: _Tally) -> list[_Segment]:
        """Recover each segment in order (the last one record by record) and count the
        ids missing between two."""
        segments: list[_Segment] = []
        for number, head in enumerate(heads):
            previous = segments[-1] if segments else None
            if number + 1 < len(heads):
                segment = self._open_sealed(head, heads[number + 1], previous, tally)
            else:
                segment = self._recover_segment(head, is_last=True, previous=previous, tally=tally)
            if segment is None:
                continue
            if previous is not None and previous.end <= HEADER_SIZE:
                # cut back to nothing by the segment that follows it
                os.unlink(previous.path)
                self._directory_dirty = True
                segments.pop()
                previous = segments[-1] if segments else None
            if previous is not None and segment.first_id > previous.next_id:
                self._add_hole(previous.next_id, segment.first_id, tally)
                storage_log.warning(
                    "TOPICLOG(%s) ids %d to %d are missing between %s and %s",
                    self.name,
                    previous.next_id,
                    segment.first_id - 1,
                    previous.path,
                    segment.path,
                )
            segments.append(segment)
        return segments

    def _take_segments(self, segments: list[_Segment]) -> None:
        """Go on after the segments recovered: ids, offsets, the start, and the last
        segment as the active one, for appends."""
        first = segments[0]
        last = segments[-1]
        check = last.check
        assert check is not None  # noqa: S101 - the last segment is always read
        self._start_id = first.first_id
        self.next_id = last.next_id
        self.next_offset = last.end_offset
        self._start_offset = self.next_offset
        for segment in segments:
            if segment.check is None:  # its first record, if intact
                self._start_offset = segment.first_offset
                break
            if segment.check.index:  # its first intact record
                self._start_offset = segment.first_offset + segment.check.index[0][1] - HEADER_SIZE
                break
        self._active = last
        self._active_check = check
        # opened at the first append: recovering a thousand logs holds no descriptor
        self._handle = self._files.handle(last.path, os.O_WRONLY | os.O_APPEND)
        self._mark = (
            last.first_offset + check.index[-1][1] - HEADER_SIZE + self.index_interval
            if check.index
            else last.first_offset
        )

    def _report(self, segments: list[_Segment], tally: _Tally) -> RecoveryReport:
        """The report of what recovery found; logged if anything was lost."""
        report = RecoveryReport(
            segments=len(segments),
            records=tally.records,
            next_id=self.next_id,
            next_offset=self.next_offset,
            truncated_bytes=tally.truncated_bytes,
            skipped_records=tally.skipped_records,
            skipped_bytes=tally.skipped_bytes,
            missing_ids=tally.missing_ids,
            bad_files=tuple(tally.bad_files),
            bad_bytes=tally.bad_bytes,
            empty_files_removed=tally.empty_files_removed,
            verified_lazily=sum(segment.check is None for segment in segments),
        )
        if not report.lossless:
            storage_log.warning("TOPICLOG(%s) recovered with losses: %s", self.name, report)
        return report

    def _read_headers(self, found: list[tuple[int, str]], tally: _Tally) -> list[_Head]:
        """The segment files in order, each with its header; what has no usable header
        is removed (empty, or a torn last header) or set aside."""
        files: list[tuple[int, str, bytes, os.stat_result]] = []
        for seq, path in found:
            fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
            try:
                status = os.fstat(fd)
                data = os.pread(fd, HEADER_SIZE, 0) if status.st_size else b""
            finally:
                os.close(fd)
            if status.st_size:
                files.append((seq, path, data, status))
            else:
                os.unlink(path)
                tally.empty_files_removed += 1
                self._directory_dirty = True
                storage_log.info("TOPICLOG(%s) removed empty segment %s", self.name, path)
        heads: list[_Head] = []
        for number, (seq, path, data, status) in enumerate(files):
            size = status.st_size
            header = _decode_header(data)
            if header is None and number == len(files) - 1 and size < HEADER_SIZE:
                os.unlink(path)
                self._directory_dirty = True
                tally.truncated_bytes += size
                storage_log.warning(
                    "TOPICLOG(%s) removed %s: %d bytes, a torn segment header",
                    self.name,
                    path,
                    size,
                )
                continue
            if header is None:
                self._set_aside(path, size, "damaged segment header", tally)
                continue
            first_offset, first_id = header
            if heads and (first_offset < heads[-1].first_offset or first_id < heads[-1].first_id):
                self._set_aside(path, size, f"segment overlaps {heads[-1].path}", tally)
                continue
            heads.append(_Head(seq, path, size, first_offset, first_id, status.st_mtime))
        return heads

    def _open_sealed(
        self, head: _Head, following: _Head, previous: _Segment | None, tally: _Tally
    ) -> _Segment | None:
        """A segment another one follows: its size checked against the next header,
        its records left for their first read. None if nothing is left of it."""
        if previous is not None and _overlaps((head.first_offset, head.first_id), previous):
            # the one before was read at open and holds ids of this one: as the last
            return self._recover_segment(head, is_last=False, previous=previous, tally=tally)
        expected = HEADER_SIZE + following.first_offset - head.first_offset
        size = head.size
        if size > expected:
            fd = os.open(head.path, os.O_RDWR | _O_CLOEXEC)
            try:
                bad = self._save_tail(fd, head.path, expected, size)
            finally:
                os.close(fd)
            tally.bad_files.append(bad)
            tally.bad_bytes += size - expected
            storage_log.warning(
                "TOPICLOG(%s) %s starts at position %d of %s: cut %d bytes (a write that "
                "failed, then a roll) from there, saved as %s",
                self.name,
                following.path,
                expected,
                head.path,
                size - expected,
                bad,
            )
            size = expected
        if size < expected:
            # Cut or set aside before: read it now, to know which ids it lacks.
            return self._recover_segment(head, is_last=False, previous=previous, tally=tally)
        if size <= HEADER_SIZE:
            os.unlink(head.path)
            self._directory_dirty = True
            if head.size <= HEADER_SIZE:
                tally.empty_files_removed += 1
            return None
        tally.records += following.first_id - head.first_id
        return _Segment(
            head.seq,
            head.path,
            head.first_id,
            head.first_offset,
            end=size,
            next_id=following.first_id,
            closed_at=head.mtime,
        )

    def _recover_segment(
        self, head: _Head, *, is_last: bool, previous: _Segment | None, tally: _Tally
    ) -> _Segment | None:
        """Check one segment record by record; None if nothing usable is left of it."""
        path = head.path
        size = head.size
        fd = os.open(path, os.O_RDWR | _O_CLOEXEC)
        try:
            header = (head.first_offset, head.first_id)
            reason = None
            if previous is not None and _overlaps(header, previous):
                self._cut_back(previous, head.first_offset, head.first_id, path, tally)
                if _overlaps(header, previous):
                    reason = f"segment overlaps {previous.path}"
            if reason is not None:
                os.close(fd)
                fd = -1
                self._set_aside(path, size, reason, tally)
                return None
            segment = _Segment(
                seq=head.seq,
                path=path,
                first_id=head.first_id,
                first_offset=head.first_offset,
                closed_at=head.mtime,
            )
            found = self._walk_segment(fd, head, tally)
            segment.check = found.check()
            segment.next_id = found.last_id + 1
            good_end = found.good_end
            tail = size - good_end
            why = found.reason or "damaged records"
            if tail and is_last:
                self._cut_torn_tail(fd, path, good_end, tail, why, tally)
            elif tail and good_end == HEADER_SIZE:
                os.close(fd)
                fd = -1
                self._set_aside(path, size, f"no intact record ({why})", tally)
                return None
            elif tail:
                self._keep_unreadable_tail(fd, path, good_end, size, why, tally)
            elif not is_last and good_end == HEADER_SIZE:
                os.close(fd)
                fd = -1
                os.unlink(path)
                self._directory_dirty = True
                tally.empty_files_removed += 1
                return None
            segment.end = good_end
            return segment
        finally:
            if fd >= 0:
                os.close(fd)

    def _walk_segment(self, fd: int, head: _Head, tally: _Tally) -> _Found:
        """Walk a segment at open: copy and log its damaged ranges, count its records,
        its holes and what was skipped."""
        path = head.path
        found = _walk_records(
            fd, HEADER_SIZE, head.size, head.first_id, _NO_LIMIT, self.index_interval
        )
        tally.bad_files.extend(self._keep_damaged(fd, path, found))
        _log_holes(self.name, path, found)
        for lo, hi in found.missing():
            self._add_hole(lo, hi, tally)
        tally.records += found.records
        tally.skipped_records += sum(hi - lo for _, _, lo, hi in found.gaps)
        tally.skipped_bytes += sum(stop - start for start, stop, _, _ in found.gaps)
        return found

    def _cut_torn_tail(
        self, fd: int, path: str, good_end: int, tail: int, why: str, tally: _Tally
    ) -> None:
        """Truncate what follows the last intact record of the last segment: a write
        the crash interrupted (or damage that cannot be told from one)."""
        os.ftruncate(fd, good_end)
        os.fsync(fd)
        tally.truncated_bytes += tail
        storage_log.warning(
            "TOPICLOG(%s) cut a torn tail of %d bytes at position %d of %s (%s)",
            self.name,
            tail,
            good_end,
            path,
            why,
        )

    def _keep_unreadable_tail(
        self, fd: int, path: str, good_end: int, size: int, why: str, tally: _Tally
    ) -> None:
        """A segment before the last is unreadable from ``good_end``: save the rest as
        ``.bad`` and cut it, keeping the intact records before."""
        tail = size - good_end
        bad = self._save_tail(fd, path, good_end, size)
        tally.bad_files.append(bad)
        tally.bad_bytes += tail
        storage_log.warning(
            "TOPICLOG(%s) %s is unreadable from position %d (%s): kept %d bytes of "
            "intact records, saved the other %d bytes as %s",
            self.name,
            path,
            good_end,
            why,
            good_end,
            tail,
            bad,
        )

    def _cut_back(
        self, segment: _Segment, first_offset: int, first_id: int, by: str, tally: _Tally
    ) -> None:
        """The segment after ``segment`` starts inside it: keep what lies before.

        This is what a write that failed and could not be truncated leaves (the log
        then rolls, and the next segment starts where the failed batch did): the
        records past that point were never acknowledged, and the later segment holds
        what was. They are saved as ``.bad`` and counted. Only for a segment read at
        open (a sealed one is cut by its size, see :meth:`_open_sealed`).
        """
        check = segment.check or _Check([])
        limit = HEADER_SIZE + first_offset - segment.first_offset
        entries = [entry for entry in check.index if entry[1] <= limit]
        start = entries[-1][1] if entries else HEADER_SIZE
        last_id = entries[-1][0] - 1 if entries else segment.first_id - 1
        good_end = start
        cut_records = 0
        fd = os.open(segment.path, os.O_RDWR | _O_CLOEXEC)
        try:
            for span_start, span_stop in _spans(check, start, segment.end):
                walk = _Walk(span_start)
                for buffer, at, position, size in _frames(
                    fd, span_start, span_stop, _SCAN_CHUNK, walk
                ):
                    intact = _intact(buffer, at, size)
                    if intact is None or intact[0] <= last_id:
                        continue
                    if position + 4 + size <= limit and intact[0] < first_id:
                        last_id = intact[0]
                        good_end = position + 4 + size
                    else:
                        cut_records += 1
            tail = segment.end - good_end
            bad = self._save_tail(fd, segment.path, good_end, segment.end)
        finally:
            os.close(fd)
        tally.records -= cut_records
        tally.bad_files.append(bad)
        tally.bad_bytes += tail
        segment.end = good_end
        segment.next_id = last_id + 1
        if segment.check is not None:
            # the greatest timestamp stays an upper bound: enough for the seeks
            segment.check = _Check(
                [entry for entry in check.index if entry[1] < good_end],
                check.timestamp_max,
                frozenset(p for p in check.damaged if p < good_end),
                gaps=tuple(gap for gap in check.gaps if gap[1] <= good_end),
            )
        kept = [hole for hole in self._holes if hole[0] < segment.next_id]
        tally.missing_ids -= sum(hi - lo for lo, hi in self._holes[len(kept) :])
        self._holes = kept
        storage_log.warning(
            "TOPICLOG(%s) %s starts inside %s: cut %d bytes (%d records of a write that "
            "failed) from position %d, saved as %s",
            self.name,
            by,
            segment.path,
            tail,
            cut_records,
            good_end,
            bad,
        )

    def _set_aside(self, path: str, size: int, reason: str, tally: _Tally) -> None:
        """A whole segment is unreadable: keep it as ``.bad``, in nsqd's words."""
        bad = _bad_path(path)
        os.rename(path, bad)
        self._directory_dirty = True
        tally.bad_files.append(bad)
        tally.bad_bytes += size
        storage_log.warning(
            "TOPICLOG(%s) %s in %s: jump to next file and saving bad file as %s",
            self.name,
            reason,
            path,
            bad,
        )

    def _save_tail(self, fd: int, path: str, start: int, size: int) -> str:
        """Copy bytes ``start:size`` to a new ``.bad`` file, then truncate them off."""
        bad = _bad_path(path)
        out = os.open(bad, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
        try:
            _copy_bytes(fd, out, start, size)
            os.fsync(out)
        finally:
            os.close(out)
        os.ftruncate(fd, start)
        os.fsync(fd)
        self._directory_dirty = True
        return bad

    def _keep_damaged(self, fd: int, path: str, found: _Found) -> list[str]:
        """Copy each damaged range a walk jumped over to a ``.bad`` file and log it, one
        line per range (segment, bytes, records lost); returns the files written."""
        kept: list[str] = []
        for start, stop, lo, hi in found.gaps:
            copy = self._copy_aside(fd, path, start, stop)
            if copy is not None:
                kept.append(copy)
            storage_log.warning(
                "TOPICLOG(%s) skipped %d damaged record(s), ids %d to %d, at bytes %d to %d "
                "of %s; the bytes are kept in %s",
                self.name,
                hi - lo,
                lo,
                hi - 1,
                start,
                stop,
                path,
                copy or "no file (could not write one)",
            )
        return kept

    def _copy_aside(self, fd: int, path: str, start: int, stop: int) -> str | None:
        """Copy damaged bytes [start, stop) of a segment to ``<segment>.<start>-<stop>.bad``
        (left as it is if an earlier start wrote it: the segment is not changed there).

        None if it cannot be written: logged, and recovery goes on, since the copy is
        for an operator, not for the log. Any thread (a first read may call it).
        """
        target = f"{path}.{start}-{stop}.bad"
        if os.path.lexists(target):
            return target
        try:
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
        except FileExistsError:
            return target
        except OSError as error:
            storage_log.error("TOPICLOG(%s) could not create %s: %s", self.name, target, error)
            return None
        try:
            _copy_bytes(fd, out, start, stop)
            os.fsync(out)
        except OSError as error:
            os.close(out)
            with contextlib.suppress(OSError):
                os.unlink(target)
            storage_log.error("TOPICLOG(%s) could not write %s: %s", self.name, target, error)
            return None
        os.close(out)
        with self._lock:
            self._directory_dirty = True
        return target

    def _add_hole(self, lo: int, hi: int, tally: _Tally) -> None:
        self._holes.append((lo, hi))
        tally.missing_ids += hi - lo

    def _checked(self, segment: _Segment, fd: int | None = None) -> _Check | None:
        """The segment's check; a sealed segment not read yet is verified first.

        Blocking, any thread. ``fd``: a descriptor open on the segment, if the caller
        has one. None if the file is gone (the segment expired meanwhile).

        Only the thread that holds ``segment.checking`` verifies; it builds the whole
        :class:`_Check` and assigns it to ``segment.check`` at once. Others wait for
        the lock, then find it set (or read it without the lock if already set).
        """
        check = segment.check
        if check is not None:
            return check
        with segment.checking:
            check = segment.check
            if check is None:
                check = self._verify(segment, fd)
                segment.check = check
        return check

    def _verify(self, segment: _Segment, fd: int | None) -> _Check | None:
        """Read a sealed segment record by record, as recovery reads the last one, and
        log and count what is lost. Runs once per segment (under ``checking``); changes
        nothing in it: damaged ranges are jumped over (and copied to ``.bad`` files), an
        unreadable rest stays in the file, past the check's end (and is copied too)."""
        own = fd is None
        if fd is None:
            fd = _open_to_read(segment.path)
            if fd is None:
                return None
        rest = None
        try:
            found = _walk_records(
                fd, HEADER_SIZE, segment.end, segment.first_id, segment.next_id, self.index_interval
            )
            self._keep_damaged(fd, segment.path, found)
            if found.good_end < segment.end:
                rest = self._copy_aside(fd, segment.path, found.good_end, segment.end)
        finally:
            if own:
                os.close(fd)
        _log_holes(self.name, segment.path, found)
        holes = found.missing()
        if found.last_id + 1 < segment.next_id:
            holes.append((found.last_id + 1, segment.next_id))
        if found.good_end < segment.end:
            storage_log.warning(
                "TOPICLOG(%s) %s is unreadable from position %d (%s): %s; the bytes from "
                "there are kept in %s",
                self.name,
                segment.path,
                found.good_end,
                found.reason or "damaged records",
                f"ids {found.last_id + 1} to {segment.next_id - 1} are missing"
                if found.last_id + 1 < segment.next_id
                else "no id is missing",
                rest or "no file (could not write one)",
            )
        if holes:
            with self._lock:
                self._found_holes.extend(holes)
                self._late_missing += sum(hi - lo for lo, hi in holes)
        return found.check(found.good_end)
