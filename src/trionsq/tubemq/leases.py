"""Deadlines by key: who must be heard from by when (pure, time passed in).

TubeMQ ends a registration its client stops renewing (30 s by default, for the
master's producers and consumers and for a consumer's hold on a partition), and
trionsq answers a pull that waited too long; all of them are deadlines in one of
these tables, and one timer task (:class:`~trionsq.dispatch.expiry.ExpiryTimer`)
sleeps until the earliest. A heap with lazy deletion: renewing pushes a new entry
and the old one is skipped when it surfaces.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LeaseTable"]

K = TypeVar("K", bound=Hashable)


class LeaseTable(Generic[K]):
    """key -> deadline, and the keys whose deadline has passed."""

    def __init__(self) -> None:
        self._deadlines: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._deadlines)

    def __contains__(self, key: K) -> bool:
        return key in self._deadlines

    def set(self, key: K, deadline: float) -> None:
        """``key`` lives until ``deadline`` (replacing any earlier one)."""
        self._deadlines[key] = deadline
        heapq.heappush(self._heap, (deadline, next(self._order), key))
        if len(self._heap) > 2 * len(self._deadlines) + 64:  # many renewals: prune
            self._heap = [(d, n, k) for d, n, k in self._heap if self._deadlines.get(k) == d]
            heapq.heapify(self._heap)

    def drop(self, key: K) -> None:
        """Forget ``key`` (its heap entry is skipped later)."""
        self._deadlines.pop(key, None)

    def deadline(self, key: K) -> float | None:
        return self._deadlines.get(key)

    def next_deadline(self) -> float | None:
        """The earliest live deadline (None: none)."""
        heap = self._heap
        while heap and self._deadlines.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_expired(self, now: float) -> list[K]:
        """The keys whose deadline is at or before ``now``, earliest first; forgotten."""
        expired: list[K] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, key = heapq.heappop(heap)
            if self._deadlines.get(key) == deadline:
                del self._deadlines[key]
                expired.append(key)
        return expired
