"""The delays file: parked long delays survive a reload exactly as written, a torn or
damaged tail is cut without losing earlier entries, and compaction keeps the live ones.
"""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.queues import delay_store
from trionsq.queues.delay_store import (
    DELAYS_MAGIC,
    DelayStore,
    DelayStoreError,
    ParkedMessage,
)
from trionsq.queues.record import Record, record_size


def make_record(internal_id: int, body: bytes = b"body", *, ext: bytes = b"") -> Record:
    """A record as a log would hold it (ext headers and a DPUB time included)."""
    ext_version = 2 if ext else 0
    size = record_size(len(body), ext_version, len(ext), deferred=True)
    return Record(
        offset=internal_id * 1000,
        raw_size=size,
        internal_id=internal_id,
        timestamp=1_700_000_000_000_000_000 + internal_id,
        body=body,
        trace_id=internal_id * 7,
        ext_version=ext_version,
        ext=ext,
        deliver_at=1_800_000_000_000_000_000,
    )


def reload(path: Path) -> dict[int, ParkedMessage]:
    store, parked = DelayStore.open(path)
    store.close()
    return {message.internal_id: message for message in parked}


def test_a_missing_file_is_empty_and_created_at_the_first_park(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "c.delays"
    store, parked = DelayStore.open(path)
    assert parked == []
    assert not path.exists()
    assert store.done(5)  # nothing to let go: nothing written
    assert not path.exists()
    record = make_record(3, b"hello", ext=b'{"a":"b"}')
    assert store.park(3, 123, 2, record)
    store.close()
    assert path.read_bytes().startswith(DELAYS_MAGIC)
    assert reload(path) == {3: ParkedMessage(3, 123, 2, record)}


def test_latest_entry_wins_and_done_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "c.delays"
    store, _ = DelayStore.open(path)
    store.park(1, 100, 0, make_record(1))
    store.park(2, 200, 0, make_record(2))
    store.park(1, 300, 1, make_record(1))  # REQ'd again with a long delay
    store.done(2)
    assert len(store) == 1
    assert 1 in store
    assert 2 not in store
    store.close()
    assert reload(path) == {1: ParkedMessage(1, 300, 1, make_record(1))}


def test_clear_empties_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.delays"
    store, _ = DelayStore.open(path)
    store.park(1, 100, 0, make_record(1))
    assert store.clear()
    assert len(store) == 0
    store.park(4, 400, 0, make_record(4))
    store.close()
    assert set(reload(path)) == {4}


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_a_torn_tail_is_cut_at_the_last_whole_entry(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "c.delays"
    store, _ = DelayStore.open(path)
    store.park(1, 100, 0, make_record(1))
    good = store.size
    store.park(2, 200, 0, make_record(2))
    store.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - cut])
    assert set(reload(path)) == {1}
    assert path.stat().st_size == good  # cut off the file: later appends follow cleanly
    store, _ = DelayStore.open(path)
    store.park(3, 300, 0, make_record(3))
    store.close()
    assert set(reload(path)) == {1, 3}


def test_a_damaged_entry_ends_the_file_there(tmp_path: Path) -> None:
    path = tmp_path / "c.delays"
    store, _ = DelayStore.open(path)
    store.park(1, 100, 0, make_record(1))
    at = store.size
    store.park(2, 200, 0, make_record(2))
    store.park(3, 300, 0, make_record(3))
    store.close()
    data = bytearray(path.read_bytes())
    data[at + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    assert set(reload(path)) == {1}


def test_a_file_torn_while_created_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "c.delays"
    path.write_bytes(DELAYS_MAGIC[:3])
    store, parked = DelayStore.open(path)
    assert parked == []
    store.park(1, 100, 0, make_record(1))
    store.close()
    assert set(reload(path)) == {1}


def test_a_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.delays"
    path.write_bytes(b'{"version":1}')
    with pytest.raises(DelayStoreError, match="bad magic"):
        DelayStore.open(path)


def test_compaction_keeps_the_live_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delay_store, "COMPACT_MIN_BYTES", 2000)
    path = tmp_path / "c.delays"
    store, _ = DelayStore.open(path)
    store.park(1, 100, 0, make_record(1, b"x" * 200))
    for internal_id in range(2, 40):
        store.park(internal_id, 100, 0, make_record(internal_id, b"y" * 200))
        store.done(internal_id)
    assert store.compactions >= 1
    assert store.size < 2000
    store.park(50, 500, 3, make_record(50))
    store.close()
    assert reload(path) == {
        1: ParkedMessage(1, 100, 0, make_record(1, b"x" * 200)),
        50: ParkedMessage(50, 500, 3, make_record(50)),
    }


