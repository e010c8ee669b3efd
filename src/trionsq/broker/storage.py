"""The broker's files: partition logs, channel states and metadata (design §2).

One :class:`Storage` per broker. It opens each durable partition's
:class:`~trionsq.queues.topic_log.TopicLog` under ``--data-path`` (ephemeral topics
stay in memory), restores topics and channels at start, and runs two tasks in the
broker nursery: the syncer (fsync after ``--sync-every`` records or ``--sync-timeout``,
whichever comes first) and the persister (metadata and channel states, written
atomically in a worker thread at most once a second, only when they changed).
Acknowledged publishes are already in the OS when OK is sent (``os.write`` in
``TopicLog.append``); what a crash can cost is fsync-level only (power loss) and
redelivery of what was unfinished (at-least-once). docs/storage.md has the layout.

Each durable channel also has a delay store (``<channel>.delays``, opened when the
channel is made, see ``queues/delay_store.py``) for its long deferrals, and a
delivery journal (``queues/delivery_journal.py``). The persister fsyncs the stores
written since the last round, and the logs dead letters were moved to, before it
writes any channel state: a state that counts a message as finished (letting its
segment go) is on disk only after the message is, in its store or its dead-letter
topic (``dead_letter_moves.py``).
"""

from __future__ import annotations

import logging
import math
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple, TypeAlias

import trio

from .. import crash_points
from ..descriptors import DescriptorBudget
from ..persist import ensure_directory, remove_file, remove_stale_temps, write_atomic
from ..protocol.names import is_ephemeral
from ..queues.cursor_state import (
    ChannelState,
    ChannelStateError,
    delays_path,
    encode_state,
    load_state,
    remove_channel_state,
    remove_partition_states,
    remove_stale_state_temps,
    restore_channel,
    scan_channel_states,
    state_path,
)
from ..queues.delay_store import DelayStore, DelayStoreError, ParkedMessage
from ..queues.delivery_journal import DeliveryJournal, JournalReplay, Move, journal_paths
from ..queues.memory_log import MemoryLog
from ..queues.topic_log import RecoveryReport, TopicLog
from .dead_letter_recovery import resolve_moves
from .health import APPEND, PERSIST, SYNC, StorageHealth, go_error_text
from .metadata import (
    Metadata,
    encode_metadata,
    load_metadata,
    metadata_path,
    repair,
    save_metadata,
    snapshot,
)
from .rate_limits import PublishLimit, PublishMode, RateLimit, Rates
from .reader_holds import HoldsError, fit_holds, holds_path, load_holds, save_holds
from .state_writes import channel_state, sync_logs, sync_then_write
from .topic import ChannelFiles

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..config import NsqdConfig
    from ..descriptors import FileHandle
    from ..queues.partition_log import PartitionLog
    from .channel import Channel
    from .topic import Partition, Topics

__all__ = ["Storage", "descriptor_budget"]

log = logging.getLogger("trionsq.storage")

PERSIST_INTERVAL: Final = 1.0
"""Seconds between checks for changed metadata and channel states."""
MIN_CACHE_RECORDS: Final = 1024
_SEGMENT: Final = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.\d{6}\.log$")
ChannelKey: TypeAlias = tuple[str, int, str]


def descriptor_budget(config: NsqdConfig, *, sockets: int = 0) -> DescriptorBudget:
    """A broker's share of the process's open-file limit (``descriptors.py``), with
    ``sockets`` of its own reserved besides the worker threads' files."""
    try:
        threads = trio.to_thread.current_default_thread_limiter().total_tokens
    except RuntimeError:  # not in a Trio run yet: trio's default
        threads = 40
    return DescriptorBudget.for_process(
        sockets=sockets, threads=threads, max_open_files=config.max_open_files
    )


