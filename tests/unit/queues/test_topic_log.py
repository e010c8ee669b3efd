"""The durable partition log: MemoryLog parity, segment files, recovery, cold reads."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from trionsq.queues import cold_reads, record_codec
from trionsq.queues import recovery as recovery_module
from trionsq.queues import segment_walk as segment_walk_module
from trionsq.queues.log_state import MAX_CHUNKS
from trionsq.queues.memory_log import MemoryLog
from trionsq.queues.record import Record, decode_records, encode_record
from trionsq.queues.topic_log import HEADER_SIZE, RecoveryReport, TopicLog, segment_name

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

NAME = "topic-0"


DECODE_TWINS = {"compiled": record_codec._decode_run, "pure": record_codec._decode_run_py}
"""Cold reads' per-record loop: the one in use (compiled where built) and the pure one."""


@contextmanager
def decode_twin(name: str) -> Iterator[None]:
    """Cold reads decode with the named twin while the block runs."""
    before = vars(cold_reads)["_decode_run"]
    setattr(cold_reads, "_decode_run", DECODE_TWINS[name])  # noqa: B010 (a Final name)
    try:
        yield
    finally:
        setattr(cold_reads, "_decode_run", before)  # noqa: B010


def open_log(
    directory: Path,
    *,
    max_bytes_per_file: int = 1 << 20,
    cache_records: int = 100,
    retention: float = 0.0,
    clock: Callable[[], float] | None = None,
    index_interval: int = 256,
) -> tuple[TopicLog, RecoveryReport]:
    if clock is None:
        return TopicLog.open(
            directory,
            NAME,
            max_bytes_per_file=max_bytes_per_file,
            cache_records=cache_records,
            retention=retention,
            index_interval=index_interval,
        )
    return TopicLog.open(
        directory,
        NAME,
        max_bytes_per_file=max_bytes_per_file,
        cache_records=cache_records,
        retention=retention,
        clock=clock,
        index_interval=index_interval,
    )


def body_for(internal_id: int) -> bytes:
    """A body that says which id it was published as (and varies in length)."""
    return b"message %d " % internal_id + b"x" * (internal_id % 37)


def fill(log: TopicLog, batches: int, per_batch: int = 10, timestamp: int = 1000) -> None:
    for number in range(batches):
        first = log.next_id
        log.append([body_for(first + i) for i in range(per_batch)], timestamp + number)


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"{NAME}.*.log"))


def read_everything(
    log: TopicLog,
    from_id: int | None = None,
    limit: int = 10**9,
    *,
    chunk: int = 7,
    max_bytes: int = 700,
) -> list[Record]:
    """Read as a channel would: memory first, a cold read installed when needed."""
    out: list[Record] = []
    next_id = log.start_id if from_id is None else from_id
    while len(out) < limit:
        if log.is_cold(next_id):
            log.install_chunk(next_id, log.read_cold(next_id, chunk, max_bytes=max_bytes))
        records = log.read(next_id, limit - len(out))
        if not records:
            break
        out.extend(records)
        next_id = records[-1].internal_id + 1
    return out


def get_anywhere(log: TopicLog, internal_id: int) -> Record | None:
    record = log.get(internal_id)
    if record is None and log.start_id <= internal_id < log.next_id:
        cold = log.read_cold(internal_id, 1)
        if cold and cold[0].internal_id == internal_id:
            return cold[0]
    return record


# -- format -----------------------------------------------------------------------


def test_segment_holds_a_header_then_records_encoded_as_record_py_does(tmp_path: Path) -> None:
    log, report = open_log(tmp_path)
    assert report.lossless
    assert report.segments == 0
    records = log.append([b"a" * 200, b"b"], 7, trace_ids=[11, 12])
    records += log.append([b"ext"], 8, ext_version=2, exts=[b'{"k":1}'])
    records += log.append([b"later"], 9, deliver_at=99)
    records += log.append([b"both"], 10, ext_version=4, exts=[b"h"], deliver_at=5, trace_ids=[3])
    log.close()
    (path,) = segment_files(tmp_path)
    assert path.name == segment_name(NAME, 0) == f"{NAME}.000000.log"
    data = path.read_bytes()
    assert data[:8] == b"TNSQSEG1"
    assert data[HEADER_SIZE:] == b"".join(encode_record(record) for record in records)
    decoded, used = decode_records(data[HEADER_SIZE:], 0)
    assert decoded == records
    assert used == len(data) - HEADER_SIZE


