"""The process's file descriptors, shared out so that no number of topics stops the broker.

A broker that kept each partition's active segment and each channel's delays file
open ran out at about a thousand topics under ``ulimit -n 1024``, and then
``accept`` failed too: nothing could connect, not even ``/ping`` (issue 30, 3b).
Go's nsqd opens its files lazily. Here one :class:`DescriptorBudget` per broker
shares the open-file limit out:

- a **reserve** it never hands out: what was open when the broker started (standard
  streams, the event loop's own), its listeners and outgoing sockets (lookupd peers,
  statsd, auth requests), and what is opened for a moment and closed again: up to
  :data:`PER_THREAD` per worker thread (cold reads, channel state and metadata
  writes, fsyncs; trio runs at most its thread limiter's tokens at once) and
  :data:`LOOP_TRANSIENT` on the Trio thread (a directory fsync, a delays file's
  compaction);
- a **pool** for what can be many: files held open (:class:`FileHandle`: segment
  writers, delays files), closed least recently used first when the pool needs the
  descriptor and opened again at their next use (RocksDB's ``max_open_files``), and
  accepted connections, admitted while the pool has room. Connections never take
  the last :data:`MIN_FILES` of it, and TCP never takes the last
  :data:`HTTP_RESERVE` connections' worth, so ``/ping`` answers however many clients
  came; a connection over that is closed at once instead of failing ``accept``
  for everyone. A cluster broker's replication connections (one per partition it
  follows, one per follower of each partition it leads: they grow with the
  partitions) come from the pool too, first: the broker *claims* as many as its
  replica roles want (:meth:`DescriptorBudget.claim_replication`), and clients are
  admitted only into what the claims leave, so a replica copying its leader never
  waits for clients to leave. Replication connections never take HTTP's share nor
  the files' floor: a claim larger than what is left refuses TCP clients, and the
  replication connections over it wait for room (logged, tried again).

Threads. Files are opened and closed by the thread that owns the budget (the
broker's Trio thread): :meth:`FileHandle.descriptor` hands out the descriptor
without a lock, since only that thread evicts (0.06-0.18 µs when the same file is
used again, 0.24-0.4 µs when another file moves to the back of the order, against
1-2 µs for the ``os.write`` it serves). Other threads only
:meth:`FileHandle.fsync` (the handle is pinned meanwhile, and a closed one is
opened anew for the call) and :meth:`FileHandle.close`.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from typing import Final

import attrs

__all__ = [
    "HTTP_RESERVE",
    "MIN_FILES",
    "DescriptorBudget",
    "DescriptorStatistics",
    "FileHandle",
    "open_file_limit",
    "raise_open_file_limit",
]

MIN_FILES: Final = 16
"""Descriptors of the pool connections never take: publishing to new topics goes
on (closing idle files for them) however many clients are connected."""
HTTP_RESERVE: Final = 8
"""Connections of the pool only HTTP may take, so /ping and /stats answer when TCP
clients have taken everything else."""
PER_THREAD: Final = 2
"""Descriptors a worker thread holds at most for a moment: a cold read's segment,
a state write's temporary file then its directory, a copy of damaged bytes."""
LOOP_TRANSIENT: Final = 4
"""Descriptors the Trio thread holds for a moment: a directory scan or fsync, a
delays file's creation or compaction."""
MIN_POOL: Final = MIN_FILES + HTTP_RESERVE + 8
"""The smallest pool: with a limit too low for the reserve, the broker still runs
(and says so at start)."""
MAX_THREADS: Final = 1024
"""Worker threads counted at most (a limiter without a bound counts as this many)."""
UNLIMITED: Final = 1 << 20
"""The limit taken for RLIM_INFINITY."""
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_REOPEN_MASK: Final = ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC)
_OUT_OF_DESCRIPTORS: Final = frozenset({errno.EMFILE, errno.ENFILE})


