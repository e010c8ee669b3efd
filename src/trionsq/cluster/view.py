"""What a broker or a lookupd knows of the cluster: etcd's keys, kept current by a watch.

:class:`ClusterView` is pure state built from etcd's keys and watch events (live
brokers with their lease, topics, partition states with their ``mod_revision``,
the coordinator); :func:`follow_cluster` is the one task that loads it and keeps it
current, reading everything again when the watch breaks.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .etcd import EtcdUnavailable
from .etcd_json import DELETE, EtcdReplyError, KeyValue, WatchBatch
from .keys import (
    BrokerInfo,
    ClusterKeys,
    CoordinatorInfo,
    JsonDecodeError,
    PartitionState,
    TopicMeta,
    decode,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from .etcd import EtcdClient

__all__ = ["ClusterView", "follow_cluster"]

log = logging.getLogger("trionsq.cluster")

RETRY_DELAY = 0.5
"""Seconds between attempts to reach etcd again after the watch broke."""


class ClusterView:
    """The cluster's keys as last read, by kind."""

    def __init__(self, keys: ClusterKeys) -> None:
        self.keys = keys
        self.brokers: dict[str, BrokerInfo] = {}
        self.leases: dict[str, int] = {}
        """Each live broker's lease."""
        self.registered: dict[str, int] = {}
        """Each live broker's registration revision: later than a partition state it
        leads, the broker restarted since."""
        self.topics: dict[str, TopicMeta] = {}
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.revisions: dict[tuple[str, int], int] = {}
        """Each partition key's ``mod_revision``, for compare-and-swap."""
        self.coordinator: CoordinatorInfo | None = None
        self.coordinator_revision = 0
        """The coordinator key's ``create_revision``: the coordinator's epoch."""
        self.revision = 0
        """The etcd revision this view is current to."""
        self.connected = False
        """Whether the watch is running (False: etcd unreachable, the view may be old)."""

    def reset(self, kvs: Iterable[KeyValue], revision: int) -> None:
        """Replace everything with a full read."""
        self.brokers.clear()
        self.leases.clear()
        self.registered.clear()
        self.topics.clear()
        self.partitions.clear()
        self.revisions.clear()
        self.coordinator = None
        self.coordinator_revision = 0
        for kv in kvs:
            self._put(kv)
        self.revision = revision

    def apply(self, batch: WatchBatch) -> None:
        """One watch message's events, in order."""
        for event in batch.events:
            if event.kind == DELETE:
                self._delete(event.kv.key)
            else:
                self._put(event.kv)
        self.revision = max(self.revision, batch.revision)

    def _put(self, kv: KeyValue) -> None:
        keys = self.keys
        try:
            if kv.key == keys.coordinator:
                self.coordinator = decode(kv.value, CoordinatorInfo)
                self.coordinator_revision = kv.create_revision
            elif (broker := keys.broker_id_of(kv.key)) is not None:
                self.brokers[broker] = decode(kv.value, BrokerInfo)
                self.leases[broker] = kv.lease
                self.registered[broker] = kv.mod_revision
            elif (where := keys.parse_topic_key(kv.key)) is not None:
                topic, partition = where
                if partition is None:
                    self.topics[topic] = decode(kv.value, TopicMeta)
                else:
                    self.partitions[topic, partition] = decode(kv.value, PartitionState)
                    self.revisions[topic, partition] = kv.mod_revision
        except JsonDecodeError as error:
            log.warning("ignored etcd key %r: %s", kv.key, error)

    def _delete(self, key: bytes) -> None:
        keys = self.keys
        if key == keys.coordinator:
            self.coordinator = None
            self.coordinator_revision = 0
        elif (broker := keys.broker_id_of(key)) is not None:
            self.brokers.pop(broker, None)
            self.leases.pop(broker, None)
            self.registered.pop(broker, None)
        elif (where := keys.parse_topic_key(key)) is not None:
            topic, partition = where
            if partition is None:
                self.topics.pop(topic, None)
            else:
                self.partitions.pop((topic, partition), None)
                self.revisions.pop((topic, partition), None)

    def topic_partitions(self, topic: str) -> list[tuple[int, PartitionState]]:
        """A topic's partitions in order."""
        return sorted((n, s) for (t, n), s in self.partitions.items() if t == topic)


async def follow_cluster(
    client: EtcdClient,
    view: ClusterView,
    changed: Callable[[], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep ``view`` current until cancelled, calling ``changed()`` after each update.

    Started once the first full read succeeded (``nursery.start`` waits for it, so a
    caller starts with a loaded view). While etcd is unreachable the view keeps what
    it last knew, ``view.connected`` is False, and reads are retried.
    """
    started = False
    while True:
        try:
            kvs, revision = await client.get_prefix(view.keys.root)
        except (EtcdUnavailable, EtcdReplyError) as error:
            _disconnected(view, changed, error)
            await trio.sleep(RETRY_DELAY)
            continue
        view.reset(kvs, revision)
        view.connected = True
        changed()
        if not started:
            task_status.started()
            started = True

        def on_batch(batch: WatchBatch) -> None:
            view.apply(batch)
            changed()

        try:
            await client.watch_prefix(view.keys.root, view.revision + 1, on_batch)
        except (EtcdUnavailable, EtcdReplyError) as error:
            _disconnected(view, changed, error)
            await trio.sleep(RETRY_DELAY)


def _disconnected(view: ClusterView, changed: Callable[[], None], error: Exception) -> None:
    if view.connected:
        log.warning("etcd unreachable, keeping the last cluster state: %s", error)
        view.connected = False
        changed()