def test_sync_handle_only_after_parks(tmp_path: Path) -> None:
    store, _ = DelayStore.open(tmp_path / "c.delays")
    assert store.sync_handle() is None
    store.park(1, 100, 0, make_record(1))
    handle = store.sync_handle()
    assert handle is not None
    store.close()  # the fsync of a closed store's file opens it for the call
    handle.fsync()
    assert store.sync_handle() is None


def test_a_refused_write_is_reported_and_cut_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors: list[OSError] = []
    path = tmp_path / "c.delays"
    store, _ = DelayStore.open(path, on_error=errors.append)
    store.park(1, 100, 0, make_record(1))
    real_write = delay_store._write_all

    def half_then_full(fd: int, data: bytes) -> None:
        real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(delay_store, "_write_all", half_then_full)
    assert not store.park(2, 200, 0, make_record(2))
    assert errors[0].filename == str(path)
    assert 2 not in store
    monkeypatch.setattr(delay_store, "_write_all", real_write)
    store.park(3, 300, 0, make_record(3))  # after the half entry was cut off
    store.close()
    assert set(reload(path)) == {1, 3}


def test_delete_removes_the_file_and_late_writes_never_bring_it_back(tmp_path: Path) -> None:
    path = tmp_path / "c.delays"
    store, _ = DelayStore.open(path)
    store.park(1, 100, 0, make_record(1))
    store.delete()
    assert not path.exists()
    assert not store.park(2, 200, 0, make_record(2))  # a FIN or REQ after the delete
    assert store.done(1)
    assert store.clear()
    assert not path.exists()


operations = st.lists(
    st.one_of(
        st.tuples(st.just("park"), st.integers(1, 12), st.integers(0, 2**62), st.integers(0, 9)),
        st.tuples(st.just("done"), st.integers(1, 12), st.just(0), st.just(0)),
        st.tuples(st.just("clear"), st.just(0), st.just(0), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(operations, st.integers(0, 4000))
def test_random_operations_then_reload_equals_the_model(
    ops: list[tuple[str, int, int, int]], compact_at: int
) -> None:
    """Any sequence of parks, dones, clears and reopens (with compaction somewhere on
    the way) reloads to the latest PARK of each id not let go since."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "c.delays"
        model: dict[int, ParkedMessage] = {}
        original = delay_store.COMPACT_MIN_BYTES
        delay_store.COMPACT_MIN_BYTES = compact_at  # type: ignore[misc]
        try:
            store, _ = DelayStore.open(path)
            for kind, internal_id, due, attempts in ops:
                if kind == "park":
                    record = make_record(internal_id, bytes([attempts]) * attempts)
                    assert store.park(internal_id, due, attempts, record)
                    model[internal_id] = ParkedMessage(internal_id, due, attempts, record)
                elif kind == "done":
                    assert store.done(internal_id)
                    model.pop(internal_id, None)
                elif kind == "clear":
                    assert store.clear()
                    model.clear()
                else:
                    store.close()
                    store, parked = DelayStore.open(path)
                    assert {message.internal_id: message for message in parked} == model
                assert len(store) == len(model)
            store.close()
        finally:
            delay_store.COMPACT_MIN_BYTES = original  # type: ignore[misc]
        assert reload(path) == model


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=10), st.data())
def test_any_torn_tail_keeps_every_whole_entry_before_it(
    ids: list[int], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "c.delays"
        store, _ = DelayStore.open(path)
        ends: list[tuple[int, dict[int, int]]] = []
        live: dict[int, int] = {}
        for step, internal_id in enumerate(ids):
            store.park(internal_id, step, 0, make_record(internal_id))
            live[internal_id] = step
            ends.append((store.size, dict(live)))
        store.close()
        whole = path.read_bytes()
        cut = data.draw(st.integers(len(DELAYS_MAGIC), len(whole)))
        path.write_bytes(whole[:cut])
        expected: dict[int, int] = {}
        for end, snapshot in ends:
            if end <= cut:
                expected = snapshot
        assert {key: m.due_ns for key, m in reload(path).items()} == expected