def open_file_limit() -> int:
    """The process's soft RLIMIT_NOFILE (:data:`UNLIMITED` when there is none)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return UNLIMITED
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED if soft == resource.RLIM_INFINITY or soft > UNLIMITED else soft


def raise_open_file_limit() -> str | None:
    """Lift the open-file soft limit to the hard one, as Go programs (nsqd) do at
    start; None, or why it could not (e.g. macOS caps it below "unlimited").

    A process-wide choice: the commands make it, an application embedding the broker
    makes its own (a library using ``select`` breaks on descriptors over 1,023).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == soft or (hard != resource.RLIM_INFINITY and hard < soft):
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as error:
        return f"cannot raise the open file limit from {soft}: {error}"
    return None


def descriptors_in_use() -> int:
    """How many descriptors this process has open now (an estimate off Linux/macOS)."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing)) - 1  # the listing's own descriptor
        except OSError:
            continue
    return 16  # pragma: no cover - neither listing exists


@attrs.frozen
class DescriptorStatistics:
    """A snapshot of a budget, for /stats and the start-up line."""

    limit: int
    reserved: int
    pool: int
    max_open_files: int
    files_open: int
    connections: int
    evictions: int
    """Files closed to give their descriptor to another file or a connection."""
    reopens: int
    """Files opened again after an eviction."""
    refused_connections: int
    replication_connections: int
    """Of ``connections``, those between brokers of a cluster (both directions)."""
    replication_claimed: int
    """Replication connections the broker's replica roles want: clients never take
    the room of those not open yet."""


class FileHandle:
    """A file the broker uses now and then: open while it is used, closed by the
    budget when the descriptor is wanted elsewhere, opened again at the next use.

    ``fd`` is the descriptor while open, else None; read it through
    :meth:`descriptor`, on the budget's thread.
    """

    __slots__ = ("_budget", "closed", "fd", "flags", "path", "pins")

    def __init__(self, budget: DescriptorBudget, path: str, flags: int) -> None:
        self._budget = budget
        self.path: Final = path
        self.flags: Final = (flags & _REOPEN_MASK) | _O_CLOEXEC
        """How it is opened again: never created, truncated or required new."""
        self.fd: int | None = None
        self.pins = 0
        """Threads fsyncing it now: it is not evicted, and a close waits for them."""
        self.closed = False

    def descriptor(self) -> int:
        """The descriptor, opened again if the budget closed it (the budget's
        thread only). Marks the file as the most recently used.

        Raises:
            OSError: it cannot be opened (EMFILE when nothing can be closed for it).
        """
        fd = self.fd
        budget = self._budget
        if fd is None:
            return budget._reopen(self)
        if budget._newest is not self:  # now the most recently used (no lock: module doc)
            try:
                budget._open.move_to_end(self)
            except KeyError:  # closed by another thread meanwhile
                return fd
            budget._newest = self
        return fd

    def fsync(self) -> None:
        """Make what was written durable (any thread): on its descriptor if it is
        open, else on one opened for the call (the kernel syncs the file, whichever
        descriptor wrote it). A file removed meanwhile has nothing to sync."""
        self._budget._fsync(self)

    def close(self) -> None:
        """Close it for good (any thread); after a pending fsync if one runs."""
        self._budget._close(self)


class DescriptorBudget:
    """Held files and connections within the open-file limit (module docstring)."""

    def __init__(self, limit: int, reserved: int, *, max_open_files: int = 0) -> None:
        """``reserved``: descriptors never handed out; ``max_open_files``: at most
        that many files held open (0: as many as the pool has room for)."""
        self.limit: Final = limit
        self.reserved: Final = reserved
        self.pool: Final = max(limit - reserved, MIN_POOL)
        self.max_open_files: Final = min(max_open_files or self.pool, self.pool)
        self._lock = threading.Lock()
        self._open: OrderedDict[FileHandle, None] = OrderedDict()
        """Open files, least recently used first. Reordered by the budget's thread
        without the lock (only that thread iterates, and each OrderedDict operation
        is atomic under the GIL); removed from under the lock by any thread."""
        self._newest: FileHandle | None = None
        """The file used last: using it again needs no reordering."""
        self.connections = 0
        """Connections admitted, replication ones included."""
        self.http_connections = 0
        self.replication_connections = 0
        self.replication_claimed = 0
        self.evictions = 0
        self.reopens = 0
        self.refused_connections = 0

    @classmethod
    def unbounded(cls) -> DescriptorBudget:
        """A budget that closes files only when the kernel refuses a descriptor (a
        log or delays file used on its own, as unit tests do)."""
        return cls(UNLIMITED, 0)

    @classmethod
    def for_process(
        cls, *, sockets: int = 0, threads: float = 40, max_open_files: int = 0
    ) -> DescriptorBudget:
        """Sized from this process's limit now: reserved are the descriptors open
        now, ``sockets`` the broker will open besides accepted connections, and
        the moment's descriptors of ``threads`` worker threads (trio's limiter) and
        of the Trio thread."""
        transient = PER_THREAD * int(min(threads, MAX_THREADS)) + LOOP_TRANSIENT
        reserved = descriptors_in_use() + sockets + transient
        return cls(open_file_limit(), reserved, max_open_files=max_open_files)

    @property
    def files_open(self) -> int:
        return len(self._open)

    @property
    def starved(self) -> bool:
        """The limit is below what the reserve and the smallest pool need."""
        return self.limit - self.reserved < MIN_POOL

    def statistics(self) -> DescriptorStatistics:
        return DescriptorStatistics(
            limit=self.limit,
            reserved=self.reserved,
            pool=self.pool,
            max_open_files=self.max_open_files,
            files_open=len(self._open),
            connections=self.connections,
            evictions=self.evictions,
            reopens=self.reopens,
            refused_connections=self.refused_connections,
            replication_connections=self.replication_connections,
            replication_claimed=self.replication_claimed,
        )

    # ------------------------------------------------------------------ files

    def handle(self, path: str | os.PathLike[str], flags: int) -> FileHandle:
        """A handle on an existing file, opened at its first use."""
        return FileHandle(self, os.fspath(path), flags)

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> FileHandle:
        """Open ``path`` now with ``flags`` (which may create it), closing the least
        recently used file if the pool is full; later openings leave out O_CREAT,
        O_EXCL and O_TRUNC.

        Raises:
            OSError: the open failed (EMFILE when nothing could be closed for it).
        """
        handle = FileHandle(self, os.fspath(path), flags)
        with self._lock:
            self._open_locked(handle, flags | _O_CLOEXEC, mode)
        return handle

    def _reopen(self, handle: FileHandle) -> int:
        with self._lock:
            if handle.closed:
                raise ValueError(f"{handle.path} was closed")
            fd = handle.fd
            if fd is None:
                fd = self._open_locked(handle, handle.flags, 0)
                self.reopens += 1
            return fd

    def _open_locked(self, handle: FileHandle, flags: int, mode: int) -> int:
        while len(self._open) >= self._room_for_files():
            if not self._evict_one():
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), handle.path)
        while True:
            try:
                fd = os.open(handle.path, flags, mode)
            except OSError as error:
                # descriptors the budget does not know of (another broker, the
                # application) took the rest: give one of ours up and try again
                if error.errno in _OUT_OF_DESCRIPTORS and self._evict_one():
                    continue
                raise
            break
        handle.fd = fd
        self._open[handle] = None
        self._newest = handle
        return fd

    def _room_for_files(self) -> int:
        return max(min(self.max_open_files, self.pool - self.connections), 1)

    def _evict_one(self) -> bool:
        """Close the least recently used file nobody is fsyncing (lock held)."""
        for handle in self._open:
            if not handle.pins:
                break
        else:
            return False
        del self._open[handle]
        if self._newest is handle:
            self._newest = None
        fd, handle.fd = handle.fd, None
        if fd is not None:
            os.close(fd)
        self.evictions += 1
        return True

    def _fsync(self, handle: FileHandle) -> None:
        with self._lock:
            fd = handle.fd
            if fd is not None:
                handle.pins += 1
        if fd is None:
            try:
                fd = os.open(handle.path, os.O_RDONLY | _O_CLOEXEC)
            except FileNotFoundError:
                return  # removed (retention, deletion): nothing left to make durable
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return
        try:
            os.fsync(fd)
        finally:
            with self._lock:
                handle.pins -= 1
                doomed = handle.closed and not handle.pins
                if doomed:
                    handle.fd = None
            if doomed:
                os.close(fd)

    def _close(self, handle: FileHandle) -> None:
        with self._lock:
            handle.closed = True
            self._open.pop(handle, None)
            if self._newest is handle:
                self._newest = None
            fd = handle.fd
            if fd is None or handle.pins:
                return  # the fsync running on it closes it
            handle.fd = None
        os.close(fd)

    # ------------------------------------------------------------------ connections

    def admit(self, *, http: bool = False) -> bool:
        """Whether an accepted connection may stay (then call
        :meth:`connection_closed` when it ends); files are closed to make room.
        Replication connections claimed but not open yet keep their room, though
        never HTTP's first :data:`HTTP_RESERVE`."""
        with self._lock:
            room = self._shared_room() + (HTTP_RESERVE if http else 0)
            fits = self.connections + self._unopened_claims() < room
            if http and not fits:
                fits = self.http_connections < HTTP_RESERVE and self._below_floor()
            if not fits:
                self.refused_connections += 1
                return False
            self.http_connections += http
            self._admitted()
            return True

    def admit_replication(self) -> bool:
        """Whether a replication connection (accepted, or about to be opened) may
        be held (then call :meth:`replication_closed` when it ends): within the
        claim, whatever the clients left (never HTTP's unused share, nor the files'
        floor); beyond it (a follower dialing again before its old end closed),
        room as a TCP client's. Files are closed to make room."""
        with self._lock:
            if self.replication_connections < min(self.replication_claimed, self._shared_room()):
                http_unused = HTTP_RESERVE - min(self.http_connections, HTTP_RESERVE)
                fits = self._below_floor(http_unused)
            else:
                fits = self.connections + self._unopened_claims() < self._shared_room()
            if not fits:
                return False
            self.replication_connections += 1
            self._admitted()
            return True

    def claim_replication(self, count: int) -> None:
        """The replication connections the broker's replica roles want now."""
        with self._lock:
            self.replication_claimed = count

    def _shared_room(self) -> int:
        """Connections of any kind but HTTP's own share: the pool less the files'
        floor and :data:`HTTP_RESERVE`."""
        return self.pool - MIN_FILES - HTTP_RESERVE

    def _below_floor(self, spare: int = 0) -> bool:
        """One more connection leaves the files their floor and ``spare`` more."""
        return self.connections < self.pool - MIN_FILES - spare

    def _unopened_claims(self) -> int:
        """Replication connections claimed and not open, within the shared room (a
        claim larger than it cannot take HTTP's share: /ping still answers)."""
        return max(
            min(self.replication_claimed, self._shared_room()) - self.replication_connections, 0
        )

    def _admitted(self) -> None:
        """One more connection: files are closed until it fits (lock held)."""
        self.connections += 1
        while len(self._open) + self.connections > self.pool and self._evict_one():
            pass

    def connection_closed(self, *, http: bool = False) -> None:
        with self._lock:
            self.connections -= 1
            self.http_connections -= http

    def replication_closed(self) -> None:
        with self._lock:
            self.connections -= 1
            self.replication_connections -= 1
