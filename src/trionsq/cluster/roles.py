"""A broker's role for one replicated partition: what a leader and a follower keep.

:class:`LeaderRole` holds the leader's :class:`~.isr.FollowerProgress`, wakes the
follower streams when the log grows, lets publishers wait for their records to be
committed, and moves the partition's commit end (what consumers may read).
:class:`FollowerRole` remembers the commit end the leader last told, so that a
follower elected later starts from it. The tasks that move bytes are in
``leader_streams.py`` and ``follower_stream.py``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import trio

from ..broker.replication import not_leader
from ..queues.record_runs import encode_records, whole_records
from ..queues.topic_log import TopicLog
from .isr import FollowerProgress

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..broker.topic import Partition
    from ..queues.partition_log import PartitionLog
    from ..queues.record import Record
    from .epochs import EpochHistory
    from .keys import PartitionState

__all__ = ["FollowerRole", "LeaderRole", "PartitionFiles"]

ENCODED_BATCHES = 16
"""Shipped batches whose bytes a leader keeps for the followers still to read them."""


class _WaitedEvent:
    """A trio Event made only when someone waits for it, and dropped when set (the
    next wait makes a new one): a leader with no follower (replicas=1) makes none
    per append."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: trio.Event | None = None

    def event(self) -> trio.Event:
        """What the next :meth:`set` sets."""
        event = self._event
        if event is None:
            event = self._event = trio.Event()
        return event

    def set(self) -> None:
        """Wake whoever waits."""
        event = self._event
        if event is not None:
            self._event = None
            event.set()


class PartitionFiles:
    """What a replica keeps beside the partition's log: its epoch history (saved by
    the manager, which knows where)."""

    def __init__(self, history: EpochHistory) -> None:
        self.history = history
        self.committed = 0
        """The last commit end this replica learned (as leader or from its leader)."""


class LeaderRole:
    """This broker leads ``partition`` in ``state.epoch``."""

    kind = "leader"

    def __init__(
        self,
        me: str,
        partition: Partition,
        state: PartitionState,
        files: PartitionFiles,
        *,
        max_lag: float,
        wake_readers: Callable[[], None],
        caught_up: Callable[[], None] = lambda: None,
        revision: int = 0,
    ) -> None:
        """``wake_readers``: wakes the partition's channel routers (the commit end
        moved); ``caught_up``: a follower outside the ISR holds everything now (the
        ISR upkeep runs at once); ``revision``: the etcd revision ``state`` was read at."""
        self.partition = partition
        self._wake_readers = wake_readers
        self._caught_up = caught_up
        self.state = state
        self.revision = revision
        """The partition key's etcd revision this role last took its state from."""
        self.files = files
        self.epoch = state.epoch
        end = partition.log.next_id
        files.history.begin(state.epoch, end)
        self.progress = FollowerProgress(
            me, state.isr, end, now=trio.current_time(), max_lag=max_lag, committed=files.committed
        )
        self.lost = False
        """Leadership went (a newer epoch, or this broker stopped): waiters are refused."""
        self._grown = _WaitedEvent()
        """Set when the log grows or the commit end moves: the follower streams look
        again (:meth:`grown_event`)."""
        self._committed = _WaitedEvent()
        """Set when the commit end moves or leadership is lost: publishers waiting
        for a commit look again (:meth:`wait_committed`)."""
        self.scope = trio.CancelScope()
        """Around the role's tasks (ISR upkeep): cancelled when the role ends."""
        self.state_bytes = b""
        """The partition's consumer state as last captured (broker/replica_state.py)."""
        self.state_version = 0
        """Grows with each change of :attr:`state_bytes`: streams send it again."""
        self.callbacks: list[Callable[[], None]] = []
        """Called once at the next commit move or the role's end (connections that
        hold publishes' answers)."""
        self._encoded: dict[tuple[int, int], tuple[list[Record], bytes]] = {}
        """The last batches shipped, and their bytes, by the (first id, end) asked:
        every follower reading the same range gets the one read."""
        self._publish_commit(self.progress.committed)

    def shipment(self, records: list[Record]) -> tuple[list[Record], bytes]:
        """``records`` (or the first of them, those in one segment file) and their
        bytes in the log, read once for all followers."""
        key = (records[0].internal_id, records[-1].internal_id + 1)
        found = self._encoded.get(key)
        if found is None:
            found = self._encoded[key] = log_bytes(self.partition.log, records)
            if len(self._encoded) > ENCODED_BATCHES:
                del self._encoded[next(iter(self._encoded))]
        return found

    def ship_state(self, data: bytes) -> None:
        """The consumer state now: the follower streams send it if it changed."""
        if data != self.state_bytes:
            self.state_bytes = data
            self.state_version += 1
            self._wake()

    def grown_event(self) -> trio.Event:
        """What the next growth of the log (or move of the commit end) sets."""
        return self._grown.event()

    def _wake(self) -> None:
        self._grown.set()

    def _publish_commit(self, committed: int) -> None:
        self.files.committed = committed
        self.partition.set_commit_end(committed)
        self._wake_readers()
        self._committed.set()
        self._call_back()

    def _call_back(self) -> None:
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback()

    def appended(self) -> None:
        """The log grew: ship it, and commit at once if no follower counts."""
        before = self.progress.committed
        after = self.progress.appended(self.partition.log.next_id, trio.current_time())
        self._wake()
        if after != before:
            self._publish_commit(after)

    def acked(self, follower: str, end: int) -> bool:
        """A follower's ACK; whether the commit end moved (the caller wakes routers)."""
        before = self.progress.committed
        progress = self.progress
        after = progress.ack(follower, end, trio.current_time())
        if (
            follower not in progress.isr
            and follower not in progress.joining
            and end >= progress.end
        ):
            self._caught_up()
        if after == before:
            return False
        self._publish_commit(after)
        if after >= progress.end:  # nothing in flight will carry it: the streams send it
            self._wake()
        return True

    def confirm(self, state: PartitionState) -> bool:
        """etcd holds a new state of the same epoch (an ISR change); whether the commit
        end moved."""
        self.state = state
        before = self.progress.committed
        after = self.progress.confirm(state.isr, trio.current_time())
        if after != before:
            self._publish_commit(after)
            self._wake()
            return True
        return False

    def end(self) -> None:
        """Leadership is over: refuse whoever waits, stop the role's tasks."""
        self.lost = True
        self.scope.cancel()
        self._committed.set()
        self._wake()
        self._call_back()

    async def wait_committed(self, end: int) -> None:
        """Until every record below ``end`` is committed.

        Raises:
            ReplicaRefusal: leadership was lost first.
        """
        while self.progress.committed < end:
            if self.lost:
                raise not_leader(f"lost the leadership of epoch {self.epoch}")
            await self._committed.event().wait()


