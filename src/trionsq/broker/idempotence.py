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

The table lives here; :meth:`~trionsq.broker.broker.Broker.publish_once` uses it
around the append. Pure state on the broker's thread: the check, the append and the
remembering run without an await in between, so concurrent publishes cannot both
store one key.
"""

from __future__ import annotations

import hashlib
import struct
from collections import deque
from typing import TYPE_CHECKING, Final, NamedTuple

from ..protocol.ext_header import IDEMPOTENCY_KEY, idempotency_key_of, stored_fields
from ..protocol.message import EXT_VERSION_JSON

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..queues.partition_log import PartitionLog
    from ..queues.record import Record

__all__ = ["IdempotenceTable", "Stored", "key_digest", "restore"]

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

    @classmethod
    def of(cls, record: Record) -> Stored:
        return cls(record.internal_id, record.trace_id, record.offset, record.raw_size)


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


def restore(
    log: PartitionLog, window: int, table: IdempotenceTable | None = None
) -> IdempotenceTable | None:
    """Rebuild a partition's table at open from the records its log holds in memory
    (a durable log's tail cache; see docs/extensions.md for what that covers), into
    ``table`` if it has one. Only headers that contain ``##idempotency_key`` are
    parsed. No table is made when none has a key, or with no window.
    """
    if window <= 0 or log.next_id <= log.start_id:
        return table
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
                table = IdempotenceTable(window)
            table.remember(digests, keyed)
        from_id = records[-1].internal_id + 1
    return table


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
    fields = stored_fields(header)
    return idempotency_key_of(fields) if fields is not None else None
