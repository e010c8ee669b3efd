"""Idempotent publishing: a keyed message is stored at most once per partition.

A PUB_EXT/MPUB_EXT or ``/pub_ext`` message whose JSON header carries
``##idempotency_key`` is not stored again when its partition already stored that
key among its last ``--idempotency-window`` keys; the publish still succeeds, and a
traced PUB_EXT is answered with the original record's id, trace id, offset and raw
size. Within one batch the first message with a key is kept. A key is remembered
only once its record was appended (a refused write remembers nothing), so a client
that retries after a lost answer stores each keyed message once (issue 17).

Each partition that sees a key gets an :class:`IdempotenceTable`: a digest of the
key (16 bytes of BLAKE2b) to the stored record's place, in insertion order, the
oldest forgotten past the window. About 185 bytes per key (the broker's RSS growth
measured by ``benchmarks/idempotent_publish.py``): 178 MiB for a full default window
of 1,000,000.
After a restart the table is rebuilt from the records the partition's log holds in
memory at open (:func:`restore`), and the empty or deleted topic loses it.

Pure state on the broker's thread: the check, the append and the remembering run
without an await in between, so concurrent publishes cannot both store one key.
"""

from __future__ import annotations

import hashlib
import struct
from collections import deque
from typing import TYPE_CHECKING, Final, NamedTuple

import orjson

from ..protocol.ext_header import IDEMPOTENCY_KEY, idempotency_key_of
from ..protocol.message import EXT_VERSION_JSON

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..queues.partition_log import PartitionLog
    from ..queues.record import Record
    from .broker import Broker
    from .topic import Partition

__all__ = ["IdempotenceTable", "Stored", "key_digest", "publish_once", "restore"]

_MARK: Final = IDEMPOTENCY_KEY.encode()
"""What a stored header must contain before it is parsed for a key (at restore)."""
_PLACE: Final = struct.Struct(">QQQI")
"""A remembered record: internal id, trace id, offset, raw size (28 bytes: a bytes
value is 64 bytes of memory where a tuple of four ints is over 140)."""
RESTORE_CHUNK: Final = 4096
"""Records read from the log's memory at a time by :func:`restore`."""


class Stored(NamedTuple):
    """Where a keyed message was stored: what a traced reply tells."""

    internal_id: int
    trace_id: int
    offset: int
    raw_size: int


def key_digest(key: str) -> bytes:
    """What the table keeps of a key: 16 bytes, whatever its length (≤ 256 bytes)."""
    try:
        data = key.encode()
    except UnicodeEncodeError:  # a lone surrogate (no JSON parser makes one)
        data = key.encode("utf-8", "surrogatepass")
    return _blake2b(data, digest_size=16).digest()


_blake2b: Final = hashlib.blake2b


class IdempotenceTable:
    """One partition's most recently stored keys (by digest), oldest first.

    A dict for the lookups and a deque for the order: a dict's own order would cost a
    scan past every deleted entry to find the oldest, which makes eviction quadratic.
    """

    __slots__ = ("_order", "_places", "duplicates", "window")

    def __init__(self, window: int) -> None:
        if window <= 0:
            raise ValueError(f"an idempotence window must be positive, got {window}")
        self.window: Final = window
        """Keys remembered at most; past it the oldest is forgotten."""
        self.duplicates = 0
        """Messages not stored because their key was (publishes that still succeeded)."""
        self._places: dict[bytes, bytes] = {}
        self._order: deque[bytes] = deque()

    def __len__(self) -> int:
        return len(self._places)

    def __contains__(self, digest: object) -> bool:
        return digest in self._places

    def get(self, digest: bytes) -> Stored | None:
        """Where the record with this key digest is, if the key is remembered."""
        place = self._places.get(digest)
        return None if place is None else Stored._make(_PLACE.unpack(place))

    def split(self, keys: Sequence[str | None]) -> tuple[list[int], list[bytes | None]]:
        """Which messages of a batch to store: the indexes of those without a key or
        with a key neither remembered nor earlier in the batch, and their digests
        (None: no key). The rest are duplicates."""
        places = self._places
        kept: list[int] = []
        digests: list[bytes | None] = []
        seen: set[bytes] = set()
        for index, key in enumerate(keys):
            if key is None:
                kept.append(index)
                digests.append(None)
                continue
            digest = key_digest(key)
            if digest in places or digest in seen:
                continue
            seen.add(digest)
            kept.append(index)
            digests.append(digest)
        return kept, digests

    def remember(self, digests: Sequence[bytes | None], records: Sequence[Record]) -> None:
        """These records were stored with these key digests (None: no key): remember
        them; past the window the oldest keys go. A digest remembered already keeps
        its first record and its place in the order."""
        places = self._places
        order = self._order
        pack = _PLACE.pack
        for digest, record in zip(digests, records, strict=False):  # fewer: dropped
            if digest is None or digest in places:
                continue
            places[digest] = pack(
                record.internal_id, record.trace_id, record.offset, record.raw_size
            )
            order.append(digest)
        for _ in range(len(order) - self.window):
            del places[order.popleft()]


