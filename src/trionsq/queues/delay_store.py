"""A durable channel's long delays, kept apart from its log (design §2's deferred heap).

A message held back for long (a DPUB due in days, a REQ with a long delay) would
hold the channel's confirmed position back, and with it every segment from that
message on, if only the cursor's state remembered it. Parked here instead, the
record is safe on its own, the cursor counts it as finished and retention may
delete its segment; the channel keeps (due, record) in its in-memory deferred heap
as before and fires it from there.

Pure storage: an append-only file of checksummed entries, no knowledge of channels.

File layout: an 8-byte magic ``TNQDLY1\\n``, then entries back to back::

    [4 payload length][4 crc32 of payload][payload]
    payload: [1 kind][8 internal id]
        PARK: + [8 due, Unix ns][2 attempts][8 log offset][record, log encoding]
        DONE: nothing more

The latest entry of an id wins: a PARK parks it (again), a DONE lets it go. A torn
or damaged tail (a crash mid-write) is cut at the last good entry on load; earlier
entries are never lost. When dead entries dominate a big enough file it is
rewritten with the live PARKs only (temporary file, fsync, rename).

Durability: every entry reaches the OS (``os.write``) before the caller changes
anything else, so a kill -9 loses nothing. For a power loss, whoever persists the
channel's cursor fsyncs this file first (:meth:`DelayStore.sync_handle`): a cursor
state that counts a parked message as finished is only ever on disk after the PARK.

Descriptors: the file is opened at its first write (none is held for a store that
only loaded its entries) through the broker's descriptor budget, which closes it
while idle when descriptors are wanted elsewhere (``descriptors.py``); the next
write opens it again, and a sync due on it opens it for the fsync.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from ..descriptors import DescriptorBudget
from ..persist import StorageFormatError, ensure_directory, fsync_directory, write_atomic
from .record import Record, RecordError, decode_records, encode_record
from .segment_format import storage_log

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..descriptors import FileHandle

__all__ = [
    "COMPACT_MIN_BYTES",
    "DELAYS_MAGIC",
    "DelayStore",
    "DelayStoreError",
    "ParkedMessage",
]

DELAYS_MAGIC: Final = b"TNQDLY1\n"
COMPACT_MIN_BYTES: Final = 1 << 20
"""A file is rewritten only from this size on, and only when less than half of it
is live: rewrites cost O(1) per byte appended, and small files are left alone."""
MAX_ATTEMPTS: Final = 0xFFFF

_HEAD: Final = struct.Struct(">II")
_KIND_ID: Final = struct.Struct(">BQ")
_PARK: Final = struct.Struct(">qHQ")
_PARK_KIND: Final = 1
_DONE_KIND: Final = 2
_FLAGS: Final = os.O_RDWR | os.O_APPEND


class DelayStoreError(StorageFormatError):
    """A delays file that is not one (wrong magic): set aside, never appended to."""


@attrs.frozen
class ParkedMessage:
    """A live PARK entry, as loaded."""

    internal_id: int
    due_ns: int
    """When it is due, Unix nanoseconds (wall clock)."""
    attempts: int
    """Deliveries so far (0: never delivered); the next one counts on from here."""
    record: Record


@attrs.frozen
class _Span:
    offset: int
    length: int


class DelayStore:
    """One channel's parked messages: an append-only file and which ids are live.

    Open with :meth:`open`. Writes return False (after telling ``on_error``) when the
    file system refuses; the file is then cut back to its last whole entry, so a
    failed write never leaves garbage that would hide later entries.
    """

    def __init__(
        self,
        path: Path,
        on_error: Callable[[OSError], None] | None = None,
        files: DescriptorBudget | None = None,
    ) -> None:
        self.path: Final = path
        self._on_error = on_error
        self._files: Final = files if files is not None else DescriptorBudget.unbounded()
        self._handle: FileHandle | None = None
        """The file, once it exists (opened when written, closed by the budget while
        idle)."""
        self._size = 0
        """Bytes of the file (0: not created yet)."""
        self._live: dict[int, _Span] = {}
        self._live_bytes = 0
        self._unsynced = False
        self._broken = False
        """A failed write could not be cut back: nothing more is appended."""
        self._closed = False
        """Closed or deleted (its channel or topic is gone, the broker stopped): a
        late FIN must not bring the file back."""
        self.compactions = 0

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        on_error: Callable[[OSError], None] | None = None,
        files: DescriptorBudget | None = None,
    ) -> tuple[DelayStore, list[ParkedMessage]]:
        """Load ``path`` (missing: empty, created at the first write); returns the
        store and its live PARKs in file order. A torn tail is cut off the file.
        ``files``: the broker's descriptor budget (default: one of its own).

        Raises:
            DelayStoreError: the file is not a delays file.
            OSError: it cannot be read or cut.
        """
        store = cls(Path(path), on_error, files)
        try:
            data = store.path.read_bytes()
        except FileNotFoundError:
            return store, []
        if len(data) < len(DELAYS_MAGIC) and DELAYS_MAGIC.startswith(data):
            store._create()  # torn while being created
            return store, []
        if not data.startswith(DELAYS_MAGIC):
            raise DelayStoreError(f"{path}: not a delays file (bad magic)")
        parked, good = _scan(data, store._live)
        store._live_bytes = sum(span.length for span in store._live.values())
        if good < len(data):
            storage_log.warning(
                "%s: cut a torn or damaged tail of %d byte(s) at offset %d",
                path,
                len(data) - good,
                good,
            )
            os.truncate(store.path, good)
        store._handle = store._files.handle(store.path, _FLAGS)
        store._size = good
        return store, [parked[key] for key in store._live]

    def _create(self) -> None:
        """The file as a fresh store: the magic alone."""
        handle = self._files.open(self.path, _FLAGS | os.O_CREAT)
        try:
            fd = handle.descriptor()
            os.ftruncate(fd, 0)
            _write_all(fd, DELAYS_MAGIC)
        except OSError:
            handle.close()
            raise
        self._handle = handle
        self._size = len(DELAYS_MAGIC)

    # ------------------------------------------------------------------ state

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, internal_id: int) -> bool:
        return internal_id in self._live

    @property
    def size(self) -> int:
        """Bytes of the file."""
        return self._size

    # ------------------------------------------------------------------ writes

    def park(self, internal_id: int, due_ns: int, attempts: int, record: Record) -> bool:
        """Park ``record`` until ``due_ns`` (again, if it was: this entry wins).

        The entry is in the OS when this returns True."""
        payload = (
            _KIND_ID.pack(_PARK_KIND, internal_id)
            + _PARK.pack(due_ns, min(max(attempts, 0), MAX_ATTEMPTS), record.offset)
            + encode_record(record)
        )
        entry = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        offset = self._append(entry)
        if offset is None:
            return False
        self._drop(internal_id)
        self._live[internal_id] = _Span(offset, len(entry))
        self._live_bytes += len(entry)
        self._unsynced = True
        return True

    def done(self, internal_id: int) -> bool:
        """Let ``internal_id`` go (delivered and finished, dropped, dead-lettered).

        Losing a DONE (a crash before it reaches the OS, a refused write) only means
        the message is delivered again after a restart."""
        if internal_id not in self._live:
            return True
        payload = _KIND_ID.pack(_DONE_KIND, internal_id)
        if self._append(_HEAD.pack(len(payload), zlib.crc32(payload)) + payload) is None:
            return False
        self._drop(internal_id)
        if self._size >= COMPACT_MIN_BYTES and self._live_bytes * 2 < self._size:
            self.compact()
        return True

    def clear(self) -> bool:
        """Let everything go (channel empty, setoffset)."""
        if self._handle is None or self._closed:
            self._live.clear()
            self._live_bytes = 0
            return True
        try:
            os.truncate(self.path, len(DELAYS_MAGIC))
        except OSError as error:
            self._failed(error)
            return False
        self._size = len(DELAYS_MAGIC)
        self._live.clear()
        self._live_bytes = 0
        return True

    def _drop(self, internal_id: int) -> None:
        span = self._live.pop(internal_id, None)
        if span is not None:
            self._live_bytes -= span.length

    def _append(self, entry: bytes) -> int | None:
        """Write ``entry`` at the end; its offset, or None when refused."""
        if self._broken or self._closed:
            return None
        try:
            if self._handle is None:
                ensure_directory(self.path.parent)
                self._create()
                fsync_directory(self.path.parent)
            assert self._handle is not None  # noqa: S101 - made just above
            fd = self._handle.descriptor()
            offset = self._size
            _write_all(fd, entry)
        except OSError as error:
            self._cut_back()
            self._failed(error)
            return None
        self._size = offset + len(entry)
        return offset

    def _cut_back(self) -> None:
        """After a failed write: back to the last whole entry, or stop appending.
        By name: no descriptor is needed (the failure may be the lack of one)."""
        if self._handle is None:
            return
        try:
            os.truncate(self.path, self._size)
        except OSError:
            self._broken = True

    def _failed(self, error: OSError) -> None:
        if error.filename is None:
            error.filename = str(self.path)
        storage_log.error("%s: write failed: %s", self.path, error)
        if self._on_error is not None:
            self._on_error(error)

    # ------------------------------------------------------------------ upkeep

    def compact(self) -> bool:
        """Rewrite the file with the live entries only (atomically); False if refused."""
        handle = self._handle
        if handle is None:
            return True
        try:
            fd = handle.descriptor()
            spans = sorted(self._live.items(), key=lambda item: item[1].offset)
            parts = [DELAYS_MAGIC]
            moved: dict[int, _Span] = {}
            offset = len(DELAYS_MAGIC)
            for internal_id, span in spans:
                parts.append(os.pread(fd, span.length, span.offset))
                moved[internal_id] = _Span(offset, span.length)
                offset += span.length
            write_atomic(self.path, b"".join(parts))
        except OSError as error:
            self._failed(error)
            return False
        handle.close()  # the replaced file: the next write opens the new one
        self._handle = self._files.handle(self.path, _FLAGS)
        self._live = moved
        self._size = offset
        self._unsynced = False  # write_atomic fsynced it
        self.compactions += 1
        return True

    def sync_handle(self) -> FileHandle | None:
        """The file to fsync (in a worker thread: :meth:`FileHandle.fsync`) when
        PARKs were written since the last one; None when there is nothing to sync.
        A compaction or close on this thread meanwhile never pulls the descriptor
        from under the fsync (the budget waits for it), and a file closed while idle
        is opened for it."""
        if not self._unsynced or self._handle is None:
            return None
        self._unsynced = False
        return self._handle

    def unsynced_again(self) -> None:
        """A sync from :meth:`sync_handle` failed: the next one must try again."""
        self._unsynced = True

    def close(self) -> None:
        """Close the file (it stays on disk); later writes are ignored."""
        self._closed = True
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()

    def delete(self) -> None:
        """Close and remove the file (the channel is deleted)."""
        self.close()
        self._live.clear()
        self._live_bytes = 0
        self._size = 0
        try:
            self.path.unlink()
        except FileNotFoundError:
            return
        fsync_directory(self.path.parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _scan(data: bytes, live: dict[int, _Span]) -> tuple[dict[int, ParkedMessage], int]:
    """Replay the entries of ``data`` into ``live``: the live PARKs by id, and where
    the good part of the file ends."""
    parked: dict[int, ParkedMessage] = {}
    pos = len(DELAYS_MAGIC)
    end = len(data)
    while end - pos >= _HEAD.size:
        length, crc = _HEAD.unpack_from(data, pos)
        stop = pos + _HEAD.size + length
        if length < _KIND_ID.size or stop > end:
            break
        payload = data[pos + _HEAD.size : stop]
        if zlib.crc32(payload) != crc:
            break
        kind, internal_id = _KIND_ID.unpack_from(payload)
        if kind == _DONE_KIND and length == _KIND_ID.size:
            live.pop(internal_id, None)
            parked.pop(internal_id, None)
        elif kind == _PARK_KIND and length >= _KIND_ID.size + _PARK.size:
            message = _parked(payload, internal_id)
            if message is None:
                break
            live.pop(internal_id, None)  # re-parked: the latest entry goes last
            live[internal_id] = _Span(pos, stop - pos)
            parked[internal_id] = message
        else:
            break
        pos = stop
    return parked, pos


def _parked(payload: bytes, internal_id: int) -> ParkedMessage | None:
    due_ns, attempts, offset = _PARK.unpack_from(payload, _KIND_ID.size)
    raw = payload[_KIND_ID.size + _PARK.size :]
    try:
        records, used = decode_records(raw, offset)
    except RecordError:
        return None
    if len(records) != 1 or used != len(raw) or records[0].internal_id != internal_id:
        return None
    return ParkedMessage(internal_id, due_ns, attempts, records[0])
