"""Topics and their partitions: one log per partition, channels as cursors over it.

Design §2 with nsqd's semantics (spec semantics.md §1-§4, §10): a message is stored
once and every channel reads it; a partition with no channel keeps its messages and
its first channel starts at the oldest one, while later channels start at the tail;
records every channel has confirmed are released. Pure state: the Trio layer wakes
the channels' routers after a publish.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

import attrs

from ..protocol.names import is_ephemeral
from ..queues.delay_store import DelayStore
from ..queues.delivery_journal import DeliveryJournal
from ..queues.ephemeral import EphemeralFeed
from ..queues.memory_log import MemoryLog
from .channel import Channel
from .holds import ReaderHolds
from .ttl import TopicTtl

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ..queues.partition_log import PartitionLog
    from ..queues.record import Record as Record  # the publish result, for transports
    from ..queues.record_runs import CopyScan
    from .driver import ChannelDriver
    from .holds import ReaderHold
    from .idempotence import IdempotenceTable
    from .latency import LatencySettings
    from .rate_limits import PublishLimit, RateLimit

__all__ = ["ChannelFiles", "Partition", "Topic", "TopicStatistics", "Topics"]


class Topics(Protocol):
    """The topics by name and their creation: what storage restores into and
    persists from (the broker), without storage depending on the broker."""

    @property
    def topics(self) -> Mapping[str, Topic]:
        """Every topic, by name."""
        ...

    def topic(
        self, name: str, *, partitions: int = 1, ext: bool = False, ordered: bool = False
    ) -> Topic:
        """The topic, created if missing."""
        ...


@attrs.frozen
class ChannelFiles:
    """A durable channel's files beside its state, opened by storage when the channel
    is made (None: in memory, ephemeral, or the file system refused)."""

    delays: DelayStore | None = None
    """Its parked long delays (queues/delay_store.py)."""
    journal: DeliveryJournal | None = None
    """Its delivery journal (queues/delivery_journal.py)."""


@attrs.frozen
class TopicStatistics:
    """A snapshot in the shape /stats reports a topic."""

    name: str
    depth: int
    message_count: int
    message_bytes: int
    paused: bool
    channels: tuple[str, ...]


class Partition:
    """One partition of a topic: its log and the channels reading it."""

    def __init__(
        self,
        topic: str,
        index: int,
        *,
        max_msg_timeout: float,
        mem_queue_size: int,
        ephemeral: bool,
        latency: LatencySettings | None = None,
        log: PartitionLog | None = None,
        ttl: TopicTtl | None = None,
        open_files: Callable[[str], ChannelFiles] | None = None,
        channel_limits: dict[str, RateLimit] | None = None,
    ) -> None:
        """``log``: the partition's storage (a durable TopicLog has MemoryLog's methods);
        ``ttl``: the topic's TTL rules, which its channels share; ``open_files(name)``:
        a durable channel's delay store and journal (none: in memory); ``channel_limits``:
        the topic's channel rate limits by channel name, shared with the other
        partitions (a channel's one bucket serves it in every partition)."""
        self.topic: Final = topic
        self.index: Final = index
        self.max_msg_timeout: Final = max_msg_timeout
        self.mem_queue_size: Final = mem_queue_size
        self.ephemeral: Final = ephemeral
        self.latency: Final = latency
        """E2e latency tracking every channel of this partition gets (None: off)."""
        self.log: PartitionLog = log if log is not None else MemoryLog()
        self.channels: dict[str, Channel] = {}
        self.drivers: dict[str, ChannelDriver] = {}
        """The task driving each channel that has one (the broker starts it when the
        channel first gets a consumer), by channel name; it goes with its channel
        (:meth:`delete_channel`): the one registry of drivers (``Broker.driver``)."""
        self.paused = False
        self.pause_from: int | None = None
        """While paused with channels: the first id the topic holds back from them."""
        self.commit_end: int | None = None
        """A replicated partition's commit end: channels read nothing from it on (None:
        not replicated, they read to the log's end). docs/replication.md."""
        self.message_count = 0
        self.message_bytes = 0
        self.dropped = 0
        """Ephemeral messages dropped past mem-queue-size (nsqd reports these as success)."""
        self.holds = ReaderHolds()
        """Readers by offset whose unread records are kept (broker/reader_holds.py)."""
        self._released_before = 0
        """Ids below it are let go by the topic itself (its last channel deleted, an
        empty) while a hold may keep them in the log: no later first channel gets them."""
        self.idempotence: IdempotenceTable | None = None
        """The ``##idempotency_key`` values stored lately (made at the first one)."""
        self.ttl = ttl if ttl is not None else TopicTtl()
        self._open_files = open_files
        self.channel_limits: dict[str, RateLimit] = (
            channel_limits if channel_limits is not None else {}
        )

    def channel(self, name: str, *, oldest: bool = False) -> Channel:
        """The channel, created if missing.

        The first channel starts at the oldest message held, a later one at the tail
        (nsqd's fan-out); while the topic is paused, at where the pause began, because
        nsqd hands what it held back to every channel existing at unpause. An
        ``#ephemeral`` channel reads its own bounded feed instead of the log.
        ``oldest``: start at the oldest message held even if channels exist (channels
        created together as the topic's first ones, as lookupd pre-creation does).
        """
        existing = self.channels.get(name)
        if existing is not None:
            return existing
        if not self.channels or (oldest and not self.paused):
            start = max(self.log.start_id, self._released_before)
            if self.paused:
                self.pause_from = start
        elif self.paused and self.pause_from is not None:
            start = self.pause_from
        else:
            start = self.log.next_id
        feed = EphemeralFeed(self.mem_queue_size, start) if is_ephemeral(name) else None
        open_files = self._open_files
        files = open_files(name) if open_files is not None and feed is None else ChannelFiles()
        channel = Channel(
            name,
            self.log,
            start,
            max_msg_timeout=self.max_msg_timeout,
            topic=self.topic,
            partition=self.index,
            feed=feed,
            latency=self.latency,
            ttl=self.ttl,
            delays=files.delays,
            rate_limit=self.channel_limits.get(name),
            journal=files.journal,
        )
        self.channels[name] = channel
        if self.paused:
            if feed is None:
                channel.intake_limit = self._bounded(start)  # nothing fanned out to it yet
        elif feed is not None:
            self._offer(feed)
        else:
            channel.intake_limit = self.commit_end
        return channel

    def _bounded(self, limit: int | None) -> int | None:
        """A channel's intake limit: the pause's, below the commit end if replicated."""
        commit = self.commit_end
        if commit is None:
            return limit
        return commit if limit is None else min(limit, commit)

    def set_commit_end(self, end: int | None) -> None:
        """Replication committed every record below ``end``: channels may read them
        (None: the partition is not replicated any more)."""
        self.commit_end = end
        limit = self.pause_from if self.paused else None
        for channel in self.channels.values():
            if channel.feed is None:
                channel.intake_limit = self._bounded(limit)

    def delete_channel(self, name: str) -> Channel | None:
        """Remove a channel; its position no longer holds records back.

        The last channel takes along everything that was fanned out to it, as nsqd's
        channel does with its queue: a channel created later does not get it. Only what
        a paused topic held back stays in the topic.
        """
        channel = self.channels.pop(name, None)
        self.drivers.pop(name, None)
        if channel is not None and not self.channels:
            held_from = self.pause_from if self.paused else None
            target = self.log.next_id if held_from is None else held_from
            self._released_before = max(self._released_before, target)
            self.log.discard_before(self.holds.floor(target))
        else:
            self.release()
        return channel

    def set_paused(self, paused: bool) -> None:
        """Topic pause: channels take nothing published from now on; publishing goes on.

        What was published before still goes out: nsqd had fanned it out already.
        """
        if paused == self.paused:
            return
        self.paused = paused
        if paused:
            self.pause_from = self.log.next_id if self.channels else None
            for channel in self.channels.values():
                if channel.feed is None:
                    channel.intake_limit = self._bounded(self.pause_from)
            return
        self.pause_from = None
        for channel in self.channels.values():
            channel.intake_limit = None if channel.feed is not None else self._bounded(None)
            if channel.feed is not None:
                self._offer(channel.feed)

    def _offer(self, feed: EphemeralFeed, records: Sequence[Record] = ()) -> None:
        """Hand an ephemeral channel's feed what it has not been offered yet."""
        if records and records[0].internal_id == feed.next_offer_id:
            self.dropped += feed.offer(records)
            return
        missing = self.log.read(feed.next_offer_id, self.log.next_id - feed.next_offer_id)
        self.dropped += feed.offer(missing)
        feed.next_offer_id = self.log.next_id

    def publish(
        self,
        bodies: Sequence[bytes],
        timestamp: int,
        *,
        deliver_at: int = 0,
        trace_ids: Sequence[int] | None = None,
        ext_version: int = 0,
        exts: Sequence[bytes] | None = None,
    ) -> list[Record]:
        """Append a batch and offer it to the ephemeral channels' feeds.

        An ephemeral topic keeps at most mem-queue-size of what it holds itself (with
        no channel, or paused); the rest is dropped and still reported as published.
        """
        if self.ephemeral and (self.paused or not self.channels):
            space = self.mem_queue_size - self.held()
            if space < len(bodies):
                keep = max(space, 0)
                self.dropped += len(bodies) - keep
                bodies = bodies[:keep]
                trace_ids = trace_ids[:keep] if trace_ids is not None else None
                exts = exts[:keep] if exts is not None else None
                if not bodies:
                    return []
        records = self.log.append(
            bodies,
            timestamp,
            trace_ids=trace_ids,
            ext_version=ext_version,
            exts=exts,
            deliver_at=deliver_at,
        )
        self._appended(len(records), sum(map(len, bodies)), records)
        return records

    def publish_one(self, body: bytes, timestamp: int) -> list[Record]:
        """:meth:`publish` of one body with no trace id, ext or delay: a plain PUB's
        short way to the log (issue 37)."""
        if self.ephemeral:
            return self.publish((body,), timestamp)
        records = [self.log.append_one(body, timestamp)]
        self._appended(1, len(body), records)
        return records

    @property
    def feeds_records(self) -> bool:
        """Whether an ephemeral channel's feed takes the Records of each append."""
        return any(channel.feed is not None for channel in self.channels.values())

    def append_copies(self, data: bytes, scan: CopyScan, records: list[Record] | None) -> None:
        """Append a replica's copies of its leader's records, ``data`` their bytes
        (broker/replica_log.py checked that they continue the log), as
        :meth:`publish` appends a batch; ``records``: their Records, which the
        caller made if :attr:`feeds_records` (or it needed them)."""
        self.log.append_verbatim(data, scan, records)
        self._appended(scan.count, scan.body_bytes, records)

    def _appended(self, count: int, body_bytes: int, records: list[Record] | None) -> None:
        """Count what was appended and offer it to the ephemeral channels' feeds."""
        self.message_count += count
        self.message_bytes += body_bytes
        if not self.paused and records is not None:
            for channel in self.channels.values():
                if channel.feed is not None:
                    self._offer(channel.feed, records)

    def held(self) -> int:
        """Messages the topic itself holds: all, with no channel; since the pause, paused."""
        if not self.channels:
            if self._released_before > self.log.start_id:  # a hold keeps those in the log
                return max(self.log.next_id - self._released_before, 0)
            return len(self.log)
        if self.paused and self.pause_from is not None:
            return self.log.next_id - max(self.pause_from, self.log.start_id)
        return 0

    def release(self) -> int:
        """Let go of records no channel and no reader hold needs; returns how many."""
        if not self.channels:
            if self._released_before <= self.log.start_id:
                return 0  # the topic holds what it has, as before any hold
            return self.log.discard_before(self.holds.floor(self._released_before))
        floor = self.log.next_id
        for channel in self.channels.values():
            floor = min(floor, channel.cursor.confirmed_id)
            if channel.saved_confirmed is not None:
                floor = min(floor, channel.saved_confirmed)
        if self.paused and self.pause_from is not None:
            floor = min(floor, self.pause_from)
        return self.log.discard_before(self.holds.floor(floor))

    def hold(self, hold: ReaderHold) -> ReaderHold | None:
        """Create or move a reader hold (its id at least ``log.earliest_id``); returns
        the one it replaced. Records released but still in the log come back under it
        (only for the hold: the topic and its channels do not get them again)."""
        log = self.log
        if hold.internal_id < log.start_id:
            if not self.channels:
                self._released_before = max(self._released_before, log.start_id)
            log.rewind(hold.internal_id)
        previous = self.holds.put(hold)
        self.release()
        return previous

    def unhold(self, reader: str) -> ReaderHold | None:
        """Remove a reader hold (None if there was none); what it kept may go now."""
        removed = self.holds.pop(reader)
        if removed is not None:
            self.release()
        return removed

    def empty(self) -> int:
        """Topic empty: drop the messages the topic itself holds; returns how many.

        In nsqd a topic holds messages only until it fans them out, i.e. while it has
        no channel (or is paused); what channels hold is theirs. Here that is the
        whole log when there is no channel. With channels nothing is dropped: the
        paused-topic case (messages published since the pause) is not modelled yet.
        The ``##idempotency_key`` values remembered are forgotten either way.
        """
        if self.idempotence is not None and self.idempotence.journal is not None:
            self.idempotence.journal.forget()
        self.idempotence = None  # an emptied topic takes every key again
        if self.channels:
            return 0
        dropped = self.held()
        self._released_before = self.log.next_id
        self.log.discard_before(self.holds.floor(self.log.next_id))
        return dropped


class Topic:
    """A named topic with one or more partitions (plain topics have one)."""

    def __init__(
        self,
        name: str,
        *,
        partitions: int = 1,
        max_msg_timeout: float,
        mem_queue_size: int,
        latency: LatencySettings | None = None,
        open_log: Callable[[int], PartitionLog] | None = None,
        ext: bool = False,
        ordered: bool = False,
        open_files: Callable[[int, str], ChannelFiles] | None = None,
    ) -> None:
        """``open_log(partition)``: each partition's storage (default: in memory);
        ``open_files(partition, channel)``: a durable channel's own files."""
        self.name: Final = name
        self.ephemeral: Final = is_ephemeral(name)
        self.ext = ext
        """Youzan ext topic: messages may carry a JSON header (PUB_EXT), consumers
        must IDENTIFY with ``extend_support`` and may ask for a dispatch tag. A topic
        can be upgraded to ext, never back."""
        self.ttl: Final = TopicTtl()
        """TTL rules (broker/ttl.py), shared with every partition's channels."""
        self.channel_limits: Final[dict[str, RateLimit]] = {}
        """Channel rate limits by channel name (broker/rate_limits.py), shared with
        every partition, whose channels of that name share the one bucket."""
        self.publish_limit: PublishLimit | None = None
        """The topic's per-producer publish limit (None: none)."""
        self.ordered: Final = ordered
        """Created for ordered consumption: consumers must SUB_ORDERED and publishers
        name a partition (spec §8.3 step 6, §8.6 rule 5)."""
        self._max_msg_timeout: Final = max_msg_timeout
        self._mem_queue_size: Final = mem_queue_size
        self._latency: Final = latency
        self._open_log: Final = open_log
        self._open_files: Final = open_files
        self.partitions: list[Partition] = []
        self.add_partitions(partitions)

    def add_partitions(self, count: int) -> list[Partition]:
        """Grow to ``count`` partitions (never shrinks); returns the new ones.

        A new partition starts with an empty log and no channel, so everything
        published to it waits for its first channel.
        """
        added = [
            Partition(
                self.name,
                index,
                max_msg_timeout=self._max_msg_timeout,
                mem_queue_size=self._mem_queue_size,
                ephemeral=self.ephemeral,
                latency=self._latency,
                log=self._open_log(index) if self._open_log is not None else None,
                ttl=self.ttl,
                open_files=self._files_opener(index),
                channel_limits=self.channel_limits,
            )
            for index in range(len(self.partitions), count)
        ]
        self.partitions.extend(added)
        return added

    def _files_opener(self, index: int) -> Callable[[str], ChannelFiles] | None:
        open_files = self._open_files
        if open_files is None:
            return None
        return lambda channel: open_files(index, channel)

    @property
    def paused(self) -> bool:
        """Whether the topic is paused (all its partitions are)."""
        return all(p.paused for p in self.partitions)

    def set_paused(self, paused: bool) -> None:
        """Pause or unpause every partition."""
        for partition in self.partitions:
            partition.set_paused(paused)

    def statistics(self) -> TopicStatistics:
        """A frozen snapshot."""
        names = sorted({name for p in self.partitions for name in p.channels})
        return TopicStatistics(
            name=self.name,
            depth=sum(p.held() for p in self.partitions),
            message_count=sum(p.message_count for p in self.partitions),
            message_bytes=sum(p.message_bytes for p in self.partitions),
            paused=self.paused,
            channels=tuple(names),
        )
