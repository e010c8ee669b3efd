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
A durable partition keeps its keys in a journal beside its log
(:mod:`trionsq.queues.key_journal`: each batch's new entries go out with one write
right after the batch), so after a restart, ``kill -9`` included, the table holds
the same last ``window`` keys (:func:`restore`); an emptied or deleted topic loses
them.

The table lives here; :func:`~trionsq.broker.keyed_publish.publish_once` uses it
around the append. Pure state on the broker's thread: the check, the append and the
remembering run without an await in between, so concurrent publishes cannot both
store one key.
"""

from __future__ import annotations

import hashlib
import struct
from collections import deque
from itertools import chain, starmap
from operator import attrgetter
from typing import TYPE_CHECKING, Final, NamedTuple, cast

from ..protocol.ext_header import IDEMPOTENCY_KEY, idempotency_key_of, stored_fields
from ..protocol.message import EXT_VERSION_JSON
from ..queues.segment_format import storage_log
from ..speedups import compiled

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..queues.key_journal import KeyJournal
    from ..queues.partition_log import PartitionLog
    from ..queues.record import Record

__all__ = [
    "IdempotenceTable",
    "Stored",
    "journaled",
    "key_digest",
    "key_digests",
    "may_hold_keys",
    "new_table",
    "remember_copies",
    "restore",
    "rewrite_journal",
]

_MARK: Final = IDEMPOTENCY_KEY.encode()
"""What a stored header must contain before it is parsed for a key (at restore)."""
_PLACE: Final = struct.Struct(">QQQI")
"""A remembered record: internal id, trace id, offset, raw size (28 bytes: a bytes
value is 64 bytes of memory where a tuple of four ints is over 140)."""
_PLACE_FIELDS: Final = attrgetter("internal_id", "trace_id", "offset", "raw_size")
_DIGEST: Final = 16
_ENTRY: Final = _DIGEST + _PLACE.size
"""A journal entry: the digest, then the place (queues/key_journal.py's ENTRY_SIZE)."""
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


def _key_digests_py(keys: Sequence[str | None]) -> list[bytes | None]:
    """:func:`key_digest` of each key (None: no key); the pure-Python twin of
    ``trionsq._speedups.key_digests``."""
    return [None if key is None else key_digest(key) for key in keys]


_key_digests_c: Final[Callable[[Sequence[str | None]], list[bytes | None] | None] | None] = (
    None if compiled is None else compiled.key_digests
)


def key_digests(keys: Sequence[str | None]) -> list[bytes | None]:
    """:func:`key_digest` of each key of a batch (None: no key): compiled where built
    (0.6 -> 0.1 us a key), else :func:`_key_digests_py`, which also takes a key with a
    lone surrogate."""
    if _key_digests_c is not None:
        digests = _key_digests_c(keys)
        if digests is not None:
            return digests
    return _key_digests_py(keys)


class IdempotenceTable:
    """One partition's most recently stored keys (by digest), oldest first.

    A dict for the lookups and a deque for the order: a dict's own order would cost a
    scan past every deleted entry to find the oldest, which makes eviction quadratic.
    """

    __slots__ = ("_order", "_places", "_unwritten", "duplicates", "journal", "window")

    def __init__(self, window: int, journal: KeyJournal | None = None) -> None:
        if window <= 0:
            raise ValueError(f"an idempotence window must be positive, got {window}")
        self.window: Final = window
        """Keys remembered at most; past it the oldest is forgotten."""
        self.duplicates = 0
        """Messages not stored because their key was (publishes that still succeeded)."""
        self.journal = journal
        """Where new keys are also written (a durable log's), or None."""
        self._places: dict[bytes, bytes] = {}
        self._order: deque[bytes] = deque()
        self._unwritten = b""

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
        every = key_digests(keys)
        if None not in every and places.keys().isdisjoint(every) and len(set(every)) == len(every):
            return list(range(len(every))), every  # the common case: each key new, once
        kept: list[int] = []
        digests: list[bytes | None] = []
        seen: set[bytes] = set()
        for index, digest in enumerate(every):
            if digest is None:
                kept.append(index)
                digests.append(None)
                continue
            if digest in places or digest in seen:
                continue
            seen.add(digest)
            kept.append(index)
            digests.append(digest)
        return kept, digests

    def remember(
        self, digests: Sequence[bytes | None], records: Sequence[Record], *, fresh: bool = False
    ) -> None:
        """These records were stored with these key digests (None: no key): remember
        them; past the window the oldest keys go. A digest remembered already keeps
        its first record and its place in the order. ``fresh``: every digest is one
        that :meth:`split` kept (none None, none remembered, none twice), so the batch
        is remembered with a few calls over it instead of a step per record."""
        places = self._places
        order = self._order
        if fresh and len(records) == len(digests):
            keyed = cast("Sequence[bytes]", digests)
            new = list(starmap(_PLACE.pack, map(_PLACE_FIELDS, records)))
            places.update(zip(keyed, new, strict=True))
            order.extend(keyed)
            entries = b"".join(chain.from_iterable(zip(keyed, new, strict=True)))
        else:
            entries = self._remember_each(digests, records)
        for _ in range(len(order) - self.window):
            del places[order.popleft()]
        if entries and self.journal is not None:
            self._journal(entries)

    def _remember_each(self, digests: Sequence[bytes | None], records: Sequence[Record]) -> bytes:
        """:meth:`remember`, record by record; the new journal entries."""
        places = self._places
        order = self._order
        pack = _PLACE.pack
        entries: list[bytes] = []
        for digest, record in zip(digests, records, strict=False):  # fewer: dropped
            if digest is None or digest in places:
                continue
            place = places[digest] = pack(
                record.internal_id, record.trace_id, record.offset, record.raw_size
            )
            order.append(digest)
            entries += (digest, place)
        return b"".join(entries)

    def _journal(self, entries: bytes) -> None:
        """Write new entries to the journal; after a refused write they wait for the
        next (logged once): the keys stay remembered here meanwhile."""
        journal = self.journal
        assert journal is not None  # noqa: S101 - the caller checked
        try:
            journal.append(self._unwritten + entries)
        except OSError as error:
            if not self._unwritten:
                storage_log.error("%s: idempotency keys not written: %s", journal.path, error)
            self._unwritten += entries
        else:
            self._unwritten = b""

    def load(self, entries: bytes) -> int:
        """Remember a journal's entries (oldest first, a later one of a digest winning),
        writing nothing; returns the highest internal id among them (0: none)."""
        if not entries:
            return 0
        places = self._places
        starts = range(0, len(entries), _ENTRY)
        digests = [entries[at : at + _DIGEST] for at in starts]
        loaded = dict(
            zip(digests, [entries[at + _DIGEST : at + _ENTRY] for at in starts], strict=True)
        )
        if not places and len(loaded) == len(digests):  # at open, no key twice: the fast way
            self._places = loaded
            self._order = deque(digests)
            self._evict()
            return _entry_id(entries, len(entries) - _ENTRY)
        newest: dict[bytes, bytes] = {}
        for at in range(len(entries) - _ENTRY, -1, -_ENTRY):
            digest = entries[at : at + _DIGEST]
            if digest not in newest and digest not in places:
                newest[digest] = entries[at + _DIGEST : at + _ENTRY]
        for digest in reversed(newest):
            places[digest] = newest[digest]
            self._order.append(digest)
        self._evict()
        return _entry_id(entries, len(entries) - _ENTRY)

    def _evict(self) -> None:
        places = self._places
        order = self._order
        for _ in range(len(order) - self.window):
            del places[order.popleft()]

    def entries(self) -> bytes:
        """Every key remembered as journal entries, oldest first."""
        places = self._places
        return b"".join(digest + places[digest] for digest in self._order)


def new_table(log: PartitionLog, window: int) -> IdempotenceTable:
    """A partition's first table (its first keyed publish, or after an empty), with
    the log's journal when the log is durable."""
    journal, entries = log.open_keys(window, create=True)
    table = IdempotenceTable(window)
    table.load(entries)
    table.journal = journal
    return table


def restore(
    log: PartitionLog, window: int, table: IdempotenceTable | None = None
) -> IdempotenceTable | None:
    """Rebuild a partition's table at open, into ``table`` if it has one: the keys of
    its journal, then those of the records stored after the journal's last entry
    (a crash between the two writes of a batch), or without a journal (a broker
    that kept none) those of the records the log holds in memory. Only headers that
    contain ``##idempotency_key`` are parsed. No table is made when there is no key,
    or with no window.
    """
    if window <= 0:
        return table
    journal, entries = log.open_keys(window, create=False)
    from_id = _first_in_memory(log)
    if journal is not None:
        table = table or IdempotenceTable(window)
        # entries past the log's end name records a power loss took: not stored
        while entries and _entry_id(entries, len(entries) - _ENTRY) >= log.next_id:
            entries = entries[:-_ENTRY]
        last = table.load(entries)
        table.journal = journal
        if last:
            from_id = max(last + 1, log.start_id)
    return journaled(_remember_stored(log, window, table, from_id), log, window)


def journaled(
    table: IdempotenceTable | None, log: PartitionLog, window: int
) -> IdempotenceTable | None:
    """``table`` with its durable log's journal, which gets every key the table holds
    if it had none (a table rebuilt from the records, or a replica's copied keys)."""
    if table is not None and table.journal is None and log.on_disk:
        table.journal, _ = log.open_keys(window, create=True)
        if table.journal is not None:
            table.journal.append(table.entries())
    return table


def rewrite_journal(table: IdempotenceTable | None) -> None:
    """Make the journal hold exactly the table's keys: after a replica's log was cut,
    it still names the records that went, which must not come back at a restart."""
    if table is not None and table.journal is not None:
        table.journal.forget()
        entries = table.entries()
        if entries:
            table.journal.append(entries)


def _remember_stored(
    log: PartitionLog, window: int, table: IdempotenceTable | None, from_id: int
) -> IdempotenceTable | None:
    """Remember the keys of the records from ``from_id`` on (read from the files
    where they are not in memory)."""
    while from_id < log.next_id:
        if log.is_cold(from_id):
            records = log.read_cold(from_id, RESTORE_CHUNK)
        else:
            records = log.read(from_id, RESTORE_CHUNK)
        if not records:
            break
        table = remember_copies(table, window, records)
        from_id = records[-1].internal_id + 1
    return table


def may_hold_keys(data: bytes) -> bool:
    """Whether records encoded as ``data`` may carry an idempotency key: the ones
    :func:`remember_copies` takes have the key's name in their header bytes (one
    search over a replica's frame, instead of a look at each record)."""
    return _MARK in data


def remember_copies(
    table: IdempotenceTable | None, window: int, records: Sequence[Record]
) -> IdempotenceTable | None:
    """Remember the keys ``records`` carry (stored records read back, or a leader's
    records a replica copied), making the table at the first key."""
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
    return table


def _entry_id(entries: bytes, at: int) -> int:
    return int.from_bytes(entries[at + _DIGEST : at + _DIGEST + 8], "big")


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
