"""Resolving Youzan offset specs to a log position, in memory and on disk (spec §8.6)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.broker.offsets import OffsetError, resolve_offset
from trionsq.protocol import OffsetSpec
from trionsq.queues.memory_log import MemoryLog
from trionsq.queues.topic_log import TopicLog

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.queues.partition_log import PartitionLog

SECOND = 1_000_000_000


def published(log: PartitionLog, seconds: list[int]) -> None:
    """One message per entry, published at that many seconds after the epoch."""
    for second in seconds:
        log.append([b"at %d" % second], second * SECOND)


def disk_log(tmp_path: Path, *, max_bytes_per_file: int = 1 << 20) -> TopicLog:
    log, _ = TopicLog.open(
        tmp_path, "t-0", max_bytes_per_file=max_bytes_per_file, cache_records=4, index_interval=64
    )
    return log


@pytest.fixture(params=["memory", "disk"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> PartitionLog:
    if request.param == "memory":
        return MemoryLog()
    return disk_log(tmp_path)


def test_special_minus_one_is_the_tail(log: PartitionLog) -> None:
    published(log, [10, 20, 30])
    assert resolve_offset(log, OffsetSpec("special", -1)) == log.next_id == 4


def test_timestamp_is_the_first_message_at_or_after_it(log: PartitionLog) -> None:
    published(log, [10, 20, 20, 30])
    assert resolve_offset(log, OffsetSpec("timestamp", 20)) == 2
    assert resolve_offset(log, OffsetSpec("timestamp", 21)) == 4
    assert resolve_offset(log, OffsetSpec("timestamp", 0)) == 1
    assert resolve_offset(log, OffsetSpec("timestamp", -5)) == 1
    assert resolve_offset(log, OffsetSpec("timestamp", 31)) == 5  # after the newest: tail


def test_timestamp_finds_the_first_late_enough_even_if_the_clock_went_back(
    log: PartitionLog,
) -> None:
    published(log, [10, 40, 20, 50])
    assert resolve_offset(log, OffsetSpec("timestamp", 30)) == 2


def test_msgcount_starts_after_that_many_messages(log: PartitionLog) -> None:
    published(log, [1, 2, 3])
    assert resolve_offset(log, OffsetSpec("msgcount", 0)) == 1
    assert resolve_offset(log, OffsetSpec("msgcount", 2)) == 3
    assert resolve_offset(log, OffsetSpec("msgcount", 3)) == 4  # the tail


def test_msgcount_beyond_the_queue_is_refused(log: PartitionLog) -> None:
    published(log, [1, 2, 3])
    with pytest.raises(OffsetError, match="out of range: the queue has 3 messages"):
        resolve_offset(log, OffsetSpec("msgcount", 4))
    with pytest.raises(OffsetError, match="out of range"):
        resolve_offset(log, OffsetSpec("msgcount", -1))


def test_virtual_queue_is_the_message_starting_at_that_byte(log: PartitionLog) -> None:
    records = log.append([b"a", b"bb", b"ccc"], SECOND)
    for record in records:
        spec = OffsetSpec("virtual_queue", record.offset)
        assert resolve_offset(log, spec) == record.internal_id
    end = OffsetSpec("virtual_queue", log.next_offset)
    assert resolve_offset(log, end) == log.next_id


def test_virtual_queue_inside_a_message_is_refused(log: PartitionLog) -> None:
    (record,) = log.append([b"body"], SECOND)
    with pytest.raises(OffsetError, match="is not the start of a message"):
        resolve_offset(log, OffsetSpec("virtual_queue", record.offset + 1))


def test_virtual_queue_past_the_end_is_refused(log: PartitionLog) -> None:
    log.append([b"body"], SECOND)
    with pytest.raises(OffsetError, match=f"the queue ends at {log.next_offset}"):
        resolve_offset(log, OffsetSpec("virtual_queue", log.next_offset + 1))


def test_memory_log_cannot_go_back_before_what_it_released() -> None:
    log = MemoryLog()
    records = log.append([b"a", b"b", b"c"], SECOND)
    log.discard_before(3)
    with pytest.raises(OffsetError, match="no longer held: the oldest is msgcount:2"):
        resolve_offset(log, OffsetSpec("msgcount", 0))
    with pytest.raises(OffsetError, match="no longer held"):
        resolve_offset(log, OffsetSpec("virtual_queue", records[0].offset))
    assert resolve_offset(log, OffsetSpec("timestamp", 0)) == 3


def test_disk_log_replays_released_records_still_in_its_segments(tmp_path: Path) -> None:
    log = disk_log(tmp_path)
    records = log.append([b"a", b"b", b"c"], SECOND)
    log.discard_before(3)  # every channel confirmed 1 and 2; the segment still has them
    assert log.start_id == 3
    assert log.earliest_id == 1
    assert resolve_offset(log, OffsetSpec("msgcount", 0)) == 1
    assert resolve_offset(log, OffsetSpec("virtual_queue", records[1].offset)) == 2
    assert resolve_offset(log, OffsetSpec("timestamp", 0)) == 1
    log.rewind(1)
    assert log.start_id == 1
    assert log.start_offset == 0
    replayed = log.read_cold(1, 10)
    assert [r.body for r in replayed] == [b"a", b"b", b"c"]


def test_disk_log_cannot_rewind_into_a_deleted_segment(tmp_path: Path) -> None:
    log = disk_log(tmp_path, max_bytes_per_file=200)
    for _ in range(10):
        log.append([b"x" * 60], SECOND)
    log.discard_before(8)
    earliest = log.earliest_id
    assert earliest > 1  # whole segments before it were deleted
    with pytest.raises(OffsetError, match="no longer held"):
        resolve_offset(log, OffsetSpec("msgcount", 0))
    log.rewind(1)
    assert log.start_id == earliest


@settings(max_examples=50, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=30),
    at=st.integers(0, 2000),
)
def test_every_message_start_resolves_and_nothing_else_does(sizes: list[int], at: int) -> None:
    log = MemoryLog()
    records = log.append([b"x" * size for size in sizes], SECOND)
    starts = {record.offset: record.internal_id for record in records}
    starts[log.next_offset] = log.next_id
    spec = OffsetSpec("virtual_queue", at)
    if at in starts:
        assert resolve_offset(log, spec) == starts[at]
    else:
        with pytest.raises(OffsetError):
            resolve_offset(log, spec)