def test_append_matches_memory_log(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    memory = MemoryLog()
    for target in (log, memory):
        target.append([b"x" * 200] * 200, 5)
        target.append([b"a", b"bb"], 6, trace_ids=[1, 2])
        target.append([b"e"], 7, ext_version=2, exts=[b"{}"])
        target.append([b"d"], 8, deliver_at=123)
        target.append([b"ed"], 9, ext_version=4, exts=[b"h"], deliver_at=5, trace_ids=[3])
    assert read_everything(log) == memory.read(1, 1000)
    assert (log.next_id, log.next_offset, len(log)) == (
        memory.next_id,
        memory.next_offset,
        len(memory),
    )
    assert log.append([], 1) == []
    with pytest.raises(ValueError, match="one entry per body"):
        log.append([b"a", b"b"], 1, trace_ids=[1])
    with pytest.raises(ValueError, match="2-byte length"):
        log.append([b"a"], 1, ext_version=2, exts=[b"x" * 0x10000])
    assert log.next_id == memory.next_id
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.append([b"a"], 1)


def test_plain_batches_build_the_same_records_either_way(tmp_path: Path) -> None:
    """The durable log's batch encoder (and its one-record path) against the memory log's."""
    log, _ = open_log(tmp_path)
    bodies = [b"a", b"bb" * 50, b"c"]
    memory = MemoryLog()
    memory.append([b"first"], 1)
    log.append([b"first"], 1)
    assert log.append(bodies, 9, trace_ids=[4, 5, 6]) == memory.append(
        bodies, 9, trace_ids=[4, 5, 6]
    )
    assert log.append(bodies, 10) == memory.append(bodies, 10)
    assert log.append([b"one"], 11, trace_ids=[7]) == memory.append([b"one"], 11, trace_ids=[7])
    assert log.append([b""], 12) == memory.append([b""], 12)
    log.close()
    reopened, _ = open_log(tmp_path)
    assert read_everything(reopened) == memory.read(memory.start_id, 100)
    reopened.close()


def test_segments_roll_before_a_batch_that_would_not_fit(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    batches = [log.append([b"%03d" % i + b"-" * 60] * 4, i) for i in range(10)]  # 388 B each
    big = log.append([b"y" * 3000], 99)  # alone larger than a segment: one of its own
    after = log.append([b"z"], 100)
    log.close()
    files = segment_files(tmp_path)
    sizes = [path.stat().st_size for path in files]
    assert all(size <= 1000 for size in sizes[:-2])
    assert sizes[-2] == HEADER_SIZE + big[0].raw_size
    assert sizes[-1] == HEADER_SIZE + after[0].raw_size
    # every batch lies whole in one file
    contents = [decode_records(path.read_bytes()[HEADER_SIZE:], 0)[0] for path in files]
    for batch in batches:
        ids = {record.internal_id for record in batch}
        holders = [
            n for n, records in enumerate(contents) if ids & {r.internal_id for r in records}
        ]
        assert len(holders) == 1


# -- parity with MemoryLog under random operations --------------------------------


class ParityMachine(RuleBasedStateMachine):
    """TopicLog against MemoryLog: appends, reads, gets, discards, reopens."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="topic-log-parity-"))
        self.memory = MemoryLog()
        self.cache_records = 3
        self.log, _ = open_log(
            self.directory, max_bytes_per_file=600, cache_records=self.cache_records
        )

    def teardown(self) -> None:
        self.log.close(sync=False)
        shutil.rmtree(self.directory, ignore_errors=True)

    @rule(
        bodies=st.lists(st.binary(min_size=1, max_size=120), min_size=1, max_size=8),
        timestamp=st.integers(0, 10**6),
        kind=st.sampled_from(["plain", "trace", "ext", "deferred"]),
    )
    def append(self, bodies: list[bytes], timestamp: int, kind: str) -> None:
        trace_ids = list(range(len(bodies))) if kind == "trace" else None
        ext_version = 2 if kind == "ext" else 0
        exts = [body[:3] for body in bodies] if kind == "ext" else None
        deliver_at = timestamp + 1 if kind == "deferred" else 0
        got = self.log.append(
            bodies,
            timestamp,
            trace_ids=trace_ids,
            ext_version=ext_version,
            exts=exts,
            deliver_at=deliver_at,
        )
        expected = self.memory.append(
            bodies,
            timestamp,
            trace_ids=trace_ids,
            ext_version=ext_version,
            exts=exts,
            deliver_at=deliver_at,
        )
        assert got == expected

    @rule(data=st.data(), count=st.integers(1, 30))
    def read(self, data: st.DataObject, count: int) -> None:
        from_id = data.draw(st.integers(0, self.memory.next_id + 2))
        assert read_everything(self.log, from_id, count) == self.memory.read(from_id, count)

    @rule(data=st.data())
    def get(self, data: st.DataObject) -> None:
        internal_id = data.draw(st.integers(0, self.memory.next_id + 2))
        assert get_anywhere(self.log, internal_id) == self.memory.get(internal_id)

    @rule(data=st.data())
    def discard(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.memory.next_id + 2))
        assert self.log.discard_before(target) == self.memory.discard_before(target)

    @rule()
    def sync(self) -> None:
        self.log.sync()
        assert self.log.unsynced == 0

    @rule()
    def reopen(self) -> None:
        start = self.log.start_id
        self.log.close()
        self.log, report = open_log(
            self.directory, max_bytes_per_file=600, cache_records=self.cache_records
        )
        assert report.lossless
        assert self.log.start_id <= start
        self.log.discard_before(start)

    @precondition(lambda self: len(self.memory) > 0)
    @rule()
    def cold_read_everything(self) -> None:
        start = self.memory.start_id
        assert self.log.read_cold(start, 10**6, max_bytes=1 << 30) == self.memory.read(start, 10**6)

    @invariant()
    def same_positions(self) -> None:
        log, memory = self.log, self.memory
        assert (log.start_id, log.next_id, log.next_offset) == (
            memory.start_id,
            memory.next_id,
            memory.next_offset,
        )
        assert log.start_offset == memory.start_offset
        assert len(log) == len(memory)
        assert log.holes == 0

    @invariant()
    def disk_matches_files(self) -> None:
        files = segment_files(self.directory)
        assert self.log.segment_count == len(files)
        assert self.log.disk_bytes == sum(path.stat().st_size for path in files)


ParityMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40)
test_parity_with_memory_log = ParityMachine.TestCase


@pytest.mark.parametrize("twin", sorted(DECODE_TWINS))
@settings(max_examples=60)
@given(
    batches=st.lists(st.integers(1, 12), min_size=2, max_size=15),
    damage=st.sets(st.integers(0, 200), max_size=12),
    cache_records=st.integers(0, 6),
    chunk=st.integers(1, 9),
    data=st.data(),
)
def test_reads_around_damaged_records(
    twin: str,
    batches: list[int],
    damage: set[int],
    cache_records: int,
    chunk: int,
    data: st.DataObject,
) -> None:
    """Damage records anywhere but the very last one: every read skips exactly them.

    Damage in the last segment is found at open, in a sealed one by the first read
    that needs it (``verify_first``: all read once before the checks; otherwise the
    checks themselves are the first reads). Either way each id is counted once.
    Run with the compiled decode loop and its pure-Python twin.
    """
    with decode_twin(twin):
        directory = Path(tempfile.mkdtemp(prefix="topic-log-holes-"))
        try:
            log, _ = open_log(directory, max_bytes_per_file=500, cache_records=cache_records)
            for count in batches:
                fill(log, 1, per_batch=count)
            written = log.read_cold(1, 10**6, max_bytes=1 << 30)
            next_id = log.next_id
            log.close()
            damaged = {written[i].internal_id for i in damage if i < len(written) - 1}
            starts = {
                decode_records(path.read_bytes()[HEADER_SIZE:], 0)[0][0].internal_id: path
                for path in segment_files(directory)
            }
            for internal_id in damaged:
                record = written[internal_id - 1]
                first = max(i for i in starts if i <= internal_id)
                position = HEADER_SIZE + record.offset - written[first - 1].offset + 4
                with starts[first].open("r+b") as file:
                    file.seek(position)
                    byte = file.read(1)[0]
                    file.seek(position)
                    file.write(bytes([byte ^ 0xFF]))
            log, report = open_log(directory, max_bytes_per_file=500, cache_records=cache_records)
            expected = [r for r in written if r.internal_id not in damaged]
            assert log.next_id == next_id
            last_first = max(starts)
            assert report.missing_ids == log.holes == sum(i >= last_first for i in damaged)
            assert report.records == len(log)
            assert report.verified_lazily == len(starts) - 1
            verify_first = data.draw(st.booleans())
            if verify_first:
                assert log.read_cold(1, 10**6, max_bytes=1 << 30) == expected
                assert log.holes == report.missing_ids + log.late_missing_ids == len(damaged)
                assert len(log) == len(expected)

            for _ in range(3):
                from_id = data.draw(st.integers(0, next_id + 1))
                limit = data.draw(st.integers(1, 40))
                start = max(from_id, log.start_id)
                assert (
                    read_everything(log, from_id, limit, chunk=chunk, max_bytes=300)
                    == [r for r in expected if r.internal_id >= start][:limit]
                )
                probe = data.draw(st.integers(0, next_id))
                by_id = {r.internal_id: r for r in expected if r.internal_id >= log.start_id}
                assert get_anywhere(log, probe) == by_id.get(probe)
                record = written[data.draw(st.integers(0, len(written) - 1))]
                after = next(
                    (r for r in expected if r.offset >= record.offset and r.internal_id >= start),
                    None,
                )
                if record.internal_id >= start:
                    assert log.seek_offset(record.offset) == (
                        after.internal_id if after else next_id
                    )
                target = data.draw(st.integers(log.start_id, next_id))
                released = sum(1 for r in expected if log.start_id <= r.internal_id < target)
                if verify_first:
                    assert log.discard_before(target) == released
                    assert len(log) == sum(1 for r in expected if r.internal_id >= log.start_id)
                else:  # a segment not read yet still counts its damaged records
                    assert log.discard_before(target) >= released
            # every segment still held read once now: each damaged id held counts once
            log.read_cold(log.start_id, 10**6, max_bytes=1 << 30)
            assert log.holes == sum(i >= log.start_id for i in damaged)
            assert len(log) == sum(1 for r in expected if r.internal_id >= log.start_id)
            assert report.missing_ids + log.late_missing_ids <= len(damaged)
        finally:
            shutil.rmtree(directory, ignore_errors=True)


# -- recovery ---------------------------------------------------------------------


def test_reopen_recovers_ids_offsets_and_bodies(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=2000, cache_records=10)
    fill(log, 30)
    written = log.read_cold(1, 10**6, max_bytes=1 << 30)
    assert len(written) == 300
    next_id, next_offset = log.next_id, log.next_offset
    log.close()
    log, report = open_log(tmp_path, max_bytes_per_file=2000, cache_records=10)
    assert report.lossless
    assert report.records == 300
    assert report.segments == len(segment_files(tmp_path)) > 1
    assert (log.next_id, log.next_offset, log.start_id, log.start_offset) == (
        next_id,
        next_offset,
        1,
        0,
    )
    assert log.read(291, 100) == written[290:]  # the tail cache was filled from disk
    assert log.is_cold(290)
    assert read_everything(log) == written
    (record,) = log.append([b"after"], 5)
    assert (record.internal_id, record.offset) == (next_id, next_offset)


def test_every_cut_of_the_last_record_is_recovered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "source"
    log, _ = open_log(source)
    fill(log, 3)
    last = log.get(log.next_id - 1)
    assert last is not None
    log.close()
    (path,) = segment_files(source)
    whole = path.read_bytes()
    caplog.set_level(logging.WARNING, "trionsq.storage")
    for cut in range(1, last.raw_size):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        (directory / path.name).write_bytes(whole[:-cut])
        log, report = open_log(directory)
        assert report.truncated_bytes == last.raw_size - cut
        assert report.records == 29
        assert (report.skipped_records, report.missing_ids, report.bad_files) == (0, 0, ())
        assert (log.next_id, log.next_offset) == (last.internal_id, last.offset)
        assert (directory / path.name).stat().st_size == len(whole) - last.raw_size
        assert [r.body for r in read_everything(log)] == [body_for(i) for i in range(1, 30)]
        (again,) = log.append([last.body], last.timestamp)
        assert again == last  # the same id and offset are given again
        log.close()
    assert "cut a torn tail" in caplog.text


def test_a_cut_at_a_record_boundary_loses_nothing(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    fill(log, 1)
    log.close()
    log, report = open_log(tmp_path)
    assert report.lossless
    assert report.truncated_bytes == 0
    assert log.next_id == 11


def ids_in(path: Path) -> list[int]:
    """The ids of the records of one segment file (read whole, no recovery)."""
    return [record.internal_id for record in decode_records(path.read_bytes()[HEADER_SIZE:], 0)[0]]


@pytest.mark.parametrize("where", ["sealed", "last"])
def test_a_flipped_byte_in_a_middle_record_is_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """In the last segment open finds it; in a sealed one, the first read does. Either
    way it is logged and counted once, and its neighbours are intact."""
    log, _ = open_log(tmp_path, max_bytes_per_file=2500, cache_records=2)
    fill(log, 8)
    log.close()
    files = segment_files(tmp_path)
    assert len(files) > 2
    path = files[0] if where == "sealed" else files[-1]
    ids = ids_in(path)
    victim = ids[len(ids) // 2]
    log, _ = open_log(tmp_path, max_bytes_per_file=2500, cache_records=2)
    damaged = log.read_cold(victim, 1)[0]
    first = log.read_cold(ids[0], 1)[0]
    log.close()
    data = bytearray(path.read_bytes())
    position = HEADER_SIZE + damaged.offset - first.offset + 20  # in the fields: bad checksum
    data[position] ^= 0x40
    path.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, "trionsq.storage")
    log, report = open_log(tmp_path, max_bytes_per_file=2500, cache_records=2)
    assert report.verified_lazily == len(files) - 1
    assert report.truncated_bytes == report.bad_bytes == 0
    if where == "sealed":
        assert report.lossless  # not read at open
        assert "damaged" not in caplog.text
        assert (log.holes, len(log)) == (0, 80)
    else:
        assert (report.skipped_records, report.skipped_bytes) == (1, damaged.raw_size)
        assert report.missing_ids == 1
        assert not report.lossless
        assert (log.holes, len(log)) == (1, 79)
    records = read_everything(log)
    assert [r.internal_id for r in records] == [i for i in range(1, 81) if i != victim]
    assert all(r.body == body_for(r.internal_id) for r in records)
    assert caplog.text.count("skipped 1 damaged record") == 1
    assert log.late_missing_ids == (1 if where == "sealed" else 0)
    assert (log.holes, len(log)) == (1, 79)
    assert get_anywhere(log, victim - 1) == log.read_cold(victim - 1, 1)[0]
    assert get_anywhere(log, victim) is None
    assert log.read_cold(victim, 1)[0].internal_id == victim + 1
    # a chunk read from a hole answers for the hole too
    log.install_chunk(victim, log.read_cold(victim, 3))
    assert not log.is_cold(victim)
    assert [r.internal_id for r in log.read(victim, 2)] == [victim + 1, victim + 2]
    assert log.get(victim) is None
    assert log.get(victim + 3) == log.read_cold(victim + 3, 1)[0]
    # reading it again neither warns nor counts again
    caplog.clear()
    assert read_everything(log) == records
    assert "damaged" not in caplog.text
    assert log.late_missing_ids == (1 if where == "sealed" else 0)
    assert log.holes == 1
    # reopened, it is found again (at open or by the first read), once
    log.close()
    log, _ = open_log(tmp_path, max_bytes_per_file=2500, cache_records=2)
    near = log.read_cold(victim - 1, 3, max_bytes=1 << 20)
    assert [r.internal_id for r in near] == [victim - 1, victim + 1, victim + 2]
    assert caplog.text.count("skipped 1 damaged record") == 1
    assert "damaged; skipped" not in caplog.text
    # the hole leaves with what is discarded
    assert log.discard_before(victim + 3) == victim + 1
    assert log.holes == 0


def test_open_reads_only_the_last_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000, cache_records=5)
    fill(log, 12)
    written = log.read_cold(1, 1000)
    log.close()
    files = segment_files(tmp_path)
    firsts = [ids_in(path)[0] for path in files]
    walked: list[int] = []
    real_walk = segment_walk_module._walk_records

    def walk(fd: int, position: int, end: int, first_id: int, *rest: int) -> object:
        walked.append(first_id)
        return real_walk(fd, position, end, first_id, *rest)

    monkeypatch.setattr(recovery_module, "_walk_records", walk)
    log, report = open_log(tmp_path, max_bytes_per_file=1000, cache_records=5)
    assert walked == [firsts[-1]]
    assert report.lossless
    assert report.segments == len(files)
    assert report.verified_lazily == len(files) - 1
    assert report.records == len(log) == 120
    assert (log.start_id, log.start_offset, log.next_id) == (1, 0, 121)
    assert log.read(116, 10) == written[115:]  # the tail cache, from the last segment
    # a read verifies the segments it needs, each once
    assert log.read_cold(firsts[1] + 1, 2) == written[firsts[1] : firsts[1] + 2]
    assert walked == [firsts[-1], firsts[1]]
    assert log.read_cold(firsts[1], 2) == written[firsts[1] - 1 : firsts[1] + 1]
    assert walked == [firsts[-1], firsts[1]]
    # as do the seeks
    third = written[firsts[3] + 1]
    assert log.seek_offset(third.offset) == third.internal_id
    assert walked == [firsts[-1], firsts[1], firsts[3]]
    assert log.offset_of(third.internal_id) == third.offset
    assert log.seek_timestamp(1000 + 3) == firsts[3]  # fill's timestamps rise by batch
    assert walked == [firsts[-1], firsts[1], firsts[3], firsts[0], firsts[2]]
    assert read_everything(log) == written
    assert sorted(walked) == sorted(firsts)
    assert log.late_missing_ids == log.holes == 0


@pytest.mark.parametrize("cut", ["at a record boundary", "inside a record"])
def test_a_sealed_segment_shorter_than_the_next_header_says_loses_ids(
    tmp_path: Path, cut: str
) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 10)
    written = log.read_cold(1, 1000)
    log.close()
    files = segment_files(tmp_path)
    ids = ids_in(files[1])
    last = written[ids[-1] - 1]
    size = files[1].stat().st_size
    keep = size - last.raw_size if cut == "at a record boundary" else size - 10
    with files[1].open("r+b") as file:
        file.truncate(keep)
    log, report = open_log(tmp_path, max_bytes_per_file=1000)
    assert report.missing_ids == 1  # the last record of that segment
    assert log.holes == 1
    assert report.verified_lazily == len(files) - 2  # that one is read at open
    if cut == "inside a record":
        bad = Path(str(files[1]) + ".bad")
        assert report.bad_files == (str(bad),)
        assert report.bad_bytes == last.raw_size - 10 == bad.stat().st_size
    else:
        assert report.bad_files == ()
    assert files[1].stat().st_size == size - last.raw_size
    assert read_everything(log) == [r for r in written if r.internal_id != last.internal_id]
    assert log.late_missing_ids == 0


def test_a_sealed_segment_longer_than_the_next_header_says_is_cut_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A write that failed and could not be undone, then a roll: the next header
    starts where the failed write did, and what lies past that is set aside."""
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 10)
    written = log.read_cold(1, 1000)
    log.close()
    files = segment_files(tmp_path)
    original = files[2].read_bytes()
    torn = encode_record(written[0])[:25]  # part of a batch that was never acknowledged
    files[2].write_bytes(original + torn)
    caplog.set_level(logging.WARNING, "trionsq.storage")
    log, report = open_log(tmp_path, max_bytes_per_file=1000)
    bad = Path(str(files[2]) + ".bad")
    assert report.bad_files == (str(bad),)
    assert report.bad_bytes == len(torn)
    assert bad.read_bytes() == torn
    assert files[2].read_bytes() == original
    assert (report.missing_ids, report.skipped_records, report.truncated_bytes) == (0, 0, 0)
    assert report.verified_lazily == len(files) - 1
    assert report.records == 100
    assert "a write that failed, then a roll" in caplog.text
    assert read_everything(log) == written
    assert log.holes == log.late_missing_ids == 0
    log.close()
    log, report = open_log(tmp_path, max_bytes_per_file=1000)
    assert report.lossless


def test_several_damaged_records_in_a_row(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    fill(log, 2)
    records = log.read_cold(1, 100)
    log.close()
    (path,) = segment_files(tmp_path)
    data = bytearray(path.read_bytes())
    for victim in records[3:6]:
        data[HEADER_SIZE + victim.offset + 4] ^= 0xFF  # the checksum itself
    path.write_bytes(bytes(data))
    log, report = open_log(tmp_path)
    assert report.skipped_records == 3
    assert report.missing_ids == 3
    assert [r.internal_id for r in read_everything(log)] == [1, 2, 3, *range(7, 21)]


def test_damaged_records_at_the_end_are_a_torn_tail(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    fill(log, 2)
    last = log.read_cold(20, 1)[0]
    log.close()
    (path,) = segment_files(tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    log, report = open_log(tmp_path)
    assert report.truncated_bytes == last.raw_size
    assert report.skipped_records == 0
    assert log.next_id == 20


@pytest.mark.parametrize("victim_id", [5, "last"])
def test_an_impossible_size_in_a_sealed_segment_is_found_by_the_first_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, victim_id: int | str
) -> None:
    """Only the damaged record is lost: the read resynchronises at the next intact
    one. With nothing intact after it in its segment, the ids up to the next segment
    are lost. Either way the segment is not changed; the damaged bytes are copied."""
    log, _ = open_log(tmp_path, max_bytes_per_file=1500)
    fill(log, 6)
    first = segment_files(tmp_path)[0]
    last_of_first = ids_in(first)[-1]
    victim = log.read_cold(5 if victim_id == 5 else last_of_first, 1)[0]
    log.close()
    lost = [victim.internal_id]
    data = bytearray(first.read_bytes())
    data[HEADER_SIZE + victim.offset : HEADER_SIZE + victim.offset + 4] = b"\xff\xff\xff\xff"
    first.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, "trionsq.storage")
    log, report = open_log(tmp_path, max_bytes_per_file=1500)
    assert report.lossless
    assert len(log) == 60
    ids = [r.internal_id for r in read_everything(log)]
    assert ids == [i for i in range(1, 61) if i not in lost]
    assert log.holes == log.late_missing_ids == 1
    assert len(log) == 59
    start = HEADER_SIZE + victim.offset
    (bad,) = tmp_path.glob(f"{first.name}.*.bad")
    assert bad.name == f"{first.name}.{start}-{start + victim.raw_size}.bad"
    assert bad.read_bytes() == bytes(data[start : start + victim.raw_size])
    if victim_id == 5:
        assert caplog.text.count("skipped 1 damaged record(s), ids 5 to 5") == 1
    else:
        assert caplog.text.count("is unreadable from position") == 1
        assert f"ids {last_of_first} to {last_of_first} are missing" in caplog.text
    # a read never writes to a segment: the file is as it was
    assert first.read_bytes() == bytes(data)
    assert not Path(str(first) + ".bad").exists()
    assert log.seek_offset(victim.offset) == victim.internal_id + 1
    assert log.offset_of(victim.internal_id) == log.read_cold(victim.internal_id + 1, 1)[0].offset


def test_a_zero_length_segment_is_removed_without_loss(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    fill(log, 2)
    log.close()
    empty = tmp_path / segment_name(NAME, 1)
    empty.touch()
    log, report = open_log(tmp_path)
    assert report.lossless
    assert report.empty_files_removed == 1
    assert not empty.exists()
    assert log.next_id == 21
    log.append([b"more"], 1)
    log.close()
    assert [path.name for path in segment_files(tmp_path)] == [segment_name(NAME, 0)]


def test_an_unreadable_segment_is_set_aside_as_bad(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 12)
    log.close()
    files = segment_files(tmp_path)
    assert len(files) >= 4
    middle = files[1]
    lost = decode_records(middle.read_bytes()[HEADER_SIZE:], 0)[0]
    data = bytearray(middle.read_bytes())
    data[3] ^= 0x20  # the magic
    middle.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, "trionsq.storage")
    log, report = open_log(tmp_path, max_bytes_per_file=1000)
    bad = str(middle) + ".bad"
    assert report.bad_files == (bad,)
    assert report.bad_bytes == len(data)
    assert report.missing_ids == len(lost)
    assert Path(bad).exists()
    assert not middle.exists()
    assert f"jump to next file and saving bad file as {bad}" in caplog.text
    lost_ids = {record.internal_id for record in lost}
    assert [r.internal_id for r in read_everything(log)] == [
        i for i in range(1, 121) if i not in lost_ids
    ]
    assert log.next_id == 121
    log.close()
    # a second recovery keeps the first .bad and finds nothing new to complain about
    log, report = open_log(tmp_path, max_bytes_per_file=1000)
    assert report.bad_files == ()
    assert report.missing_ids == len(lost)


def test_an_unreadable_last_segment_leaves_the_one_before_active(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 6)
    written = log.read_cold(1, 1000)
    log.close()
    last = segment_files(tmp_path)[-1]
    first_lost = decode_records(last.read_bytes()[HEADER_SIZE:], 0)[0][0].internal_id
    last.write_bytes(b"\x00" * 40)
    log, report = open_log(tmp_path, max_bytes_per_file=1000)
    assert report.bad_files == (str(last) + ".bad",)
    assert (log.next_id, log.next_offset) == (first_lost, written[first_lost - 1].offset)
    (record,) = log.append([b"next"], 1)
    assert record.internal_id == first_lost


def test_a_torn_header_of_a_new_last_segment_is_removed(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    fill(log, 1)
    log.close()
    (tmp_path / segment_name(NAME, 1)).write_bytes(b"TNSQ")
    log, report = open_log(tmp_path)
    assert report.truncated_bytes == 4
    assert report.segments == 1
    assert log.next_id == 11


def test_a_missing_middle_segment_shows_as_missing_ids(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 10)
    written = log.read_cold(1, 1000)
    log.close()
    files = segment_files(tmp_path)
    lost = decode_records(files[1].read_bytes()[HEADER_SIZE:], 0)[0]
    files[1].unlink()
    log, report = open_log(tmp_path, max_bytes_per_file=1000)
    assert report.missing_ids == len(lost)
    assert len(log) == 100 - len(lost)
    after = lost[-1].internal_id + 1
    # offsets still come from the segment headers
    assert log.read_cold(lost[0].internal_id, 1) == [written[after - 1]]
    assert log.next_offset == written[-1].end


def test_files_of_other_logs_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "other-0.000000.log").write_bytes(b"junk")
    (tmp_path / f"{NAME}.000000.log.bad").write_bytes(b"junk")
    (tmp_path / f"{NAME}.notes").write_bytes(b"junk")
    log, report = open_log(tmp_path)
    assert report.lossless
    assert report.segments == 0
    log.append([b"a"], 1)
    log.close()
    assert (tmp_path / "other-0.000000.log").read_bytes() == b"junk"


# -- cold reads -------------------------------------------------------------------


@pytest.mark.parametrize("twin", sorted(DECODE_TWINS))
def test_cold_reads_of_a_reopened_log_with_a_tiny_cache(tmp_path: Path, twin: str) -> None:
    with decode_twin(twin):
        _cold_reads_of_a_reopened_log(tmp_path)


def _cold_reads_of_a_reopened_log(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=4000, cache_records=5)
    fill(log, 100, per_batch=20)
    log.close()
    log, _ = open_log(tmp_path, max_bytes_per_file=4000, cache_records=5)
    assert log.read(1, 10) == []
    assert log.get(1) is None
    assert log.is_cold(1)
    assert not log.is_cold(log.next_id - 5)
    assert not log.is_cold(log.next_id)
    chunk = log.read_cold(1, 10**6, max_bytes=3000)
    assert 3000 <= sum(r.raw_size for r in chunk) < 3000 + 200
    log.install_chunk(1, chunk)
    assert not log.is_cold(1)
    assert log.read(3, 4) == chunk[2:6]
    assert log.get(chunk[-1].internal_id) == chunk[-1]
    assert log.bytes_held >= sum(r.raw_size for r in chunk)
    everything = read_everything(log)
    assert [r.internal_id for r in everything] == list(range(1, 2001))
    assert all(r.body == body_for(r.internal_id) for r in everything)
    assert log.read_cold(1990, 3) == everything[1989:1992]
    assert log.read_cold(2001, 3) == []
    assert log.read_cold(5, 0) == []
    # chunks stop answering once discarded
    log.discard_before(chunk[-1].internal_id + 1)
    assert log.is_cold(chunk[-1].internal_id + 1)
    assert log.get(1) is None


def test_installed_chunks_are_bounded(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, cache_records=0)
    starts = [1 + 20 * number for number in range(MAX_CHUNKS + 1)]  # one more than it keeps
    fill(log, 2 * len(starts))
    for start in starts:
        log.install_chunk(start, log.read_cold(start, 5))
    assert log.is_cold(1)
    assert not log.is_cold(starts[1])
    assert log.read(starts[-1], 100) == log.read_cold(starts[-1], 5)
    assert log.chunk_stop(starts[-1]) == starts[-1] + 5
    assert log.chunk_stop(1) is None


@pytest.mark.parametrize("reopened", [False, True])
def test_read_cold_in_a_thread_while_appending_rolling_and_expiring(
    tmp_path: Path, reopened: bool
) -> None:
    """``reopened``: the readers also verify sealed segments (or find them expired)."""
    log, _ = open_log(tmp_path, max_bytes_per_file=3000, cache_records=10)
    fill(log, 30 if reopened else 5)
    if reopened:
        log.close()
        log, report = open_log(tmp_path, max_bytes_per_file=3000, cache_records=10)
        assert report.verified_lazily > 5
    stop = threading.Event()
    errors: list[BaseException] = []
    seen = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                next_id = log.start_id
                while True:
                    records = log.read_cold(next_id, 50, max_bytes=2000)
                    if not records:
                        break
                    ids = [r.internal_id for r in records]
                    assert ids == list(range(ids[0], ids[0] + len(ids)))
                    assert ids[0] >= next_id or next_id < log.start_id
                    for record in records:
                        assert record.body == body_for(record.internal_id)
                    seen[0] += len(records)
                    next_id = ids[-1] + 1
                log.seek_timestamp(1010)
                log.offset_of(log.start_id)
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for _ in range(300):
        fill(log, 1, per_batch=7)
        log.discard_before(log.next_id - 150)
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert seen[0] > 0
    assert log.segment_count < 20


def test_threads_first_reading_a_sealed_segment_verify_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 6)
    written = log.read_cold(1, 1000)
    log.close()
    files = segment_files(tmp_path)
    sealed_firsts = [ids_in(path)[0] for path in files[:-1]]
    victim = written[4]  # in the first segment
    data = bytearray(files[0].read_bytes())
    data[HEADER_SIZE + victim.offset + 4] ^= 0xFF
    files[0].write_bytes(bytes(data))
    walked: list[int] = []
    real_walk = segment_walk_module._walk_records

    def slow_walk(fd: int, position: int, end: int, first_id: int, *rest: int) -> object:
        walked.append(first_id)
        time.sleep(0.02)  # the other threads arrive meanwhile
        return real_walk(fd, position, end, first_id, *rest)

    monkeypatch.setattr(recovery_module, "_walk_records", slow_walk)
    caplog.set_level(logging.WARNING, "trionsq.storage")
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    walked.clear()
    barrier = threading.Barrier(4)
    results: list[list[Record]] = []
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            barrier.wait()
            results.append(log.read_cold(1, 1000))
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    expected = [r for r in written if r.internal_id != victim.internal_id]
    assert results == [expected] * 4
    assert walked == sealed_firsts  # each sealed segment, once
    assert caplog.text.count("skipped 1 damaged record") == 1
    assert log.late_missing_ids == 1
    log.install_chunk(1, results[0])
    assert log.holes == 1
    assert len(log) == 59


async def test_read_cold_through_trio_to_thread(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, cache_records=2)
    fill(log, 10)
    records = await trio.to_thread.run_sync(log.read_cold, 1, 1000)
    assert [r.internal_id for r in records] == list(range(1, 101))


@pytest.mark.parametrize("reopened", [False, True])
def test_seek_timestamp_offset_and_offset_of(tmp_path: Path, reopened: bool) -> None:
    """``reopened``: every seek runs on a log just opened, so the sealed segments it
    needs build their index then."""
    log, _ = open_log(tmp_path, max_bytes_per_file=2500, index_interval=128)
    # timestamps rise, with one batch from a clock that went back
    stamps = [100, 110, 120, 105, 130, 140, 150, 150, 160, 170, 180, 190]
    for stamp in stamps:
        first = log.next_id
        log.append([body_for(first + i) for i in range(15)], stamp)
    records = log.read_cold(1, 10**6, max_bytes=1 << 30)

    def fresh() -> TopicLog:
        if not reopened:
            return log
        log.close()
        opened, report = open_log(tmp_path, max_bytes_per_file=2500, index_interval=128)
        assert report.verified_lazily == report.segments - 1 > 2
        return opened

    for target in (0, 100, 101, 105, 106, 115, 120, 121, 150, 151, 190, 191, 10**9):
        expected = next((r.internal_id for r in records if r.timestamp >= target), log.next_id)
        log = fresh()
        assert log.seek_timestamp(target) == expected, target
    for record in records[::7]:
        log = fresh()
        assert log.seek_offset(record.offset) == record.internal_id
        log = fresh()
        assert log.seek_offset(record.offset + 1) == record.internal_id + 1
        log = fresh()
        assert log.offset_of(record.internal_id) == record.offset
    log = fresh()
    assert log.seek_offset(0) == 1
    assert log.seek_offset(log.next_offset) == log.next_id
    assert log.offset_of(log.next_id) == log.next_offset
    # the logical start bounds every seek
    log.discard_before(50)
    assert log.seek_timestamp(0) == 50
    assert log.seek_offset(0) == 50
    assert log.offset_of(1) == records[49].offset


def test_start_offset_of_a_cold_start_is_read_from_disk(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, cache_records=3)
    fill(log, 10)
    expected = log.read_cold(37, 1)[0].offset
    log.discard_before(37)
    assert log.start_offset == expected


# -- retention and deletion -------------------------------------------------------


def test_retention_zero_deletes_consumed_segments_but_never_the_active_one(
    tmp_path: Path,
) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 12)
    files = segment_files(tmp_path)
    first_ids = [decode_records(p.read_bytes()[HEADER_SIZE:], 0)[0][0].internal_id for p in files]
    log.discard_before(first_ids[2])  # the first two segments are all below it
    assert segment_files(tmp_path) == files[2:]
    assert log.disk_bytes == sum(p.stat().st_size for p in files[2:])
    log.discard_before(first_ids[2] + 1)  # a segment partly needed stays
    assert segment_files(tmp_path) == files[2:]
    assert log.discard_before(log.next_id) > 0
    assert segment_files(tmp_path) == files[-1:]
    assert len(log) == 0
    assert log.start_offset == log.next_offset
    log.close()
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    assert log.start_id == first_ids[-1]  # the start is the caller's to restore


