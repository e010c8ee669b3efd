"""What the broker tells its watchers (docs/admin.md): admin events and message samples.

Pure code, no trio: the broker calls :meth:`EventHub.emit` synchronously where a
change happens (never on the per-message path), each :class:`Watcher` appends to its
own bounded queue and calls its ``wake`` callback; the admin stream's writer task
(server/admin_stream.py) drains the queue. A watcher whose queue is full is marked
overflowed and its queue dropped: the broker never grows memory for a watcher that
stopped reading, and a watcher never silently misses an event (its connection is
closed instead).

Publishing costs one truth test of :attr:`EventHub.samplers` per batch while nobody
samples.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ..queues.record import Record

__all__ = ["EVENT_GROUPS", "QUEUE_LIMIT", "EventHub", "Sampler", "Watcher"]

EVENT_GROUPS: Final = ("topic", "partition", "channel", "client", "snapshot", "sample")
"""The kinds a watcher may choose (the ``events`` of a subscription)."""
QUEUE_LIMIT: Final = 10_000
"""Messages a watcher may have waiting before it is closed as too slow."""

Event = dict[str, object]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Watcher:
    """One subscriber's filters and bounded queue."""

    def __init__(
        self,
        wake: Callable[[], None],
        *,
        topics: Iterable[str] | None = None,
        groups: Iterable[str] = EVENT_GROUPS,
        limit: int = QUEUE_LIMIT,
    ) -> None:
        self.wake = wake
        """Called after each message queued (and at overflow): wakes the writer."""
        self.topics: frozenset[str] | None = None if topics is None else frozenset(topics)
        self.groups: frozenset[str] = frozenset(groups)
        self.limit = limit
        self.queue: deque[Event] = deque()
        self.overflowed = False
        """True once the queue was full: the stream closes this watcher (code 4008)."""

    def wants(self, group: str, topic: str | None) -> bool:
        """Whether an event of ``group`` about ``topic`` (None: no topic) is for it."""
        if group not in self.groups:
            return False
        return topic is None or self.topics is None or topic in self.topics

    def offer(self, event: Event) -> None:
        """Queue one message, or overflow (the queue is dropped, nothing more is kept)."""
        if self.overflowed:
            return
        if len(self.queue) >= self.limit:
            self.overflowed = True
            self.queue.clear()
        else:
            self.queue.append(event)
        self.wake()

    def take(self) -> list[Event]:
        """Everything queued, oldest first."""
        taken = list(self.queue)
        self.queue.clear()
        return taken


class Sampler:
    """Every ``every``-th message published to ``topic``, for one watcher."""

    def __init__(self, watcher: Watcher, topic: str, every: int, *, bodies: bool) -> None:
        self.watcher = watcher
        self.topic = topic
        self.every = every
        self.bodies = bodies
        self._countdown = 1  # the first message published is sampled

    def sample(self, partition: int, records: Sequence[Record]) -> None:
        """Count a batch; queue the metadata of the messages that fall on the rate."""
        left = len(records)
        index = self._countdown - 1
        while index < left:
            self.watcher.offer(_sample_event(self.topic, partition, records[index], self.bodies))
            index += self.every
        self._countdown = index - left + 1


def _sample_event(topic: str, partition: int, record: Record, bodies: bool) -> Event:
    event: Event = {
        "type": "sample",
        "ts": _now_ms(),
        "topic": topic,
        "partition": partition,
        "id": f"{record.internal_id:016x}",
        "offset": record.offset,
        "timestamp": record.timestamp,
        "size": len(record.body),
        "trace_id": str(record.trace_id) if record.trace_id else None,
        "ext": record.ext.decode("utf-8", "replace") if record.ext else None,
    }
    if bodies:
        event["body"] = record.body
    return event


class EventHub:
    """The broker's watchers; :meth:`emit` hands each event to those that want it."""

    def __init__(self) -> None:
        self.watchers: list[Watcher] = []
        self.samplers: dict[str, list[Sampler]] = {}
        """Topic name → samplers; empty while nobody samples (publish checks it)."""

    def add(self, watcher: Watcher) -> None:
        self.watchers.append(watcher)

    def remove(self, watcher: Watcher) -> None:
        """Forget a watcher and its samplers (one not there is ignored)."""
        if watcher in self.watchers:
            self.watchers.remove(watcher)
        for topic in list(self.samplers):
            self.set_sampler(watcher, topic, 0)

    def set_sampler(
        self, watcher: Watcher, topic: str, every: int, *, bodies: bool = False
    ) -> None:
        """Sample one message in ``every`` published to ``topic`` (0: stop)."""
        kept = [s for s in self.samplers.get(topic, ()) if s.watcher is not watcher]
        if every > 0:
            kept.append(Sampler(watcher, topic, every, bodies=bodies))
        if kept:
            self.samplers[topic] = kept
        else:
            self.samplers.pop(topic, None)

    def emit(self, group: str, kind: str, topic: str | None = None, **fields: object) -> None:
        """Tell every watcher that wants it: ``{"type": kind, "ts": ..., **fields}``
        (``topic`` is a field too when given)."""
        if not self.watchers:
            return
        event: Event = {"type": kind, "ts": _now_ms()}
        if topic is not None:
            event["topic"] = topic
        event.update(fields)
        for watcher in self.watchers:
            if watcher.wants(group, topic):
                watcher.offer(event)

    def sample(self, topic: str, partition: int, records: Sequence[Record]) -> None:
        """A batch was published: the samplers of ``topic`` count it."""
        for sampler in self.samplers.get(topic, ()):
            sampler.sample(partition, records)
