"""Messages a channel holds back until a time: DPUB, and REQ with a delay.

Pure code with time passed in. Kept as (due, key) in a heap, so the durable log can
persist it with the cursor (design §2) and a long delay never pins old segments.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Generic, TypeVar

import attrs

__all__ = ["DeferredQueue", "DeferredStatistics"]

T = TypeVar("T")


@attrs.frozen
class DeferredStatistics:
    """A snapshot for /stats (``deferred_count``)."""

    deferred: int


class DeferredQueue(Generic[T]):
    """Items due at a time, at most one per key (nsqd defers a message id once)."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[float, int, T]] = {}
        self._heap: list[tuple[float, int, int]] = []
        self._seq = itertools.count()
        self.changes = 0
        """Counts every push, pop and clear: a cheap "has it changed" for persisting."""

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: int) -> bool:
        return key in self._items

    def push(self, key: int, due: float, item: T) -> None:
        """Hold ``item`` until ``due``.

        Raises:
            ValueError: ``key`` is already deferred.
        """
        if key in self._items:
            raise ValueError(f"message {key} is already deferred")
        seq = next(self._seq)
        self.changes += 1
        self._items[key] = (due, seq, item)
        heapq.heappush(self._heap, (due, seq, key))

    def discard(self, key: int) -> bool:
        """Drop ``key`` if it is held (its heap entry goes lazily); whether it was."""
        if self._items.pop(key, None) is None:
            return False
        self.changes += 1
        return True

    def next_due(self) -> float | None:
        """The earliest due time, or None when empty."""
        heap = self._heap
        while heap:
            due, seq, key = heap[0]
            held = self._items.get(key)
            if held is not None and held[1] == seq:
                return due
            heapq.heappop(heap)
        return None

    def pop_due(self, now: float) -> list[T]:
        """Remove and return every item due at or before ``now``, in due order."""
        ready: list[T] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, seq, key = heapq.heappop(heap)
            held = self._items.get(key)
            if held is not None and held[1] == seq:
                del self._items[key]
                ready.append(held[2])
        if ready:
            self.changes += 1
        return ready

    def entries(self) -> list[tuple[float, int]]:
        """(due, key) of everything held, in due order: what gets persisted."""
        return sorted((due, key) for key, (due, _, _) in self._items.items())

    def clear(self) -> list[T]:
        """Channel empty: drop everything."""
        items = [item for _, _, item in self._items.values()]
        self.changes += 1
        self._items.clear()
        self._heap.clear()
        return items

    def statistics(self) -> DeferredStatistics:
        """A frozen snapshot."""
        return DeferredStatistics(len(self._items))