def test_retention_with_age(tmp_path: Path) -> None:
    now = [1000.0]
    log, _ = open_log(tmp_path, max_bytes_per_file=1000, retention=60.0, clock=lambda: now[0])
    fill(log, 12)
    files = segment_files(tmp_path)
    assert log.discard_before(log.next_id) == 120
    assert segment_files(tmp_path) == files  # consumed, but not old enough
    now[0] += 59
    assert log.expire() == 0
    assert log.expire(now=now[0] + 1) == len(files) - 1
    assert segment_files(tmp_path) == files[-1:]


def test_expires_in_says_when_the_oldest_released_segment_comes_of_age(tmp_path: Path) -> None:
    now = [1000.0]
    log, _ = open_log(tmp_path, max_bytes_per_file=1000, retention=60.0, clock=lambda: now[0])
    fill(log, 12)
    assert log.expires_in() is None  # nothing released: only a release can let one go
    log.discard_before(log.next_id)
    assert log.expires_in() == 60.0
    now[0] += 45
    assert log.expires_in() == 15.0
    now[0] += 20
    assert log.expires_in() == 0.0
    assert log.expire() > 0
    assert log.expires_in() is None  # only the active segment is left


def test_recovered_segments_age_from_their_mtime(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 12)
    log.close()
    files = segment_files(tmp_path)
    for path in files[:2]:
        os.utime(path, (1000.0, 1000.0))
    log, _ = open_log(tmp_path, max_bytes_per_file=1000, retention=60.0, clock=lambda: 1100.0)
    log.discard_before(log.next_id)
    assert segment_files(tmp_path) == files[2:]


