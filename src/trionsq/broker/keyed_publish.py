"""Publishing with idempotency keys: the batch's keys checked against the
partition's table (:mod:`.idempotence`) around the append, so a keyed message is
stored at most once (issue 17). Apart from :class:`~.broker.Broker` only to keep that
module under its size; it reads the broker through :class:`KeyedHost`, so the two do
not import each other."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..protocol.message import EXT_VERSION_JSON
from . import idempotence
from .health import APPEND
from .idempotence import Stored

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..config import NsqdConfig
    from ..queues.record import Record
    from .health import StorageFault
    from .replication import ReplicationHook
    from .topic import Topic

__all__ = ["KeyedHost", "publish_once"]


class KeyedHost(Protocol):
    """What a keyed publish uses of the broker (the broker, without this module
    depending on it)."""

    @property
    def replication(self) -> ReplicationHook | None:
        """Refuses writes this broker may not make (None: a single broker)."""
        ...

    @property
    def topics(self) -> Mapping[str, Topic]:
        """Every topic, by name."""
        ...

    @property
    def config(self) -> NsqdConfig:
        """The broker's settings (``idempotency_window``)."""
        ...

    # a twin on purpose: Broker.publish's signature, declared again by the protocol so
    # that this module need not import broker.py (which imports it)
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
        """The unkeyed append (Broker.publish)."""
        ...

    def storage_fault(self, area: str, error: OSError) -> StorageFault:
        """A refused file operation, recorded in the broker's health."""
        ...


def publish_once(
    broker: KeyedHost,
    topic: str,
    bodies: Sequence[bytes],
    keys: Sequence[str | None],
    timestamp: int,
    *,
    partition_index: int,
    trace_ids: Sequence[int],
    exts: Sequence[bytes],
    source: str = "",
) -> Stored | None:
    """Publish ext messages (JSON headers ``exts``), skipping each whose
    ``##idempotency_key`` (``keys``, None: no key) the partition holds or an earlier
    one of the batch has (broker/idempotence.py).

    Returns where the first message is: stored now, or by the publish that stored its
    key; None when nothing holds it (an ephemeral topic dropped it). The topic must
    exist (the caller checked it).

    Raises:
        StorageFault: the log (or the key journal it needs first) refused the
            write: nothing of the batch is stored, and no key of it is remembered.
        ReplicaRefusal: a replicated partition this broker may not write now
            (checked first: a follower answers no duplicate either).
    """
    if broker.replication is not None:
        broker.replication.check_write(topic, partition_index)
    partition = broker.topics[topic].partitions[partition_index]
    table = partition.idempotence
    if table is None:
        window = broker.config.idempotency_window
        if window <= 0:  # deduplication is off
            stored = broker.publish(
                topic,
                bodies,
                timestamp,
                partition_index=partition_index,
                trace_ids=trace_ids,
                ext_version=EXT_VERSION_JSON,
                exts=exts,
                source=source,
            )
            return Stored.of(stored[0]) if stored else None
        try:  # the key journal's file (a refusal must answer E_PUB_FAILED)
            table = idempotence.new_table(partition.log, window)
        except OSError as error:
            raise broker.storage_fault(APPEND, error) from error
        partition.idempotence = table
    kept, digests = table.split(keys)
    first: Stored | None = None
    first_key = keys[0] if keys else None
    if first_key is not None and (not kept or kept[0] != 0):  # a duplicate: where it is
        first = table.get(idempotence.key_digest(first_key))  # (before this batch may evict it)
    records: list[Record] = []
    if kept:
        everything = len(kept) == len(bodies)
        records = broker.publish(
            topic,
            bodies if everything else [bodies[i] for i in kept],
            timestamp,
            partition_index=partition_index,
            trace_ids=trace_ids if everything else [trace_ids[i] for i in kept],
            ext_version=EXT_VERSION_JSON,
            exts=exts if everything else [exts[i] for i in kept],
            source=source,
        )
        table.remember(digests, records, fresh=None not in digests)
    table.duplicates += len(bodies) - len(kept)
    if kept and kept[0] == 0:
        first = Stored.of(records[0]) if records else None
    return first
