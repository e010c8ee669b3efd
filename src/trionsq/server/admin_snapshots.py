"""Admin stream snapshots, built once per interval and shared (issue 30, item 3).

A snapshot of a broker with 300 topics of 3 channels is 0.4 MB of JSON and about
20 ms of work; built for each subscriber, 20 subscribers at 100 ms took 89% of a core
and /ping waited 0.3 s. Subscribers with the same subscription (snapshot interval and
topics) form a group. A group's snapshots fall due on the boundaries of its interval
on Trio's clock, so its subscribers wake together; the first to wake builds the
snapshot, serialized once into a websocket frame, and every subscriber of the group
sends those same bytes after a small frame with its own ``seq``
(websocket_frames.py). Rates are per second between the group's consecutive
snapshots.

Pure bookkeeping around one synchronous build: no task of its own (the subscribers'
writers call it), so nothing here outlives the subscribers.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Final

import attrs
import orjson
import trio

from ..version import NSQD_RELEASE
from .memory_stats import resident_bytes
from .stats import stats_document
from .websocket_frames import continuation_frame

if TYPE_CHECKING:
    from ..broker.broker import Broker

__all__ = ["Snapshot", "SnapshotHub", "SnapshotKey"]

SnapshotKey = tuple[int, frozenset[str] | None]
"""A subscription's snapshot interval (ms) and topics (None: every topic)."""
COUNTED: Final = ("message_count", "finish_count", "requeue_count", "timeout_count")
"""A channel's counters that get a rate ..."""
RATES: Final = ("message_rate", "finish_rate", "requeue_rate", "timeout_rate")
"""... under these names."""
BUILD_SHARE: Final = 0.15
"""The most of the broker's time snapshots may take: after a build of ``d`` seconds,
no snapshot falls due for ``d * (1 / BUILD_SHARE - 1)`` (a broker of 900 channels
builds one in about 15 ms, so 100 ms intervals hold; one of 10,000 channels gets
them further apart instead of spending all its time on them)."""


@attrs.frozen
class Snapshot:
    """One built snapshot, as every subscriber of its group sends it."""

    built_at: float
    """Trio time."""
    next_due: float
    """When the group's next snapshot is due (Trio time): the next boundary of its
    interval, or later when building snapshots would take more than
    :data:`BUILD_SHARE` of the broker's time."""
    ts: int
    """Unix milliseconds, the message's ``ts``."""
    tail: bytes
    """The JSON object after ``type``, ``seq`` and ``ts`` (``"interval_ms":...}``), as
    the final frame of the message every subscriber sends (websocket_frames.py)."""

    def head(self, seq: int) -> bytes:
        """What comes before :attr:`tail` in a subscriber's message at ``seq``."""
        return b'{"type":"snapshot","seq":%d,"ts":%d,' % (seq, self.ts)


class _Group:
    """The subscribers of one subscription: how many, the latest snapshot, and the
    counters it was built from (for the next one's rates)."""

    __slots__ = ("counted_at", "counters", "latest", "members")

    def __init__(self) -> None:
        self.members = 0
        self.latest: Snapshot | None = None
        self.counters: dict[tuple[str, str], tuple[int, ...]] = {}
        """Topic (channel ``""``) or channel → its counters at the latest build."""
        self.counted_at: float | None = None