def test_delete_files(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 5)
    log.delete_files()
    assert segment_files(tmp_path) == []
    assert log.disk_bytes == 0


# -- writes, fsync, errors --------------------------------------------------------


def test_sync_fsyncs_rolled_and_active_segments_and_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    log, _ = open_log(tmp_path, max_bytes_per_file=1000)
    fill(log, 1)
    assert log.unsynced == 10
    log.sync()
    assert log.unsynced == 0
    assert len(synced) == 2  # the new segment and the directory it was created in
    synced.clear()
    log.sync()
    assert len(synced) == 1  # only the active segment
    synced.clear()
    fill(log, 3)  # rolls: the old segment is fsynced and closed at the next sync
    assert log.unsynced == 30
    log.sync()
    assert len(synced) >= 3
    synced.clear()
    log.close()
    assert len(synced) == 1
    log.close()  # twice is fine


def test_sync_from_a_thread_while_appending(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=2000)
    done = threading.Event()
    errors: list[BaseException] = []

    def syncer() -> None:
        try:
            while not done.is_set():
                log.sync()
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    thread = threading.Thread(target=syncer)
    thread.start()
    fill(log, 200, per_batch=3)
    done.set()
    thread.join()
    log.close()
    assert not errors
    log, report = open_log(tmp_path, max_bytes_per_file=2000)
    assert report.lossless
    assert log.next_id == 601


