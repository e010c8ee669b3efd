"""The descriptor budget: held files closed least recently used first and opened
again on use, never while an fsync holds them; connections admitted within the
pool, with a share only HTTP may take and a floor connections never take."""

from __future__ import annotations

import errno
import os
import threading
from typing import TYPE_CHECKING

import pytest

from trionsq import descriptors
from trionsq.descriptors import (
    HTTP_RESERVE,
    MIN_FILES,
    UNLIMITED,
    DescriptorBudget,
    FileHandle,
)

if TYPE_CHECKING:
    from pathlib import Path

APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as error:
        if error.errno != errno.EBADF:
            raise
        return False
    return True


def write(handle: FileHandle, data: bytes) -> None:
    assert os.write(handle.descriptor(), data) == len(data)


def test_the_least_recently_used_file_is_closed_for_a_new_one_and_opened_again(
    tmp_path: Path,
) -> None:
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=2)
    a, b = (budget.open(tmp_path / name, APPEND) for name in "ab")
    write(a, b"a1")  # b is now the least recently used
    c = budget.open(tmp_path / "c", APPEND)
    assert b.fd is None
    assert a.fd is not None
    assert c.fd is not None
    write(b, b"b1")  # opened again, in append mode, closing a (used before c)
    assert a.fd is None
    write(a, b"a2")
    assert budget.files_open == 2
    assert (tmp_path / "a").read_bytes() == b"a1a2"
    assert (tmp_path / "b").read_bytes() == b"b1"
    stats = budget.statistics()
    assert (stats.evictions, stats.reopens, stats.files_open) == (3, 2, 2)


def test_a_file_opened_again_is_never_created_or_truncated(tmp_path: Path) -> None:
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=1)
    path = tmp_path / "segment"
    first = budget.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_APPEND)
    write(first, b"kept")
    budget.open(tmp_path / "other", APPEND)  # closes the first
    write(first, b"+more")
    assert path.read_bytes() == b"kept+more"
    budget.open(tmp_path / "other2", APPEND)
    path.unlink()
    with pytest.raises(FileNotFoundError):  # gone: not made again, empty
        first.descriptor()
    assert not path.exists()


def test_a_closed_handle_is_not_opened_again(tmp_path: Path) -> None:
    budget = DescriptorBudget(UNLIMITED, 0)
    handle = budget.open(tmp_path / "f", APPEND)
    fd = handle.fd
    handle.close()
    assert fd is not None
    assert not is_open(fd)
    assert budget.files_open == 0
    with pytest.raises(ValueError, match="was closed"):
        handle.descriptor()


class BlockedFsync:
    """os.fsync in the budget's module, held until released (a slow disk)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.synced: list[int] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            self.entered.set()
            assert self.release.wait(10)
            self.synced.append(os.fstat(fd).st_ino)
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def test_a_file_being_fsynced_is_neither_closed_for_another_nor_by_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=1)
    handle = budget.open(tmp_path / "busy", APPEND)
    write(handle, b"x")
    fd = handle.fd
    assert fd is not None
    blocked = BlockedFsync(monkeypatch)
    syncing = threading.Thread(target=handle.fsync)
    syncing.start()
    try:
        assert blocked.entered.wait(10)
        with pytest.raises(OSError, match="Too many open files") as refused:
            budget.open(tmp_path / "other", APPEND)  # the only file is pinned
        assert refused.value.errno == errno.EMFILE
        assert refused.value.filename == str(tmp_path / "other")
        handle.close()  # waits for the fsync: its descriptor stays valid meanwhile
        assert is_open(fd)
    finally:
        blocked.release.set()
        syncing.join(10)
    assert blocked.synced == [os.stat(tmp_path / "busy").st_ino]
    assert not is_open(fd)
    assert budget.files_open == 0
    budget.open(tmp_path / "other", APPEND)  # room again


def test_fsync_of_a_closed_file_opens_it_for_the_call_and_skips_a_removed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=1)
    evicted = budget.open(tmp_path / "evicted", APPEND)
    write(evicted, b"due")
    removed = budget.open(tmp_path / "removed", APPEND)
    write(removed, b"gone")
    budget.open(tmp_path / "third", APPEND)
    assert evicted.fd is None
    assert removed.fd is None
    (tmp_path / "removed").unlink()
    blocked = BlockedFsync(monkeypatch)
    blocked.release.set()
    evicted.fsync()
    removed.fsync()
    assert blocked.synced == [os.stat(tmp_path / "evicted").st_ino]
    assert evicted.fd is None  # not kept: the call's descriptor is its own
    assert budget.files_open == 1


def test_a_kernel_refusal_closes_an_idle_file_and_tries_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Descriptors the budget does not know of (another broker in the process, the
    application) took the rest: an idle file gives its descriptor up."""
    budget = DescriptorBudget(UNLIMITED, 0)
    idle = budget.open(tmp_path / "idle", APPEND)
    real_open = os.open
    refusals: list[OSError] = []

    def kernel_open(path: str, flags: int, mode: int = 0o777) -> int:
        if refusals:
            raise refusals.pop()
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", kernel_open)
    refusals.append(OSError(errno.EMFILE, "Too many open files"))
    fresh = budget.open(tmp_path / "fresh", APPEND)
    assert idle.fd is None
    assert fresh.fd is not None
    alone = DescriptorBudget(UNLIMITED, 0)
    refusals.append(OSError(errno.ENFILE, "Too many open files in system"))
    with pytest.raises(OSError, match="Too many open files in system"):  # none idle
        alone.open(tmp_path / "third", APPEND)


