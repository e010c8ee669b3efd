"""A channel's delivery journal: what a kill -9 must not make it forget (issue 30).

A channel's state file (``cursor_state.py``) is written at most once a second, so a
crash forgets up to a second of its changes. Two of them must never be forgotten:

- **delivery counts** on a channel with a dead-letter bound: after a crash, a
  message delivered ``max_attempts`` times must not be delivered once more. Each
  routing pass of such a channel writes the new counts of the messages it hands out
  here, with one ``os.write``, before their frames are sent;
- **dead-letter moves**: a message on its way to the dead-letter topic is written
  here (where, in that topic's log) before it is appended there, so a restart can
  tell whether the append happened (``broker/dead_letter_moves.py``).

Pure storage: no knowledge of channels. Two files, ``<channel>.journal.0`` and
``.1``, written in turn: when the persister is about to write a state that covers
everything journaled so far (:meth:`DeliveryJournal.checkpoint`) and the state it
wrote before that is on disk (:meth:`DeliveryJournal.covered`), the file it holds no
longer matters: it is emptied and becomes the one appended to. So neither file
grows past what one state write covers, with no rewrite and no fsync on the event
loop, and a crash at any moment leaves every entry the last written state lacks.

File layout: ``TNQJRN1\\n`` and an 8-byte generation (the newer file has the higher
one), then entries ``[4 payload length][4 crc32 of payload][payload]``::

    COUNTS (1): runs of [8 first id][4 run length][2 deliveries]
    MOVE (2):   [2 topic name length][topic name][4 partition][8 first id there]
                then [8 id][2 deliveries] per message, appended there in this order

A torn or damaged tail is ignored at load (a crash mid-write): what follows a bad
entry was never acknowledged to anyone.

Descriptors: each file is held through the broker's descriptor budget
(``descriptors.py``), opened at its first write (a journal only read at open holds
none), closed by the budget while idle when descriptors are wanted elsewhere and
opened again at the next write; the file not appended to is closed once the other
takes over. Nothing here is fsynced (a written state covers what a file held
before it is emptied), so only the broker's thread ever touches them.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import TYPE_CHECKING, Final

import attrs

from .. import crash_points
from ..descriptors import DescriptorBudget
from ..persist import ensure_directory, fsync_directory
from .segment_format import storage_log

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from pathlib import Path

    from ..descriptors import FileHandle

__all__ = [
    "JOURNAL_MAGIC",
    "DeliveryJournal",
    "JournalReplay",
    "Move",
    "journal_paths",
    "runs_of",
]

JOURNAL_MAGIC: Final = b"TNQJRN1\n"
MAX_DELIVERIES: Final = 0xFFFF

_HEAD: Final = struct.Struct(">II")
_GENERATION: Final = struct.Struct(">Q")
_RUN: Final = struct.Struct(">QIH")
_MOVE: Final = struct.Struct(">IQ")
_MOVED: Final = struct.Struct(">QH")
_NAME_LENGTH: Final = struct.Struct(">H")
_COUNTS_KIND: Final = 1
_MOVE_KIND: Final = 2
_HEADER_SIZE: Final = len(JOURNAL_MAGIC) + _GENERATION.size
_FLAGS: Final = os.O_RDWR | os.O_APPEND


@attrs.frozen
class Move:
    """Messages on their way to another topic's partition: ``messages`` as
    (internal id, deliveries), appended there from id ``first_id`` on, in order."""

    topic: str
    partition: int
    first_id: int
    messages: tuple[tuple[int, int], ...]


@attrs.define
class JournalReplay:
    """What the journal files held at open."""

    counts: dict[int, int] = attrs.Factory(dict)
    """Internal id -> the highest delivery count written for it."""
    moves: list[Move] = attrs.Factory(list)
    """In the order written (oldest file first)."""


def journal_paths(state: Path) -> tuple[Path, Path]:
    """The two journal files beside a channel's state file ``<channel>.state``."""
    stem = state.name.removesuffix(".state")
    return state.with_name(f"{stem}.journal.0"), state.with_name(f"{stem}.journal.1")