def test_a_failed_write_appends_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, _ = open_log(tmp_path)
    fill(log, 2)
    size = segment_files(tmp_path)[0].stat().st_size
    real_write = os.write

    def half_then_fail(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 100:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_fail)
    with pytest.raises(OSError, match="No space"):
        fill(log, 1)
    assert segment_files(tmp_path)[0].stat().st_size == size
    assert log.next_id == 21
    monkeypatch.undo()
    fill(log, 1)
    log.close()
    log, report = open_log(tmp_path)
    assert report.lossless
    assert [r.body for r in log.read_cold(1, 100)] == [body_for(i) for i in range(1, 31)]


@pytest.mark.parametrize("in_new_segment", [False, True])
def test_a_write_that_cannot_be_undone_rolls_to_a_new_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_new_segment: bool
) -> None:
    # 10 records take about 620 bytes: with 1000 a segment, each batch rolls
    log, _ = open_log(tmp_path, max_bytes_per_file=1000 if in_new_segment else 1 << 20)
    fill(log, 2)
    segments = log.segment_count
    real_write = os.write

    def half(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 100:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(5, "I/O error")

    def no_truncate(fd: int, length: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "write", half)
    monkeypatch.setattr(os, "ftruncate", no_truncate)
    with pytest.raises(OSError, match="I/O error"):
        fill(log, 1)
    monkeypatch.undo()
    fill(log, 1)
    assert log.segment_count == segments + 1 + in_new_segment
    log.close()
    log, report = open_log(tmp_path)
    assert report.bad_bytes > 0  # the half batch, set aside
    assert report.missing_ids == 0
    assert report.records == 30
    assert log.segment_count == segments + 1
    assert [r.body for r in read_everything(log)] == [body_for(i) for i in range(1, 31)]


def test_records_larger_than_the_read_sizes(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, cache_records=0)
    bodies = [b"a" * 100_000, b"b" * 1_500_000, b"c"]
    for body in bodies:
        log.append([body], 1)
    log.close()
    log, report = open_log(tmp_path, cache_records=0)
    assert report.lossless
    assert report.records == 3
    assert [r.body for r in log.read_cold(1, 10, max_bytes=10)] == bodies[:1]
    assert [r.body for r in log.read_cold(2, 10, max_bytes=10)] == bodies[1:2]
    assert [r.body for r in log.read_cold(1, 10)] == bodies[:2]  # past 1 MiB: stop
    assert [r.body for r in log.read_cold(1, 10, max_bytes=2_000_000)] == bodies
    assert log.seek_offset(log.next_offset - 1) == 4


def test_an_empty_log(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    assert (log.start_id, log.next_id, log.start_offset, log.next_offset, len(log)) == (
        1,
        1,
        0,
        0,
        0,
    )
    assert log.read(1, 5) == []
    assert log.get(1) is None
    assert not log.is_cold(1)
    assert log.read_cold(1, 5) == []
    assert log.seek_timestamp(0) == log.seek_offset(0) == 1
    assert log.offset_of(1) == 0
    assert log.discard_before(10) == 0
    assert log.bytes_held == log.disk_bytes == log.segment_count == 0
    log.sync()
    log.close()
    assert segment_files(tmp_path) == []


# -- damage in the middle: resynchronising (issue 14) ----------------------------


def flip(path: Path, position: int, mask: int = 0xFF) -> bytes:
    """XOR one byte of a file; returns the file's new bytes."""
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))
    return bytes(data)


