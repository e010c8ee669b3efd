"""Partition logs, delay stores and journals (idempotency keys, deliveries) sharing a
descriptor budget smaller than their number: files are closed while idle and opened
again on use, and nothing written is lost, left unsynced, or kept from retention by
it (issue 30, 3b)."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from trionsq.broker.idempotence import new_table, restore
from trionsq.descriptors import UNLIMITED, DescriptorBudget
from trionsq.queues.delay_store import COMPACT_MIN_BYTES, DelayStore
from trionsq.queues.delivery_journal import DeliveryJournal
from trionsq.queues.topic_log import TopicLog

from .test_delay_store import make_record, reload
from .test_key_journal import publish as publish_keyed
from .test_key_journal import remembered
from .test_topic_log import body_for, read_everything

if TYPE_CHECKING:
    from pathlib import Path


def open_logs(
    directory: Path, budget: DescriptorBudget, count: int, *, max_bytes_per_file: int = 1 << 20
) -> list[TopicLog]:
    return [
        TopicLog.open(
            directory,
            f"topic{number}-0",
            max_bytes_per_file=max_bytes_per_file,
            cache_records=4,
            files=budget,
        )[0]
        for number in range(count)
    ]


def publish(log: TopicLog, count: int = 1) -> None:
    first = log.next_id
    log.append([body_for(first + i) for i in range(count)], 1000 + first)


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The inodes of the files (not directories) fsynced; each fsync is still done."""
    inodes: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        status = os.fstat(fd)
        if stat.S_ISREG(status.st_mode):
            inodes.append(status.st_ino)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return inodes


def test_round_robin_over_more_logs_than_descriptors_keeps_every_record(
    tmp_path: Path,
) -> None:
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=3)
    logs = open_logs(tmp_path, budget, 10, max_bytes_per_file=600)
    for _ in range(20):
        for log in logs:
            publish(log, 2)
            assert budget.files_open <= 3
    for log in logs:
        log.close()
    assert budget.files_open == 0
    reopened = open_logs(tmp_path, DescriptorBudget(UNLIMITED, 0, max_open_files=3), 10)
    for log in reopened:
        records = read_everything(log)
        assert [record.internal_id for record in records] == list(range(1, 41))
        assert all(record.body == body_for(record.internal_id) for record in records)
        log.close(sync=False)


def test_a_hot_log_stays_open_while_cold_ones_take_turns(tmp_path: Path) -> None:
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=2)
    hot, *cold = open_logs(tmp_path, budget, 6)
    for round_ in range(100):
        publish(hot)
        publish(cold[round_ % len(cold)])
    stats = budget.statistics()
    assert stats.reopens == 100 - len(cold)  # the cold ones, each time but their first
    assert hot._handle is not None
    assert hot._handle.fd is not None


def test_recovery_holds_no_descriptor(tmp_path: Path) -> None:
    budget = DescriptorBudget(UNLIMITED, 0)
    for log in open_logs(tmp_path, budget, 5, max_bytes_per_file=300):
        publish(log, 20)
        log.close()
    again = DescriptorBudget(UNLIMITED, 0)
    logs = open_logs(tmp_path, again, 5, max_bytes_per_file=300)
    assert again.files_open == 0
    publish(logs[0])
    assert again.files_open == 1
    for log in logs:
        log.close()


def test_a_sync_covers_segments_closed_before_it_came_due(
    tmp_path: Path, fsynced: list[int]
) -> None:
    """--sync-every/--sync-timeout: a segment written, then closed for another file
    (the active one, and rolled ones), is fsynced at the log's next sync."""
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=1)
    log, other = open_logs(tmp_path, budget, 2, max_bytes_per_file=300)
    publish(log, 8)  # rolls: a sealed segment waits for its fsync, and the active one
    publish(log, 8)
    written = sorted(tmp_path.glob("topic0-0.*.log"))
    assert len(written) >= 2
    publish(other)  # closes the log's files
    assert log._handle is not None
    assert log._handle.fd is None
    log.sync()
    assert sorted(fsynced) == sorted(path.stat().st_ino for path in written)
    fsynced.clear()
    log.sync()  # nothing written since: a closed segment is not opened for nothing
    assert fsynced == []
    log.close()
    other.close()


