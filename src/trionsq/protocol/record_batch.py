"""The record batch: a page of a partition log in columns, for readers by offset.

``GET /partition/read`` answers with one batch (``application/vnd.trionsq.record-batch``);
the Spark source and other readers decode it with :func:`decode_record_batch`. The
layout is columnar so that a reader can hand each column to Arrow without copying:
fixed-width columns are plain little-endian arrays and the two binary columns are
Arrow's ``binary`` layout (int32 offsets, then the bytes). Every column starts at a
multiple of 8 bytes from the start of the body (zero padding between), all integers
are little-endian::

    header, 48 bytes:
      [8 magic b"TNSQRB01"][u32 count n][u32 flags = 0]
      [i64 next_offset][i64 latest_offset][i64 earliest_offset][i64 reserved = 0]
    columns, in this order, each padded to 8 bytes:
      offsets       i64[n]    virtual byte offset of each record in the partition
      ids           i64[n]    internal id (from 1)
      timestamps    i64[n]    publish time, ns since the Unix epoch
      trace_ids     u64[n]    0 when none was given
      ext_versions  u8[n]     0 none, 2 raw tag, 4 JSON header
      ext_offsets   i32[n+1]  into ext_data; the first is 0
      ext_data      bytes
      body_offsets  i32[n+1]  into body_data; the first is 0
      body_data     bytes

``next_offset`` is where the next read starts (the end of the last record, or the
offset asked for when the batch is empty), ``latest_offset`` the end of the
partition's log when read, ``earliest_offset`` the oldest offset still readable.

Sans-IO: no trio, no sockets, nothing but bytes.
"""

from __future__ import annotations

import struct
import sys
from array import array
from itertools import accumulate, pairwise
from operator import attrgetter
from typing import TYPE_CHECKING, Final, Literal, Protocol

import attrs

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "CONTENT_TYPE",
    "HEADER_SIZE",
    "MAGIC",
    "BatchRecord",
    "RecordBatch",
    "RecordBatchError",
    "decode_record_batch",
    "encode_record_batch",
]

MAGIC: Final = b"TNSQRB01"
CONTENT_TYPE: Final = "application/vnd.trionsq.record-batch"
_HEADER: Final = struct.Struct("<8sIIqqqq")
HEADER_SIZE: Final = _HEADER.size  # 48
_MAX_BINARY: Final = 2**31 - 1
"""Arrow ``binary`` offsets are int32: a column's bytes must stay below 2 GiB."""
_MIN_RECORD_BYTES: Final = 8 * 4 + 1 + 4 + 4
"""The least a record adds to a batch (four 8-byte values, its version byte and one
offset in each binary column): bounds ``count`` by the body's length."""
_LITTLE: Final = sys.byteorder == "little"
_PADDING: Final = bytes(8)

_offset: Final = attrgetter("offset")
_internal_id: Final = attrgetter("internal_id")
_timestamp: Final = attrgetter("timestamp")
_trace_id: Final = attrgetter("trace_id")
_ext_version: Final = attrgetter("ext_version")
_ext: Final = attrgetter("ext")
_body: Final = attrgetter("body")