def damaged_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "damaged record(s)" in r.getMessage()]


@pytest.mark.parametrize("mask", [0x01, 0x10, 0x80, 0xFF])
@pytest.mark.parametrize("byte", [0, 1, 2, 3])
def test_a_flipped_size_byte_in_the_active_segment_loses_only_its_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, byte: int, mask: int
) -> None:
    """Whatever the size field now says (too small, a little or much too large), the
    walk finds the next record and goes on: one record lost, counted, kept, logged."""
    log, _ = open_log(tmp_path)
    fill(log, 10)
    written = log.read_cold(1, 1000, max_bytes=1 << 30)
    next_id, next_offset = log.next_id, log.next_offset
    log.close()
    (path,) = segment_files(tmp_path)
    victim = written[40]
    start = HEADER_SIZE + victim.offset
    data = flip(path, start + byte, mask)
    caplog.set_level(logging.WARNING, "trionsq.storage")
    log, report = open_log(tmp_path)
    assert (report.skipped_records, report.skipped_bytes) == (1, victim.raw_size)
    assert (report.missing_ids, report.truncated_bytes, report.bad_bytes) == (1, 0, 0)
    assert (log.next_id, log.next_offset, log.holes) == (next_id, next_offset, 1)
    assert read_everything(log) == written[:40] + written[41:]
    bad = Path(f"{path}.{start}-{start + victim.raw_size}.bad")
    assert report.bad_files == (str(bad),)
    assert bad.read_bytes() == data[start : start + victim.raw_size]
    (line,) = damaged_lines(caplog)
    assert f"skipped 1 damaged record(s), ids 41 to 41, at bytes {start} to" in line
    assert str(path) in line
    assert str(bad) in line
    # appends go on after it; reopened, the same range is found and kept only once
    log.append([b"after"], 7)
    log.close()
    log, again = open_log(tmp_path)
    assert again.missing_ids == 1
    assert [r.body for r in read_everything(log)][-1] == b"after"
    assert sorted(tmp_path.glob("*.bad")) == [bad]


