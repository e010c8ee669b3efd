"""Messages a channel has handed to consumers and not yet seen finished.

Pure code, time passed in (design §5): a dict from message key to entry, a heap of
(deadline, seq, key) with lazy deletion after trio's own ``Deadlines`` (a TOUCH
pushes a new heap entry; the old one is skipped when it surfaces), and a per-client
index so a disconnect requeues that client's messages at once.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Final, Generic, TypeVar

import attrs

if TYPE_CHECKING:
    from collections.abc import KeysView, Sequence

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
    """Heap size in batches, stale ones included (bounded at about twice the live ones)."""


@attrs.define(eq=False)
class _Batch(Generic[T]):
    """Messages delivered to one client at one moment with one deadline: what the
    table keeps per message is a dict slot pointing here and its payload in
    :attr:`payloads` (issue 19: an entry object and a heap push per message were a
    tenth of the consume path). Slotted, and hashed by identity (it is kept in
    sets and compared in the heap only by its seq)."""

    client: int
    delivered_at: float
    deadline: float
    seq: int
    payloads: dict[int, T]
    """Its keys still in flight; empty once all are finished, touched or expired."""

    def entry(self, key: int, payload: T) -> InFlight[T]:
        return InFlight(key, payload, self.client, self.delivered_at, self.deadline, self.seq)


class InFlightTable(Generic[T]):
    """The in-flight messages of one channel, keyed by internal message id.

    Kept per delivery batch (:class:`_Batch`): a routing pass hands a consumer
    hundreds of messages at once, so the heap has one ``(deadline, seq, batch)``
    entry per batch and each message only a dict slot. A TOUCH moves its message to
    a batch of its own; a batch with nothing left is stale in the heap and skipped
    when it surfaces, and the heap is pruned when stale batches outnumber live ones.
    """

    def __init__(self, max_msg_timeout: float) -> None:
        """``max_msg_timeout``: a TOUCH never moves a deadline past delivery + this."""
        self.max_msg_timeout: Final = max_msg_timeout
        self._entries: dict[int, _Batch[T]] = {}
        self._heap: list[tuple[float, int, _Batch[T]]] = []
        self._live_batches = 0
        self._counts: dict[int, int] = {}
        """Messages each client holds."""
        self._batches_of: dict[int, set[_Batch[T]]] = {}
        """Each client's batches that still hold messages (for a disconnect)."""
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: int) -> bool:
        return key in self._entries

    def keys(self) -> KeysView[int]:
        """The keys in flight (a live view: do not change the table while iterating)."""
        return self._entries.keys()

    def get(self, key: int) -> InFlight[T] | None:
        """The entry for ``key``, if it is in flight."""
        batch = self._entries.get(key)
        return batch.entry(key, batch.payloads[key]) if batch is not None else None

    def count_for(self, client: int) -> int:
        """How many messages ``client`` holds."""
        return self._counts.get(client, 0)

    def add(self, key: int, payload: T, client: int, now: float, timeout: float) -> float:
        """Record a delivery; returns its deadline (``now + timeout``).

        Raises:
            ValueError: ``key`` is already in flight (nsqd refuses that internally too).
        """
        return self.add_many([(key, payload)], client, now, timeout)

    def add_many(
        self, items: Sequence[tuple[int, T]], client: int, now: float, timeout: float
    ) -> float:
        """Record a batch delivered to ``client`` at ``now``: ``(key, payload)`` pairs,
        one deadline for all; returns it.

        Raises:
            ValueError: a key is already in flight; nothing of the batch is recorded.
        """
        entries = self._entries
        payloads = dict(items)
        if len(payloads) != len(items) or not entries.keys().isdisjoint(payloads):
            raise ValueError(f"a message of {list(payloads)} is already in flight")
        deadline = now + timeout
        if not payloads:
            return deadline
        self._insert(_Batch(client, now, deadline, next(self._seq), payloads))
        return deadline

    def _insert(self, batch: _Batch[T]) -> None:
        """A new batch of messages, none of them in flight yet."""
        payloads = batch.payloads
        client = batch.client
        self._entries.update(dict.fromkeys(payloads, batch))
        self._counts[client] = self._counts.get(client, 0) + len(payloads)
        batches = self._batches_of.get(client)
        if batches is None:
            self._batches_of[client] = {batch}
        else:
            batches.add(batch)
        self._live_batches += 1
        heapq.heappush(self._heap, (batch.deadline, batch.seq, batch))
        if len(self._heap) > 2 * self._live_batches + 64:
            self._prune()

    def _owned(self, key: int, client: int) -> _Batch[T]:
        batch = self._entries.get(key)
        if batch is None:
            raise InFlightError(NOT_IN_FLIGHT)
        if batch.client != client:
            raise InFlightError(NOT_OWNER)
        return batch

    def _take(self, key: int, batch: _Batch[T]) -> T:
        """Out of flight: ``key`` of ``batch``."""
        payload = batch.payloads.pop(key)
        del self._entries[key]
        self._uncount(batch.client, 1)
        if not batch.payloads:
            self._retire(batch)
        return payload

    def _retire(self, batch: _Batch[T]) -> None:
        """``batch`` holds nothing any more (its heap entry stays, stale)."""
        self._live_batches -= 1
        batches = self._batches_of.get(batch.client)
        if batches is not None:
            batches.discard(batch)
            if not batches:
                del self._batches_of[batch.client]

    def finish(self, key: int, client: int) -> InFlight[T]:
        """FIN or REQ: take the message out of flight; only its owner may.

        Raises:
            InFlightError: not in flight, or owned by another client.
        """
        batch = self._owned(key, client)
        return batch.entry(key, self._take(key, batch))

    def finish_many(self, keys: Sequence[int], client: int) -> tuple[list[int], list[int]]:
        """FIN of many keys in order: (the keys taken out of flight, the keys refused).

        What :meth:`finish` does for each, in one pass (issue 19); a refused key is
        not in flight or not ``client``'s (:meth:`reason` says which).
        """
        entries = self._entries
        finished: list[int] = []
        refused: list[int] = []
        for key in keys:
            batch = entries.get(key)
            if batch is None or batch.client != client:
                refused.append(key)
                continue
            del entries[key]
            payloads = batch.payloads
            del payloads[key]
            if not payloads:
                self._retire(batch)
            finished.append(key)
        if finished:
            self._uncount(client, len(finished))
        return finished, refused

    def reason(self, key: int) -> str:
        """Why a FIN/REQ/TOUCH of ``key`` by a client that does not hold it was refused."""
        return NOT_IN_FLIGHT if key not in self._entries else NOT_OWNER

    def touch(self, key: int, client: int, now: float, timeout: float) -> float:
        """TOUCH: deadline = now + timeout, never past delivery + max-msg-timeout.

        Returns the new deadline.

        Raises:
            InFlightError: not in flight, or owned by another client.
        """
        batch = self._owned(key, client)
        deadline = min(now + timeout, batch.delivered_at + self.max_msg_timeout)
        payload = self._take(key, batch)
        seq = next(self._seq)
        self._insert(_Batch(client, batch.delivered_at, deadline, seq, {key: payload}))
        return deadline

    def next_deadline(self) -> float | None:
        """The earliest live deadline, or None when nothing is in flight."""
        heap = self._heap
        while heap:
            deadline, _, batch = heap[0]
            if batch.payloads:
                return deadline
            heapq.heappop(heap)
        return None

    def pop_expired(self, now: float) -> list[InFlight[T]]:
        """Remove and return every entry whose deadline is ``<= now``, earliest first."""
        expired: list[InFlight[T]] = []
        heap = self._heap
        entries = self._entries
        while heap and heap[0][0] <= now:
            _, _, batch = heapq.heappop(heap)
            payloads = batch.payloads
            if not payloads:
                continue
            for key, payload in payloads.items():
                del entries[key]
                expired.append(batch.entry(key, payload))
            self._uncount(batch.client, len(payloads))
            batch.payloads = {}
            self._retire(batch)
        return expired

    def _uncount(self, client: int, count: int) -> None:
        left = self._counts[client] - count
        if left:
            self._counts[client] = left
        else:
            del self._counts[client]

    def remove_client(self, client: int) -> list[InFlight[T]]:
        """A client went away: take all its messages out of flight, oldest delivery first."""
        batches = self._batches_of.pop(client, None)
        if not batches:
            return []
        removed: list[InFlight[T]] = []
        entries = self._entries
        for batch in batches:
            for key, payload in batch.payloads.items():
                del entries[key]
                removed.append(batch.entry(key, payload))
            batch.payloads = {}
            self._live_batches -= 1
        self._counts.pop(client, None)
        removed.sort(key=lambda entry: (entry.delivered_at, entry.key))
        if len(self._heap) > 2 * self._live_batches + 64:
            self._prune()
        return removed

    def take_after(self, key: int) -> list[InFlight[T]]:
        """Take every message with a key above ``key`` out of flight, by key (an
        ordered channel going back to ``key``)."""
        later = sorted(k for k in self._entries if k > key)
        taken: list[InFlight[T]] = []
        for k in later:
            batch = self._entries[k]
            taken.append(batch.entry(k, self._take(k, batch)))
        return taken

    def clear(self) -> list[InFlight[T]]:
        """Channel empty: drop everything (returned for accounting)."""
        removed = [batch.entry(key, batch.payloads[key]) for key, batch in self._entries.items()]
        self._entries.clear()
        self._heap.clear()
        self._live_batches = 0
        self._counts.clear()
        self._batches_of.clear()
        return removed

    def statistics(self) -> InFlightStatistics:
        """A frozen snapshot."""
        return InFlightStatistics(len(self._entries), len(self._heap))

    def _prune(self) -> None:
        """Drop the heap's stale batches (nothing left in them)."""
        self._heap = [item for item in self._heap if item[2].payloads]
        heapq.heapify(self._heap)
