"""The channel cursor: reading forward, confirming the contiguous finished prefix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from trionsq.queues.cursor import ChannelCursor
from trionsq.queues.ephemeral import EphemeralFeed
from trionsq.queues.memory_log import MemoryLog

if TYPE_CHECKING:
    from trionsq.queues.record import Record


def filled(count: int) -> MemoryLog:
    log = MemoryLog()
    log.append([b"m%d" % i for i in range(count)], timestamp=0)
    return log


def test_take_and_backlog() -> None:
    log = filled(10)
    cursor = ChannelCursor(log, log.start_id)
    assert cursor.backlog == 10
    assert [r.internal_id for r in cursor.take(4)] == [1, 2, 3, 4]
    assert cursor.backlog == 6
    late = ChannelCursor(log, log.next_id)  # a later channel starts at the tail
    assert late.take(5) == []
    log.append([b"new"], timestamp=1)
    assert [r.body for r in late.take(5)] == [b"new"]


def test_confirmed_advances_over_the_contiguous_prefix() -> None:
    log = filled(6)
    cursor = ChannelCursor(log, 1)
    cursor.take(6)
    cursor.finish(2)
    cursor.finish(3)
    assert cursor.confirmed_id == 1
    assert cursor.statistics().finished_ahead == 2
    cursor.finish(1)
    assert cursor.confirmed_id == 4
    record = log.get(4)
    assert record is not None
    assert cursor.confirmed_offset == record.offset
    cursor.finish(99)  # never read: ignored
    cursor.finish(1)  # already confirmed: ignored
    for i in (4, 5, 6):
        cursor.finish(i)
    assert cursor.confirmed_id == 7
    assert cursor.confirmed_offset == log.next_offset
    assert cursor.statistics().finished_ahead == 0


def test_move_to_resets_everything() -> None:
    log = filled(5)
    cursor = ChannelCursor(log, 1)
    cursor.take(3)
    cursor.finish(2)
    cursor.move_to(5)
    assert (cursor.read_id, cursor.confirmed_id, cursor.backlog) == (5, 5, 1)
    assert cursor.statistics().finished_ahead == 0


@given(st.permutations(list(range(1, 31))), st.integers(0, 30))
def test_finishing_in_any_order_confirms_exactly_the_prefix(order: list[int], done: int) -> None:
    log = filled(30)
    cursor = ChannelCursor(log, 1)
    cursor.take(30)
    finished = set(order[:done])
    for internal_id in order[:done]:
        cursor.finish(internal_id)
    expected = 1
    while expected in finished:
        expected += 1
    assert cursor.confirmed_id == expected
    assert cursor.statistics().finished_ahead == len([i for i in finished if i > expected])


class HoleyLog(MemoryLog):
    """A log with ids recovery had to skip (a durable log's holes)."""

    def __init__(self, missing: set[int]) -> None:
        super().__init__()
        self.missing = missing

    def read(self, from_id: int, max_count: int) -> list[Record]:
        records = list(super().read(from_id, max_count + len(self.missing)))
        return [r for r in records if r.internal_id not in self.missing][:max_count]


def test_ids_missing_from_the_log_count_as_finished() -> None:
    log = HoleyLog({2, 3})
    log.append([b"m%d" % i for i in range(5)], timestamp=0)
    cursor = ChannelCursor(log, log.start_id)
    assert [r.internal_id for r in cursor.take(10)] == [1, 4, 5]
    cursor.finish(1)
    assert cursor.confirmed_id == 4  # over the holes
    cursor.finish(5)
    cursor.finish(4)
    assert cursor.confirmed_id == 6


def test_take_stops_before_a_given_id() -> None:
    """A channel reads up to where a redelivered message was put back, not past it."""
    log = filled(6)
    cursor = ChannelCursor(log, log.start_id)
    assert cursor.position_after(4) == 5
    assert cursor.position_after(100) == log.next_id
    assert [r.internal_id for r in cursor.take(10, stop_id=3)] == [1, 2]
    assert cursor.take(10, stop_id=3) == []
    assert cursor.read_id == 3
    assert [r.internal_id for r in cursor.take(10, stop_id=None)] == [3, 4, 5, 6]


def test_take_with_a_stop_inside_holes_moves_to_the_stop() -> None:
    log = HoleyLog({2, 3, 5})
    log.append([b"m%d" % i for i in range(6)], timestamp=0)
    cursor = ChannelCursor(log, log.start_id)
    assert [r.internal_id for r in cursor.take(10, stop_id=4)] == [1]
    assert cursor.read_id == 4  # over the holes 2 and 3, not past the stop
    assert [r.internal_id for r in cursor.take(10, stop_id=6)] == [4]
    assert cursor.read_id == 6
    for internal_id in (1, 4):
        cursor.finish(internal_id)
    assert cursor.confirmed_id == 6  # the holes count as finished


def test_an_ephemeral_feed_reads_up_to_a_stop_over_its_gaps() -> None:
    log = filled(6)
    feed = EphemeralFeed(capacity=10, next_offer_id=1)
    feed.offer([r for r in log.read(1, 6) if r.internal_id != 3])  # as if 3 was dropped
    assert feed.position_after(2) == 4
    assert feed.position_after(5) == feed.next_offer_id == 7
    assert [r.internal_id for r in feed.take(10, stop_id=4)] == [1, 2]
    assert [r.internal_id for r in feed.take(1, stop_id=7)] == [4]
    assert [r.internal_id for r in feed.take(10)] == [5, 6]


@given(
    before=st.lists(st.integers(-2, 45), max_size=20),
    runs=st.lists(
        st.one_of(
            st.lists(st.integers(-2, 45), max_size=12),
            st.tuples(st.integers(0, 44), st.integers(1, 12)).map(
                lambda s: list(range(s[0], s[0] + s[1]))
            ),
        ),
        max_size=6,
    ),
)
def test_finish_many_is_finish_of_each(before: list[int], runs: list[list[int]]) -> None:
    """A run of FINs, in order or not, leaves the cursor as one finish per id would;
    runs in delivery order take the one-step path, the rest the loop."""
    log = filled(40)
    one_by_one = ChannelCursor(log, 1)
    batched = ChannelCursor(log, 1)
    one_by_one.take(35)
    batched.take(35)
    for internal_id in before:
        one_by_one.finish(internal_id)
        batched.finish(internal_id)
    for run in runs:
        for internal_id in run:
            one_by_one.finish(internal_id)
        batched.finish_many(run)
        assert batched.confirmed_id == one_by_one.confirmed_id
        assert batched.statistics() == one_by_one.statistics()
