"""Messages a channel has handed to consumers and not yet seen finished.

Pure code, time passed in (design §5): a dict from message key to entry, a heap of
(deadline, seq, key) with lazy deletion after trio's own ``Deadlines`` (a TOUCH
pushes a new heap entry; the old one is skipped when it surfaces), and a per-client
index so a disconnect requeues that client's messages at once.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Final, Generic, TypeVar

import attrs

__all__ = ["InFlight", "InFlightError", "InFlightStatistics", "InFlightTable"]

T = TypeVar("T")

NOT_IN_FLIGHT: Final = "ID not in flight"
NOT_OWNER: Final = "client does not own message"


class InFlightError(Exception):
    """FIN/REQ/TOUCH of a key that is not in flight, or in flight to another client.

    ``reason`` is nsqd's wording, ready for ``broker_errors.fin_failed`` and friends.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@attrs.define(eq=False)
class InFlight(Generic[T]):
    """One message in flight: who has it, since when, until when."""

    key: int
    payload: T
    client: int
    delivered_at: float
    deadline: float
    seq: int
    """Matches the heap entry that is current; older entries for this key are stale."""


@attrs.frozen
class InFlightStatistics:
    """A snapshot for /stats."""

    in_flight: int
    """Messages in flight now."""
    heap_entries: int
    """Heap size, stale entries included (bounded at about twice ``in_flight``)."""


class InFlightTable(Generic[T]):
    """The in-flight messages of one channel, keyed by internal message id."""

    def __init__(self, max_msg_timeout: float) -> None:
        """``max_msg_timeout``: a TOUCH never moves a deadline past delivery + this."""
        self.max_msg_timeout: Final = max_msg_timeout
        self._entries: dict[int, InFlight[T]] = {}
        self._heap: list[tuple[float, int, int]] = []
        self._by_client: dict[int, set[int]] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: int) -> bool:
        return key in self._entries

    def get(self, key: int) -> InFlight[T] | None:
        """The entry for ``key``, if it is in flight."""
        return self._entries.get(key)

    def count_for(self, client: int) -> int:
        """How many messages ``client`` holds."""
        keys = self._by_client.get(client)
        return len(keys) if keys else 0

    def add(self, key: int, payload: T, client: int, now: float, timeout: float) -> float:
        """Record a delivery; returns its deadline (``now + timeout``).

        Raises:
            ValueError: ``key`` is already in flight (nsqd refuses that internally too).
        """
        if key in self._entries:
            raise ValueError(f"message {key} is already in flight")
        seq = next(self._seq)
        deadline = now + timeout
        self._entries[key] = InFlight(key, payload, client, now, deadline, seq)
        heapq.heappush(self._heap, (deadline, seq, key))
        self._by_client.setdefault(client, set()).add(key)
        return deadline

    def _owned(self, key: int, client: int) -> InFlight[T]:
        entry = self._entries.get(key)
        if entry is None:
            raise InFlightError(NOT_IN_FLIGHT)
        if entry.client != client:
            raise InFlightError(NOT_OWNER)
        return entry

    def _drop(self, entry: InFlight[T]) -> None:
        del self._entries[entry.key]
        keys = self._by_client[entry.client]
        keys.discard(entry.key)
        if not keys:
            del self._by_client[entry.client]
        if len(self._heap) > 2 * len(self._entries) + 64:
            self._prune()

    def finish(self, key: int, client: int) -> InFlight[T]:
        """FIN or REQ: take the message out of flight; only its owner may.

        Raises:
            InFlightError: not in flight, or owned by another client.
        """
        entry = self._owned(key, client)
        self._drop(entry)
        return entry

    def touch(self, key: int, client: int, now: float, timeout: float) -> float:
        """TOUCH: deadline = now + timeout, never past delivery + max-msg-timeout.

        Returns the new deadline.

        Raises:
            InFlightError: not in flight, or owned by another client.
        """
        entry = self._owned(key, client)
        entry.deadline = min(now + timeout, entry.delivered_at + self.max_msg_timeout)
        entry.seq = next(self._seq)
        heapq.heappush(self._heap, (entry.deadline, entry.seq, key))
        return entry.deadline

    def next_deadline(self) -> float | None:
        """The earliest live deadline, or None when nothing is in flight."""
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry.seq == seq:
                return deadline
            heapq.heappop(heap)
        return None

    def pop_expired(self, now: float) -> list[InFlight[T]]:
        """Remove and return every entry whose deadline is ``<= now``, earliest first."""
        expired: list[InFlight[T]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, seq, key = heapq.heappop(heap)
            entry = self._entries.get(key)
            if entry is not None and entry.seq == seq:
                self._drop(entry)
                expired.append(entry)
        return expired

    def remove_client(self, client: int) -> list[InFlight[T]]:
        """A client went away: take all its messages out of flight, oldest delivery first."""
        keys = self._by_client.pop(client, None)
        if not keys:
            return []
        removed = [self._entries.pop(key) for key in keys]
        removed.sort(key=lambda entry: (entry.delivered_at, entry.key))
        if len(self._heap) > 2 * len(self._entries) + 64:
            self._prune()
        return removed

    def clear(self) -> list[InFlight[T]]:
        """Channel empty: drop everything (returned for accounting)."""
        removed = list(self._entries.values())
        self._entries.clear()
        self._heap.clear()
        self._by_client.clear()
        return removed

    def statistics(self) -> InFlightStatistics:
        """A frozen snapshot."""
        return InFlightStatistics(len(self._entries), len(self._heap))

    def _prune(self) -> None:
        """Drop stale heap entries so the heap stays within about twice the table."""
        self._heap = [(e.deadline, e.seq, e.key) for e in self._entries.values()]
        heapq.heapify(self._heap)