def test_retention_removes_closed_segments_and_a_due_sync_skips_them(
    tmp_path: Path, fsynced: list[int]
) -> None:
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=1)
    log, other = open_logs(tmp_path, budget, 2, max_bytes_per_file=300)
    for _ in range(6):
        publish(log, 4)
    publish(other)
    segments = sorted(tmp_path.glob("topic0-0.*.log"))
    assert len(segments) > 2
    log.discard_before(log.next_id)  # every channel confirmed all: only the active stays
    assert sorted(tmp_path.glob("topic0-0.*.log")) == segments[-1:]
    log.sync()  # the rolled ones were due: gone, nothing to sync and no error
    assert fsynced == [segments[-1].stat().st_ino]
    publish(log)
    assert [r.internal_id for r in read_everything(log)] == [log.next_id - 1]
    log.close()
    other.close()


def test_delay_stores_taking_turns_on_one_descriptor_keep_every_entry(tmp_path: Path) -> None:
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=1)
    paths = [tmp_path / f"c{number}.delays" for number in range(4)]
    stores = [DelayStore.open(path, files=budget)[0] for path in paths]
    for internal_id in range(1, 21):
        for store in stores:
            assert store.park(internal_id, 100 + internal_id, 1, make_record(internal_id))
        assert budget.files_open == 1
    for store in stores:
        assert store.done(3)
        store.close()
    for path in paths:
        assert sorted(reload(path)) == [n for n in range(1, 21) if n != 3]


def test_a_loaded_store_holds_no_descriptor_until_written(tmp_path: Path) -> None:
    path = tmp_path / "c.delays"
    store, _ = DelayStore.open(path)
    store.park(1, 100, 0, make_record(1))
    store.close()
    budget = DescriptorBudget(UNLIMITED, 0)
    store, parked = DelayStore.open(path, files=budget)
    assert [message.internal_id for message in parked] == [1]
    assert budget.files_open == 0
    store.park(2, 200, 0, make_record(2))
    assert budget.files_open == 1
    store.close()
    assert sorted(reload(path)) == [1, 2]


def test_clear_compaction_and_sync_of_a_closed_delays_file(
    tmp_path: Path, fsynced: list[int]
) -> None:
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=1)
    path = tmp_path / "c.delays"
    store, _ = DelayStore.open(path, files=budget)
    other, _ = DelayStore.open(tmp_path / "o.delays", files=budget)
    store.park(1, 100, 0, make_record(1))
    handle = store.sync_handle()
    assert handle is not None
    other.park(1, 100, 0, make_record(1))  # closes the store's file
    handle.fsync()  # opened for the call
    assert fsynced == [path.stat().st_ino]
    assert store.clear()  # cut by name, no descriptor needed
    assert reload(path) == {}
    big = b"x" * 4096
    internal_id = 0
    while store.compactions == 0:  # parks and lets go until most of the file is dead
        internal_id += 1
        store.park(internal_id, 100, 0, make_record(internal_id, big))
        other.park(internal_id + 1, 100, 0, make_record(internal_id + 1))  # closes it
        if internal_id % 2:
            store.done(internal_id)
    assert store.size < COMPACT_MIN_BYTES
    store.park(10**6, 100, 0, make_record(10**6))  # the compacted file, opened again
    store.close()
    other.close()
    assert sorted(reload(path)) == [*range(2, internal_id + 1, 2), 10**6]


def keyed_logs(directory: Path, budget: DescriptorBudget, count: int) -> list[TopicLog]:
    return [
        TopicLog.open(
            directory, f"t{number}-0", max_bytes_per_file=1 << 20, cache_records=4, files=budget
        )[0]
        for number in range(count)
    ]


