"""The sink's idempotency keys, and its exactly-once batches of bodies built in bulk.

Every row the sink writes exactly once carries a key derived from the row itself
(sink.py says why): the hex BLAKE2b-128 of the write's scope, the row's body and
its other fields, with ``.<n>`` for the n-th identical row of the task, and the
row goes to the partition the digest's first 4 bytes pick. :func:`idempotency_key`
derives one row's key; :func:`keyed_chunks` turns a whole Arrow column of bodies
into the MPUB_EXT parts of those rows at once (the common write, ``body`` alone),
compiled where built (about 0.4 us a row instead of 2.5) or in
:func:`_keyed_chunks_py`. Both give the keys the sink always gave, so a task
retried by another version still repeats its keys.
"""

from __future__ import annotations

import hashlib
import struct
from itertools import pairwise
from typing import TYPE_CHECKING, Final

from ..protocol.keyed_parts import KEY_ONLY_START
from ..speedups import compiled

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa
    from typing_extensions import Buffer

__all__ = ["KeyedChunk", "idempotency_key", "keyed_chunks"]

KeyedChunk = tuple[int, int, bytes]
"""(partition, messages, their MPUB_EXT parts): :func:`keyed_chunks`' output."""
_PART_HEAD: Final = struct.Struct(">iH")
_BODIES_ONLY: Final = b"{}"
"""What the fields other than the body add to the digest of a row of bodies alone."""


def idempotency_key(
    prefix: bytes, body: bytes, extra: bytes, seen: dict[bytes, int]
) -> tuple[str, int]:
    """A row's key and the number that spreads it over partitions; ``seen`` counts
    the rows of the task by digest (and is updated)."""
    fingerprint = hashlib.blake2b(prefix + body + extra, digest_size=16).digest()
    repeat = seen.get(fingerprint, 0)
    seen[fingerprint] = repeat + 1
    text = fingerprint.hex()
    return (f"{text}.{repeat}" if repeat else text), int.from_bytes(fingerprint[:4], "big")


# a twin on purpose: _speedups.pyi's keyed_chunks stub repeats this signature (a C
# function has none to import)
def _keyed_chunks_py(
    offsets: Buffer,
    data: Buffer,
    first: int,
    count: int,
    wide: bool,
    prefix: bytes,
    extra: bytes,
    seen: dict[bytes, int],
    partitions: int,
    batch_size: int,
) -> list[KeyedChunk]:
    """The MPUB_EXT parts of ``count`` bodies of an Arrow binary or string column
    (its offsets buffer, int64 when ``wide``, from index ``first``, and its data
    buffer), ``batch_size`` at most per chunk, partition by partition, each body
    keyed by :func:`idempotency_key`. The pure-Python twin of
    ``trionsq._speedups.keyed_chunks``."""
    ends = memoryview(offsets).cast("B").cast("q" if wide else "i")[first : first + count + 1]
    view = memoryview(data).cast("B")
    rows: list[list[bytes]] = [[] for _ in range(partitions)]
    for start, stop in pairwise(ends):
        body = bytes(view[start:stop])
        key, spread = idempotency_key(prefix, body, extra, seen)
        header = KEY_ONLY_START + key.encode() + b'"}'
        part = _PART_HEAD.pack(2 + len(header) + len(body), len(header)) + header + body
        rows[spread % partitions].append(part)
    return [
        (partition, len(parts[at : at + batch_size]), b"".join(parts[at : at + batch_size]))
        for partition, parts in enumerate(rows)
        for at in range(0, len(parts), batch_size)
    ]


_keyed_chunks: Final[
    Callable[
        [Buffer, Buffer, int, int, bool, bytes, bytes, dict[bytes, int], int, int],
        list[KeyedChunk],
    ]
] = _keyed_chunks_py if compiled is None else compiled.keyed_chunks


def keyed_chunks(
    column: pa.Array, prefix: bytes, seen: dict[bytes, int], partitions: int, batch_size: int
) -> list[KeyedChunk]:
    """The MPUB_EXT parts of a column of bodies (binary or string) written exactly once."""
    import pyarrow as pa  # only where the sink runs, with Spark

    if not len(column):
        return []
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        wide = False
    else:  # large (64-bit offsets) as they are, any other layout (views) made large
        if not (pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)):
            column = column.cast(pa.large_binary())
        wide = True
    _, offsets, data = column.buffers()
    return _keyed_chunks(
        offsets,
        b"" if data is None else data,
        column.offset,
        len(column),
        wide,
        prefix,
        _BODIES_ONLY,
        seen,
        partitions,
        batch_size,
    )
