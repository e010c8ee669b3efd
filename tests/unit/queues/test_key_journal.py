"""The idempotency key journal kept with a durable log: what a restart gives back."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from trionsq.broker.idempotence import key_digest, new_table, restore
from trionsq.broker.topic import Partition
from trionsq.protocol.message import EXT_VERSION_JSON
from trionsq.queues.key_journal import ENTRY_SIZE
from trionsq.queues.topic_log import TopicLog

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.broker.idempotence import IdempotenceTable

WALL = 1_700_000_000_000_000_000


def opened(directory: Path) -> TopicLog:
    log, _ = TopicLog.open(directory, "t-0", max_bytes_per_file=1 << 20, cache_records=4)
    return log


def publish(log: TopicLog, table: IdempotenceTable | None, keys: list[str]) -> None:
    """A keyed batch as Broker.publish_once stores it: the log, then the table."""
    exts = [orjson.dumps({"##idempotency_key": key}) for key in keys]
    records = log.append([b"x"] * len(keys), WALL, ext_version=EXT_VERSION_JSON, exts=exts)
    if table is not None:
        table.remember([key_digest(key) for key in keys], records)


def remembered(table: IdempotenceTable | None, keys: list[str]) -> list[bool]:
    assert table is not None
    return [key_digest(key) in table for key in keys]


def test_a_restart_gives_back_every_key_not_only_the_tail_cache(tmp_path: Path) -> None:
    log = opened(tmp_path)
    table = new_table(log, 100)
    keys = [f"k{n}" for n in range(50)]
    for start in range(0, 50, 10):
        publish(log, table, keys[start : start + 10])
    log.close(sync=False)  # as kill -9 leaves it: written, not synced
    again = opened(tmp_path)
    assert remembered(restore(again, 100), keys) == [True] * 50
    again.close()


def test_a_batch_the_journal_missed_is_taken_from_the_log(tmp_path: Path) -> None:
    """Killed between a batch's log write and its journal write."""
    log = opened(tmp_path)
    table = new_table(log, 100)
    publish(log, table, [f"a{n}" for n in range(10)])
    publish(log, None, [f"b{n}" for n in range(10)])  # the journal never got these
    log.close(sync=False)
    again = opened(tmp_path)
    restored = restore(again, 100)
    assert (
        remembered(restored, [f"a{n}" for n in range(10)] + [f"b{n}" for n in range(10)])
        == [True] * 20
    )
    again.close()
    third = opened(tmp_path)  # and the journal caught up
    journal, entries = third.open_keys(100, create=False)
    assert journal is not None
    assert len(entries) == 20 * ENTRY_SIZE
    third.close()


def test_keys_of_records_a_power_loss_took_are_forgotten(tmp_path: Path) -> None:
    """The journal reached the disk, the log's last batch did not: those keys name
    nothing stored, so they must be stored again."""
    log = opened(tmp_path)
    table = new_table(log, 100)
    publish(log, table, ["kept"])
    size = log.disk_bytes
    publish(log, table, ["lost1", "lost2"])
    log.close(sync=False)
    (segment,) = tmp_path.glob("t-0.*.log")
    with segment.open("r+b") as file:
        file.truncate(size)
    again = opened(tmp_path)
    assert remembered(restore(again, 100), ["kept", "lost1", "lost2"]) == [True, False, False]
    again.close()


def test_the_journal_rotates_and_keeps_the_window(tmp_path: Path) -> None:
    log = opened(tmp_path)
    table = new_table(log, 10)
    keys = [f"k{n}" for n in range(35)]
    for start in range(0, 35, 5):
        publish(log, table, keys[start : start + 5])
    log.close()
    assert sorted(p.name for p in tmp_path.glob("t-0.keys*")) == ["t-0.keys", "t-0.keys.old"]
    assert (tmp_path / "t-0.keys").stat().st_size <= 8 + 2 * (8 + 5 * ENTRY_SIZE)
    again = opened(tmp_path)
    assert remembered(restore(again, 10), keys) == [False] * 25 + [True] * 10
    again.close()


def test_a_torn_block_is_cut_off(tmp_path: Path) -> None:
    log = opened(tmp_path)
    table = new_table(log, 100)
    publish(log, table, ["a", "b"])
    log.close()
    with (tmp_path / "t-0.keys").open("ab") as file:
        file.write(b"\x05\x00\x00\x00torn")
    again = opened(tmp_path)
    assert remembered(restore(again, 100), ["a", "b"]) == [True, True]
    publish(again, again_table := restore(again, 100), ["c"])
    assert again_table is not None
    again.close()
    third = opened(tmp_path)
    assert remembered(restore(third, 100), ["a", "b", "c"]) == [True, True, True]
    third.close()


def test_emptying_the_topic_forgets_the_journal_too(tmp_path: Path) -> None:
    log = opened(tmp_path)
    partition = Partition("t", 0, max_msg_timeout=900.0, mem_queue_size=4, ephemeral=False, log=log)
    partition.idempotence = new_table(log, 100)
    publish(log, partition.idempotence, ["a", "b"])
    log.discard_before(log.next_id)  # consumed: the records may go, the keys stay
    partition.empty()
    log.close()
    again = opened(tmp_path)
    journal, entries = again.open_keys(100, create=False)
    assert journal is not None
    assert entries == b""
    again.close()


def test_keys_after_emptying_come_back_after_a_restart(tmp_path: Path) -> None:
    """Emptying cuts the journal back to its magic: the next keys are appended right
    after it (a file position left at the old end would leave a gap of zeros that
    ends the file at open)."""
    log = opened(tmp_path)
    partition = Partition("t", 0, max_msg_timeout=900.0, mem_queue_size=4, ephemeral=False, log=log)
    partition.idempotence = new_table(log, 100)
    publish(log, partition.idempotence, [f"old{n}" for n in range(20)])
    log.discard_before(log.next_id)
    partition.empty()
    partition.idempotence = new_table(log, 100)  # as the next keyed publish makes it
    publish(log, partition.idempotence, ["new"])
    log.close(sync=False)
    assert (tmp_path / "t-0.keys").stat().st_size == 8 + 8 + ENTRY_SIZE
    again = opened(tmp_path)
    journal, entries = again.open_keys(100, create=False)
    assert journal is not None
    assert len(entries) == ENTRY_SIZE
    again.close()


def test_deleting_the_log_deletes_the_journal(tmp_path: Path) -> None:
    log = opened(tmp_path)
    publish(log, new_table(log, 2), ["a", "b", "c"])
    log.delete_files()
    assert list(tmp_path.glob("t-0.keys*")) == []