def test_tcp_connections_leave_room_for_http_and_files(tmp_path: Path) -> None:
    budget = DescriptorBudget(100, 10)  # a pool of 90
    files = [budget.open(tmp_path / str(n), APPEND) for n in range(80)]
    tcp_room = 90 - MIN_FILES - HTTP_RESERVE
    assert all(budget.admit() for _ in range(tcp_room))
    assert not budget.admit()
    assert budget.files_open == 90 - tcp_room  # idle files closed for the connections
    assert all(budget.admit(http=True) for _ in range(HTTP_RESERVE))
    assert not budget.admit(http=True)
    assert budget.files_open == MIN_FILES
    assert sum(handle.fd is not None for handle in files) == MIN_FILES
    budget.open(tmp_path / "new topic", APPEND)  # files still get their floor
    assert budget.files_open == MIN_FILES
    budget.connection_closed()
    assert budget.admit(http=True)
    stats = budget.statistics()
    assert (stats.connections, stats.refused_connections) == (90 - MIN_FILES, 2)


def test_the_pool_is_what_the_limit_leaves_after_the_reserve() -> None:
    budget = DescriptorBudget.for_process(sockets=10, threads=40, max_open_files=100)
    assert budget.limit == descriptors.open_file_limit()
    in_use = descriptors.descriptors_in_use()
    assert budget.reserved >= in_use + 10 + 2 * 40
    assert budget.pool == max(budget.limit - budget.reserved, descriptors.MIN_POOL)
    assert budget.max_open_files == min(100, budget.pool)
    tiny = DescriptorBudget(64, 100)
    assert tiny.starved
    assert tiny.pool == descriptors.MIN_POOL


def test_clients_leave_the_room_claimed_for_replication_connections(tmp_path: Path) -> None:
    """Issue 35: a cluster broker's replication connections come from the pool, first."""
    budget = DescriptorBudget(100, 10)  # a pool of 90
    files = [budget.open(tmp_path / str(n), APPEND) for n in range(80)]
    budget.claim_replication(20)
    client_room = 90 - MIN_FILES - HTTP_RESERVE - 20
    assert all(budget.admit() for _ in range(client_room))
    assert not budget.admit()
    # the claimed ones are admitted however many clients came, files closed for them
    assert all(budget.admit_replication() for _ in range(20))
    assert budget.files_open == 90 - client_room - 20
    # none over the claim here (a follower dialing again before its old end closed):
    # HTTP's share stays HTTP's, and the files keep their floor
    assert not budget.admit_replication()
    assert all(budget.admit(http=True) for _ in range(HTTP_RESERVE))
    assert budget.files_open == MIN_FILES
    assert sum(handle.fd is not None for handle in files) == MIN_FILES
    budget.replication_closed()
    assert budget.admit_replication()  # its follower dialed again: its room was kept
    stats = budget.statistics()
    assert stats.replication_connections == 20
    assert stats.connections == client_room + 20 + HTTP_RESERVE
    assert stats.replication_claimed == 20


def test_a_claim_larger_than_the_pool_refuses_tcp_but_never_http() -> None:
    budget = DescriptorBudget(100, 10)
    budget.claim_replication(500)  # more partitions than the limit can replicate
    assert not budget.admit()
    shared = 90 - MIN_FILES - HTTP_RESERVE
    assert all(budget.admit_replication() for _ in range(shared))
    assert not budget.admit_replication()  # the follower waits, and tries again
    assert all(budget.admit(http=True) for _ in range(HTTP_RESERVE))
    assert not budget.admit(http=True)


def test_claims_not_open_yet_keep_their_room_and_a_smaller_claim_frees_it() -> None:
    budget = DescriptorBudget(100, 10)
    budget.claim_replication(30)
    assert all(budget.admit_replication() for _ in range(10))  # 20 claimed, not open
    client_room = 90 - MIN_FILES - HTTP_RESERVE - 30
    assert all(budget.admit() for _ in range(client_room))
    assert not budget.admit()
    budget.claim_replication(10)  # roles ended: the rest goes to clients again
    assert budget.admit()
    budget.claim_replication(0)
    assert budget.statistics().replication_claimed == 0


def test_a_claim_that_grows_after_clients_came_waits_for_them_to_leave() -> None:
    budget = DescriptorBudget(100, 10)
    shared = 90 - MIN_FILES - HTTP_RESERVE
    assert all(budget.admit() for _ in range(shared))
    budget.claim_replication(5)  # a replicated topic created now
    assert not budget.admit_replication()  # retried by the follower
    assert all(budget.admit(http=True) for _ in range(HTTP_RESERVE))  # /ping answers
    assert not budget.admit(http=True)
    budget.connection_closed()
    assert not budget.admit()  # the room a client left goes to replication
    assert budget.admit_replication()
    budget.connection_closed(http=True)
    assert not budget.admit_replication()  # HTTP's share stays HTTP's
    assert budget.admit(http=True)