def log_bytes(partition_log: PartitionLog, records: list[Record]) -> tuple[list[Record], bytes]:
    """``records`` (or those of the first segment file they are in) and their bytes:
    a durable log's own, read back from its file (just written: in the page cache),
    so the leader encodes nothing to ship and replicas hold its exact bytes; encoded
    again only from a memory log, or where a damaged stretch left a gap."""
    if isinstance(partition_log, TopicLog):
        first = records[0]
        data = partition_log.read_encoded(first.offset, records[-1].end)
        count = whole_records(records, len(data))
        if count:
            records = records[:count]
            size = records[-1].end - first.offset
            return records, data if len(data) == size else data[:size]
    return records, encode_records(records)


class FollowerRole:
    """This broker follows ``state.leader`` for ``partition`` in ``state.epoch``."""

    kind = "follower"

    def __init__(self, partition: Partition, state: PartitionState, files: PartitionFiles) -> None:
        self.partition = partition
        self.state = state
        self.files = files
        self.epoch = state.epoch
        self.scope = trio.CancelScope()
        """Around the follower's stream task: cancelled when the role ends."""
        self.connected = False
        self.fetched = 0
        """Bytes of records copied (for /stats and the catch-up rate)."""
        self.pending_state: bytes | None = None
        """The last consumer state the leader shipped, not applied yet."""
        self.state_due = -math.inf
        """When a shipped state may next be applied (``follower_stream.py``)."""
        self.apply_state: Callable[[bytes], None] | None = None
        """Applies a shipped state to this broker's copy of the partition (set by
        the stream task)."""

    def take_state(self) -> None:
        """Apply the last shipped consumer state now, if one waits."""
        data, self.pending_state = self.pending_state, None
        if data is not None and self.apply_state is not None:
            self.apply_state(data)

    def end(self) -> None:
        """Stop following; a shipped state still waiting is applied first, so a
        leadership of this partition that starts next serves from it."""
        self.take_state()
        self.scope.cancel()
