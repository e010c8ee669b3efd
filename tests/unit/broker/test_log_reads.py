"""Reading a partition log by offset, and reader holds (issue 17), without sockets."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from trionsq.broker.log_reads import (
    ReadError,
    earliest_offset,
    id_at_offset,
    offset_after,
    offsets,
    read_from_offset,
    replayable_log,
)
from trionsq.broker.reader_holds import (
    HoldsError,
    ReaderHold,
    decode_holds,
    encode_holds,
    fit_holds,
    holds_path,
    load_holds,
    move_hold,
    release_hold,
    save_holds,
)
from trionsq.broker.topic import Partition
from trionsq.queues.memory_log import MemoryLog
from trionsq.queues.topic_log import TopicLog

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.queues.partition_log import PartitionLog
    from trionsq.queues.record import Record

WALL = 1_700_000_000_000_000_000


def durable(directory: Path, *, cache_records: int = 50) -> TopicLog:
    log, _ = TopicLog.open(
        directory, "t-0", max_bytes_per_file=2048, cache_records=cache_records, index_interval=256
    )
    return log


def fill(log: PartitionLog, count: int, *, batch: int = 10) -> list[Record]:
    written: list[Record] = []
    for first in range(0, count, batch):
        bodies = [b"body %d" % i + b"x" * (i % 13) for i in range(first, min(first + batch, count))]
        written += log.append(bodies, WALL + first)
    return written


async def read_all(log: PartitionLog, offset: int, *, max_records: int = 7) -> list[Record]:
    pages: list[Record] = []
    while True:
        records, next_offset = await read_from_offset(
            log, offset, max_records=max_records, max_bytes=1 << 20
        )
        if not records:
            assert next_offset == offset == log.next_offset
            return pages
        assert next_offset == records[-1].end
        pages += records
        offset = next_offset


@pytest.fixture(params=["memory", "disk"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> PartitionLog:
    if request.param == "memory":
        return MemoryLog()
    return durable(tmp_path)


async def test_pages_by_next_offset_give_every_record_once(log: PartitionLog) -> None:
    written = fill(log, 300)
    assert await read_all(log, 0) == written
    assert await read_all(log, written[150].offset, max_records=1000) == written[150:]


async def test_a_page_is_bounded_by_bytes_but_has_at_least_one_record(log: PartitionLog) -> None:
    written = fill(log, 40)
    one, next_offset = await read_from_offset(log, 0, max_records=100, max_bytes=1)
    assert one == written[:1]
    assert next_offset == written[1].offset
    budget = sum(r.raw_size for r in written[:5])
    five, _ = await read_from_offset(log, 0, max_records=100, max_bytes=budget)
    assert five == written[:5]
    four, _ = await read_from_offset(log, 0, max_records=100, max_bytes=budget - 1)
    assert four == written[:4]


async def test_offsets_outside_the_log_or_inside_a_record_are_refused(log: PartitionLog) -> None:
    written = fill(log, 20)
    end = log.next_offset
    assert await read_from_offset(log, end, max_records=5, max_bytes=100) == ([], end)
    with pytest.raises(
        ReadError, match=f"offset {end + 1} is past the end of the partition \\({end}\\)"
    ):
        await read_from_offset(log, end + 1, max_records=5, max_bytes=100)
    with pytest.raises(ReadError, match="offset 3 is not the start of a message"):
        await read_from_offset(log, 3, max_records=5, max_bytes=100)
    log.discard_before(11)  # a memory log lets them go; a durable one keeps the segment
    oldest = await earliest_offset(log)
    assert oldest == (written[10].offset if not log.on_disk else 0)
    if not log.on_disk:
        with pytest.raises(ReadError, match=f"offset 0 is no longer held: the oldest is {oldest}"):
            await read_from_offset(log, 0, max_records=5, max_bytes=100)
    assert await id_at_offset(log, written[12].offset) == 13
    assert await id_at_offset(log, end) == log.next_id


async def test_a_durable_log_reads_what_channels_released_until_retention_deletes_it(
    tmp_path: Path,
) -> None:
    log = durable(tmp_path)
    written = fill(log, 300)
    assert log.segment_count > 3
    log.discard_before(150, now=0.0)  # the segments wholly below 150 go
    first_kept = log.earliest_id
    assert 1 < first_kept < 150
    held = [r for r in written if r.internal_id >= first_kept]
    found = await offsets(log)
    assert (found.earliest_id, found.earliest_offset) == (first_kept, held[0].offset)
    assert found.latest_offset == log.next_offset
    assert await read_all(log, held[0].offset) == held  # below start_id, from the files
    with pytest.raises(ReadError, match="is no longer held"):
        await read_from_offset(log, 0, max_records=5, max_bytes=100)
    assert log.read_cold(first_kept, 3)[0].internal_id == 150  # channels: from start_id
    assert log.read_cold(first_kept, 3, floor=first_kept) == held[:3]


async def test_offset_for_a_timestamp(log: PartitionLog) -> None:
    written = fill(log, 100)  # batch k has timestamp WALL + 10k
    found = await offsets(log, WALL + 35)
    assert found.timestamp_offset == written[40].offset
    assert (await offsets(log, 0)).timestamp_offset == 0
    assert (await offsets(log, WALL * 2)).timestamp_offset == log.next_offset
    assert (await offsets(log)).timestamp_offset is None


async def test_where_a_count_of_records_ends(log: PartitionLog) -> None:
    written = fill(log, 50)
    assert await offset_after(log, 0, 10) == written[10].offset
    assert await offset_after(log, written[45].offset, 5) == log.next_offset
    assert await offset_after(log, written[45].offset, 500) == log.next_offset
    assert await offset_after(log, log.next_offset, 1) == log.next_offset
    with pytest.raises(ReadError, match="not the start"):
        await offset_after(log, 1, 1)


async def test_an_ephemeral_partition_has_no_replayable_log() -> None:
    partition = Partition("t#ephemeral", 0, max_msg_timeout=1.0, mem_queue_size=10, ephemeral=True)
    with pytest.raises(ReadError, match="ephemeral"):
        replayable_log(partition)


# ---------------------------------------------------------------------- holds


def partition_on(log: PartitionLog) -> Partition:
    return Partition("t", 0, max_msg_timeout=60.0, mem_queue_size=10_000, ephemeral=False, log=log)


def consume_all(partition: Partition, name: str) -> None:
    channel = partition.channel(name)
    channel.move_to(partition.log.next_id)  # as if every message was finished
    channel.saved_confirmed = channel.cursor.confirmed_id


async def nothing() -> None:
    pass


async def test_a_hold_keeps_what_a_channel_consumed(log: PartitionLog) -> None:
    partition = partition_on(log)
    partition.channel("c")
    written = fill(log, 100)
    hold = await move_hold(partition, "spark", written[30].offset, save=nothing)
    assert hold == ReaderHold("spark", written[30].offset, 31)
    consume_all(partition, "c")
    partition.release()
    assert log.start_id == 31
    assert await read_all(log, written[30].offset) == written[30:]
    await move_hold(partition, "spark", written[60].offset, save=nothing)
    assert log.start_id == 61
    assert await release_hold(partition, "spark", save=nothing) == ReaderHold(
        "spark", written[60].offset, 61
    )
    assert log.start_id == log.next_id
    assert await release_hold(partition, "spark", save=nothing) is None


async def test_a_hold_survives_the_last_channel_but_the_topic_lets_go(log: PartitionLog) -> None:
    partition = partition_on(log)
    partition.channel("c")
    written = fill(log, 50)
    await move_hold(partition, "r", written[10].offset, save=nothing)
    partition.delete_channel("c")  # the last channel takes its messages along
    assert log.start_id == 11  # but the hold keeps them in the log
    assert partition.held() == 0
    fill(log, 5)
    assert partition.held() == 5
    fresh = partition.channel("d")  # a new first channel starts after what was let go
    assert fresh.cursor.read_id == 51
    partition.delete_channel("d")
    partition.empty()
    assert partition.held() == 0
    await release_hold(partition, "r", save=nothing)
    assert log.start_id == log.next_id


async def test_a_topic_without_channels_keeps_everything_with_or_without_holds(
    log: PartitionLog,
) -> None:
    partition = partition_on(log)
    written = fill(log, 30)
    await move_hold(partition, "r", written[20].offset, save=nothing)
    assert partition.release() == 0
    assert partition.held() == 30
    await release_hold(partition, "r", save=nothing)
    assert partition.held() == 30
    assert partition.channel("first").cursor.read_id == 1


async def test_a_hold_that_cannot_be_saved_is_undone(log: PartitionLog) -> None:
    partition = partition_on(log)
    written = fill(log, 10)

    async def refuse() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        await move_hold(partition, "r", written[2].offset, save=refuse)
    assert partition.holds.get("r") is None
    await move_hold(partition, "r", written[2].offset, save=nothing)
    with pytest.raises(OSError, match="No space"):
        await move_hold(partition, "r", written[5].offset, save=refuse)
    assert partition.holds.get("r") == ReaderHold("r", written[2].offset, 3)
    with pytest.raises(OSError, match="No space"):
        await release_hold(partition, "r", save=refuse)
    assert partition.holds.get("r") == ReaderHold("r", written[2].offset, 3)


async def test_a_hold_goes_back_into_what_is_still_on_disk(tmp_path: Path) -> None:
    log = durable(tmp_path)
    partition = partition_on(log)
    partition.channel("c")
    written = fill(log, 200)
    consume_all(partition, "c")
    partition.release()
    assert log.start_id == log.next_id
    oldest = log.earliest_id  # the active segment keeps its records
    hold = await move_hold(partition, "r", written[oldest - 1].offset, save=nothing)
    assert hold.internal_id == oldest
    assert log.start_id == oldest
    assert partition.channel("c").cursor.read_id == log.next_id  # the channel stays put
    with pytest.raises(ReadError, match="no longer held"):
        await move_hold(partition, "r", 0, save=nothing)
    with pytest.raises(ReadError, match="not the start of a message"):
        await move_hold(partition, "r", written[oldest].offset + 1, save=nothing)


def test_the_holds_file_round_trips_and_refuses_what_is_wrong(tmp_path: Path) -> None:
    holds = (ReaderHold("a", 0, 1), ReaderHold("b.x", 4096, 33))
    assert encode_holds(holds) == (
        b'{"version":1,"holds":[{"reader":"a","offset":0,"internal_id":1},'
        b'{"reader":"b.x","offset":4096,"internal_id":33}]}'
    )
    path = holds_path(tmp_path, "t", 3)
    assert path == tmp_path / "channels" / "t-3" / "holds.json"
    assert load_holds(path) == ()
    save_holds(path, holds)
    assert load_holds(path) == holds
    save_holds(path, ())
    assert not path.exists()
    with pytest.raises(HoldsError, match="listed twice"):
        decode_holds(encode_holds((holds[0], holds[0])))
    with pytest.raises(HoldsError, match="not a valid durable name"):
        decode_holds(encode_holds((ReaderHold("x#ephemeral", 0, 1),)))
    with pytest.raises(HoldsError, match="format version 2"):
        decode_holds(b'{"version":2,"holds":[]}')
    with pytest.raises(HoldsError, match="internal_id"):
        decode_holds(b'{"version":1,"holds":[{"reader":"a","offset":0}]}')


def test_saved_holds_are_fitted_to_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = durable(tmp_path)
    written = fill(log, 20)
    holds = (ReaderHold("in", written[5].offset, 6), ReaderHold("past", 10**6, 500))
    with caplog.at_level(logging.WARNING, "trionsq.storage"):
        fitted = fit_holds(log, holds, label="t/0")
    assert fitted == (holds[0], ReaderHold("past", log.next_offset, log.next_id))
    assert "reader hold past at id 500" in caplog.text