def test_a_flipped_body_byte_loses_only_its_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log, _ = open_log(tmp_path)
    fill(log, 3)
    written = log.read_cold(1, 100)
    log.close()
    (path,) = segment_files(tmp_path)
    victim = written[12]
    start = HEADER_SIZE + victim.offset
    data = flip(path, start + victim.raw_size - 3)
    caplog.set_level(logging.WARNING, "trionsq.storage")
    log, report = open_log(tmp_path)
    assert report.missing_ids == report.skipped_records == 1
    assert read_everything(log) == written[:12] + written[13:]
    (bad,) = tmp_path.glob("*.bad")
    assert bad.read_bytes() == data[start : start + victim.raw_size]
    assert len(damaged_lines(caplog)) == 1


def test_a_long_damaged_range_loses_the_records_it_touches(tmp_path: Path) -> None:
    """Zeroed bytes across several records (a bad disk block): every record the range
    touches is lost, the first one starting after it is found again."""
    log, _ = open_log(tmp_path)
    fill(log, 100)
    written = log.read_cold(1, 10_000, max_bytes=1 << 30)
    log.close()
    (path,) = segment_files(tmp_path)
    data = bytearray(path.read_bytes())
    lo, hi = HEADER_SIZE + 5000, HEADER_SIZE + 9096
    data[lo:hi] = bytes(hi - lo)
    path.write_bytes(bytes(data))
    touched = {r.internal_id for r in written if r.offset < hi - HEADER_SIZE and r.end > 5000}
    log, report = open_log(tmp_path)
    assert report.missing_ids == len(touched) > 10
    assert read_everything(log) == [r for r in written if r.internal_id not in touched]