class BatchRecord(Protocol):
    """What a batch takes from each record (:class:`trionsq.queues.record.Record` has it)."""

    @property
    def offset(self) -> int: ...
    @property
    def internal_id(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def trace_id(self) -> int: ...
    @property
    def ext_version(self) -> int: ...
    @property
    def ext(self) -> bytes: ...
    @property
    def body(self) -> bytes: ...


class RecordBatchError(ValueError):
    """Bytes that are not a well-formed record batch."""


@attrs.frozen(eq=False)
class RecordBatch:
    """A decoded batch: header values and each column as a view of the body.

    Typed columns are memoryviews cast to their element type (``'q'`` i64, ``'Q'``
    u64, ``'B'`` u8, ``'i'`` i32); the two ``*_data`` columns are byte views. They
    share the body's memory: keep them only as long as you keep the body in mind.
    """

    count: int
    next_offset: int
    latest_offset: int
    earliest_offset: int
    offsets: memoryview
    ids: memoryview
    timestamps: memoryview
    trace_ids: memoryview
    ext_versions: memoryview
    ext_offsets: memoryview
    ext_data: memoryview
    body_offsets: memoryview
    body_data: memoryview

    def bodies(self) -> list[bytes]:
        """Each record's body."""
        return _split(self.body_data, self.body_offsets)

    def exts(self) -> list[bytes]:
        """Each record's ext bytes (``b""`` when it has none)."""
        return _split(self.ext_data, self.ext_offsets)


def _split(data: memoryview, offsets: memoryview) -> list[bytes]:
    raw = data.tobytes()
    bounds = offsets.tolist()
    return [raw[start:stop] for start, stop in pairwise(bounds)]


def _pad(length: int) -> bytes:
    return _PADDING[: -length % 8]


def _le(values: array[int]) -> bytes:
    if not _LITTLE:  # pragma: no cover - every platform CI runs on is little-endian
        values.byteswap()
    return values.tobytes()


def encode_record_batch(
    records: Sequence[BatchRecord], *, next_offset: int, latest_offset: int, earliest_offset: int
) -> bytes:
    """The batch holding ``records`` (in log order), with the header's offsets.

    Raises:
        ValueError: the bodies or the ext headers add up to 2 GiB or more (Arrow's
            int32 offsets), or a value does not fit its column.
    """
    count = len(records)
    bodies = list(map(_body, records))
    exts = list(map(_ext, records))
    body_offsets = array("i", accumulate(map(len, bodies), initial=0)) if count else array("i", [0])
    ext_offsets = array("i", accumulate(map(len, exts), initial=0)) if count else array("i", [0])
    body_data = b"".join(bodies)
    ext_data = b"".join(exts)
    if len(body_data) > _MAX_BINARY or len(ext_data) > _MAX_BINARY:  # pragma: no cover
        raise ValueError("a record batch holds less than 2 GiB of bodies and of ext headers")
    versions = bytes(map(_ext_version, records))
    return b"".join(
        (
            _HEADER.pack(MAGIC, count, 0, next_offset, latest_offset, earliest_offset, 0),
            _le(array("q", map(_offset, records))),
            _le(array("q", map(_internal_id, records))),
            _le(array("q", map(_timestamp, records))),
            _le(array("Q", map(_trace_id, records))),
            versions,
            _pad(count),
            _le(ext_offsets),
            _pad(len(ext_offsets) * 4),
            ext_data,
            _pad(len(ext_data)),
            _le(body_offsets),
            _pad(len(body_offsets) * 4),
            body_data,
            _pad(len(body_data)),
        )
    )


def _aligned(position: int) -> int:
    return position + (-position % 8)


def decode_record_batch(data: bytes) -> RecordBatch:
    """The batch in ``data`` (a whole response body).

    Raises:
        RecordBatchError: wrong magic or flags, a truncated body, or binary offsets
            that do not start at 0, go back, or end elsewhere than their data.
    """
    view = memoryview(data).cast("B")
    size = len(view)
    if size < HEADER_SIZE:
        raise RecordBatchError(
            f"record batch truncated: {size} bytes, the header alone is {HEADER_SIZE}"
        )
    magic, count, flags, next_offset, latest_offset, earliest_offset, _ = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise RecordBatchError(f"not a record batch: magic {magic!r}, expected {MAGIC!r}")
    if flags:
        raise RecordBatchError(f"record batch flags {flags:#x} are not supported (expected 0)")
    if count * _MIN_RECORD_BYTES > size - HEADER_SIZE:
        raise RecordBatchError(f"record batch truncated: {size} bytes cannot hold {count} records")
    position = HEADER_SIZE

    def column(length: int, what: str) -> memoryview:
        nonlocal position
        end = position + length
        if end > size:
            raise RecordBatchError(
                f"record batch truncated in its {what} column: it needs {end} bytes, got {size}"
            )
        found = view[position:end]
        position = _aligned(end)
        return found

    offsets = _typed(column(8 * count, "offsets"), "q")
    ids = _typed(column(8 * count, "ids"), "q")
    timestamps = _typed(column(8 * count, "timestamps"), "q")
    trace_ids = _typed(column(8 * count, "trace_ids"), "Q")
    ext_versions = column(count, "ext_versions")
    ext_offsets = _typed(column(4 * (count + 1), "ext_offsets"), "i")
    ext_data = column(_data_length(ext_offsets, "ext"), "ext_data")
    body_offsets = _typed(column(4 * (count + 1), "body_offsets"), "i")
    body_data = column(_data_length(body_offsets, "body"), "body_data")
    if position != size:
        raise RecordBatchError(
            f"record batch has {size - position} bytes after its last column"
            if size > position
            else f"record batch truncated: the padding after body_data needs {position} bytes,"
            f" got {size}"
        )
    return RecordBatch(
        count,
        next_offset,
        latest_offset,
        earliest_offset,
        offsets,
        ids,
        timestamps,
        trace_ids,
        ext_versions,
        ext_offsets,
        ext_data,
        body_offsets,
        body_data,
    )


def _typed(raw: memoryview, code: Literal["q", "Q", "i"]) -> memoryview:
    """A column's bytes as typed values (copied and swapped on a big-endian host)."""
    if _LITTLE:
        return raw.cast(code)
    values = array(code, raw.tobytes())  # pragma: no cover - big-endian hosts only
    values.byteswap()  # pragma: no cover
    return memoryview(values)  # pragma: no cover


def _data_length(offsets: memoryview, what: str) -> int:
    """The length of a binary column's data, after checking its offsets."""
    bounds = offsets.tolist()
    if bounds[0] != 0:
        raise RecordBatchError(f"record batch {what}_offsets start at {bounds[0]}, not 0")
    if any(stop < start for start, stop in pairwise(bounds)):
        raise RecordBatchError(f"record batch {what}_offsets go back")
    return int(bounds[-1])
