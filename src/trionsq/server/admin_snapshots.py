"""Admin stream snapshots, built once per interval and shared (issue 30, item 3).

A snapshot of a broker with 300 topics of 3 channels is 0.5 MB of JSON and 15-30 ms
of work; built for each subscriber, 20 subscribers at 100 ms took 89% of a core and
/ping waited 0.3 s. Subscribers with the same subscription (snapshot interval and
topics) form a group, which keeps one schedule: its snapshots fall due on the
boundaries of its interval on Trio's clock (later when building would take more than
:data:`BUILD_SHARE` of the broker), the first subscriber to wake builds the snapshot,
serialized once into a websocket frame, and every subscriber of the group sends
those same bytes after a small frame with its own ``seq`` (websocket_frames.py).
Rates are per second between the group's consecutive snapshots.

A build goes topic by topic, with a scheduler pass at least every :data:`TURN` of
work, so /ping and the data path never wait for a whole build. It keeps the JSON of
each topic whose figures (topic_figures.py) stood still since the group's previous
snapshot, and whose rates were 0 then: reading a topic's figures costs a fifth of
building its document, and most topics of a large broker are idle between two
snapshots (300 idle topics of 3 channels: 6 ms a build instead of 20-27). A topic
that moved is built again without its figures read, so a broker whose every topic
is busy pays what it paid before (23-24 ms either way).

No task of its own: the subscribers' writers build, so nothing here outlives them.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Final, cast

import attrs
import orjson
import trio

from .memory_stats import resident_bytes
from .stats import producer_documents, topic_document
from .topic_figures import topic_figures
from .websocket_frames import continuation_frame

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..broker.broker import Broker
    from ..broker.topic import Topic

__all__ = ["Snapshot", "SnapshotHub", "SnapshotKey"]

SnapshotKey = tuple[int, frozenset[str] | None]
"""A subscription's snapshot interval (ms) and topics (None: every topic)."""
COUNTED: Final = ("message_count", "finish_count", "requeue_count", "timeout_count")
"""A channel's counters that get a rate ..."""
RATES: Final = ("message_rate", "finish_rate", "requeue_rate", "timeout_rate")
"""... under these names."""
TURN: Final = 0.001
"""Seconds of building between scheduler passes (by the wall clock): /ping and the data
path never wait for a whole build."""
BUILD_SHARE: Final = 0.15
"""The most of the broker's time snapshots may take: after a build of ``d`` seconds,
no snapshot falls due for ``d * (1 / BUILD_SHARE - 1)`` (a broker of 900 mostly idle
channels builds one in about 6 ms, so 100 ms intervals hold; one whose 900 channels
are all busy, 24 ms, or one of 10,000 channels gets them further apart instead of
spending its time on them)."""


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


@attrs.frozen
class _Piece:
    """One topic's part of a group's latest snapshot, and what it was built from."""

    figures: tuple[object, ...] | None
    """topic_figures.py's, read only for a quiet piece (the next build keeps it while
    they stand still); a piece with rates is built again anyway."""
    counters: dict[str, tuple[int, ...]]
    """The topic's (``""``) and each channel's :data:`COUNTED`, for the next rates."""
    json: bytes
    quiet: bool
    """Every rate was 0: the same figures make the same bytes."""


class _Group:
    """The subscribers of one subscription: how many, the latest snapshot, and each
    topic's part of it (reused by the next build when the topic did nothing)."""

    __slots__ = ("building", "counted_at", "latest", "members", "pieces")

    def __init__(self) -> None:
        self.members = 0
        self.latest: Snapshot | None = None
        self.building: trio.Event | None = None
        """Set while a subscriber builds the group's next snapshot (the others wait)."""
        self.pieces: dict[str, _Piece] = {}
        """Each topic's part of :attr:`latest`, by name."""
        self.counted_at: float | None = None


