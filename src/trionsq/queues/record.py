"""The record a partition log holds for each message, and its exact size.

Offsets are virtual: the bytes of all records before this one since the partition
began (design §2). The in-memory log and the durable segments share this encoding,
so an offset or a raw size a client sees (PUB_TRACE's reply, SUB_ORDERED's
layout, ``/channel/setoffset``) stays true when storage changes.

Layout, big-endian::

    [4 size][4 crc32 of everything after it][8 timestamp ns][8 internal id]
    [8 trace id][1 flags][1 ext version][if flags & DEFERRED: 8 deliver-at ns]
    [if ext version: 2 ext length, ext][body]

``raw_size`` = 4 + size. Attempts are not stored: they belong to each channel. A
DPUB's delivery time is stored, since a channel may read the record long after it
was published (or after a restart) and must still hold it back until then.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import attrs

__all__ = ["Record", "RecordError", "decode_records", "encode_record", "record_size"]

_HEAD: Final = struct.Struct(">II")
_FIXED: Final = struct.Struct(">qQQBB")
_DELIVER_AT: Final = struct.Struct(">q")
DEFERRED: Final = 0x01
_EXT_LEN: Final = struct.Struct(">H")
FIXED_SIZE: Final = _HEAD.size + _FIXED.size  # 34: a record with an empty body, no ext
MAX_EXT_LENGTH: Final = 0xFFFF - 1


class RecordError(ValueError):
    """Bytes that are not a whole, intact record (torn tail, bad checksum, bad size)."""


@attrs.define(unsafe_hash=True)
class Record:
    """One message in a partition log; never changed once made.

    Immutable by convention, not enforced: a frozen attrs class sets each field with
    ``object.__setattr__``, and building one cost 1.1 us against 0.25 us (issue 19):
    a record is made per message published and per message read back from disk.
    Hashable by value, as it was frozen.
    """

    offset: int
    """Virtual offset: bytes of all earlier records of the partition."""
    raw_size: int
    """The record's encoded size, its 4-byte size field included."""
    internal_id: int
    """Monotonic per partition, from 1."""
    timestamp: int
    """Publish time, nanoseconds since the Unix epoch."""
    body: bytes
    trace_id: int = 0
    ext_version: int = 0
    ext: bytes = b""
    deliver_at: int = 0
    """DPUB: not before this time (ns since the epoch); 0 = at once."""

    @property
    def end(self) -> int:
        """The offset of the next record."""
        return self.offset + self.raw_size


def record_size(
    body_length: int, ext_version: int = 0, ext_length: int = 0, *, deferred: bool = False
) -> int:
    """The raw size of a record, without encoding it."""
    size = FIXED_SIZE + body_length
    if deferred:
        size += _DELIVER_AT.size
    if ext_version:
        size += _EXT_LEN.size + ext_length
    return size


def encode_record(record: Record) -> bytes:
    """The bytes of ``record`` as a log stores them."""
    flags = DEFERRED if record.deliver_at else 0
    parts = [
        _FIXED.pack(
            record.timestamp, record.internal_id, record.trace_id, flags, record.ext_version
        )
    ]
    if flags & DEFERRED:
        parts.append(_DELIVER_AT.pack(record.deliver_at))
    if record.ext_version:
        if len(record.ext) > MAX_EXT_LENGTH:
            raise ValueError("ext header longer than its 2-byte length allows")
        parts.append(_EXT_LEN.pack(len(record.ext)))
        parts.append(record.ext)
    parts.append(record.body)
    payload = b"".join(parts)
    return _HEAD.pack(len(payload) + 4, zlib.crc32(payload)) + payload


def decode_records(data: bytes, offset: int) -> tuple[list[Record], int]:
    """Every whole record at the start of ``data``, which begins at ``offset``.

    Returns the records and how many bytes they used; an incomplete record at the end
    is left for more data.

    Raises:
        RecordError: a record's size is impossible or its checksum does not match.
    """
    records: list[Record] = []
    pos = 0
    end = len(data)
    while end - pos >= _HEAD.size:
        size, crc = _HEAD.unpack_from(data, pos)
        if size < FIXED_SIZE - 4:
            raise RecordError(f"record at offset {offset + pos} has impossible size {size}")
        stop = pos + 4 + size
        if stop > end:
            break
        payload = data[pos + _HEAD.size : stop]
        if zlib.crc32(payload) != crc:
            raise RecordError(f"record at offset {offset + pos} fails its checksum")
        timestamp, internal_id, trace_id, flags, ext_version = _FIXED.unpack_from(payload)
        cursor = _FIXED.size
        deliver_at = 0
        if flags & DEFERRED:
            if len(payload) < cursor + _DELIVER_AT.size:
                raise RecordError(f"record at offset {offset + pos} is too short for its delay")
            (deliver_at,) = _DELIVER_AT.unpack_from(payload, cursor)
            cursor += _DELIVER_AT.size
        ext = b""
        if ext_version:
            if len(payload) < cursor + 2:
                raise RecordError(f"record at offset {offset + pos} is too short for its ext")
            (ext_length,) = _EXT_LEN.unpack_from(payload, cursor)
            cursor += 2
            if len(payload) < cursor + ext_length:
                raise RecordError(f"record at offset {offset + pos} is too short for its ext")
            ext = payload[cursor : cursor + ext_length]
            cursor += ext_length
        records.append(
            Record(
                offset + pos,
                4 + size,
                internal_id,
                timestamp,
                payload[cursor:],
                trace_id,
                ext_version,
                ext,
                deliver_at,
            )
        )
        pos = stop
    return records, pos
