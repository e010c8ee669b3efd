"""Channel state files: the format, capture from a live channel, and restore semantics.

Restore must give at-least-once: every id unfinished at the crash is read again,
finished ids are not delivered again, deferred ids come back at the same wall-clock
moment (through the other process's monotonic clock) and are not also delivered by
the cursor.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.queues.cursor import ChannelCursor
from trionsq.queues.cursor_state import (
    ChannelState,
    ChannelStateError,
    capture_state,
    decode_state,
    encode_state,
    load_state,
    partition_state_directory,
    remove_channel_state,
    remove_partition_states,
    remove_stale_state_temps,
    restore_channel,
    restore_cursor,
    save_state,
    scan_channel_states,
    state_path,
)
from trionsq.queues.deferred import DeferredQueue
from trionsq.queues.memory_log import MemoryLog

if TYPE_CHECKING:
    from pathlib import Path

WALL = 1_700_000_000_000_000_000
SECOND = 1_000_000_000

Deferred = DeferredQueue[None]


def log_of(count: int) -> MemoryLog:
    log = MemoryLog()
    log.append([b"m%d" % i for i in range(count)], timestamp=WALL)
    return log


def state(
    confirmed: int,
    read: int,
    finished: tuple[int, ...] = (),
    deferred: tuple[tuple[int, int], ...] = (),
    *,
    paused: bool = False,
) -> ChannelState:
    return ChannelState(
        confirmed_id=confirmed, read_id=read, finished=finished, deferred=deferred, paused=paused
    )


def redelivered_order(cursor: ChannelCursor, skip: frozenset[int]) -> list[int]:
    """What a channel following RestoredChannel's docstring delivers from the cursor."""
    return [r.internal_id for r in cursor.take(10**6) if r.internal_id not in skip]


# ------------------------------------------------------------------ format


def test_the_documented_format() -> None:
    s = state(101, 140, (103, 104), ((WALL, 102),), paused=True)
    data = encode_state(s)
    assert data == (
        b'{"version":1,"confirmed_id":101,"read_id":140,"finished":[103,104],'
        b'"deferred":[[1700000000000000000,102]],"paused":true}'
    )
    assert decode_state(data) == s


@st.composite
def states(draw: st.DrawFn) -> ChannelState:
    confirmed = draw(st.integers(0, 2**40))
    read = confirmed + draw(st.integers(0, 300))
    ids = draw(st.sets(st.integers(confirmed, confirmed + 400), max_size=60))  # some beyond read
    deferred_ids = draw(st.sets(st.sampled_from(sorted(ids)))) if ids else set()
    finished = tuple(sorted(i for i in ids - deferred_ids if i > confirmed))
    dues = st.integers(-(2**62), 2**62)
    deferred = tuple(sorted((draw(dues), i) for i in deferred_ids))
    return state(confirmed, read, finished, deferred, paused=draw(st.booleans()))


@given(states())
def test_round_trip(s: ChannelState) -> None:
    s.check()
    assert decode_state(encode_state(s)) == s


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "channel state: not JSON"),
        (b'{"version":2}', "format version 2 is not supported"),
        (b'{"version":1,"confirmed_id":1}', r"required field missing @ \$\.read_id"),
        (
            b'{"version":1,"confirmed_id":5,"read_id":3,"finished":[],"deferred":[],"paused":false}',
            "out of order",
        ),
        (
            b'{"version":1,"confirmed_id":1,"read_id":9,"finished":[4,3],"deferred":[],"paused":false}',
            "finished id 3 is not increasing",
        ),
        (
            b'{"version":1,"confirmed_id":1,"read_id":9,"finished":[1],"deferred":[],"paused":false}',
            "finished id 1",
        ),
        (
            b'{"version":1,"confirmed_id":1,"read_id":9,"finished":[4],"deferred":[[0,4]],"paused":false}',
            "deferred id 4",
        ),
        (
            b'{"version":1,"confirmed_id":3,"read_id":9,"finished":[],"deferred":[[0,2]],"paused":false}',
            "deferred id 2 is below confirmed_id 3",
        ),
        (
            b'{"version":1,"confirmed_id":1,"read_id":9,"finished":[],"deferred":[[0,2],[1,2]],"paused":false}',
            "deferred id 2",
        ),
        (
            b'{"version":1,"confirmed_id":1,"read_id":9,"finished":[],"deferred":[],"paused":0}',
            r"expected bool @ \$\.paused",
        ),
    ],
)
def test_bad_state_files_are_refused_clearly(data: bytes, message: str) -> None:
    with pytest.raises(ChannelStateError, match=message):
        decode_state(data)