class SnapshotHub:
    """Every group of one broker's subscribers (both listeners share it)."""

    def __init__(self, broker: Broker, *, started_at: float) -> None:
        """``started_at``: the broker's start (Unix seconds), as /stats shows it."""
        self.broker = broker
        self.started_at = started_at
        self._groups: dict[SnapshotKey, _Group] = {}
        self._not_before = -math.inf
        """No group's next snapshot falls due before this (Trio time): see BUILD_SHARE."""
        self.builds = 0
        """Snapshots built since start (tests, benchmarks)."""

    def join(self, key: SnapshotKey) -> None:
        """A subscriber takes snapshots of ``key``."""
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
        group.members += 1

    def leave(self, key: SnapshotKey) -> None:
        """A subscriber no longer takes them; the group goes with its last one."""
        group = self._groups[key]
        group.members -= 1
        if not group.members:
            del self._groups[key]

    def snapshot(self, key: SnapshotKey, due: float) -> Snapshot:
        """The group's snapshot for a subscriber whose snapshot fell due at ``due``
        (its subscription, or the previous snapshot's :attr:`~Snapshot.next_due`):
        the one built since, else a new one. Every subscriber of the group shares the
        due times, so the first to wake builds and the others take the same."""
        group = self._groups[key]
        latest = group.latest
        if latest is not None and latest.built_at >= due:
            return latest
        started = trio.current_time()
        built = self._build(key, group, started)
        finished = trio.current_time()
        self._not_before = finished + (finished - started) * (1 / BUILD_SHARE - 1)
        interval = key[0] / 1000
        boundary = (round(started * 1_000_000) // round(interval * 1_000_000) + 1) * interval
        group.latest = attrs.evolve(built, next_due=max(boundary, self._not_before))
        return group.latest

    def _build(self, key: SnapshotKey, group: _Group, now: float) -> Snapshot:
        """/stats' topics (those subscribed to), each with its message rate and each
        channel with its finish count and rates, serialized into the final frame."""
        interval_ms, topics = key
        broker = self.broker
        document = stats_document(  # /stats?format=json&include_clients=true, ours to change
            broker,
            version=NSQD_RELEASE,
            started_at=self.started_at,
            health=broker.health,
            topic=None,
            channel=None,
            include_clients=True,
            include_mem=False,
        )
        before, elapsed = group.counters, now - (group.counted_at or now)
        counters: dict[tuple[str, str], tuple[int, ...]] = {}
        shown: list[dict[str, object]] = []
        for topic in document["topics"] or ():  # type: ignore[attr-defined]
            name = topic["topic_name"]
            if topics is not None and name not in topics:
                continue
            counted: tuple[int, ...] = (topic["message_count"],)
            counters[name, ""] = counted
            (topic["message_rate"],) = _rates(counted, before.get((name, "")), elapsed)
            finished = _finish_counts(broker, name)
            for channel in topic["channels"]:
                cname = channel["channel_name"]
                channel["finish_count"] = finished.get(cname, 0)
                counted = counters[name, cname] = tuple(channel[c] for c in COUNTED)
                rates = _rates(counted, before.get((name, cname)), elapsed)
                channel.update(zip(RATES, rates, strict=True))
            shown.append(topic)
        group.counters, group.counted_at = counters, now
        members = {
            "interval_ms": interval_ms,
            "health": document.get("health"),
            "start_time": document.get("start_time"),
            "rss_bytes": resident_bytes(),
            "client_count": len(broker.clients),
            "topics": shown,
            "producers": document.get("producers"),
        }
        self.builds += 1
        tail = continuation_frame(memoryview(orjson.dumps(members))[1:])
        return Snapshot(built_at=now, next_due=now, ts=time.time_ns() // 1_000_000, tail=tail)


def _finish_counts(broker: Broker, topic: str) -> dict[str, int]:
    """Each channel's FINs over the topic's partitions (/stats has no such count)."""
    counts: dict[str, int] = {}
    found = broker.topics.get(topic)
    for partition in found.partitions if found is not None else ():
        for name, channel in partition.channels.items():
            counts[name] = counts.get(name, 0) + channel.finish_count
    return counts


def _rates(now: tuple[int, ...], before: tuple[int, ...] | None, elapsed: float) -> list[float]:
    """Per second over ``elapsed`` for each counter (0 without a previous value)."""
    if before is None or elapsed <= 0:
        return [0.0] * len(now)
    return [round(max(0, value - old) / elapsed, 3) for value, old in zip(now, before, strict=True)]
