"""The broker: topics by name, and one running channel driver per channel.

Topics and channels outlive the connections that create them, so their tasks start
in the broker nursery (design §3); deleting a channel cancels its runner's scope.
Connections call in here for PUB/SUB and for leaving, and register themselves in
:attr:`Broker.clients` for ``/stats``. Topic and channel creation and deletion are
announced to :meth:`Broker.add_listener` listeners (the lookupd peers), synchronously.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final, Protocol

import trio

from ..protocol.message import EXT_VERSION_JSON, EXT_VERSION_NONE
from ..protocol.names import is_ephemeral
from . import idempotence, keyed_publish, trace_log
from .dead_letter_moves import DeadLetterMover
from .events import EventHub
from .group_coordinator import GroupCoordinator
from .health import APPEND, CREATE, READ, StorageFault
from .latency import LatencySettings
from .offsets import OffsetError, resolve_offset
from .rate_limits import PublishLimit, PublishMode, RateLimit, Rates
from .subscription import Subscription
from .topic import Topic
from .topology import (
    TopologyChange,
    TopologyListeners,
    partition_registrations,
    registrations,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ..config import NsqdConfig
    from ..protocol.commands import OffsetSpec
    from ..queues.record import Record
    from .channel import Channel
    from .consumers import Consumer
    from .driver import ChannelDriver, DriverFactory, Outbox
    from .replication import ReplicationHook
    from .statistics import ClientStatistics
    from .storage import Storage
    from .topic import Partition

__all__ = ["Broker", "ConnectedClient", "TopologyChange"]

log = logging.getLogger("trionsq")

RELEASE_EVERY = 4096
"""Records appended between attempts to release what every channel has confirmed."""


class ConnectedClient(Protocol):
    """A connection as the broker knows it: enough for /stats."""

    def statistics(self) -> ClientStatistics:
        """A snapshot of the connection's counters and settings."""
        ...