class SnapshotHub:
    """Every group of one broker's subscribers (both listeners share it)."""

    def __init__(
        self,
        broker: Broker,
        *,
        started_at: float,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        """``started_at``: the broker's start (Unix seconds), as /stats shows it;
        ``cpu_clock``: the CPU seconds of the broker's thread, which builds are
        measured by (their share of the broker's time is bounded)."""
        self.broker = broker
        self.started_at = started_at
        self._cpu_clock = cpu_clock
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

    async def snapshot(self, key: SnapshotKey, *, sent: float, fresh_after: float) -> Snapshot:
        """The snapshot a subscriber of ``key`` sends next: the group's latest, when it
        is newer than the one the subscriber sent (built at ``sent``), not older than
        its subscription (``fresh_after``) and not yet followed by a due one; else a
        new one. A subscriber sleeps until the :attr:`~Snapshot.next_due` of what it
        sent, so every subscriber of the group follows the group's one schedule: the
        first to wake builds, the others take the same (waiting while it is built)."""
        group = self._groups[key]
        while True:
            latest = group.latest
            if (
                latest is not None
                and latest.built_at > sent
                and latest.built_at >= fresh_after
                and trio.current_time() < latest.next_due
            ):
                return latest
            if group.building is None:
                break
            await group.building.wait()
        group.building = building = trio.Event()
        try:
            started = trio.current_time()
            built, cost = await self._build(key, group, started)
            self._not_before = trio.current_time() + cost * (1 / BUILD_SHARE - 1)
            interval = key[0] / 1000
            boundary = (round(started * 1_000_000) // round(interval * 1_000_000) + 1) * interval
            group.latest = attrs.evolve(built, next_due=max(boundary, self._not_before))
        finally:  # the waiting subscribers find the new snapshot (or build one themselves)
            group.building = None
            building.set()
        return group.latest

    async def _build(self, key: SnapshotKey, group: _Group, now: float) -> tuple[Snapshot, float]:
        """/stats' topics (those subscribed to), each with its message rate and each
        channel with its finish count and rates, serialized into the final frame;
        and the CPU seconds it took. A topic whose figures stood still since the
        group's previous snapshot (and whose rates were 0 then) keeps its bytes, so a
        build costs what moved. At most :data:`TURN` of work between scheduler passes."""
        interval_ms, topics = key
        broker = self.broker
        names = sorted(broker.topics if topics is None else topics & broker.topics.keys())
        elapsed = now - (group.counted_at or now)
        pieces: dict[str, _Piece] = {}
        cpu_clock = self._cpu_clock
        cost, turn_started = 0.0, cpu_clock()
        turn_ends, wall = time.perf_counter() + TURN, time.time()
        for name in names:
            if time.perf_counter() >= turn_ends:
                cost += cpu_clock() - turn_started
                await trio.lowlevel.checkpoint()
                turn_started = cpu_clock()
                turn_ends, wall = time.perf_counter() + TURN, time.time()
            topic = broker.topics.get(name)
            if topic is None:  # deleted while the build let others in
                continue
            piece = group.pieces.get(name)
            if piece is None or not piece.quiet:  # new, or busy: built again, no figures read
                piece = _piece(broker, topic, None, piece, elapsed, wall)
            else:
                figures = topic_figures(broker, topic, wall)
                if figures != piece.figures:
                    piece = _piece(broker, topic, figures, piece, elapsed, wall)
            pieces[name] = piece
        group.pieces, group.counted_at = pieces, now
        head = {
            "interval_ms": interval_ms,
            "health": broker.health,
            "start_time": math.floor(self.started_at),
            "rss_bytes": resident_bytes(),
            "client_count": len(broker.clients),
        }
        parts: list[bytes | memoryview] = [memoryview(orjson.dumps(head))[1:-1], b',"topics":[']
        for index, piece in enumerate(pieces.values()):
            parts += (b",", piece.json) if index else (piece.json,)
        parts += (b'],"producers":', orjson.dumps(producer_documents(broker)), b"}")
        tail = continuation_frame(*parts)  # the object after type, seq and ts, one copy
        self.builds += 1
        cost += cpu_clock() - turn_started
        snapshot = Snapshot(built_at=now, next_due=now, ts=time.time_ns() // 1_000_000, tail=tail)
        return snapshot, cost


def _piece(
    broker: Broker,
    topic: Topic,
    figures: tuple[object, ...] | None,
    before: _Piece | None,
    elapsed: float,
    now: float,
) -> _Piece:
    """``topic``'s part of a snapshot at ``now`` (Unix seconds), its rates over the
    ``elapsed`` seconds since ``before`` (None: 0); ``figures``: the topic's, when
    already read at ``now``."""
    document = topic_document(broker, topic, now)
    old = {} if before is None else before.counters
    counted: tuple[int, ...] = (cast("int", document["message_count"]),)
    counters = {"": counted}
    (document["message_rate"],) = rates = _rates(counted, old.get(""), elapsed)
    quiet = not any(rates)
    finished = _finish_counts(topic)
    for channel in cast("list[dict[str, object]]", document["channels"]):
        name = cast("str", channel["channel_name"])
        channel["finish_count"] = finished.get(name, 0)
        counted = counters[name] = cast(
            "tuple[int, ...]", tuple(channel[counter] for counter in COUNTED)
        )
        rates = _rates(counted, old.get(name), elapsed)
        channel.update(zip(RATES, rates, strict=True))
        quiet = quiet and not any(rates)
    if quiet and figures is None:
        figures = topic_figures(broker, topic, now)
    return _Piece(
        figures=figures if quiet else None,
        counters=counters,
        json=orjson.dumps(document),
        quiet=quiet,
    )


def _finish_counts(topic: Topic) -> dict[str, int]:
    """Each channel's FINs over the topic's partitions (/stats has no such count)."""
    counts: dict[str, int] = {}
    for partition in topic.partitions:
        for name, channel in partition.channels.items():
            counts[name] = counts.get(name, 0) + channel.finish_count
    return counts


def _rates(now: tuple[int, ...], before: tuple[int, ...] | None, elapsed: float) -> list[float]:
    """Per second over ``elapsed`` for each counter (0 without a previous value, and
    for a channel that did nothing: most of a large broker's, as a rule)."""
    if before is None or elapsed <= 0 or now == before:
        return [0.0] * len(now)
    return [round(max(0, value - old) / elapsed, 3) for value, old in zip(now, before, strict=True)]