def test_a_record_inside_a_body_is_not_taken_for_the_next_one(tmp_path: Path) -> None:
    """A body holding a whole, valid record: the resync does not stop there, since its
    id is not one the damaged bytes could have held."""
    inner = encode_record(Record(0, 0, 10**12, 5, b"not a real record"))
    log, _ = open_log(tmp_path)
    log.append([b"first", b"x" * 40 + inner + b"y" * 40, b"third"], 5)
    written = log.read_cold(1, 10)
    log.close()
    (path,) = segment_files(tmp_path)
    flip(path, HEADER_SIZE + written[1].offset + 3, 0x04)  # the size field
    log, report = open_log(tmp_path)
    assert report.missing_ids == 1
    assert read_everything(log) == [written[0], written[2]]


def test_a_torn_tail_is_cut_and_not_counted_even_after_damage(tmp_path: Path) -> None:
    """Damage with nothing intact after it at the end of the active segment is a torn
    write: cut, not counted, no copy kept."""
    log, _ = open_log(tmp_path)
    fill(log, 2)
    written = log.read_cold(1, 100)
    log.close()
    (path,) = segment_files(tmp_path)
    flip(path, HEADER_SIZE + written[-1].offset + 1, 0x20)
    log, report = open_log(tmp_path)
    assert (report.missing_ids, report.truncated_bytes) == (0, written[-1].raw_size)
    assert read_everything(log) == written[:-1]
    assert not list(tmp_path.glob("*.bad"))


@pytest.mark.parametrize("part", ["size", "body"])
def test_damage_in_an_older_segment_is_found_counted_and_kept_by_its_first_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, part: str
) -> None:
    log, _ = open_log(tmp_path, max_bytes_per_file=1500, cache_records=5)
    fill(log, 10)
    written = log.read_cold(1, 1000, max_bytes=1 << 30)
    log.close()
    files = segment_files(tmp_path)
    assert len(files) > 3
    ids = ids_in(files[1])
    victim = written[ids[len(ids) // 2] - 1]
    base = written[ids[0] - 1].offset
    start = HEADER_SIZE + victim.offset - base
    data = flip(files[1], start + (2 if part == "size" else 40), 0x01)
    caplog.set_level(logging.WARNING, "trionsq.storage")
    log, report = open_log(tmp_path, max_bytes_per_file=1500, cache_records=5)
    assert report.lossless  # not read at open
    assert read_everything(log) == [r for r in written if r is not victim]
    assert log.late_missing_ids == log.holes == 1
    (bad,) = tmp_path.glob("*.bad")
    assert bad.name == f"{files[1].name}.{start}-{start + victim.raw_size}.bad"
    assert bad.read_bytes() == data[start : start + victim.raw_size]
    assert len(damaged_lines(caplog)) == 1
    assert files[1].read_bytes() == data  # a read changes no segment


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.tuples(st.lists(st.binary(max_size=120), min_size=1, max_size=6), st.integers(0, 2)),
        min_size=1,
        max_size=12,
    ),
    where=st.floats(0, 1, exclude_max=True),
    mask=st.integers(1, 255),
    cache_records=st.integers(0, 5),
)
def test_one_flipped_byte_costs_at_most_its_record(
    batches: list[tuple[list[bytes], int]], where: float, mask: int, cache_records: int
) -> None:
    """Any record byte of any segment flipped: recovery and reads lose the record that
    holds it and nothing else, deliver no damaged body, and count the loss unless it
    was the very last record (a torn tail, cut)."""
    directory = Path(tempfile.mkdtemp(prefix="topic-log-flip-"))
    try:
        log, _ = open_log(directory, max_bytes_per_file=600, cache_records=cache_records)
        for number, (bodies, kind) in enumerate(batches):
            if kind == 1:
                log.append(bodies, number, ext_version=1, exts=[b"tag-%d" % number] * len(bodies))
            elif kind == 2:
                log.append(bodies, number, deliver_at=10**18 + number)
            else:
                log.append(bodies, number, trace_ids=[number] * len(bodies))
        written = log.read_cold(1, 10**6, max_bytes=1 << 30)
        log.close()
        files = segment_files(directory)
        firsts = [ids_in(path)[0] for path in files]
        victim = written[int(where * len(written))]
        number = max(n for n, first in enumerate(firsts) if first <= victim.internal_id)
        path = files[number]
        position = HEADER_SIZE + victim.offset - written[firsts[number] - 1].offset
        flip(path, position + int(where * 7919) % victim.raw_size, mask)
        log, report = open_log(directory, max_bytes_per_file=600, cache_records=cache_records)
        expected = [r for r in written if r.internal_id != victim.internal_id]
        assert read_everything(log) == expected
        assert log.read_cold(1, 10**6, max_bytes=1 << 30) == expected
        torn = victim is written[-1]
        assert report.missing_ids + log.late_missing_ids == (0 if torn else 1)
        assert log.next_id == (victim.internal_id if torn else written[-1].internal_id + 1)
        assert len(log) == len(expected)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_the_tail_cache_is_bounded_by_bytes_too(tmp_path: Path) -> None:
    """1,000 records of 1 MB held a gigabyte under a 10,000-record cache (issue 14):
    the byte bound keeps the newest that fit, the rest is read cold, nothing lost,
    and the reopened log loads no more than the bound either."""
    bound = 64 * 1024
    log, _ = TopicLog.open(
        tmp_path, NAME, max_bytes_per_file=1 << 20, cache_records=10_000, cache_bytes=bound
    )
    bodies = [bytes([n]) * 10_000 for n in range(200)]
    for body in bodies:
        log.append([body], 1)
        assert log.bytes_held <= bound
        assert len(log._cache) < 40  # what is no longer served does not stay behind
    assert log.get(200) is not None  # the newest are in memory
    assert log.is_cold(1)
    assert [r.body for r in read_everything(log)] == bodies
    log.close()
    reopened, _ = TopicLog.open(
        tmp_path, NAME, max_bytes_per_file=1 << 20, cache_records=10_000, cache_bytes=bound
    )
    assert 0 < reopened.bytes_held <= bound
    assert [r.body for r in read_everything(reopened)] == bodies
    reopened.close()
