"""A partition's idempotency keys on disk, beside its segments, so a restart keeps them.

The broker remembers the last ``--idempotency-window`` keys a partition stored
(:mod:`trionsq.broker.idempotence`); the log alone gives back only those of the
records it holds in memory at open. This journal gives back all of them: each
keyed batch appends its new keys' entries (the key's 16-byte digest and the
record's place, 44 bytes) with one ``os.write`` right after the batch's own, so
what survives ``kill -9`` in the log survives here too, but for the batch in
between the two writes, which recovery takes from the log (see
:func:`~trionsq.broker.idempotence.restore`).

Files: ``<log name>.keys`` (appended to; the one open descriptor) and
``<log name>.keys.old``. When ``.keys`` holds ``window`` entries it is renamed
``.keys.old`` (replacing the previous one) and a new ``.keys`` begins: the two
always hold the last ``window`` keys or more, at most ``2 * window`` entries
(88 MB at the default window of 1,000,000), and no entry is ever rewritten.
Each file is an 8-byte magic then blocks ``[4 count][4 crc32 of the entries]``
+ entries; a torn or damaged block ends the file (it is cut off at open), which
only loses keys a crash was writing. Only the appending thread writes; ``sync``
may run in a worker thread meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import zlib
from typing import TYPE_CHECKING, Final

from .segment_format import _O_CLOEXEC, _fsync_directory

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["ENTRY_SIZE", "KeyJournal"]

MAGIC: Final = b"TNSQKEY1"
ENTRY_SIZE: Final = 44
"""A 16-byte key digest and a 28-byte place (internal id, trace id, offset, raw size)."""
_BLOCK: Final = struct.Struct("<II")


class KeyJournal:
    """The ``.keys`` files of one log; :meth:`open` recovers what they hold."""

    def __init__(self, path: Path, window: int) -> None:
        self.path: Final = path
        self.old_path: Final = path.with_name(path.name + ".old")
        self.window: Final = window
        self.count = 0
        """Entries in ``.keys`` (it is rotated at ``window``)."""
        self._fd: int | None = None
        self._end = 0
        self._dirty = False
        self._directory_dirty = False
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path, window: int, *, create: bool) -> tuple[KeyJournal | None, bytes]:
        """The journal at ``path`` and its entries, oldest first (44 bytes each, the
        last ``window`` at most); (None, b"") when there is none and not ``create``."""
        journal = cls(path, window)
        if not create and not path.exists() and not journal.old_path.exists():
            return None, b""
        old = _read_blocks(journal.old_path) if journal.old_path.exists() else b""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o644)
        try:
            current, end = _recover(fd)
        except OSError:
            os.close(fd)
            raise
        journal._fd = fd
        journal._end = end
        journal.count = len(current) // ENTRY_SIZE
        entries = old + current
        return journal, entries[-window * ENTRY_SIZE :]

    def append(self, entries: bytes) -> None:
        """Add entries (a multiple of 44 bytes) with one write; rotates first when
        ``.keys`` is full. On an error nothing is added (a partial write is cut off)."""
        fd = self._fd
        if fd is None:
            raise ValueError(f"{self.path} is closed")
        if self.count >= self.window:
            fd = self._rotate()
        block = _BLOCK.pack(len(entries) // ENTRY_SIZE, zlib.crc32(entries)) + entries
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

    def _rotate(self) -> int:
        """``.keys`` becomes ``.keys.old``; a new ``.keys`` begins."""
        fd = os.open(
            self.path.with_name(self.path.name + ".new"),
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC,
            0o644,
        )
        try:
            os.write(fd, MAGIC)
            os.rename(self.path, self.old_path)
            os.rename(self.path.with_name(self.path.name + ".new"), self.path)
        except OSError:
            os.close(fd)
            raise
        with self._lock:
            previous, self._fd = self._fd, fd
        if previous is not None:
            os.fsync(previous)  # what .keys.old holds is durable before the new file fills
            os.close(previous)
        self._end = len(MAGIC)
        self.count = 0
        self._directory_dirty = True
        return fd

    def forget(self) -> None:
        """Drop every entry (the topic was emptied: its keys are forgotten)."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, len(MAGIC))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.old_path)
        self._end = len(MAGIC)
        self.count = 0
        self._dirty = True

    def sync(self) -> None:
        """fsync what was appended (with the log's, on the same schedule)."""
        with self._lock:
            fd = self._fd
            dirty, self._dirty = self._dirty, False
            directory_dirty, self._directory_dirty = self._directory_dirty, False
        if fd is not None and dirty:
            os.fsync(fd)
        if directory_dirty:
            _fsync_directory(self.path.parent)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def delete(self) -> None:
        """Close and remove the files (the topic is deleted)."""
        self.close()
        for path in (self.path, self.old_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _recover(fd: int) -> tuple[bytes, int]:
    """The entries of an open ``.keys`` and where its intact blocks end; a new or
    headerless file gets its magic, a damaged tail is cut off."""
    data = _read_all(fd)
    if len(data) < len(MAGIC) or not data.startswith(MAGIC):
        os.ftruncate(fd, 0)
        os.pwrite(fd, MAGIC, 0)
        os.lseek(fd, len(MAGIC), os.SEEK_SET)
        return b"", len(MAGIC)
    entries, end = _blocks(data)
    if end < len(data):
        os.ftruncate(fd, end)
    os.lseek(fd, end, os.SEEK_SET)
    return entries, end


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


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    at = 0
    while at < size:
        chunk = os.pread(fd, size - at, at)
        if not chunk:
            break
        chunks.append(chunk)
        at += len(chunk)
    return b"".join(chunks)
