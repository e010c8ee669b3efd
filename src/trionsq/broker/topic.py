"""Topics and their partitions: one log per partition, channels as cursors over it.

Design §2 with nsqd's semantics (spec semantics.md §1-§4, §10): a message is stored
once and every channel reads it; a partition with no channel keeps its messages and
its first channel starts at the oldest one, while later channels start at the tail;
records every channel has confirmed are released. Pure state: the Trio layer wakes
the channels' routers after a publish.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs

from ..protocol.names import is_ephemeral
from ..queues.memory_log import MemoryLog
from .channel import Channel

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..queues.record import Record

__all__ = ["Partition", "Topic", "TopicStatistics"]


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
    ) -> None:
        self.topic: Final = topic
        self.index: Final = index
        self.max_msg_timeout: Final = max_msg_timeout
        self.mem_queue_size: Final = mem_queue_size
        self.ephemeral: Final = ephemeral
        self.log = MemoryLog()
        self.channels: dict[str, Channel] = {}
        self.paused = False
        self.message_count = 0
        self.message_bytes = 0
        self.dropped = 0
        """Ephemeral messages dropped past mem-queue-size (nsqd reports these as success)."""

    def channel(self, name: str) -> Channel:
        """The channel, created if missing: the first starts at the oldest message held."""
        existing = self.channels.get(name)
        if existing is not None:
            return existing
        start = self.log.start_id if not self.channels else self.log.next_id
        channel = Channel(
            name,
            self.log,
            start,
            max_msg_timeout=self.max_msg_timeout,
            topic=self.topic,
            partition=self.index,
        )
        channel.intake_paused = self.paused
        self.channels[name] = channel
        return channel

    def delete_channel(self, name: str) -> Channel | None:
        """Remove a channel; its position no longer holds records back."""
        channel = self.channels.pop(name, None)
        self.release()
        return channel

    def set_paused(self, paused: bool) -> None:
        """Topic pause: channels take no new messages; publishing goes on."""
        self.paused = paused
        for channel in self.channels.values():
            channel.intake_paused = paused

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
        """Append a batch; an ephemeral partition keeps at most mem-queue-size unread."""
        if self.ephemeral:
            space = self.mem_queue_size - self.backlog()
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
        self.message_count += len(records)
        self.message_bytes += sum(len(body) for body in bodies)
        return records

    def backlog(self) -> int:
        """Messages not yet read by the slowest channel (all held, with no channel)."""
        if not self.channels:
            return len(self.log)
        return max(channel.cursor.backlog for channel in self.channels.values())

    def release(self) -> int:
        """Let go of records every channel has confirmed; returns how many."""
        if not self.channels:
            return 0
        floor = min(channel.cursor.confirmed_id for channel in self.channels.values())
        return self.log.discard_before(floor)

    def empty(self) -> int:
        """Topic empty: drop the messages the topic itself holds; returns how many.

        In nsqd a topic holds messages only until it fans them out, i.e. while it has
        no channel (or is paused); what channels hold is theirs. Here that is the
        whole log when there is no channel. With channels nothing is dropped: the
        paused-topic case (messages published since the pause) is not modelled yet.
        """
        if self.channels:
            return 0
        return self.log.discard_before(self.log.next_id)


class Topic:
    """A named topic with one or more partitions (plain topics have one)."""

    def __init__(
        self,
        name: str,
        *,
        partitions: int = 1,
        max_msg_timeout: float,
        mem_queue_size: int,
    ) -> None:
        self.name: Final = name
        self.ephemeral: Final = is_ephemeral(name)
        self.partitions = [
            Partition(
                name,
                index,
                max_msg_timeout=max_msg_timeout,
                mem_queue_size=mem_queue_size,
                ephemeral=self.ephemeral,
            )
            for index in range(partitions)
        ]

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
            depth=sum(len(p.log) if not p.channels else 0 for p in self.partitions),
            message_count=sum(p.message_count for p in self.partitions),
            message_bytes=sum(p.message_bytes for p in self.partitions),
            paused=self.paused,
            channels=tuple(names),
        )
