"""DeferredQueue: due order, one entry per key, and what gets persisted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.queues.deferred import DeferredQueue


def test_pop_due_in_order_and_only_when_due() -> None:
    queue: DeferredQueue[str] = DeferredQueue()
    queue.push(1, 30.0, "a")
    queue.push(2, 10.0, "b")
    queue.push(3, 20.0, "c")
    assert queue.next_due() == 10.0
    assert queue.pop_due(9.99) == []
    assert queue.pop_due(20.0) == ["b", "c"]
    assert queue.entries() == [(30.0, 1)]
    assert queue.statistics().deferred == 1
    with pytest.raises(ValueError, match="already deferred"):
        queue.push(1, 5.0, "again")
    assert queue.clear() == ["a"]
    assert queue.next_due() is None


@given(
    st.dictionaries(st.integers(0, 1000), st.floats(0, 1e6, allow_nan=False), max_size=50),
    st.floats(0, 1e6, allow_nan=False),
)
def test_pop_due_matches_a_sort(dues: dict[int, float], now: float) -> None:
    queue: DeferredQueue[int] = DeferredQueue()
    for key, due in dues.items():
        queue.push(key, due, key)
    ready = queue.pop_due(now)
    expected = [k for d, k in sorted((d, k) for k, d in dues.items()) if d <= now]
    assert sorted(ready) == sorted(expected)
    assert [dues[k] for k in ready] == sorted(dues[k] for k in ready)
    assert len(queue) == len(dues) - len(ready)
