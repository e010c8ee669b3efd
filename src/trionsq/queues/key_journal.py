"""A partition's idempotency keys on disk, beside its segments, so a restart keeps them.

The broker remembers the last ``--idempotency-window`` keys a partition stored
(:mod:`trionsq.broker.idempotence`); the log alone gives back only those of the
records it holds in memory at open. This journal gives back all of them: each
keyed batch appends its new keys' entries (the key's 16-byte digest and the
record's place, 44 bytes) with one ``os.write`` right after the batch's own, so
what survives ``kill -9`` in the log survives here too, but for the batch in
between the two writes, which recovery takes from the log (see
:func:`~trionsq.broker.idempotence.restore`).

Files: ``<log name>.keys`` (appended to) and ``<log name>.keys.old``. When
``.keys`` holds ``window`` entries it is renamed ``.keys.old`` (replacing the
previous one) and a new ``.keys`` begins: the two always hold the last ``window``
keys or more, at most ``2 * window`` entries (88 MB at the default window of
1,000,000), and no entry is ever rewritten. Each file is an 8-byte magic then
blocks ``[4 count][4 crc32 of the entries]`` + entries; a torn or damaged block
ends the file (it is cut off at open), which only loses keys a crash was writing.

Descriptors: ``.keys`` is held through the broker's descriptor budget
(``descriptors.py``), like the log's segments: opened at its first append (a
restart opens none, however many keyed partitions there are), closed by the budget
while idle when descriptors are wanted elsewhere, opened again at the next append,
and fsynced by name if it was closed since. It is opened ``O_APPEND``, so an append
after a cut (a refused write, :meth:`KeyJournal.forget`) lands right after what is
kept. Only the appending thread writes; ``sync`` may run in a worker thread
meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import zlib
from typing import TYPE_CHECKING, Final

from ..descriptors import DescriptorBudget
from .segment_format import _O_CLOEXEC, _fsync_directory

if TYPE_CHECKING:
    from pathlib import Path

    from ..descriptors import FileHandle

__all__ = ["ENTRY_SIZE", "KeyJournal"]

MAGIC: Final = b"TNSQKEY1"
ENTRY_SIZE: Final = 44
"""A 16-byte key digest and a 28-byte place (internal id, trace id, offset, raw size)."""
_BLOCK: Final = struct.Struct("<II")
_FLAGS: Final = os.O_WRONLY | os.O_APPEND


class KeyJournal:
    """The ``.keys`` files of one log; :meth:`open` recovers what they hold."""

    def __init__(self, path: Path, window: int, files: DescriptorBudget | None = None) -> None:
        self.path: Final = path
        self.old_path: Final = path.with_name(path.name + ".old")
        self.window: Final = window
        self.count = 0
        """Entries in ``.keys`` (it is rotated at ``window``)."""
        self._files: Final = files if files is not None else DescriptorBudget.unbounded()
        self._handle: FileHandle | None = None
        """``.keys`` (None once closed): open while appended to, closed by the budget
        while idle."""
        self._end = 0
        self._dirty = False
        self._directory_dirty = False
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, path: Path, window: int, *, create: bool, files: DescriptorBudget | None = None
    ) -> tuple[KeyJournal | None, bytes]:
        """The journal at ``path`` and its entries, oldest first (44 bytes each, the
        last ``window`` at most); (None, b"") when there is none and not ``create``.
        ``files``: the broker's descriptor budget (default: one of its own)."""
        journal = cls(path, window, files)
        if not create and not path.exists() and not journal.old_path.exists():
            return None, b""
        old = _read_blocks(journal.old_path) if journal.old_path.exists() else b""
        current = journal._recover()
        journal.count = len(current) // ENTRY_SIZE
        entries = old + current
        return journal, entries[-window * ENTRY_SIZE :]

    def _recover(self) -> bytes:
        """The entries of ``.keys``, read by name (no descriptor is held for it until
        the first append); a damaged tail is cut off, and a missing or headerless
        file begins anew with its magic."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        if len(data) < len(MAGIC) or not data.startswith(MAGIC):
            handle = self._files.open(self.path, _FLAGS | os.O_CREAT | os.O_TRUNC)
            try:
                os.write(handle.descriptor(), MAGIC)
            except OSError:
                handle.close()
                raise
            self._handle = handle
            self._end = len(MAGIC)
            return b""
        entries, end = _blocks(data)
        if end < len(data):
            os.truncate(self.path, end)
        self._handle = self._files.handle(self.path, _FLAGS)
        self._end = end
        return entries

    def append(self, entries: bytes) -> None:
        """Add entries (a multiple of 44 bytes) with one write; rotates first when
        ``.keys`` is full. On an error nothing is added (a partial write is cut off)."""
        handle = self._handle
        if handle is None:
            raise ValueError(f"{self.path} is closed")
        if self.count >= self.window:
            handle = self._rotate(handle)
        block = _BLOCK.pack(len(entries) // ENTRY_SIZE, zlib.crc32(entries)) + entries
        fd = handle.descriptor()
        try:
            written = os.write(fd, block)
            if written != len(block):
                raise OSError(f"short write to {self.path} ({written} of {len(block)} bytes)")
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._end)
            raise
        self._end += len(block)
        self.count += len(entries) // ENTRY_SIZE
        self._dirty = True

    def _rotate(self, previous: FileHandle) -> FileHandle:
        """``.keys`` becomes ``.keys.old``; a new ``.keys`` begins.

        What ``.keys`` holds is made durable first, while the name is still its
        own: a handle the budget closed is fsynced by name."""
        new_path = self.path.with_name(self.path.name + ".new")
        fd = os.open(new_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
        try:
            os.write(fd, MAGIC)
        finally:
            os.close(fd)
        previous.fsync()  # what .keys.old holds is durable before the new file fills
        os.rename(self.path, self.old_path)
        os.rename(new_path, self.path)
        handle = self._files.handle(self.path, _FLAGS)
        with self._lock:
            self._handle = handle
        previous.close()
        self._end = len(MAGIC)
        self.count = 0
        self._directory_dirty = True
        return handle

    def forget(self) -> None:
        """Drop every entry (the topic was emptied: its keys are forgotten)."""
        if self._handle is None:
            return
        os.truncate(self.path, len(MAGIC))  # by name: no descriptor needed (O_APPEND)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.old_path)
        self._end = len(MAGIC)
        self.count = 0
        self._dirty = True

    def sync(self) -> None:
        """fsync what was appended (with the log's, on the same schedule)."""
        with self._lock:
            handle = self._handle
            dirty, self._dirty = self._dirty, False
            directory_dirty, self._directory_dirty = self._directory_dirty, False
        if handle is not None and dirty:
            handle.fsync()
        if directory_dirty:
            _fsync_directory(self.path.parent)

    def close(self) -> None:
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()

    def delete(self) -> None:
        """Close and remove the files (the topic is deleted)."""
        self.close()
        for path in (self.path, self.old_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _read_blocks(path: Path) -> bytes:
    """The entries of ``.keys.old`` (read only)."""
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        return b""
    return _blocks(data)[0]


def _blocks(data: bytes) -> tuple[bytes, int]:
    """The entries of the intact blocks from the magic on, and where they end."""
    view = memoryview(data)
    parts: list[memoryview] = []
    at = len(MAGIC)
    while at + _BLOCK.size <= len(data):
        count, crc = _BLOCK.unpack_from(data, at)
        stop = at + _BLOCK.size + count * ENTRY_SIZE
        if count == 0 or stop > len(data):
            break
        entries = view[at + _BLOCK.size : stop]
        if zlib.crc32(entries) != crc:
            break
        parts.append(entries)
        at = stop
    return b"".join(parts), at
