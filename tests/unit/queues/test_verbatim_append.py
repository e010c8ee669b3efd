"""A replica's log written from its leader's bytes (docs/replication.md): the leader
reads its records' bytes back from its segment file (``TopicLog.read_encoded``,
``whole_records``), the replica appends them as they are (``append_verbatim``).
The copy must be the leader's log byte for byte, and its bookkeeping (ids, offsets,
sparse index, greatest timestamps) what recovery finds in the same files, so a
restart, a seek or a cut reads it as any other log; a write torn by a kill leaves a
log that recovers to the last whole frame. Each test runs with the compiled check of
the copies (``scan_copies``) and with its pure-Python twin."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trionsq.queues import record_runs
from trionsq.queues.log_cut import cut_segment_files
from trionsq.queues.memory_log import MemoryLog
from trionsq.queues.record import Record, encode_record
from trionsq.queues.record_runs import decode_all, scan_copies, whole_records
from trionsq.queues.topic_log import TopicLog

from ..test_speedups import _compiled

if TYPE_CHECKING:
    from pathlib import Path

NAME = "t-0"
INDEX = 256
"""A small index interval: many entries in few records."""

batches = st.lists(
    st.tuples(
        st.lists(st.binary(max_size=300), min_size=1, max_size=12),
        st.integers(min_value=1, max_value=50),  # timestamp (the clock may go back)
        st.sampled_from([0, 0, 4]),  # ext version
        st.sampled_from([0, 0, 60]),  # deliver-at
    ),
    min_size=1,
    max_size=12,
)


@pytest.fixture(params=["compiled", "pure"])
def scan_twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test once with each twin of the copies' check."""
    scan = _compiled().scan_copies if request.param == "compiled" else record_runs._scan_copies_py
    monkeypatch.setattr(record_runs, "_scan_copies", scan)


def _open(directory: Path, max_bytes: int) -> TopicLog:
    log, _ = TopicLog.open(
        directory, NAME, max_bytes_per_file=max_bytes, cache_records=50, index_interval=INDEX
    )
    return log


def _publish(log: TopicLog, plan: list[tuple[list[bytes], int, int, int]]) -> None:
    for bodies, timestamp, ext_version, deliver_at in plan:
        exts = [b'{"k":"%d"}' % n for n in range(len(bodies))] if ext_version else None
        log.append(
            bodies,
            timestamp,
            trace_ids=list(range(len(bodies))),
            ext_version=ext_version,
            exts=exts,
            deliver_at=deliver_at,
        )


def _all(log: TopicLog | MemoryLog) -> list[Record]:
    if isinstance(log, MemoryLog):
        return log.read(log.start_id, 1 << 20)
    return log.read_cold(log.start_id, 1 << 20, max_bytes=1 << 62)


def _ship(
    leader: TopicLog, follower: TopicLog | MemoryLog, frame: int, until: int | None = None
) -> int:
    """Copy the leader's records from the follower's end (to ``until``), ``frame`` at
    most a time, as a follower stream does; returns how many frames went."""
    frames = 0
    stop = leader.next_id if until is None else until
    while follower.next_id < stop:
        count = min(frame, stop - follower.next_id)
        records = leader.read_cold(follower.next_id, count, max_bytes=1 << 62)[:count]
        first = records[0]
        data = leader.read_encoded(first.offset, records[-1].end)
        count = whole_records(records, len(data))
        assert count  # a segment's records are whole and back to back
        data = data[: records[count - 1].end - first.offset]
        scan = scan_copies(data, first.offset, first.internal_id)
        # every other frame with its Records, as a keyed frame comes: the tail cache
        # takes them, and starts again after a frame without
        follower.append_verbatim(data, scan, decode_all(data, first.offset) if frames % 2 else None)
        frames += 1
    return frames


def _check_of(log: TopicLog) -> tuple[list[tuple[int, int, int]], int]:
    check = log._segments[-1].check
    assert check is not None
    return list(check.index), check.timestamp_max