def publish_once(
    broker: Broker,
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
    """Publish ext messages (JSON headers ``exts``), skipping each whose key
    (``keys``, None: no key) the partition holds or an earlier one of the batch has.

    Returns where the first message is: stored now, or by the publish that stored its
    key; None when nothing holds it (an ephemeral topic dropped it). The topic must
    exist (the caller checked it).

    Raises:
        StorageFault: the log refused the write: nothing of the batch is stored,
            and no key of it is remembered.
    """
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
            return _place(stored[0]) if stored else None
        table = partition.idempotence = IdempotenceTable(window)
    kept, digests = table.split(keys)
    first: Stored | None = None
    first_key = keys[0] if keys else None
    if first_key is not None and (not kept or kept[0] != 0):  # a duplicate: where it is
        first = table.get(key_digest(first_key))  # (before this batch may evict it)
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
        table.remember(digests, records)
    table.duplicates += len(bodies) - len(kept)
    if kept and kept[0] == 0:
        first = _place(records[0]) if records else None
    return first


def _place(record: Record) -> Stored:
    return Stored(record.internal_id, record.trace_id, record.offset, record.raw_size)


def restore(partition: Partition, window: int) -> int:
    """Rebuild a partition's table at open from the records its log holds in memory
    (a durable log's tail cache; see docs/extensions.md for what that covers).

    Only headers that contain ``##idempotency_key`` are parsed. No table is made
    when none has a key. Returns how many keys are remembered.
    """
    log = partition.log
    if window <= 0 or log.next_id <= log.start_id:
        return 0
    table = partition.idempotence
    from_id = _first_in_memory(log)
    while from_id < log.next_id:
        records = log.read(from_id, RESTORE_CHUNK)
        if not records:
            break
        digests: list[bytes | None] = []
        keyed: list[Record] = []
        for record in records:
            if record.ext_version != EXT_VERSION_JSON or _MARK not in record.ext:
                continue
            key = _stored_key(record.ext)
            if key is not None:
                digests.append(key_digest(key))
                keyed.append(record)
        if keyed:
            if table is None:
                table = partition.idempotence = IdempotenceTable(window)
            table.remember(digests, keyed)
        from_id = records[-1].internal_id + 1
    return 0 if table is None else len(table)


def _first_in_memory(log: PartitionLog) -> int:
    """The first id from which the log answers from memory (bisection over
    ``is_cold``: at open nothing but the tail cache is in memory)."""
    low, high = log.start_id, log.next_id
    while low < high:
        middle = (low + high) // 2
        if log.is_cold(middle):
            low = middle + 1
        else:
            high = middle
    return low


def _stored_key(header: bytes) -> str | None:
    """The key of a stored header (checked when it was published)."""
    try:
        fields = orjson.loads(header)
    except orjson.JSONDecodeError:
        return None
    return idempotency_key_of(fields) if isinstance(fields, dict) else None
