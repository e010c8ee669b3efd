"""Moving dead letters to their topic: each in exactly one place at every instant a
crash can hit (issue 30; docs/storage.md "Dead letters and crashes").

A message that left its channel (``channel_exits.py``) is still unfinished there
until it is in the dead-letter topic; the move is ordered so that a crash between
any two steps leaves it in one place, or in a state the next start resolves:

1. the dead-letter topic is in metadata.json, with its ext flag, before anything is
   appended to it (written now, in a worker thread, if the persister has not yet);
2. the move is written to the channel's delivery journal: which messages, and at
   which ids of the topic's log they are about to be appended;
3. the append (``os.write``, as any publish);
4. the channel lets them go: they are finished in its cursor, which the persister
   writes only after an fsync of the topic's log (``Storage.persist``).

At start (:func:`.dead_letter_recovery.resolve_moves`), a journaled move whose
message the channel still holds is looked up at its id in the dead-letter topic's
log: there (the crash came between 3 and the state write), the channel counts it
finished; not there (between 2 and 3), it leaves again, as does a message a restart
brings back at its bound (delivered ``max_attempts`` times, then put back by the
restart). Those leave before the broker serves (:meth:`DeadLetterMover.settle`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import trio

from .. import crash_points
from ..protocol.message import EXT_VERSION_JSON
from ..queues.delivery_journal import Move
from .dead_letters import dead_letter_header
from .health import StorageFault
from .topic import Topics

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..queues.record import Record
    from .channel import Channel
    from .storage import Storage
    from .topic import Topic

__all__ = ["DeadLetterMover", "MoverHost"]

log = logging.getLogger("trionsq")


class MoverHost(Topics, Protocol):
    """What the mover needs of the broker: its topics, and publishing to one (the
    broker, without the mover depending on it)."""

    def wall_clock(self) -> int:
        """Unix nanoseconds now: the broker's clock."""
        ...

    def publish(
        self,
        topic_name: str,
        bodies: Sequence[bytes],
        timestamp: int,
        *,
        ext_version: int = 0,
        exts: Sequence[bytes] | None = None,
    ) -> list[Record]:
        """Append a batch to the topic's first partition."""
        ...


class DeadLetterMover:
    """The broker's one task that moves dead letters (an Event wakes it)."""

    def __init__(self, broker: MoverHost, storage: Storage | None) -> None:
        self._broker = broker
        self._storage = storage if storage is not None and storage.enabled else None
        self._waiting: dict[tuple[str, int, str], Channel] = {}
        self._wake = trio.Event()

    def notify(self, channel: Channel) -> None:
        """``channel`` holds dead letters (after a routing pass). Not a checkpoint."""
        self._waiting[channel.topic, channel.partition, channel.name] = channel
        self._wake.set()
        if crash_points.ARMED:
            crash_points.reached("dead_letter.noticed")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Move what channels hold, as they are notified; until cancelled."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            waiting, self._waiting = self._waiting, {}
            for channel in waiting.values():
                await self._move(channel)

    async def _move(self, channel: Channel) -> None:
        topic = self._dead_topic(channel)
        if topic is None:
            return
        storage = self._storage
        if storage is not None and not storage.saved(topic.name, ext=topic.ext):
            try:
                await storage.save_metadata_now(self._broker)
            except OSError as error:
                self._refused(channel, error)
                return
            if crash_points.ARMED:
                crash_points.reached("dead_letter.topic_saved")
            current = self._broker.topics.get(topic.name)
            if current is not topic or channel.dead_topic() != topic.name:
                self.notify(channel)  # deleted or renamed meanwhile: once more, afresh
                return
        if self._alive(channel):
            self.move_now(channel, topic)

    def settle(self) -> None:
        """At start, before the broker serves: move what recovery left on its way
        (blocking: the metadata is written on this thread)."""
        for name, channel in self._holding():
            topic = self._dead_topic(channel)
            if topic is None:
                continue
            storage = self._storage
            if storage is not None and not storage.saved(name, ext=topic.ext):
                try:
                    storage.save_metadata_blocking(self._broker)
                except OSError as error:
                    self._refused(channel, error)
                    continue
            self.move_now(channel, topic)

    def _holding(self) -> list[tuple[str, Channel]]:
        return [
            (channel.dead_topic(), channel)
            for topic in self._broker.topics.values()
            for partition in topic.partitions
            for channel in partition.channels.values()
            if channel.dead_letters
        ]

    def _dead_topic(self, channel: Channel) -> Topic | None:
        """The channel's dead-letter topic, created (as an ext topic) if missing;
        None when there is nothing to move or the topic cannot be made."""
        if not channel.dead_letters or not self._alive(channel):
            return None
        name = channel.dead_topic()
        try:
            return self._broker.topic(name, ext=name not in self._broker.topics)
        except StorageFault as fault:
            self._refused(channel, fault)
            return None

    def _alive(self, channel: Channel) -> bool:
        """Whether ``channel`` still exists (not deleted while we waited)."""
        topic = self._broker.topics.get(channel.topic)
        return (
            topic is not None
            and channel.partition < len(topic.partitions)
            and topic.partitions[channel.partition].channels.get(channel.name) is channel
        )

    def move_now(self, channel: Channel, topic: Topic) -> None:
        """Steps 2 to 4 of the module docstring, with no await between them."""
        letters, channel.dead_letters = channel.dead_letters, []
        if not letters:
            return
        partition = topic.partitions[0]
        journal = channel.journal
        if journal is not None:
            messages = tuple((letter.record.internal_id, letter.deliveries) for letter in letters)
            journal.moving(Move(topic.name, 0, partition.log.next_id, messages))
            if crash_points.ARMED:
                crash_points.reached("dead_letter.journaled")
        bodies = [letter.record.body for letter in letters]
        broker = self._broker
        try:
            if topic.ext:
                origin = (channel.topic, channel.name, channel.partition)
                exts = [dead_letter_header(letter, *origin) for letter in letters]
                broker.publish(
                    topic.name, bodies, broker.wall_clock(), ext_version=EXT_VERSION_JSON, exts=exts
                )
            else:  # a plain topic of that name existed: the bodies alone
                broker.publish(topic.name, bodies, broker.wall_clock())
        except StorageFault as fault:
            channel.dead_letters = letters + channel.dead_letters
            self._refused(channel, fault)
            return
        if crash_points.ARMED:
            crash_points.reached("dead_letter.appended")
        channel.dead_letters_moved(letters)
        if self._storage is not None:
            self._storage.moved_to(partition.log)
        if crash_points.ARMED:
            crash_points.reached("dead_letter.released")

    def _refused(self, channel: Channel, error: Exception) -> None:
        """The dead-letter topic cannot take them now: back in the channel."""
        letters, channel.dead_letters = channel.dead_letters, []
        log.error(
            "channel %s/%s: %d dead letter(s) kept: %s",
            channel.topic,
            channel.name,
            len(letters),
            error,
        )
        channel.take_back_dead_letters(letters)
