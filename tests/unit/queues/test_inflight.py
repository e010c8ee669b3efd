"""InFlightTable: unit cases, and a hypothesis state machine against a naive model."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from trionsq.queues.inflight import NOT_IN_FLIGHT, NOT_OWNER, InFlightError, InFlightTable


def test_add_finish_and_ownership() -> None:
    table: InFlightTable[str] = InFlightTable(max_msg_timeout=900)
    assert table.add(1, "m1", client=7, now=10.0, timeout=60) == 70.0
    with pytest.raises(ValueError, match="already in flight"):
        table.add(1, "again", client=7, now=11.0, timeout=60)
    with pytest.raises(InFlightError) as other:
        table.finish(1, client=8)
    assert other.value.reason == NOT_OWNER
    assert table.finish(1, client=7).payload == "m1"
    with pytest.raises(InFlightError) as gone:
        table.finish(1, client=7)
    assert gone.value.reason == NOT_IN_FLIGHT
    assert len(table) == 0
    assert table.next_deadline() is None


def test_touch_moves_deadline_but_never_past_max_msg_timeout() -> None:
    table: InFlightTable[str] = InFlightTable(max_msg_timeout=100)
    table.add(1, "m", client=1, now=0.0, timeout=60)
    assert table.touch(1, client=1, now=50.0, timeout=60) == 100.0  # capped at 0 + 100
    assert table.touch(1, client=1, now=30.0, timeout=10) == 40.0  # may also move earlier
    assert table.next_deadline() == 40.0
    assert table.pop_expired(39.9) == []
    expired = table.pop_expired(40.0)
    assert [e.key for e in expired] == [1]
    assert table.next_deadline() is None  # the stale 100.0 and 60.0 heap entries are skipped
    with pytest.raises(InFlightError):
        table.touch(1, client=1, now=41.0, timeout=1)


def test_pop_expired_in_deadline_order() -> None:
    table: InFlightTable[int] = InFlightTable(max_msg_timeout=900)
    for key, timeout in [(1, 30), (2, 10), (3, 20), (4, 40)]:
        table.add(key, key, client=key % 2, now=0.0, timeout=timeout)
    assert [e.key for e in table.pop_expired(25.0)] == [2, 3]
    assert table.next_deadline() == 30.0


def test_remove_client_takes_all_of_its_messages_at_once() -> None:
    table: InFlightTable[int] = InFlightTable(max_msg_timeout=900)
    table.add(3, 3, client=1, now=2.0, timeout=60)
    table.add(1, 1, client=1, now=1.0, timeout=60)
    table.add(2, 2, client=2, now=1.5, timeout=60)
    removed = table.remove_client(1)
    assert [e.key for e in removed] == [1, 3]  # oldest delivery first
    assert table.count_for(1) == 0
    assert table.count_for(2) == 1
    assert table.remove_client(1) == []
    assert table.next_deadline() == 61.5


def test_heap_stays_bounded_under_many_touches() -> None:
    table: InFlightTable[int] = InFlightTable(max_msg_timeout=10**9)
    table.add(1, 1, client=1, now=0.0, timeout=60)
    for step in range(10_000):
        table.touch(1, client=1, now=float(step), timeout=60)
        if step % 1000 == 0:
            table.finish(1, client=1)
            table.add(1, 1, client=1, now=float(step), timeout=60)
    assert table.statistics().heap_entries <= 10_000  # lazy entries, but pruned on removals
    table.finish(1, client=1)
    assert table.statistics().in_flight == 0


def test_a_batch_shares_one_deadline_and_leaves_key_by_key() -> None:
    table: InFlightTable[str] = InFlightTable(max_msg_timeout=900)
    assert table.add_many([(1, "a"), (2, "b"), (3, "c")], client=5, now=0.0, timeout=60) == 60.0
    with pytest.raises(ValueError, match="already in flight"):
        table.add_many([(4, "d"), (2, "again")], client=5, now=1.0, timeout=60)
    assert 4 not in table  # nothing of a refused batch is kept
    assert table.count_for(5) == 3
    finished, refused = table.finish_many([2, 9, 2], client=5)
    assert (finished, refused) == ([2], [9, 2])
    assert [table.reason(key) for key in refused] == [NOT_IN_FLIGHT, NOT_IN_FLIGHT]
    assert table.finish_many([1], client=6) == ([], [1])
    assert table.reason(1) == NOT_OWNER
    table.touch(3, client=5, now=30.0, timeout=60)  # leaves the batch for one of its own
    assert table.next_deadline() == 60.0  # key 1 still holds the batch's deadline
    assert [(e.key, e.payload) for e in table.pop_expired(60.0)] == [(1, "a")]
    assert table.next_deadline() == 90.0
    assert table.count_for(5) == 1
    assert [e.key for e in table.pop_expired(90.0)] == [3]
    assert table.next_deadline() is None
    assert table.count_for(5) == 0


def test_finished_batches_do_not_pile_up_in_the_heap() -> None:
    table: InFlightTable[int] = InFlightTable(max_msg_timeout=900)
    for start in range(0, 100_000, 100):
        keys = range(start, start + 100)
        table.add_many([(key, key) for key in keys], client=1, now=float(start), timeout=60)
        assert table.finish_many(list(keys), client=1)[1] == []
    assert len(table) == 0
    assert table.statistics().heap_entries <= 66  # stale batches pruned, not kept 60 s


class InFlightModel(RuleBasedStateMachine):
    """The table against a plain dict scanned linearly."""

    def __init__(self) -> None:
        super().__init__()
        self.table: InFlightTable[int] = InFlightTable(max_msg_timeout=50.0)
        self.model: dict[int, tuple[int, float, float]] = {}  # key -> (client, delivered, deadline)
        self.now = 0.0

    @rule(step=st.floats(0, 20, allow_nan=False))
    def advance(self, step: float) -> None:
        self.now += step

    @rule(key=st.integers(0, 30), client=st.integers(0, 3), timeout=st.floats(0.5, 60))
    def add(self, key: int, client: int, timeout: float) -> None:
        if key in self.model:
            with pytest.raises(ValueError, match="already"):
                self.table.add(key, key, client, self.now, timeout)
            return
        self.table.add(key, key, client, self.now, timeout)
        self.model[key] = (client, self.now, self.now + timeout)

    @rule(
        keys=st.lists(st.integers(0, 30), max_size=8, unique=True),
        client=st.integers(0, 3),
        timeout=st.floats(0.5, 60),
    )
    def add_many(self, keys: list[int], client: int, timeout: float) -> None:
        items = [(key, key) for key in keys]
        if any(key in self.model for key in keys):
            with pytest.raises(ValueError, match="already"):
                self.table.add_many(items, client, self.now, timeout)
            return
        deadline = self.table.add_many(items, client, self.now, timeout)
        for key in keys:
            self.model[key] = (client, self.now, deadline)

    @rule(keys=st.lists(st.integers(0, 30), max_size=8), client=st.integers(0, 3))
    def finish_many(self, keys: list[int], client: int) -> None:
        expected_finished: list[int] = []
        expected_refused: list[int] = []
        for key in keys:
            owner = self.model.get(key)
            if owner is not None and owner[0] == client:
                expected_finished.append(key)
                del self.model[key]
            else:
                expected_refused.append(key)
        assert self.table.finish_many(keys, client) == (expected_finished, expected_refused)

    @rule(key=st.integers(0, 30), client=st.integers(0, 3))
    def finish(self, key: int, client: int) -> None:
        expected = self.model.get(key)
        if expected is None or expected[0] != client:
            reason = NOT_IN_FLIGHT if expected is None else NOT_OWNER
            with pytest.raises(InFlightError) as caught:
                self.table.finish(key, client)
            assert caught.value.reason == reason
            return
        assert self.table.finish(key, client).key == key
        del self.model[key]

    @rule(key=st.integers(0, 30), client=st.integers(0, 3), timeout=st.floats(0.5, 60))
    def touch(self, key: int, client: int, timeout: float) -> None:
        expected = self.model.get(key)
        if expected is None or expected[0] != client:
            with pytest.raises(InFlightError):
                self.table.touch(key, client, self.now, timeout)
            return
        owner, delivered, _ = expected
        deadline = min(self.now + timeout, delivered + 50.0)
        assert self.table.touch(key, client, self.now, timeout) == deadline
        self.model[key] = (owner, delivered, deadline)

    @rule()
    def expire(self) -> None:
        due = sorted((d, k) for k, (_, _, d) in self.model.items() if d <= self.now)
        got = self.table.pop_expired(self.now)
        assert sorted((e.deadline, e.key) for e in got) == due
        for _, key in due:
            del self.model[key]

    @precondition(lambda self: bool(self.model))
    @rule(client=st.integers(0, 3))
    def disconnect(self, client: int) -> None:
        keys = sorted(k for k, (c, _, _) in self.model.items() if c == client)
        assert sorted(e.key for e in self.table.remove_client(client)) == keys
        for key in keys:
            del self.model[key]

    @invariant()
    def agrees(self) -> None:
        assert len(self.table) == len(self.model)
        expected = min((d for _, _, d in self.model.values()), default=None)
        assert self.table.next_deadline() == expected
        for client in range(4):
            assert self.table.count_for(client) == sum(
                1 for c, _, _ in self.model.values() if c == client
            )


TestInFlightModel = InFlightModel.TestCase
TestInFlightModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