# ------------------------------------------------------------------ capture


def test_capture_converts_deferred_dues_to_wall_clock() -> None:
    log = log_of(10)
    cursor = ChannelCursor(log, 1)
    cursor.take(8)
    for internal_id in (1, 3, 4):
        cursor.finish(internal_id)
    deferred: DeferredQueue[str] = DeferredQueue()
    deferred.push(6, 130.0, "later")
    deferred.push(5, 100.5, "sooner")
    s = capture_state(cursor, deferred, paused=True, now_monotonic=100.0, now_wall_ns=WALL)
    assert s == state(2, 9, (3, 4), ((WALL + SECOND // 2, 5), (WALL + 30 * SECOND, 6)), paused=True)


# ------------------------------------------------------------------ restore


def test_read_restarts_at_confirmed_and_finished_ahead_is_not_redelivered() -> None:
    log = log_of(10)
    s = state(2, 9, (3, 4), ((WALL + 5 * SECOND, 6),))
    restored = restore_channel(log, s, now_monotonic=0.0, now_wall_ns=WALL)
    cursor = restored.cursor
    assert (cursor.read_id, cursor.confirmed_id) == (2, 2)
    assert restored.finished_ids == {3, 4}
    assert restored.deferred_ids == {6}
    assert restored.skip_ids == {3, 4, 6}
    assert restored.redelivered == 4  # 2, 5, 7 and 8 had been read and were unfinished
    assert redelivered_order(cursor, restored.skip_ids) == [2, 5, 7, 8, 9, 10]
    cursor.finish(2)
    assert cursor.confirmed_id == 5  # 3 and 4 still count as finished
    assert cursor.statistics().finished_ahead == 0


def test_restore_cursor_alone() -> None:
    log = log_of(5)
    cursor = restore_cursor(log, state(2, 5, (4,)))
    assert (cursor.read_id, cursor.confirmed_id) == (2, 2)
    assert cursor.statistics().finished_ahead == 1
    cursor.take(3)
    cursor.finish(2)
    cursor.finish(3)
    assert cursor.confirmed_id == 5


def test_deferred_due_times_move_to_the_new_monotonic_clock() -> None:
    log = log_of(10)
    s = state(1, 9, (), ((WALL + 30 * SECOND, 6), (WALL - 3 * SECOND, 2)))
    # restarted 10 s of wall time later, in a process whose monotonic clock reads 5.0
    restored = restore_channel(log, s, now_monotonic=5.0, now_wall_ns=WALL + 10 * SECOND)
    assert restored.deferred == ((5.0 - 13.0, 2), (5.0 + 20.0, 6))


def test_capture_then_restore_keeps_the_due_moment() -> None:
    log = log_of(3)
    cursor = ChannelCursor(log, 1)
    cursor.take(3)
    deferred: DeferredQueue[None] = DeferredQueue()
    deferred.push(2, 1000.25, None)
    s = capture_state(cursor, deferred, paused=False, now_monotonic=1000.0, now_wall_ns=WALL)
    restored = restore_channel(
        log, decode_state(encode_state(s)), now_monotonic=7.0, now_wall_ns=WALL + 60 * SECOND
    )
    ((due, internal_id),) = restored.deferred
    assert internal_id == 2
    assert due == pytest.approx(7.0 - 59.75)


def test_a_restored_channel_saved_again_keeps_its_ids() -> None:
    """Saved soon after a restart: the cursor sits at confirmed, ids above it stand."""
    log = log_of(10)
    s = state(2, 9, (3, 4), ((WALL, 6),))
    restored = restore_channel(log, s, now_monotonic=0.0, now_wall_ns=WALL)
    deferred: DeferredQueue[None] = DeferredQueue()
    for due, internal_id in restored.deferred:
        deferred.push(internal_id, due, None)
    again = capture_state(
        restored.cursor, deferred, paused=False, now_monotonic=0.0, now_wall_ns=WALL
    )
    again.check()
    assert again == state(2, 2, (3, 4), ((WALL, 6),))
    assert decode_state(encode_state(again)) == again


def test_ids_ahead_of_the_cursor() -> None:
    """A DPUB is deferred at publish, before the cursor reads it; FINished there, the
    cursor does not know yet: the channel passes it as ``finished_ahead``."""
    log = log_of(10)
    cursor = ChannelCursor(log, 1)
    cursor.take(3)
    deferred: DeferredQueue[None] = DeferredQueue()
    deferred.push(9, 2.0, None)
    deferred.push(7, 1.0, None)
    s = capture_state(
        cursor, deferred, paused=False, now_monotonic=0.0, now_wall_ns=WALL, finished_ahead=[8, 7]
    )
    assert s == state(1, 4, (7, 8), ((WALL + 2 * SECOND, 9),))
    assert decode_state(encode_state(s)) == s
    restored = restore_channel(log, s, now_monotonic=0.0, now_wall_ns=WALL)
    assert restored.redelivered == 3
    assert redelivered_order(restored.cursor, restored.skip_ids) == [1, 2, 3, 4, 5, 6, 10]


def test_log_cut_below_the_confirmed_position_is_counted_as_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = log_of(10)
    log.discard_before(6)  # recovery lost records 1..5
    caplog.set_level(logging.INFO, "trionsq.storage")
    restored = restore_channel(
        log,
        state(2, 9, (3, 6), ((WALL, 4), (WALL, 8))),
        now_monotonic=0,
        now_wall_ns=WALL,
        label="t/0/c",
    )
    # 2, 4, 5 were unfinished and are gone; 6 was finished, so the cursor starts at 7
    assert restored.lost == 3
    assert restored.cursor.confirmed_id == 7
    assert restored.finished_ids == frozenset()
    assert restored.deferred_ids == {8}
    assert "t/0/c: ids 2..5 are no longer in the log; 3 unfinished message(s) lost" in caplog.text


def test_state_ahead_of_the_log_restarts_at_its_end(caplog: pytest.LogCaptureFixture) -> None:
    log = log_of(4)  # the log's unsynced tail was lost; ids 5.. will be reused
    restored = restore_channel(
        log, state(7, 12, (9,), ((WALL, 10),)), now_monotonic=0, now_wall_ns=WALL
    )
    assert (restored.cursor.read_id, restored.cursor.confirmed_id) == (5, 5)
    assert restored.skip_ids == frozenset()
    assert "state is ahead of the log" in caplog.text
    log.append([b"new"], timestamp=WALL)
    assert redelivered_order(restored.cursor, restored.skip_ids) == [5]


@st.composite
def live_channels(draw: st.DrawFn) -> tuple[MemoryLog, ChannelCursor, Deferred, set[int]]:
    """A channel after random reads, FINs, REQs with delay, and DPUBs deferred at
    publish (ahead of the cursor), some of those FINished before the cursor got there."""
    count = draw(st.integers(0, 120))
    log = log_of(count)
    cursor = ChannelCursor(log, 1)
    deferred: Deferred = DeferredQueue()
    cursor.take(draw(st.integers(0, count)))
    read = list(range(1, cursor.read_id))
    for internal_id in draw(st.permutations(read))[: draw(st.integers(0, len(read)))]:
        if draw(st.booleans()):
            cursor.finish(internal_id)
        elif internal_id >= cursor.confirmed_id:
            deferred.push(internal_id, draw(st.floats(-1e6, 1e6)), None)
    unread = list(range(cursor.read_id, log.next_id))
    ahead = draw(st.sets(st.sampled_from(unread))) if unread else set()
    finished_ahead = draw(st.sets(st.sampled_from(sorted(ahead)))) if ahead else set()
    for internal_id in ahead - finished_ahead:
        deferred.push(internal_id, draw(st.floats(-1e6, 1e6)), None)
    return log, cursor, deferred, finished_ahead


@given(live_channels(), st.floats(-1e6, 1e6), st.integers(0, 2**62))
def test_restart_delivers_exactly_the_unfinished_ids(
    channel: tuple[MemoryLog, ChannelCursor, Deferred, set[int]], mono: float, wall: int
) -> None:
    log, cursor, deferred, finished_ahead = channel
    finished = {
        i for i in range(1, log.next_id) if i < cursor.confirmed_id or i in cursor._finished
    }
    finished |= finished_ahead
    held = {key for _, key in deferred.entries()}
    s = capture_state(
        cursor,
        deferred,
        paused=False,
        now_monotonic=mono,
        now_wall_ns=wall,
        finished_ahead=finished_ahead,
    )
    s.check()
    restored = restore_channel(
        log, decode_state(encode_state(s)), now_monotonic=mono, now_wall_ns=wall
    )
    # the first unfinished id: a finished-ahead id right at the live one moves it on
    assert restored.cursor.confirmed_id == min(set(range(1, log.next_id + 1)) - finished)
    held = {key for key in held if key not in finished}
    assert restored.deferred_ids == held
    # the cursor plus the deferred heap cover every unfinished id exactly once
    again = redelivered_order(restored.cursor, restored.skip_ids)
    assert sorted(again + sorted(held)) == sorted(set(range(1, log.next_id)) - finished)
    assert not set(again) & held
    assert restored.redelivered == sum(1 for i in again if i < cursor.read_id)
    dues = {key: due for due, key in deferred.entries()}
    assert {key: due for due, key in restored.deferred} == pytest.approx(dues, abs=1e-6)


# ------------------------------------------------------------------ files


def test_file_layout_and_round_trip(tmp_path: Path) -> None:
    path = state_path(tmp_path, "orders-v2", 3, "billing.x")
    assert path == tmp_path / "channels" / "orders-v2-3" / "billing.x.state"
    assert partition_state_directory("", "t", 0).as_posix() == "channels/t-0"
    assert load_state(path) is None
    s = state(1, 2, (), (), paused=True)
    save_state(path, s)
    assert load_state(path) == s
    path.write_bytes(b"garbage")
    with pytest.raises(ChannelStateError, match=r"billing\.x\.state: not JSON"):
        load_state(path)


def test_ephemeral_channels_have_no_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="never persisted"):
        state_path(tmp_path, "t", 0, "c#ephemeral")
    with pytest.raises(ValueError, match="never persisted"):
        state_path(tmp_path, "t#ephemeral", 0, "c")


def test_scan_and_remove(tmp_path: Path) -> None:
    for topic, partition, channel in [
        ("a-1", 0, "x"),
        ("a-1", 0, ".."),
        ("a", 1, "y"),
        ("b", 0, "z"),
    ]:
        save_state(state_path(tmp_path, topic, partition, channel), state(1, 1))
    junk = partition_state_directory(tmp_path, "a-1", 0)
    (junk / ".x.state.0011.tmp").write_bytes(b"")
    (junk / "e#ephemeral.state").write_bytes(b"")
    (junk / "notes.txt").write_bytes(b"")
    (tmp_path / "channels" / "no-partition").mkdir()
    (tmp_path / "channels" / "bad name-0").mkdir()
    assert scan_channel_states(tmp_path) == {
        ("a-1", 0): ("..", "x"),
        ("a", 1): ("y",),
        ("b", 0): ("z",),
    }
    assert [p.name for p in remove_stale_state_temps(tmp_path)] == [".x.state.0011.tmp"]
    assert remove_stale_state_temps(tmp_path / "elsewhere") == []
    assert remove_channel_state(tmp_path, "a", 1, "y") is True
    assert remove_channel_state(tmp_path, "a", 1, "y") is False
    assert remove_partition_states(tmp_path, "a-1", 0) == 4
    assert remove_partition_states(tmp_path, "a-1", 0) == 0
    assert scan_channel_states(tmp_path) == {("b", 0): ("z",)}
    assert scan_channel_states(tmp_path / "elsewhere") == {}