def runs_of(counts: Iterable[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(id, deliveries) pairs, sorted by id, as runs (first id, length, deliveries) of
    consecutive ids with the same count."""
    runs: list[tuple[int, int, int]] = []
    first = last = deliveries = -1
    for internal_id, count in counts:
        if internal_id == last + 1 and count == deliveries:
            last = internal_id
            continue
        if first >= 0:
            runs.append((first, last - first + 1, deliveries))
        first = last = internal_id
        deliveries = count
    if first >= 0:
        runs.append((first, last - first + 1, deliveries))
    return runs


class DeliveryJournal:
    """One channel's two journal files; open with :meth:`open`.

    A write the file system refuses returns False after telling ``on_error``: the
    caller goes on (a crash may then cost what the entry would have kept).
    """

    def __init__(
        self,
        paths: tuple[Path, Path],
        on_error: Callable[[OSError], None] | None = None,
        files: DescriptorBudget | None = None,
    ) -> None:
        self.paths: Final = paths
        self._on_error = on_error
        self._files: Final = files if files is not None else DescriptorBudget.unbounded()
        self._handles: list[FileHandle | None] = [None, None]
        """Each file once written to since open (closed by the budget while idle)."""
        self._sizes = [0, 0]
        self._generations = [0, 0]
        self._active = 0
        self._covered = False
        """The state of the last :meth:`checkpoint` is on disk: the file that was
        active before it holds nothing the disk lacks."""
        self._closed = False
        self.writes = 0
        """Entries written since open (statistics, tests)."""

    @classmethod
    def open(
        cls,
        state: Path,
        *,
        on_error: Callable[[OSError], None] | None = None,
        files: DescriptorBudget | None = None,
    ) -> tuple[DeliveryJournal, JournalReplay]:
        """The journal of the channel whose state file is ``state``, and what its
        files hold (missing files: nothing; created at the first write). ``files``:
        the broker's descriptor budget (default: one of its own).

        Raises:
            OSError: a file is there but cannot be read.
        """
        journal = cls(journal_paths(state), on_error, files)
        replay = JournalReplay()
        found: list[tuple[int, int, bytes]] = []
        for index, path in enumerate(journal.paths):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            if len(data) < _HEADER_SIZE or not data.startswith(JOURNAL_MAGIC):
                storage_log.warning("%s: not a journal file, ignored", path)
                continue
            (generation,) = _GENERATION.unpack_from(data, len(JOURNAL_MAGIC))
            journal._generations[index] = generation
            found.append((generation, index, data))
        for _, index, data in sorted(found):
            good = _replay(data, replay)
            if good < len(data):
                storage_log.warning(
                    "%s: ignored a torn or damaged tail of %d byte(s) at offset %d",
                    journal.paths[index],
                    len(data) - good,
                    good,
                )
            journal._active = index  # appends go on in the newest file
        return journal, replay

    # ------------------------------------------------------------------ writes

    def delivered(self, runs: Sequence[tuple[int, int, int]]) -> bool:
        """Messages handed out: runs of (first id, length, deliveries now). In the OS
        when this returns True."""
        payload = bytearray([_COUNTS_KIND])
        for first, length, deliveries in runs:
            payload += _RUN.pack(first, length, min(deliveries, MAX_DELIVERIES))
        written = self._append(bytes(payload))
        if crash_points.ARMED:
            crash_points.reached("journal.delivered")
        return written

    def moving(self, move: Move) -> bool:
        """Messages about to be appended to ``move.topic``: in the OS when this
        returns True."""
        name = move.topic.encode()
        payload = bytearray([_MOVE_KIND])
        payload += _NAME_LENGTH.pack(len(name)) + name
        payload += _MOVE.pack(move.partition, move.first_id)
        for internal_id, deliveries in move.messages:
            payload += _MOVED.pack(internal_id, min(deliveries, MAX_DELIVERIES))
        return self._append(bytes(payload))

    def checkpoint(self) -> None:
        """A state covering everything journaled until now is about to be written.

        If the one of the previous checkpoint was written (:meth:`covered`), the file
        that was active before that holds only what is on disk already: it is
        emptied and appended to from now on."""
        active = self._active
        other = 1 - active
        if not self._covered or self._closed:
            pass
        elif self._sizes[active] > _HEADER_SIZE:
            if self._handles[other] is None and not self.paths[other].exists():
                self._active = other  # made, as the newest, at its first entry
            elif self._reset(other, max(self._generations) + 1):
                self._active = other
            if self._active == other:  # one file held per journal: reopened to reset it
                self._close_file(active)
        elif self._sizes[other] > _HEADER_SIZE:  # nothing new: the older file goes alone
            self._reset(other, self._generations[other])
            self._close_file(other)
        self._covered = False
        if crash_points.ARMED:
            crash_points.reached("journal.checkpoint")

    def covered(self) -> None:
        """The state of the last :meth:`checkpoint` is on disk."""
        self._covered = True

    def clear(self) -> None:
        """Forget everything (channel empty, setoffset: every count starts over)."""
        generation = max(self._generations) + 1
        for index in (0, 1):
            if self._handles[index] is not None or self.paths[index].exists():
                self._reset(index, generation if index == self._active else 0)

    def _reset(self, index: int, generation: int) -> bool:
        """Empty file ``index`` and give it ``generation`` (created if it is not)."""
        try:
            fd = self._descriptor(index)
            os.ftruncate(fd, 0)
            os.write(fd, JOURNAL_MAGIC + _GENERATION.pack(generation))
        except OSError as error:
            self._failed(index, error)
            return False
        self._sizes[index] = _HEADER_SIZE
        self._generations[index] = generation
        return True

    def _descriptor(self, index: int) -> int:
        """File ``index``'s descriptor (the broker's thread): opened again if the
        budget closed it, or for the first time (created if it is not there).

        Raises:
            OSError: it cannot be opened (EMFILE when nothing can be closed for it).
        """
        handle = self._handles[index]
        if handle is not None:
            return handle.descriptor()
        path = self.paths[index]
        created = not path.exists()
        if created:
            ensure_directory(path.parent)
        handle = self._handles[index] = self._files.open(path, _FLAGS | os.O_CREAT)
        fd = handle.descriptor()
        self._sizes[index] = os.fstat(fd).st_size
        if created:
            fsync_directory(path.parent)
        return fd

    def _append(self, payload: bytes) -> bool:
        if self._closed:
            return False
        index = self._active
        entry = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        try:
            fd = self._descriptor(index)
            if self._sizes[index] < _HEADER_SIZE:  # new, or torn while being created
                os.ftruncate(fd, 0)
                generation = max(self._generations) + 1
                os.write(fd, JOURNAL_MAGIC + _GENERATION.pack(generation))
                self._generations[index] = generation
                self._sizes[index] = _HEADER_SIZE
            size = self._sizes[index]
            written = os.write(fd, entry)
            if written != len(entry):  # pragma: no cover - a full disk mid-entry
                os.ftruncate(fd, size)
                raise OSError(28, "short write")
        except OSError as error:
            self._failed(index, error)
            return False
        self._sizes[index] = size + len(entry)
        self.writes += 1
        return True

    def _failed(self, index: int, error: OSError) -> None:
        if error.filename is None:
            error.filename = str(self.paths[index])
        storage_log.error("%s: write failed: %s", self.paths[index], error)
        if self._on_error is not None:
            self._on_error(error)

    # ------------------------------------------------------------------ upkeep

    def close(self) -> None:
        """Close the files (they stay on disk); later writes are ignored."""
        self._closed = True
        self._close_file(0)
        self._close_file(1)

    def _close_file(self, index: int) -> None:
        handle = self._handles[index]
        if handle is not None:
            self._handles[index] = None
            handle.close()

    def delete(self) -> None:
        """Close and remove both files (the channel is deleted)."""
        self.close()
        removed = False
        for path in self.paths:
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            removed = True
        if removed:
            fsync_directory(self.paths[0].parent)


def _replay(data: bytes, replay: JournalReplay) -> int:
    """Apply one file's entries to ``replay``; where its good part ends."""
    pos = _HEADER_SIZE
    end = len(data)
    counts = replay.counts
    while end - pos >= _HEAD.size:
        length, crc = _HEAD.unpack_from(data, pos)
        stop = pos + _HEAD.size + length
        if length < 1 or stop > end:
            break
        payload = data[pos + _HEAD.size : stop]
        if zlib.crc32(payload) != crc:
            break
        kind = payload[0]
        if kind == _COUNTS_KIND and (length - 1) % _RUN.size == 0:
            for first, run, deliveries in _RUN.iter_unpack(payload[1:]):
                for internal_id in range(first, first + run):
                    if counts.get(internal_id, 0) < deliveries:
                        counts[internal_id] = deliveries
        elif kind == _MOVE_KIND:
            move = _move(payload)
            if move is None:
                break
            replay.moves.append(move)
        else:
            break
        pos = stop
    return pos


def _move(payload: bytes) -> Move | None:
    try:
        (name_length,) = _NAME_LENGTH.unpack_from(payload, 1)
        start = 1 + _NAME_LENGTH.size
        name = payload[start : start + name_length].decode()
        partition, first_id = _MOVE.unpack_from(payload, start + name_length)
        rest = payload[start + name_length + _MOVE.size :]
    except (struct.error, UnicodeDecodeError):
        return None
    if len(rest) % _MOVED.size:
        return None
    return Move(name, partition, first_id, tuple(_MOVED.iter_unpack(rest)))
