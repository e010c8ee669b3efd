"""Atomic whole-file writes (docs/storage.md): a crash leaves the old or the new file."""

from __future__ import annotations

import os
import stat
import threading
from typing import TYPE_CHECKING

import attrs
import pytest

from trionsq.persist import (
    StorageFormatError,
    decode_versioned,
    ensure_directory,
    fsync_directory,
    read_optional,
    remove_file,
    remove_stale_temps,
    storage_converter,
    write_atomic,
)

if TYPE_CHECKING:
    from pathlib import Path


def temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_write_creates_and_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "metadata.json"
    write_atomic(target, b"first, rather long content")
    assert target.read_bytes() == b"first, rather long content"
    write_atomic(target, b"second")
    assert target.read_bytes() == b"second"
    write_atomic(target, b"")
    assert target.read_bytes() == b""
    assert temps(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir()] == ["metadata.json"]


def test_large_data_is_written_entirely(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)
    write_atomic(tmp_path / "big", data)
    assert (tmp_path / "big").read_bytes() == data


def test_short_writes_are_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def dribble(fd: int, data: bytes | memoryview) -> int:
        return real_write(fd, bytes(data[:3]))

    monkeypatch.setattr(os, "write", dribble)
    write_atomic(tmp_path / "f", b"0123456789abcdef")
    monkeypatch.undo()
    assert (tmp_path / "f").read_bytes() == b"0123456789abcdef"


def test_file_then_directory_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        synced.append(("dir" if stat.S_ISDIR(mode) else "file", os.fstat(fd).st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    target = tmp_path / "a.state"
    write_atomic(target, b"x")
    assert synced == [("file", target.stat().st_ino), ("dir", tmp_path.stat().st_ino)]


def test_crash_before_rename_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "billing.state"
    write_atomic(target, b"old")

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert temps(tmp_path) == []  # the failed writer cleaned up


def test_failed_write_removes_its_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t"
    write_atomic(target, b"old")

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert temps(tmp_path) == []


def test_a_temp_left_by_a_killed_process_is_never_read(tmp_path: Path) -> None:
    # What kill -9 between the temp write and the rename leaves behind.
    target = tmp_path / "metadata.json"
    write_atomic(target, b"old")
    (tmp_path / ".metadata.json.0123456789abcdef.tmp").write_bytes(b"new, half writ")
    assert read_optional(target) == b"old"
    write_atomic(target, b"newer")  # a later writer is not disturbed by it
    assert read_optional(target) == b"newer"
    removed = remove_stale_temps(tmp_path)
    assert [p.name for p in removed] == [".metadata.json.0123456789abcdef.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata.json"]


def test_remove_stale_temps_leaves_real_files(tmp_path: Path) -> None:
    for name in ("orders-0.000001.log", "metadata.json", ".hidden", "x.tmp", ".a.tmp"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / ".dir.tmp").mkdir()
    assert [p.name for p in remove_stale_temps(tmp_path)] == [".a.tmp"]
    assert remove_stale_temps(tmp_path / "missing") == []


def test_concurrent_writers_of_different_files(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for round_ in range(50):
                write_atomic(tmp_path / name, f"{name} {round_}".encode() * 100)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"c{i}.state",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for i in range(6):
        assert (tmp_path / f"c{i}.state").read_bytes() == f"c{i}.state 49".encode() * 100
    assert temps(tmp_path) == []


def test_read_optional(tmp_path: Path) -> None:
    assert read_optional(tmp_path / "nothing") is None
    (tmp_path / "f").write_bytes(b"abc")
    assert read_optional(tmp_path / "f") == b"abc"


def test_directories_and_removal(tmp_path: Path) -> None:
    nested = tmp_path / "channels" / "orders-0"
    assert ensure_directory(nested) is True
    assert nested.is_dir()
    assert ensure_directory(nested) is False
    write_atomic(nested / "c.state", b"{}")
    assert remove_file(nested / "c.state") is True
    assert remove_file(nested / "c.state") is False
    fsync_directory(nested)


@attrs.frozen
class Sample:
    version: int
    ids: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...]


CONVERTER = storage_converter()


def decode(data: bytes) -> Sample:
    return decode_versioned(data, Sample, CONVERTER, version=1, what="sample")


def test_decode_versioned_round_trip() -> None:
    sample = decode(b'{"version":1,"ids":[1,2],"pairs":[[3,4]],"extra":"ignored"}')
    assert sample == Sample(1, (1, 2), ((3, 4),))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{", "sample: not JSON"),
        (b"[1]", "sample: expected a JSON object"),
        (b'{"ids":[]}', "sample: no integer format version"),
        (b'{"version":"1"}', "sample: no integer format version"),
        (b'{"version":2}', r"sample: format version 2 is not supported \(this trionsq reads 1\)"),
        (b'{"version":1,"ids":[],"pairs":[]', "sample: not JSON"),
        (b'{"version":1,"ids":{},"pairs":[]}', r"expected tuple @ \$\.ids"),
        (b'{"version":1,"ids":[true],"pairs":[]}', r"expected int @ \$\.ids\[0\]"),
        (b'{"version":1,"ids":[1.0],"pairs":[]}', r"expected int @ \$\.ids\[0\]"),
        (b'{"version":1,"ids":[],"pairs":[[1,2,3]]}', r"@ \$\.pairs\[0\]"),
        (b'{"version":1,"ids":[],"pairs":[[1]]}', r"@ \$\.pairs\[0\]"),
        (b'{"version":1,"ids":[],"pairs":[null]}', r"@ \$\.pairs\[0\]"),
        (b'{"version":1,"ids":[]}', r"required field missing @ \$\.pairs"),
    ],
)
def test_decode_versioned_errors_say_what_and_where(data: bytes, message: str) -> None:
    with pytest.raises(StorageFormatError, match=message):
        decode(data)