class Storage:
    """Durable storage when ``config.persist``; otherwise every log is in memory."""

    def __init__(
        self,
        config: NsqdConfig,
        wall_clock: Callable[[], int] = time.time_ns,
        descriptors: DescriptorBudget | None = None,
    ) -> None:
        """``wall_clock``: the broker's (deferred due times are stored in wall time);
        ``descriptors``: the broker's budget, which the segment and delays files
        share with its connections (default: one sized from the process's limit)."""
        self.config = config
        self.descriptors: Final = descriptors or descriptor_budget(config)
        self.wall_clock: Final = wall_clock
        self.directory: Final = Path(config.data_path or ".") if config.persist else None
        self.logs: dict[tuple[str, int], TopicLog] = {}
        self.reports: dict[tuple[str, int], RecoveryReport] = {}
        """What recovery found per partition (losses show in /stats)."""
        self._saved_states: dict[tuple[str, int, str], bytes] = {}
        self._fingerprints: dict[tuple[str, int, str], tuple[object, ...] | None] = {}
        """Each channel's ``state_fingerprint`` when its state was last found saved."""
        self._saved_metadata = b""
        self._unsynced: set[TopicLog] = set()
        self._appended = trio.Event()
        self._sync_due = trio.Event()
        self._changed = trio.Event()
        """Set when a channel or the metadata may have changed: the persister waits on
        it instead of waking every second for nothing."""
        self._unsynced_count = 0
        self.health = StorageHealth()
        """Whether writes succeed (``/ping``, ``/stats`` health)."""
        self._holds_lock = trio.Lock()
        """One reader-hold write at a time, so the last file written is the latest."""
        self.delays: dict[ChannelKey, DelayStore] = {}
        """Each durable channel's delay store, open while the channel exists."""
        self._loaded: dict[ChannelKey, list[ParkedMessage]] = {}
        """What the stores held at start, until :meth:`recover` gives it back."""
        self.journals: dict[ChannelKey, DeliveryJournal] = {}
        """Each durable channel's delivery journal, open while the channel exists."""
        self._replays: dict[ChannelKey, JournalReplay] = {}
        """What the journals held at start, until :meth:`recover` applies it."""
        self._recovering = False
        self._moved_to: set[TopicLog] = set()
        """Logs dead letters were moved to since the last persist: fsynced first."""
        self._write_lock = trio.Lock()
        """One metadata and state write at a time, so the last file written is the
        latest (the persister's round, or a dead-letter topic's metadata now)."""
        self._saved_topics: dict[str, bool] = {}
        """The topics metadata.json lists, with their ext flag."""

    @property
    def enabled(self) -> bool:
        """Whether anything is written to disk."""
        return self.directory is not None

    # ------------------------------------------------------------------ logs

    def open_log(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log: segment files, or memory for ephemeral topics."""
        if self.directory is None or is_ephemeral(topic):
            return MemoryLog()
        key = (topic, partition)
        existing = self.logs.get(key)
        if existing is not None:
            return existing
        opened, report = TopicLog.open(
            self.directory,
            f"{topic}-{partition}",
            max_bytes_per_file=self.config.max_bytes_per_file,
            cache_records=max(self.config.mem_queue_size, MIN_CACHE_RECORDS),
            retention=self.config.retention,
            files=self.descriptors,
        )
        if not report.lossless:
            log.warning("%s-%d: recovered with losses: %s", topic, partition, report)
        self.logs[key] = opened
        self.reports[key] = report
        return opened

    def appended(self, partition_log: PartitionLog, count: int) -> None:
        """A batch reached the OS: schedule its fsync by the sync policy."""
        if not isinstance(partition_log, TopicLog):
            return
        if not self.health.healthy:
            self.health.succeeded(APPEND)
        self._unsynced.add(partition_log)
        self._unsynced_count += count
        self._appended.set()
        if self._unsynced_count >= self.config.sync_every:
            self._sync_due.set()

    def delete_topic_files(self, topic: str, partitions: int) -> None:
        """A deleted topic's segments and channel states go (nsqd deletes its files)."""
        if self.directory is None:
            return
        for partition in range(partitions):
            topic_log = self.logs.pop((topic, partition), None)
            try:
                if topic_log is not None:
                    self._unsynced.discard(topic_log)
                    topic_log.close(sync=False)
                    topic_log.delete_files()
                for key in [k for k in self.delays if k[:2] == (topic, partition)]:
                    self.delays.pop(key).close()  # the directory goes with its files
                for key in [k for k in self.journals if k[:2] == (topic, partition)]:
                    self.journals.pop(key).close()
                remove_partition_states(self.directory, topic, partition)
            except OSError as error:
                _left_behind(f"topic {topic}/{partition}", error)
            for key in [k for k in self._saved_states if k[:2] == (topic, partition)]:
                del self._saved_states[key]
                self._fingerprints.pop(key, None)

    def delete_channel_files(self, topic: str, partition: int, channel: str) -> None:
        """A deleted durable channel's state file goes."""
        if self.directory is None or is_ephemeral(channel) or is_ephemeral(topic):
            return
        try:
            remove_channel_state(self.directory, topic, partition, channel)
            store = self.delays.pop((topic, partition, channel), None)
            if store is not None:
                store.delete()
            else:
                remove_file(delays_path(self.directory, topic, partition, channel))
            journal = self.journals.pop((topic, partition, channel), None)
            if journal is not None:
                journal.delete()
            else:
                for path in journal_paths(state_path(self.directory, topic, partition, channel)):
                    remove_file(path)
        except OSError as error:
            _left_behind(f"channel {topic}/{partition}/{channel}", error)
        self._saved_states.pop((topic, partition, channel), None)
        self._fingerprints.pop((topic, partition, channel), None)

    def open_files(self, topic: str, partition: int, channel: str) -> ChannelFiles:
        """A new channel's delay store and delivery journal (none in memory or when
        ephemeral)."""
        if self.directory is None or is_ephemeral(topic) or is_ephemeral(channel):
            return ChannelFiles()
        return ChannelFiles(
            self.open_delays(topic, partition, channel),
            self._open_journal(topic, partition, channel),
        )

    def _open_journal(self, topic: str, partition: int, channel: str) -> DeliveryJournal | None:
        """A durable channel's journal; what it holds is applied by :meth:`recover`
        (a channel made later starts with an empty one). None when the file system
        will not read it: the channel then journals nothing (one error line)."""
        assert self.directory is not None  # noqa: S101 - only called when enabled
        key = (topic, partition, channel)
        path = state_path(self.directory, topic, partition, channel)
        try:
            journal, replay = DeliveryJournal.open(
                path, on_error=self._delays_failed, files=self.descriptors
            )
        except OSError as error:
            log.error("storage: cannot read %s: %s", path, go_error_text(error))
            self.health.failed(PERSIST, error)
            return None
        if self._recovering:
            self._replays[key] = replay
        elif replay.counts or replay.moves:  # left by a channel deleted before
            journal.clear()
        self.journals[key] = journal
        return journal

    def open_delays(self, topic: str, partition: int, channel: str) -> DelayStore | None:
        """A new durable channel's delay store (None in memory or when ephemeral).

        At start, what it holds is given back to the channel by :meth:`recover`; a
        channel made later starts empty (a file left by one deleted before is
        cleared). An unusable file is set aside as ``.bad``; one the file system
        will not open leaves the channel without parking (long delays then pin
        segments, as short ones do), the file untouched for the next start.
        """
        directory = self.directory
        if directory is None or is_ephemeral(topic) or is_ephemeral(channel):
            return None
        key = (topic, partition, channel)
        path = delays_path(directory, topic, partition, channel)
        try:
            try:
                store, parked = DelayStore.open(
                    path, on_error=self._delays_failed, files=self.descriptors
                )
            except DelayStoreError as error:
                bad = _set_aside(path)
                log.error("%s; set aside as %s: its parked messages are gone", error, bad.name)
                store, parked = DelayStore.open(
                    path, on_error=self._delays_failed, files=self.descriptors
                )
            if parked and not self._recovering:
                store.clear()
                parked = []
        except OSError as error:
            log.error(
                "storage: cannot open %s: %s; channel %s/%d/%s parks no long delays",
                path,
                go_error_text(error),
                topic,
                partition,
                channel,
            )
            self.health.failed(PERSIST, error)
            return None
        previous = self.delays.pop(key, None)
        if previous is not None:  # pragma: no cover - a channel is made once
            previous.close()
        self.delays[key] = store
        if parked:
            self._loaded[key] = parked
        return store

    def _delays_failed(self, error: OSError) -> None:
        self.health.failed(PERSIST, error)

    # ------------------------------------------------------------------ start

    def recover(self, broker: Topics) -> Metadata | None:
        """Recreate topics and channels from disk (before any listener accepts).

        Blocking file work: the broker is not serving yet, so nothing waits on it.
        """
        directory = self.directory
        if directory is None:
            return None
        ensure_directory(directory)
        remove_stale_temps(directory)
        remove_stale_state_temps(directory)
        on_disk: dict[str, int] = {}
        for path in directory.glob("*.log"):
            match = _SEGMENT.match(path.name)
            if match:
                name, index = match["topic"], int(match["partition"])
                on_disk[name] = max(on_disk.get(name, 0), index + 1)
        stored = load_metadata(directory) or Metadata(1, ())
        metadata = repair(stored, on_disk, scan_channel_states(directory))
        if metadata is not stored:
            save_metadata(directory, metadata)
        now, wall = trio.current_time(), self.wall_clock()
        self._recovering = True
        try:
            moves = self._recover_topics(broker, metadata, now, wall)
        finally:
            self._recovering = False
            self._loaded.clear()
            self._replays.clear()
        for channel, journaled in moves:  # every dead-letter topic is open now
            resolve_moves(channel, journaled, self.logs)
        self._metadata_saved(snapshot(broker))
        return metadata

    def _recover_topics(
        self, broker: Topics, metadata: Metadata, now: float, wall: int
    ) -> list[tuple[Channel, list[Move]]]:
        """Every topic and channel back; the journaled dead-letter moves of each
        channel, to resolve once every topic is back."""
        moves: list[tuple[Channel, list[Move]]] = []
        for meta in metadata.topics:
            topic = broker.topic(
                meta.name, partitions=meta.partitions, ext=meta.ext, ordered=meta.ordered
            )
            topic.ttl.ttl_ns = meta.ttl_ns
            topic.ttl.headers = meta.ttl_headers
            publish = Rates(meta.publish_limit_msgs, meta.publish_limit_bytes)
            mode = PublishMode(meta.publish_limit_mode)
            topic.publish_limit = PublishLimit(publish, now, mode) if publish else None
            for channel_meta in meta.channels:
                rates = Rates(channel_meta.rate_limit_msgs, channel_meta.rate_limit_bytes)
                if rates:  # before the channels are made: each partition's shares it
                    topic.channel_limits[channel_meta.name] = RateLimit(rates, now)
            for partition in topic.partitions:
                for channel_meta in meta.channels:
                    state = self._load_channel_state(meta.name, partition.index, channel_meta.name)
                    # no usable state: the oldest record held, even for a later channel
                    # (at-least-once; nsqd's "later channels start at the tail" would lose)
                    channel = partition.channel(channel_meta.name, oldest=state is None)
                    key = (meta.name, partition.index, channel_meta.name)
                    parked = self._loaded.pop(key, [])
                    counts: dict[int, int] = {}
                    if state is not None:
                        counts = self._restore_channel(key, channel, state, parked, now, wall)
                    _restore_parked(channel, parked, now, wall)
                    channel.paused = channel_meta.paused
                    channel.max_attempts = channel_meta.max_attempts
                    channel.dead_letter_topic = channel_meta.dead_letter_topic
                    replay = self._replays.pop(key, None)
                    if replay is not None:
                        moves.append((channel, replay.moves))
                        for internal_id, deliveries in replay.counts.items():
                            if deliveries > counts.get(internal_id, 0):
                                counts[internal_id] = deliveries
                    channel.restore_attempts(
                        {i: n for i, n in counts.items() if channel.unfinished(i)}
                    )
                self._restore_holds(meta.name, partition)
            if meta.paused:
                topic.set_paused(True)
        return moves

    def _load_channel_state(self, topic: str, partition: int, channel: str) -> ChannelState | None:
        """The channel's saved state; None when there is none or it is unusable.

        An unusable file is set aside as ``.bad`` (kept for a post-mortem, never read
        again) with one error line, and the channel starts over at the oldest record.
        """
        assert self.directory is not None  # noqa: S101 - only called when enabled
        path = state_path(self.directory, topic, partition, channel)
        try:
            return load_state(path)
        except ChannelStateError as error:
            bad = _set_aside(path)
            log.error(  # the error text starts with the state file's path
                "%s; set aside as %s: channel %s/%d/%s restarts at the oldest message held,"
                " so what it had not finished is delivered again",
                error,
                bad.name,
                topic,
                partition,
                channel,
            )
            return None

    def _restore_holds(self, topic: str, partition: Partition) -> None:
        """The partition's saved reader holds (an unusable file is set aside)."""
        assert self.directory is not None  # noqa: S101 - only called when enabled
        path = holds_path(self.directory, topic, partition.index)
        try:
            saved = load_holds(path)
        except HoldsError as error:
            bad = _set_aside(path)
            log.error("%s; set aside as %s: its reader holds are gone", error, bad.name)
            return
        label = f"{topic}/{partition.index}"
        for hold in fit_holds(partition.log, saved, label=label):
            partition.holds.put(hold)  # all of them before anything is released

    async def save_holds(self, topic: str, partition: Partition) -> None:
        """Write the partition's durable reader holds now (in a worker thread); in
        memory, nothing. Raises OSError when the file system refuses."""
        if self.directory is None or is_ephemeral(topic):
            return
        path = holds_path(self.directory, topic, partition.index)
        key = (topic, partition.index)
        async with self._holds_lock:
            if self.logs.get(key) is not partition.log:
                return  # the topic was deleted meanwhile, its files with it
            await trio.to_thread.run_sync(save_holds, path, partition.holds.durable())
            if self.logs.get(key) is not partition.log:  # deleted while writing
                await trio.to_thread.run_sync(save_holds, path, ())

    def _restore_channel(
        self,
        key: ChannelKey,
        channel: Channel,
        state: ChannelState,
        parked: list[ParkedMessage],
        now: float,
        wall: int,
    ) -> dict[int, int]:
        """The cursor, finished ids and short deferrals from the state file; a
        deferral the delay store holds too comes from the store (it wins). Returns
        the delivery counts it holds."""
        topic, partition, _ = key
        label = f"{topic}/{partition}/{channel.name}"
        restored = restore_channel(
            channel.log, state, now_monotonic=now, now_wall_ns=wall, label=label
        )
        channel.cursor = restored.cursor
        channel.saved_confirmed = restored.cursor.confirmed_id
        partition_log = channel.log
        in_store = {message.internal_id for message in parked}
        for due, internal_id in restored.deferred:
            if internal_id in in_store:
                continue
            record = partition_log.get(internal_id)
            if record is None and partition_log.on_disk:
                cold = partition_log.read_cold(internal_id, 1)
                record = cold[0] if cold and cold[0].internal_id == internal_id else None
            if record is not None:
                channel.defer_ahead(record, due, now=now, wall_ns=wall)
        for internal_id in restored.finished_ids:
            channel.skip_finished(internal_id)
        channel.lost += restored.lost
        self._saved_states[key] = encode_state(state)
        return restored.attempts

    # ------------------------------------------------------------------ tasks

    async def run(
        self, broker: Topics, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The syncer and the persister, until cancelled; then a last persist."""
        if self.directory is None:
            task_status.started()
            return
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._sync_forever)
                nursery.start_soon(self._persist_forever, broker)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(self.config.sync_timeout + 10):
                await self.persist(broker)
                try:
                    await trio.to_thread.run_sync(self._sync_and_close)
                except OSError as error:  # what reached the OS stays there; say so once
                    self.health.failed(SYNC, error)

    async def _sync_forever(self) -> None:
        timeout = self.config.sync_timeout
        while True:
            await self._appended.wait()
            with trio.move_on_after(timeout if timeout > 0 else math.inf):
                await self._sync_due.wait()
            await self.sync()

    async def sync(self) -> None:
        """fsync every log written since the last sync.

        A log whose fsync fails stays due: it is tried again with the next sync
        (``--sync-timeout`` later at most, or at the next write).
        """
        logs, self._unsynced = self._unsynced, set()
        self._unsynced_count = 0
        self._appended = trio.Event()
        self._sync_due = trio.Event()
        if not logs:
            return
        failed = await trio.to_thread.run_sync(sync_logs, logs)
        if failed is None:
            if not self.health.healthy:
                self.health.succeeded(SYNC)
            return
        unsynced, error = failed
        self.health.failed(SYNC, error)
        self._unsynced |= unsynced
        self._appended.set()

    def _sync_and_close(self) -> None:
        """Close every log, each even when another's fsync failed; then raise."""
        failure: OSError | None = None
        for store in self.delays.values():  # the last persist synced them
            store.close()
        for journal in self.journals.values():
            journal.close()
        for topic_log in self.logs.values():
            try:
                topic_log.close(sync=True)
            except OSError as error:
                failure = failure or error
                topic_log.close(sync=False)
        if failure is not None:
            raise failure

    def changed(self) -> None:
        """A channel's state or the metadata may have changed (the broker and every
        channel's driver say so): the persister writes within a second."""
        self._changed.set()

    async def _persist_forever(self, broker: Topics) -> None:
        """Write what changed a second after the first change, so what follows in that
        second goes in the same write; an idle broker does not wake at all, except
        when ``--retention`` lets a consumed segment go by age: then once, when the
        oldest comes of age."""
        retention = self.config.retention
        while True:
            with trio.move_on_at(self._next_expiry()):
                await self._changed.wait()
            await trio.sleep(PERSIST_INTERVAL)
            self._changed = trio.Event()
            await self.persist(broker)
            # what channels confirmed (and persisted) can go, even with no new publishes
            for topic in list(broker.topics.values()):
                for partition in topic.partitions:
                    partition.release()
            if retention > 0:  # age alone deletes nothing: look when one is due
                for topic_log in self.logs.values():
                    topic_log.expire()

    def _next_expiry(self) -> float:
        """The Trio time at which some log's oldest released segment is old enough to
        go (inf: none is, or ``--retention`` is off)."""
        if self.config.retention <= 0:
            return math.inf
        waits = [wait for log in self.logs.values() if (wait := log.expires_in()) is not None]
        return trio.current_time() + min(waits) if waits else math.inf

    def _delay_syncs(self) -> list[tuple[DelayStore, FileHandle]]:
        """The file to fsync of each delay store written since the last round."""
        syncs: list[tuple[DelayStore, FileHandle]] = []
        for store in self.delays.values():
            handle = store.sync_handle()
            if handle is not None:
                syncs.append((store, handle))
        return syncs

    def saved(self, topic: str, *, ext: bool) -> bool:
        """Whether metadata.json lists ``topic`` with that ext flag."""
        return self._saved_topics.get(topic) == ext

    def moved_to(self, partition_log: PartitionLog) -> None:
        """Dead letters were appended to ``partition_log``: it is fsynced before any
        channel state (which lets them go) is written, and the persister is told."""
        if isinstance(partition_log, TopicLog):
            self._moved_to.add(partition_log)
        self.changed()

    async def save_metadata_now(self, broker: Topics) -> None:
        """Write metadata.json now if it differs from what is on disk (a dead-letter
        topic must be listed before its first append). Raises OSError when refused."""
        async with self._write_lock:
            current = snapshot(broker)
            data = encode_metadata(current)
            if data != self._saved_metadata and self.directory is not None:
                path = metadata_path(self.directory)
                try:
                    await trio.to_thread.run_sync(write_atomic, path, data)
                except OSError as error:
                    self.health.failed(PERSIST, error)
                    raise
                self._metadata_saved(current, data)

    def save_metadata_blocking(self, broker: Topics) -> None:
        """:meth:`save_metadata_now` on this thread (at start, before serving)."""
        current = snapshot(broker)
        data = encode_metadata(current)
        if data != self._saved_metadata and self.directory is not None:
            write_atomic(metadata_path(self.directory), data)
            self._metadata_saved(current, data)

    def _metadata_saved(self, metadata: Metadata, data: bytes | None = None) -> None:
        self._saved_metadata = data if data is not None else encode_metadata(metadata)
        self._saved_topics = {topic.name: topic.ext for topic in metadata.topics}

    async def persist(self, broker: Topics) -> None:
        """Write metadata and every durable channel state that changed since written."""
        directory = self.directory
        if directory is None:
            return
        async with self._write_lock:
            await self._persist(broker, directory)
        if crash_points.ARMED:
            crash_points.reached("storage.persisted")

    async def _persist(self, broker: Topics, directory: Path) -> None:
        current = snapshot(broker)
        metadata = encode_metadata(current)
        writes: list[tuple[Path, bytes]] = []
        if metadata != self._saved_metadata:
            writes.append((metadata_path(directory), metadata))
        changed = self._changed_states(broker, directory, writes)
        syncs = self._delay_syncs()
        logs, self._moved_to = self._moved_to, set()
        if not writes and not syncs and not logs:
            return
        written, error = await trio.to_thread.run_sync(sync_then_write, syncs, logs, writes)
        if error is None:
            if not self.health.healthy:
                self.health.succeeded(PERSIST)
        else:
            # what was not written stays "changed", and the persister comes back for
            # it after a second even if nothing else changes (health stays NOK until then)
            self.health.failed(PERSIST, error)
            self._changed.set()
            if not any(written):
                self._moved_to |= logs
        if metadata != self._saved_metadata:
            if written[0]:
                self._metadata_saved(current, metadata)
            written = written[1:]
        for change, ok in zip(changed, written, strict=True):
            if ok:
                self._saved_states[change.key] = change.data
                self._fingerprints[change.key] = change.fingerprint
                change.channel.saved_confirmed = change.confirmed
                if change.channel.journal is not None:
                    change.channel.journal.covered()

    def _changed_states(
        self, broker: Topics, directory: Path, writes: list[tuple[Path, bytes]]
    ) -> list[_Changed]:
        """The durable channel states that changed since written, added to ``writes``;
        each changed channel's journal is checkpointed with its capture."""
        now, wall = trio.current_time(), self.wall_clock()
        changed: list[_Changed] = []
        fingerprints = self._fingerprints
        for topic in list(broker.topics.values()):
            if topic.ephemeral:
                continue
            for partition in topic.partitions:
                for name, channel in partition.channels.items():
                    if is_ephemeral(name):
                        continue
                    key = (topic.name, partition.index, name)
                    fingerprint = channel.state_fingerprint()
                    if key in fingerprints and fingerprints[key] == fingerprint:
                        continue  # nothing it persists moved since it was found saved
                    state = channel_state(channel, now, wall)
                    data = encode_state(state)
                    if self._saved_states.get(key) == data:
                        fingerprints[key] = fingerprint
                        continue
                    if channel.journal is not None:
                        channel.journal.checkpoint()  # what the state covers from now
                    changed.append(_Changed(key, data, channel, state.confirmed_id, fingerprint))
                    writes.append((state_path(directory, *key), data))
        return changed


class _Changed(NamedTuple):
    """A channel state to write, and what to remember once it is written."""

    key: tuple[str, int, str]
    data: bytes
    channel: Channel
    confirmed: int
    fingerprint: tuple[object, ...] | None


def _left_behind(what: str, error: OSError) -> None:
    """A deletion the file system refused: the broker forgets the topic or channel,
    but its files stay, and it comes back at the next start."""
    log.error(
        "storage: cannot remove the files of deleted %s: %s (they stay, and it comes"
        " back at the next start unless removed by hand)",
        what,
        go_error_text(error),
    )


def _set_aside(path: Path) -> Path:
    """Rename an unusable file to ``<name>.bad`` (``.bad.<n>`` if one is there already)."""
    bad = path.with_name(path.name + ".bad")
    number = 0
    while bad.exists():
        number += 1
        bad = path.with_name(f"{path.name}.bad.{number}")
    path.rename(bad)
    return bad


def _restore_parked(channel: Channel, parked: list[ParkedMessage], now: float, wall: int) -> None:
    """The delay store's messages back in the channel's deferred heap, due at the
    same wall-clock moment (through this process's monotonic clock)."""
    for message in parked:
        due = now + (message.due_ns - wall) / 1e9
        channel.restore_parked(message.record, due, message.attempts)