class Broker:
    """Topics, channels and their drivers (each kept by its partition), and the
    connected clients."""

    def __init__(
        self,
        config: NsqdConfig,
        nursery: trio.Nursery,
        storage: Storage | None = None,
        *,
        drive: DriverFactory,
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        """``drive``: builds the task that drives a channel (``ChannelRunner``), which
        the broker starts in ``nursery`` when the channel first gets a consumer;
        ``wall_clock``: Unix nanoseconds now (publish times, DPUB and long-delay due
        times), replaceable so a test's virtual clock moves it too."""
        self.config = config
        self.wall_clock: Final = wall_clock
        self._nursery = nursery
        self._drive = drive
        self.storage = storage
        """Where durable partitions keep their logs and channels their positions."""
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, ConnectedClient] = {}
        """TCP connections by client id, in connection order (/stats producers, clients)."""
        percentiles = tuple(config.e2e_processing_latency_percentiles)
        self.latency = (
            LatencySettings(percentiles, config.e2e_processing_latency_window_time)
            if percentiles
            else None
        )
        """E2e latency tracking for every channel; None unless percentiles are configured."""
        self._since_release: dict[str, int] = {}
        self.trace_log: bool = config.trace_log
        """Log traced messages at publish and delivery (Youzan's trace log)."""
        self._listeners = TopologyListeners()
        self.events = EventHub()
        """The admin stream's watchers (docs/admin.md): told every change here."""
        self.group_coordinator = GroupCoordinator(self, nursery, self._wake)
        self.groups: Final = self.group_coordinator.groups
        """Consumer groups by (topic, channel), while they have members."""
        self.replication: ReplicationHook | None = None
        """The cluster's hook for replicated topics (``--etcd-endpoints``; None: a
        single broker, and publishes are answered once in its log as always)."""
        self.dead_letter_mover = DeadLetterMover(self, storage)
        """Moves what leaves a channel to its dead-letter topic (its task runs in the
        broker nursery, started by nursery_tree.py)."""

    # ------------------------------------------------------------- topology listeners

    def add_listener(self, listener: Callable[[TopologyChange], None]) -> None:
        """Hear of every topic/channel creation and deletion from now on.

        Called synchronously, never on the message path: a listener queues and returns.
        """
        self._listeners.add(listener)

    def remove_listener(self, listener: Callable[[TopologyChange], None]) -> None:
        """Stop hearing (a listener that is not there is ignored)."""
        self._listeners.remove(listener)

    def _announce(
        self,
        topic: str,
        channel: str | None,
        exists: bool,
        partitions: Iterable[int],
        *,
        whole: bool = True,
    ) -> None:
        """Tell the listeners (a :class:`TopologyChange`); a ``whole`` change (the name
        came or went) is also persisted and streamed to the admin watchers."""
        if whole:
            self._state_changed()
            if self.events.watchers:
                state = "created" if exists else "deleted"
                if channel is None:
                    self.events.emit("topic", f"topic_{state}", topic)
                else:
                    self.events.emit("channel", f"channel_{state}", topic, channel=channel)
        if self._listeners:
            change = TopologyChange(topic, channel, exists, tuple(partitions), whole)
            self._listeners.tell(change)

    def registrations(self) -> list[tuple[str, str | None]]:
        """What a lookupd is told on (re)connect (see :func:`.topology.registrations`)."""
        return registrations(self.topics)

    def partition_registrations(self) -> list[tuple[str, int, str | None]]:
        """The same in Youzan's form (see :func:`.topology.partition_registrations`)."""
        return partition_registrations(self.topics)

    def register_client(
        self, client_id: int, client: ConnectedClient, remote_address: str = ""
    ) -> None:
        """A TCP connection began (it is listed by /stats until it ends)."""
        self.clients[client_id] = client
        self.events.emit(
            "client", "client_connected", client_id=str(client_id), remote_address=remote_address
        )

    def unregister_client(self, client_id: int) -> None:
        """A TCP connection ended."""
        client = self.clients.pop(client_id, None)
        if client is not None and self.events.watchers:
            address = client.statistics().remote_address
            self.events.emit(
                "client", "client_disconnected", client_id=str(client_id), remote_address=address
            )

    def topic(
        self, name: str, *, partitions: int = 1, ext: bool = False, ordered: bool = False
    ) -> Topic:
        """The topic, created on first use (PUB/SUB auto-create plain topics).

        ``ext``/``ordered`` apply when the topic is created; ``ext`` also upgrades an
        existing plain topic (one way: an ext topic stays ext), and ``partitions``
        adds partitions to an existing topic that has fewer (never removes any).
        """
        topic = self.topics.get(name)
        if topic is not None:
            if ext and not topic.ext:
                topic.ext = True
                for partition in topic.partitions:
                    for channel in partition.channels.values():
                        for consumer in channel.consumers.values():
                            if consumer.outbox is not None:
                                consumer.outbox.topic_now_ext()
            if partitions > len(topic.partitions):
                try:
                    added = topic.add_partitions(partitions)
                except OSError as error:
                    raise self.storage_fault(CREATE, error) from error
                if topic.ext:
                    self._restore_keys(added)
                for partition in added:
                    self.events.emit(
                        "partition", "partition_created", name, partition=partition.index
                    )
                self._announce(name, None, True, _indexes(added), whole=False)
            return topic
        storage = self.storage
        try:
            topic = Topic(
                name,
                partitions=partitions,
                max_msg_timeout=self.config.max_msg_timeout,
                mem_queue_size=self.config.mem_queue_size,
                latency=self.latency,
                open_log=(lambda index: storage.open_log(name, index)) if storage else None,
                ext=ext,
                ordered=ordered,
                open_files=(
                    (lambda index, channel: storage.open_files(name, index, channel))
                    if storage
                    else None
                ),
            )
        except OSError as error:
            raise self.storage_fault(CREATE, error) from error
        if storage is not None and not storage.health.healthy:
            storage.health.succeeded(CREATE)
        if ext:
            self._restore_keys(topic.partitions)
        topic.ttl.dead_letter = self.config.ttl_dead_letter
        self.topics[name] = topic
        self._announce(name, None, True, _indexes(topic.partitions))
        for partition in topic.partitions:
            self.events.emit("partition", "partition_created", name, partition=partition.index)
        return topic

    def _restore_keys(self, partitions: Sequence[Partition]) -> None:
        """An ext topic's logs were opened: remember the ``##idempotency_key`` values
        of the records they hold in memory (a restart keeps those keys)."""
        for partition in partitions:
            partition.idempotence = idempotence.restore(
                partition.log, self.config.idempotency_window, partition.idempotence
            )

    def storage_fault(self, area: str, error: OSError) -> StorageFault:
        """A refused file operation, recorded in the broker's health."""
        if self.storage is None:  # memory logs do not do file I/O: a real bug
            raise error
        return self.storage.health.failed(area, error)

    def _cold_read_outcome(self, error: OSError | None) -> None:
        """A channel's disk read failed (it retries), or works again."""
        if self.storage is None:
            return
        if error is None:
            self.storage.health.succeeded(READ)
        else:
            self.storage.health.failed(READ, error)

    @property
    def health(self) -> str:
        """nsqd's health text: ``OK``, or ``NOK - <error>`` while storing fails or, in a
        replicated cluster, while etcd cannot be reached."""
        text = "OK" if self.storage is None else self.storage.health.text
        if text == "OK" and self.replication is not None:
            degraded = self.replication.degraded()
            if degraded is not None:
                return f"NOK - {degraded}"
        return text

    # a twin on purpose: keyed_publish.KeyedHost.publish declares this signature again,
    # the protocol that lets keyed_publish call it without importing this module
    def publish(
        self,
        topic_name: str,
        bodies: Sequence[bytes],
        timestamp: int,
        *,
        deliver_at: int = 0,
        partition_index: int = 0,
        trace_ids: Sequence[int] | None = None,
        ext_version: int = 0,
        exts: Sequence[bytes] | None = None,
        source: str = "",
    ) -> list[Record]:
        """Append a batch to one partition and wake every channel's router once.

        ``ext_version``/``exts``: Youzan ext headers (4 = the JSON bytes as sent);
        ``source``: the publishing client's address, for the trace log.

        Raises:
            StorageFault: the log refused the write (nothing of the batch is stored).
            ReplicaRefusal: a replicated partition this broker may not write now.
        """
        partition = self.topic(topic_name).partitions[partition_index]
        replication = self.replication
        if replication is not None:
            replication.check_write(topic_name, partition_index)
        try:
            records = partition.publish(
                bodies,
                timestamp,
                deliver_at=deliver_at,
                trace_ids=trace_ids,
                ext_version=ext_version,
                exts=exts,
            )
        except OSError as error:
            raise self.storage_fault(APPEND, error) from error
        if self.storage is not None and records:
            self.storage.appended(partition.log, len(records))
        if replication is not None and records:
            replication.appended(topic_name, partition_index)
        if exts and ext_version and partition.ttl.note_published(exts):
            self._state_changed()  # the metadata remembers the topic's ##ttl headers
            self._nursery.start_soon(self.run_ttl_timers, topic_name)
        if self.trace_log and trace_ids is not None:
            trace_log.published(topic_name, partition_index, records, source)
        if deliver_at and records and not partition.paused and partition.commit_end is None:
            # a replicated partition's channels take it when committed (read_into defers
            # it then): deferred now, a short DPUB could go out before its commit
            self._defer_at_publish(partition, records, deliver_at)
        self._reach_channels(partition, topic_name, partition_index, records)
        return records

    def publish_single(
        self,
        topic_name: str,
        partition_index: int,
        body: bytes,
        trace_id: int | None,
        header: bytes | None,
        *,
        source: str,
    ) -> list[Record]:
        """:meth:`publish` of one body now (PUB_TRACE, PUB_EXT, HTTP ``/pub_ext``):
        with its trace id (None: 0) and its JSON ext header, if any. Raises as
        :meth:`publish`."""
        return self.publish(
            topic_name,
            [body],
            self.wall_clock(),
            partition_index=partition_index,
            trace_ids=[trace_id or 0],
            ext_version=EXT_VERSION_NONE if header is None else EXT_VERSION_JSON,
            exts=None if header is None else [header],
            source=source,
        )

    def publish_plain(self, topic: Topic, body: bytes, timestamp: int, index: int = 0) -> None:
        """:meth:`publish` of one body to partition ``index`` of an existing topic
        (the callers check it: a plain PUB, an HTTP /pub without a delay), without
        the steps a trace id, an ext header or a delay need (issue 37). With
        replication it keeps every rule of :meth:`publish` (checked before the
        append, told after it). Raises StorageFault and ReplicaRefusal as
        :meth:`publish`."""
        partition = topic.partitions[index]
        replication = self.replication
        if replication is not None:
            replication.check_write(topic.name, index)
        try:
            records = partition.publish_one(body, timestamp)
        except OSError as error:
            raise self.storage_fault(APPEND, error) from error
        if self.storage is not None and records:
            self.storage.appended(partition.log, 1)
        if replication is not None and records:
            replication.appended(topic.name, index)
        self._reach_channels(partition, topic.name, index, records)

    def _reach_channels(
        self, partition: Partition, topic_name: str, partition_index: int, records: list[Record]
    ) -> None:
        """After an append: wake every channel's router once, release what no
        channel needs now and then, give the admin stream its samples."""
        ttl = partition.ttl.active and records
        drivers = partition.drivers
        for name, channel in partition.channels.items():
            if ttl:  # they leave when they expire, read or not (channel_ttl.py)
                channel.ttl_arrived(records, in_order=True)
                runner = drivers.get(name)
                if runner is not None:
                    runner.deadline_changed()
            if channel.consumers:  # a channel nobody reads is woken when someone subscribes
                drivers[name].wake()
        count = self._since_release.get(topic_name, 0) + len(records)
        if count >= RELEASE_EVERY:
            partition.release()
            count = 0
        self._since_release[topic_name] = count
        if self.events.samplers and topic_name in self.events.samplers:
            self.events.sample(topic_name, partition_index, records)

    publish_once = keyed_publish.publish_once
    """Publish ext messages, each whose ``##idempotency_key`` the partition holds
    skipped: :func:`~.keyed_publish.publish_once` with this broker as its host (it
    says what it returns and raises)."""

    def _defer_at_publish(
        self, partition: Partition, records: Sequence[Record], deliver_at: int
    ) -> None:
        """DPUB: into every durable channel's deferred queue now, as nsqd fans it out."""
        now, wall = trio.current_time(), self.wall_clock()
        due = now + max(0, deliver_at - wall) / 1e9
        for name, channel in partition.channels.items():
            if channel.feed is not None:
                continue  # an ephemeral feed holds it and defers it when read
            for record in records:
                channel.defer_ahead(record, due, now=now, wall_ns=wall)
            runner = partition.drivers.get(name)
            if runner is not None:
                runner.deadline_changed()

    def default_partition(self, topic: str, lowest: int) -> int:
        """Where a publish or SUB naming no partition goes: ``lowest``, or for a
        replicated topic the lowest partition this broker leads (plain NSQ clients
        reach it through any broker lookupd lists; docs/replication.md)."""
        replication = self.replication
        led = replication.default_partition(topic) if replication is not None else None
        return lowest if led is None else led

    def driver(self, topic_name: str, partition: int, channel_name: str) -> ChannelDriver | None:
        """The task driving that channel, if one runs (kept in ``Partition.drivers``)."""
        topic = self.topics.get(topic_name)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return topic.partitions[partition].drivers.get(channel_name)

    async def subscribe(
        self,
        topic_name: str,
        channel_name: str,
        consumer: Consumer,
        outbox: Outbox,
        *,
        partition: int = 0,
        ordered: bool = False,
    ) -> Subscription:
        """Add a consumer to one partition's channel, creating topic, channel and runner
        as needed (a partition beyond the first must exist); the consumer's handle.

        ``ordered`` (SUB_ORDERED) makes the channel ordered from now on: one message in
        flight at a time.

        Raises:
            ReplicaRefusal: a replicated partition this broker does not lead.
        """
        if self.replication is not None:
            self.replication.check_read(topic_name, partition)
        runner = await self._runner(topic_name, partition, channel_name)
        if ordered:
            runner.channel.ordered = True
        consumer.outbox = outbox
        runner.channel.subscribe(consumer)
        runner.wake()
        if consumer.member is not None:
            self.group_coordinator.joined(runner.channel, consumer.member)
        return Subscription(runner, consumer, self.unsubscribe, self.wall_clock)

    async def _runner(self, topic_name: str, partition: int, channel_name: str) -> ChannelDriver:
        """The channel's runner, creating channel and runner (in the broker nursery)."""
        runner = self.driver(topic_name, partition, channel_name)
        if runner is None:
            partitions = self.topic(topic_name).partitions
            new_here = channel_name not in partitions[partition].channels
            is_new = new_here and not any(channel_name in p.channels for p in partitions)
            channel = partitions[partition].channel(channel_name)
            if new_here:
                self._announce(topic_name, channel_name, True, (partition,), whole=is_new)
            persisted = self.storage is not None and self.storage.enabled
            runner = self._drive(
                channel,
                read_outcome=self._cold_read_outcome,
                changed=self._state_changed if persisted else None,  # nothing to tell in memory
                dead_letters=self.dead_letter_mover.notify,
                wall_clock=self.wall_clock,
            )
            partitions[partition].drivers[channel_name] = runner
            await self._nursery.start(runner.run)
        return runner

    def unsubscribe(self, runner: ChannelDriver, client_id: int) -> None:
        """A consumer left: requeue its messages; drop an ephemeral channel it leaves empty."""
        channel = runner.channel
        consumer = channel.consumers.get(client_id)
        channel.unsubscribe(client_id)
        if consumer is not None and consumer.member is not None:
            self.group_coordinator.left(channel, consumer.member)
        key = (channel.topic, channel.partition, channel.name)
        if self.driver(*key) is not runner:  # the channel was deleted meanwhile
            return
        runner.wake()
        if is_ephemeral(channel.name) and not channel.consumers:
            self.delete_channel(*key)

    async def drain(self, grace: float) -> int:
        """Stop delivering, then give consumers up to ``grace`` seconds to finish what
        they hold; the number of messages still in flight after it (they are
        delivered again after a restart). Publishing goes on meanwhile.

        nsqd closes every connection at once, so a consumer's in-flight messages come
        back as duplicates after the restart; a rolling restart with this grace
        loses none of them.
        """
        runners = [
            d for t in self.topics.values() for p in t.partitions for d in p.drivers.values()
        ]
        for runner in runners:
            runner.channel.draining = True
        holding = sum(len(runner.channel.in_flight) for runner in runners)
        if holding and grace > 0:
            log.info("stopping: waiting up to %gs for %d messages in flight", grace, holding)
            with trio.move_on_after(grace):
                for runner in runners:
                    await runner.drained()
        left = sum(len(runner.channel.in_flight) for runner in runners)
        if holding:
            log.info("stopping: %d of %d messages in flight finished", holding - left, holding)
        return left

    def delete_channel(self, topic_name: str, partition: int, channel_name: str) -> Channel | None:
        """Remove a channel, stop its tasks and close its consumers' connections.

        An ephemeral topic left without channels goes too.
        """
        topic = self.topics.get(topic_name)
        runner = None
        if topic is not None and 0 <= partition < len(topic.partitions):
            runner = topic.partitions[partition].drivers.pop(channel_name, None)
        if runner is not None:
            runner.cancel_scope.cancel()
            for consumer in list(runner.channel.consumers.values()):
                if consumer.outbox is not None:
                    consumer.outbox.close()
        if topic is None:
            return None
        channel = topic.partitions[partition].delete_channel(channel_name)
        if channel is not None:
            if self.storage is not None:
                self.storage.delete_channel_files(topic_name, partition, channel_name)
            gone = not any(channel_name in p.channels for p in topic.partitions)
            if gone:
                topic.channel_limits.pop(channel_name, None)
            self._announce(topic_name, channel_name, False, (partition,), whole=gone)
        if topic.ephemeral and not any(p.channels for p in topic.partitions):
            del self.topics[topic_name]
            self._announce(topic_name, None, False, _indexes(topic.partitions))
        return channel

    # ------------------------------------------------------------- admin (HTTP, embedding)

    def find_channel(self, topic_name: str, channel_name: str) -> list[Channel]:
        """The channel in every partition of an existing topic (empty list: none)."""
        topic = self.topics.get(topic_name)
        if topic is None:
            return []
        return [p.channels[channel_name] for p in topic.partitions if channel_name in p.channels]

    async def create_first_channels(self, topic_name: str, channel_names: Sequence[str]) -> None:
        """Create channels together as a topic's first ones: in each partition that had
        no channel, every one of them starts at the oldest message held (nsqd gives
        pre-created channels everything the new topic held). Their state is made
        before any await, so nothing published meanwhile tells them apart."""
        partitions = self.topic(topic_name).partitions
        lacking = {n: [p.index for p in partitions if n not in p.channels] for n in channel_names}
        for partition in partitions:
            first = not partition.channels
            for name in channel_names:
                partition.channel(name, oldest=first)
        for name, indexes in lacking.items():
            if indexes:
                whole = len(indexes) == len(partitions)
                self._announce(topic_name, name, True, indexes, whole=whole)
        for name in channel_names:
            await self.create_channel(topic_name, name)

    async def create_channel(self, topic_name: str, channel_name: str) -> None:
        """Create a channel (and its topic) with a running router, without consumers."""
        for partition in self.topic(topic_name).partitions:
            await self._runner(topic_name, partition.index, channel_name)

    def delete_topic(self, topic_name: str) -> bool:
        """Delete a topic, its channels and its messages; False if there was none."""
        topic = self.topics.get(topic_name)
        if topic is None:
            return False
        for partition in topic.partitions:
            for channel_name in list(partition.channels):
                self.delete_channel(topic_name, partition.index, channel_name)
        if self.topics.pop(topic_name, None) is not None:  # an ephemeral one is gone already
            self._announce(topic_name, None, False, _indexes(topic.partitions))
        if self.storage is not None:
            self.storage.delete_topic_files(topic_name, len(topic.partitions))
        self._since_release.pop(topic_name, None)
        return True

    def empty_topic(self, topic_name: str) -> bool:
        """Drop what the topic itself holds (not its channels'); False if no such topic."""
        topic = self.topics.get(topic_name)
        if topic is None:
            return False
        for partition in topic.partitions:
            partition.empty()
        self.events.emit("topic", "topic_emptied", topic_name)
        return True

    def set_topic_paused(self, topic_name: str, paused: bool) -> bool:
        """Pause or unpause a topic; False if no such topic."""
        topic = self.topics.get(topic_name)
        if topic is None:
            return False
        topic.set_paused(paused)
        self._state_changed()
        self.events.emit("topic", "topic_paused" if paused else "topic_unpaused", topic_name)
        if not paused:
            self._wake_topic(topic_name)
        return True

    def _state_changed(self) -> None:
        """Something the persister writes may have changed."""
        if self.storage is not None and self.storage.enabled:
            self.storage.changed()

    def empty_channel(self, topic_name: str, channel_name: str) -> bool:
        """Drop a channel's queued, in-flight and deferred messages; False if none."""
        channels = self.find_channel(topic_name, channel_name)
        for channel in channels:
            channel.empty()
            self._wake(channel)
        if channels:
            self.events.emit("channel", "channel_emptied", topic_name, channel=channel_name)
        return bool(channels)

    async def set_channel_offset(
        self,
        topic_name: str,
        partition: int,
        channel_name: str,
        spec: OffsetSpec,
        *,
        only_consumer: int | None = None,
    ) -> bool:
        """Move one partition's channel to where ``spec`` says (Youzan's setoffset).

        ``only_consumer`` (SUB_ADVANCED): applied only while that client is the
        channel's one consumer, as in Youzan, else left alone (returns False).
        Raises :class:`OffsetError` when the spec names no place the log has, the
        channel is ephemeral (no log position) or it went away meanwhile; nothing
        moves then. A durable log is searched in a worker thread.
        """
        channel = self._existing_channel(topic_name, partition, channel_name)
        if channel.feed is not None:
            raise OffsetError("an ephemeral channel has no consume offset")
        if only_consumer is not None and list(channel.consumers) != [only_consumer]:
            return False
        log = channel.log
        if log.on_disk:  # seeks read files: in a worker thread
            try:
                target = await trio.to_thread.run_sync(resolve_offset, log, spec)
            except OSError as error:
                raise self.storage_fault(READ, error) from error
        else:
            target = resolve_offset(log, spec)
        if self._existing_channel(topic_name, partition, channel_name) is not channel:
            raise OffsetError("the channel was deleted meanwhile")
        if target < log.earliest_id:
            raise OffsetError(f"consume offset {spec} is no longer held")
        log.rewind(target)
        channel.move_to(target)
        self._wake(channel)
        self.events.emit(
            "channel", "channel_offset_set", topic_name, channel=channel_name, partition=partition
        )
        return True

    def _existing_channel(self, topic_name: str, partition: int, channel_name: str) -> Channel:
        topic = self.topics.get(topic_name)
        if topic is None or not 0 <= partition < len(topic.partitions):
            raise OffsetError(f"topic {topic_name} has no partition {partition}")
        channel = topic.partitions[partition].channels.get(channel_name)
        if channel is None:
            raise OffsetError(f"channel {channel_name} does not exist")
        return channel

    def set_channel_paused(self, topic_name: str, channel_name: str, paused: bool) -> bool:
        """Pause or unpause delivery from a channel; False if no such channel."""
        channels = self.find_channel(topic_name, channel_name)
        for channel in channels:
            channel.paused = paused
            self._wake(channel)
        if channels:
            kind = "channel_paused" if paused else "channel_unpaused"
            self.events.emit("channel", kind, topic_name, channel=channel_name)
        return bool(channels)

    async def set_topic_ttl(self, topic_name: str, ttl_ns: int) -> None:
        """A topic's TTL (0: none), for all its channels at once; persisted. Its
        channels sweep now, so messages already past it leave now."""
        self.topics[topic_name].ttl.ttl_ns = ttl_ns
        self._state_changed()  # also for a topic with no channel yet
        for partition in self.topics[topic_name].partitions:
            for channel in partition.channels.values():
                channel.ttl_due_ns = 0
        await self.run_ttl_timers(topic_name)
        self._wake_topic(topic_name)

    async def run_ttl_timers(self, topic_name: str | None = None) -> None:
        """Give every channel of a topic with a TTL (of ``topic_name``, or of any) its
        runner: a channel's runner starts with its first consumer, but its messages
        must expire while nobody consumes (channels restored at start, a TTL set on
        a topic whose channels nobody read since)."""
        names = [topic_name] if topic_name is not None else list(self.topics)
        for name in names:
            topic = self.topics.get(name)
            if topic is None or not topic.ttl.active:
                continue
            for partition in topic.partitions:
                for channel_name in list(partition.channels):
                    if channel_name not in partition.drivers:
                        await self._runner(name, partition.index, channel_name)

    def set_dead_letter(
        self, topic_name: str, channel_name: str, max_attempts: int, dead_topic: str = ""
    ) -> bool:
        """Set a channel's dead-letter bound (0: none) and topic (empty:
        ``<topic>.dead``) in every partition; False if no such channel. Messages put
        back from now on are held against it (persisted with the channel)."""
        channels = self.find_channel(topic_name, channel_name)
        for channel in channels:
            channel.max_attempts = max_attempts
            channel.dead_letter_topic = dead_topic
            self._wake(channel)
        return bool(channels)

    def set_channel_rate_limit(self, topic_name: str, channel_name: str, rates: Rates) -> bool:
        """A channel's rate limit (``Rates()``: none), one bucket shared by the channel in
        every partition, starting full; False if no such channel. Persisted."""
        channels = self.find_channel(topic_name, channel_name)
        if not channels:
            return False
        limits = self.topics[topic_name].channel_limits
        limit = RateLimit(rates, trio.current_time()) if rates else None
        if limit is None:
            limits.pop(channel_name, None)
        else:
            limits[channel_name] = limit
        for channel in channels:
            channel.rate_limit = limit
            channel.refill_at = None
            self._wake(channel)
        return True

    def set_publish_limit(
        self, topic_name: str, rates: Rates, mode: PublishMode = PublishMode.THROTTLE
    ) -> None:
        """A topic's per-producer publish limit (``Rates()``: none) and what it does
        with a publish over it; persisted. Each TCP connection gets its own bucket,
        HTTP publishes share one."""
        topic = self.topics[topic_name]
        now = trio.current_time()
        topic.publish_limit = PublishLimit(rates, now, mode) if rates else None
        self._state_changed()

    def _wake(self, channel: Channel) -> None:
        """An admin change to ``channel`` (empty, pause, offset): route, and persist."""
        self._state_changed()
        runner = self.driver(channel.topic, channel.partition, channel.name)
        if runner is not None:
            runner.wake()
            runner.deadline_changed()

    def _wake_topic(self, topic_name: str) -> None:
        for partition in self.topics[topic_name].partitions:
            for channel in partition.channels.values():
                self._wake(channel)


def _indexes(partitions: Iterable[Partition]) -> list[int]:
    return [partition.index for partition in partitions]
