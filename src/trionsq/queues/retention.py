"""Releasing records and deleting the segment files retention lets go.

The log's logical start moves on as channels confirm records
(:meth:`_Retention.discard_before`); a segment file goes once all its ids are
below it and, with a retention time, it stopped taking writes that long ago
(:meth:`_Retention.expire`). A file the system refuses to remove is tried again.
"""

from __future__ import annotations

import os

from .log_state import _LogState
from .segment_format import storage_log


class _Retention(_LogState):
    """The releasing side of :class:`~trionsq.queues.topic_log.TopicLog`."""

    # -- releasing ------------------------------------------------------------------

    def discard_before(self, internal_id: int, *, now: float | None = None) -> int:
        """Move the logical start to ``internal_id``; returns how many records that
        released. Segments wholly before it are deleted as :meth:`expire` allows."""
        target = min(internal_id, self.next_id)
        start = self._start_id
        released = 0
        if target > start:
            released = target - start - self._missing(start, target)
            self._start_offset = self._offset_in_memory(target)
            self._start_id = target
            skip = target - self._cache_base
            if skip > self._cache_skip:
                self._cache_skip = min(skip, len(self._cache))
            self._chunks = [chunk for chunk in self._chunks if chunk.stop > target]
            self._holes = [hole for hole in self._holes if hole[1] > target]
        self.expire(now)
        return released

    def expire(self, now: float | None = None) -> int:
        """Delete the segments retention lets go; returns how many.

        A segment goes when all its ids are below ``start_id``, it is not the active
        one, and (with ``retention`` > 0) it stopped taking writes that long ago.
        Call it when :meth:`expires_in` says so: age alone does not trigger it.
        """
        if self._undeleted:
            undeleted, self._undeleted = self._undeleted, []
            for path in undeleted:
                self._unlink(path, again=True)
        segments = self._segments
        if len(segments) < 2:
            return 0
        if now is None:
            now = self._clock()
        count = 0
        for segment in segments:
            if (
                segment is self._active
                or segment.next_id > self._start_id
                or (self.retention > 0 and now - segment.closed_at < self.retention)
            ):
                break
            count += 1
        if not count:
            return 0
        self._segments = segments[count:]
        for segment in segments[:count]:
            self._unlink(segment.path)
            self._disk_bytes -= segment.end
        with self._lock:
            self._directory_dirty = True
        return count

    def expires_in(self) -> float | None:
        """Seconds until :meth:`expire` may delete a segment by age alone (0: now, to
        try again a removal the system refused); None while only a release can let
        one go (the oldest segment is still needed, or is the active one)."""
        if self._undeleted:
            return 0.0
        segments = self._segments
        if self.retention <= 0 or len(segments) < 2:
            return None
        oldest = segments[0]
        if oldest is self._active or oldest.next_id > self._start_id:
            return None
        return max(0.0, oldest.closed_at + self.retention - self._clock())

    def _unlink(self, path: str, *, again: bool = False) -> None:
        """Remove an expired segment; if refused (read-only, I/O error), keep its name
        to try at the next :meth:`expire` and say so once. Its records are below every
        channel's start, so a restart before it goes only skips them again."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as error:
            self._undeleted.append(path)
            if not again:
                storage_log.warning(
                    "TOPICLOG(%s) cannot remove expired segment %s yet: %s",
                    self.name,
                    path,
                    error.strerror or error,
                )