def test_key_journals_taking_turns_on_two_descriptors_keep_every_key(tmp_path: Path) -> None:
    """Four keyed partitions, a segment and a ``.keys`` each, on two descriptors; the
    journals rotate (window 10) while the budget keeps closing them."""
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=2)
    logs = keyed_logs(tmp_path, budget, 4)
    tables = [new_table(log, 10) for log in logs]
    keys = [f"k{n}" for n in range(36)]
    for start in range(0, 36, 3):
        for log, table in zip(logs, tables, strict=True):
            publish_keyed(log, table, keys[start : start + 3])
            assert budget.files_open <= 2
    assert budget.statistics().reopens > 0
    for log in logs:
        log.close()
    assert budget.files_open == 0
    for number in range(4):
        names = sorted(path.name for path in tmp_path.glob(f"t{number}-0.keys*"))
        assert names == [f"t{number}-0.keys", f"t{number}-0.keys.old"]
    again = DescriptorBudget(UNLIMITED, 0)
    for log in keyed_logs(tmp_path, again, 4):
        assert remembered(restore(log, 10), keys) == [False] * 26 + [True] * 10
        log.close()


def test_a_restored_key_journal_holds_no_descriptor_until_written(tmp_path: Path) -> None:
    (log,) = keyed_logs(tmp_path, DescriptorBudget(UNLIMITED, 0), 1)
    publish_keyed(log, new_table(log, 100), ["a"])
    log.close()
    budget = DescriptorBudget(UNLIMITED, 0)
    (log,) = keyed_logs(tmp_path, budget, 1)
    table = restore(log, 100)
    assert budget.files_open == 0
    publish_keyed(log, table, ["b"])
    assert budget.files_open == 2  # the segment and the journal
    log.close()


def test_a_closed_key_journal_is_fsynced_by_name_and_before_its_rotation(
    tmp_path: Path, fsynced: list[int]
) -> None:
    """The sync due on a ``.keys`` the budget closed opens it for the fsync; a rotation
    fsyncs the file becoming ``.keys.old`` first, closed or not."""
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=1)
    log, other = keyed_logs(tmp_path, budget, 2)
    table = new_table(log, 2)
    publish_keyed(log, table, ["a"])
    publish(other)  # closes the log's files
    journal = log._keys
    assert journal is not None
    assert journal._handle is not None
    assert journal._handle.fd is None
    log.sync()
    keys = tmp_path / "t0-0.keys"
    assert keys.stat().st_ino in fsynced
    publish_keyed(log, table, ["b"])
    first = keys.stat().st_ino
    publish(other)
    fsynced.clear()
    publish_keyed(log, table, ["c"])  # full (window 2): rotates
    assert (tmp_path / "t0-0.keys.old").stat().st_ino == first
    assert fsynced == [first]
    log.close()
    other.close()


def test_delivery_journals_taking_turns_on_one_descriptor_keep_every_count(
    tmp_path: Path,
) -> None:
    """Four channels' journals on one descriptor, the files taking turns as states
    are written: what the last written state lacks is all there at open."""
    budget = DescriptorBudget(UNLIMITED, 0, max_open_files=1)
    states = [tmp_path / f"c{number}.state" for number in range(4)]
    journals = [DeliveryJournal.open(state, files=budget)[0] for state in states]
    for internal_id in range(1, 31):
        for journal in journals:
            assert journal.delivered([(internal_id, 1, 2)])
            assert budget.files_open == 1
        if internal_id % 10 == 0:  # a state covering everything until now
            for journal in journals:
                journal.checkpoint()
                journal.covered()
    for journal in journals:
        journal.close()
    assert budget.files_open == 0
    for state in states:
        _, replay = DeliveryJournal.open(state)  # since the state written at 20
        assert replay.counts == dict.fromkeys(range(21, 31), 2)