@pytest.mark.usefixtures("scan_twin")
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=batches,
    frame=st.integers(min_value=1, max_value=40),
    max_bytes=st.sampled_from([600, 1 << 20]),
)
def test_a_verbatim_copy_is_the_leaders_log_and_what_recovery_finds(
    tmp_path_factory: object,
    plan: list[tuple[list[bytes], int, int, int]],
    frame: int,
    max_bytes: int,
) -> None:
    base = tmp_path_factory.mktemp("copy")  # type: ignore[attr-defined]
    leader = _open(base / "leader", 1 << 20)
    _publish(leader, plan)
    follower = _open(base / "follower", max_bytes)  # rolls where the leader did not
    memory = MemoryLog()
    _ship(leader, follower, frame)
    _ship(leader, memory, frame)
    expected = [encode_record(r) for r in _all(leader)]
    assert [encode_record(r) for r in _all(follower)] == expected
    assert [encode_record(r) for r in _all(memory)] == expected
    assert (follower.next_id, follower.next_offset) == (leader.next_id, leader.next_offset)
    assert (memory.next_id, memory.next_offset) == (leader.next_id, leader.next_offset)
    # what the tail cache serves is the leader's
    cached = [follower.get(i) for i in range(1, follower.next_id)]
    assert [encode_record(r) for r in cached if r is not None] == [
        encode_record(r) for r, c in zip(_all(leader), cached, strict=True) if c is not None
    ]
    # the bookkeeping of the writes is what a recovery of the same files finds
    written = _check_of(follower)
    seeks = [follower.seek_timestamp(t) for t in range(0, 52, 3)]
    offsets = [follower.seek_offset(o) for o in range(0, follower.next_offset + 1, 97)]
    follower.close()
    again = _open(base / "follower", max_bytes)
    assert _check_of(again) == written
    assert [again.seek_timestamp(t) for t in range(0, 52, 3)] == seeks
    assert [leader.seek_timestamp(t) for t in range(0, 52, 3)] == seeks
    assert [again.seek_offset(o) for o in range(0, again.next_offset + 1, 97)] == offsets
    assert [encode_record(r) for r in _all(again)] == expected
    again.close()
    leader.close()


@pytest.mark.usefixtures("scan_twin")
def test_a_torn_verbatim_write_recovers_to_the_last_whole_frame(tmp_path: Path) -> None:
    """A kill -9 in the middle of a frame's write: recovery keeps the records that
    reached the file whole and cuts the torn one, and copying again from that end
    gives the leader's log."""
    leader = _open(tmp_path / "leader", 1 << 20)
    _publish(leader, [([b"a" * 50] * 10, 5, 0, 0), ([b"b" * 70] * 10, 6, 4, 0)])
    follower = _open(tmp_path / "follower", 1 << 20)
    _ship(leader, follower, 10)
    follower.close()
    # the second frame's write killed half way: what it left after the first
    cut_segment_files(follower.directory, follower.name, leader.offset_of(11))
    second = leader.read_encoded(leader.offset_of(11), leader.next_offset)
    segment = max(p for p in follower.directory.iterdir() if p.suffix == ".log")
    torn = second[: len(second) // 2 + 3]
    with open(segment, "ab") as handle:
        handle.write(torn)
    again = _open(tmp_path / "follower", 1 << 20)
    kept = whole_records(leader.read_cold(11, 10), len(torn))  # what reached the file whole
    assert 0 < kept < 10
    assert (again.next_id, again.next_offset) == (11 + kept, leader.offset_of(11 + kept))
    _ship(leader, again, 10)
    assert [encode_record(r) for r in _all(again)] == [encode_record(r) for r in _all(leader)]
    again.close()
    leader.close()


@pytest.mark.usefixtures("scan_twin")
def test_a_cut_inside_a_verbatim_frame_then_the_copy_goes_on(tmp_path: Path) -> None:
    """A divergent tail cut in the middle of what one frame wrote (a leader change),
    then the new leader's records copied from there."""
    leader = _open(tmp_path / "leader", 1 << 20)
    _publish(leader, [([b"x" * 40] * 30, 7, 0, 0)])
    follower = _open(tmp_path / "follower", 1 << 20)
    assert _ship(leader, follower, 30) == 1
    new_leader = _open(tmp_path / "new", 1 << 20)
    _ship(leader, new_leader, 5, until=13)  # it held ids 1-12 when it was elected
    _publish(new_leader, [([b"y" * 20] * 5, 9, 4, 0)])
    follower.close()
    cut_segment_files(follower.directory, follower.name, leader.offset_of(13))
    again = _open(tmp_path / "follower", 1 << 20)
    assert again.next_id == 13
    _ship(new_leader, again, 4)
    assert [encode_record(r) for r in _all(again)] == [encode_record(r) for r in _all(new_leader)]
    assert [r.body for r in _all(again)][11:] == [b"x" * 40] + [b"y" * 20] * 5
    for log in (again, new_leader, leader):
        log.close()


@given(
    sizes=st.lists(st.integers(min_value=34, max_value=90), min_size=1, max_size=30),
    gap_at=st.integers(min_value=0, max_value=40),
    gap=st.integers(min_value=0, max_value=3),
    size=st.integers(min_value=0, max_value=3000),
)
def test_whole_records_counts_the_back_to_back_prefix(
    sizes: list[int], gap_at: int, gap: int, size: int
) -> None:
    """Records whose bytes lie wholly in the first ``size`` bytes, without a gap."""
    records = []
    offset = 100
    for number, raw in enumerate(sizes):
        if number == gap_at:
            offset += gap
        records.append(Record(offset, raw, 5 + number, 0, b""))
        offset += raw
    ends = [r.end - records[0].offset for r in records]
    whole = sum(1 for end in ends if end <= size)
    gapped = gap and 0 < gap_at < whole
    assert whole_records(records, size) == (0 if gapped else whole)
