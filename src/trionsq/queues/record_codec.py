"""The record format of a segment file: framing, decoding and encoding records.

Records are encoded exactly as :func:`~trionsq.queues.record.encode_record` does
(size, crc32, fields, body); this module holds that encoding precompiled for the
durable log's loops: :func:`_frames` and :func:`_decode` read records back from a
file, :func:`_encode_batch` turns a batch into bytes and
:class:`~trionsq.queues.record.Record` objects at once, :func:`_append_record` writes
a PUB's record to a descriptor as it encodes it. It knows nothing of segments, so
every other module of the log may use it.
"""

from __future__ import annotations

import os
import struct
import zlib
from itertools import accumulate, chain, repeat
from operator import add
from typing import TYPE_CHECKING, Final

import attrs

from ..speedups import compiled
from .record import DEFERRED, FIXED_SIZE, MAX_EXT_LENGTH, Record

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

# The record encoding of record.py, precompiled for this module's loops.
_SIZE: Final = struct.Struct(">I")
_PREFIX: Final = struct.Struct(">II")  # size, crc
_FIELDS: Final = struct.Struct(">qQQBB")  # timestamp, id, trace id, flags, ext version
_HEAD: Final = struct.Struct(">IIqQQBB")  # the two above, read in one call
_DELIVER_AT: Final = struct.Struct(">q")
_EXT_LENGTH: Final = struct.Struct(">H")
_MIN_SIZE_FIELD: Final = FIXED_SIZE - 4
"""The smallest possible value of a record's size field."""
_FIELDS_AT: Final = _PREFIX.size  # where the checksummed part of a record starts
_BODY_AT: Final = FIXED_SIZE  # body of a record with no ext and no delay

_crc32: Final = zlib.crc32


@attrs.define
class _Walk:
    """Where a walk over a segment's frames ended, and why if early."""

    stop: int
    reason: str | None = None


def _frames(
    fd: int, position: int, end: int, chunk: int, walk: _Walk
) -> Iterator[tuple[bytes, int, int, int]]:
    """Each record frame of a segment from ``position`` to ``end``, read in chunks.

    Yields (buffer, index in buffer, position in file, size field) for every frame
    whose size is possible and that fits before ``end``; the checksum is the caller's
    business. Stops at an impossible size field or a short read, with ``walk.reason``.
    """
    buffer = b""
    base = position
    while position < end:
        index = position - base
        if len(buffer) - index < _SIZE.size:
            if end - position < _SIZE.size:
                walk.reason = f"{end - position} bytes too short for a record"
                break
            buffer = os.pread(fd, min(chunk, end - position), position)
            base = position
            index = 0
            if len(buffer) < _SIZE.size:
                walk.reason = "the file is shorter than expected"
                break
        (size,) = _SIZE.unpack_from(buffer, index)
        stop = position + 4 + size
        if size < _MIN_SIZE_FIELD or stop > end:
            walk.reason = f"impossible record size {size}"
            break
        if stop - base > len(buffer):
            buffer = os.pread(fd, min(max(chunk, stop - position), end - position), position)
            base = position
            index = 0
            if len(buffer) < stop - position:
                walk.reason = "the file is shorter than expected"
                break
        yield buffer, index, position, size
        position = stop
    walk.stop = position


def _decode(buffer: bytes, index: int, offset: int, size: int) -> Record | None:
    """The record in a frame, or None if its checksum or its fields are wrong."""
    stop = index + 4 + size
    crc, timestamp, internal_id, trace_id, flags, ext_version = _HEAD.unpack_from(buffer, index)[1:]
    if _crc32(memoryview(buffer)[index + _FIELDS_AT : stop]) != crc:
        return None
    cursor = index + _BODY_AT
    deliver_at = 0
    if flags & DEFERRED:
        if cursor + _DELIVER_AT.size > stop:
            return None
        (deliver_at,) = _DELIVER_AT.unpack_from(buffer, cursor)
        cursor += _DELIVER_AT.size
    ext = b""
    if ext_version:
        if cursor + _EXT_LENGTH.size > stop:
            return None
        (length,) = _EXT_LENGTH.unpack_from(buffer, cursor)
        cursor += _EXT_LENGTH.size
        if cursor + length > stop:
            return None
        ext = buffer[cursor : cursor + length]
        cursor += length
    return Record(
        offset,
        size + 4,
        internal_id,
        timestamp,
        buffer[cursor:stop],
        trace_id,
        ext_version,
        ext,
        deliver_at,
    )


# a twin on purpose: the compiled decode_run's pure-Python fallback (same arguments)
def _decode_run_py(
    buffer: bytes,
    at: int,
    base: int,
    from_id: int,
    wanted: int,
    budget: int,
    make: type[Record],
    out: list[Record],
) -> tuple[int, int, int, bool]:
    """Decode the whole records of ``buffer`` from ``at`` into ``out``, from id
    ``from_id`` on, until ``wanted`` are taken or ``budget`` bytes are spent.

    ``base`` is the offset of ``buffer[0]``; ``make`` builds each record from the
    nine fields of :class:`Record` in order. Stops early at a damaged record (bad
    checksum or fields) with ``damaged`` True and ``at`` pointing to it. Returns
    (at, wanted, budget, damaged). Records below ``from_id`` are stepped over
    unchecked. The pure-Python twin of ``trionsq._speedups.decode_run``; the loop
    keeps its names local because it runs once per message read from disk.
    """
    unpack = _HEAD.unpack_from
    crc32 = _crc32
    add = out.append
    fields_at, body_at, min_size = _FIELDS_AT, _BODY_AT, _MIN_SIZE_FIELD
    length = len(buffer)
    view = memoryview(buffer)
    damaged = False
    while length - at >= FIXED_SIZE:
        size, crc, timestamp, internal_id, trace_id, flags, ext_version = unpack(buffer, at)
        raw = size + 4
        stop = at + raw
        if stop > length or size < min_size:
            break
        if internal_id >= from_id:
            if flags or ext_version:
                record = _decode(buffer, at, base + at, size)
            elif crc32(view[at + fields_at : stop]) == crc:
                record = make(
                    base + at, raw, internal_id, timestamp, buffer[at + body_at : stop], trace_id
                )
            else:
                record = None
            if record is None:
                damaged = True
                break
            add(record)
            wanted -= 1
            budget -= raw
            if not wanted or budget <= 0:
                at = stop
                break
        at = stop
    view.release()
    return at, wanted, budget, damaged


def record_layout_is_plain() -> bool:
    """Whether a :class:`Record` is only its nine slots, stored as given: no field
    validates or converts and nothing runs after ``__init__``, so the compiled loops
    may fill a new one's slots in place instead of calling it (``use_record_layout``:
    ``encode_plain`` 0.30 -> 0.18 us a record, of an unreplicated MPUB's 1.6 us a
    message on the broker)."""
    return (
        hasattr(Record, "__slots__")
        and not hasattr(Record, "__attrs_post_init__")
        and all(
            field.validator is None and field.converter is None and field.init
            for field in attrs.fields(Record)
        )
    )


if compiled is not None and record_layout_is_plain():
    compiled.use_record_layout(Record, tuple(field.name for field in attrs.fields(Record)))


_decode_run: Final[
    Callable[
        [bytes, int, int, int, int, int, type[Record], list[Record]], tuple[int, int, int, bool]
    ]
] = _decode_run_py if compiled is None else compiled.decode_run
"""Cold reads' per-record loop: compiled where built (checksums verified with the
GIL released, 3x less CPU a record), else :func:`_decode_run_py`."""


def _intact(buffer: bytes, index: int, size: int) -> tuple[int, int] | None:
    """(id, timestamp) of the record in a frame if it is intact, else None; builds no
    Record (recovery checks every record of the log)."""
    _, crc, timestamp, internal_id, _, flags, ext_version = _HEAD.unpack_from(buffer, index)
    if _crc32(buffer[index + _FIELDS_AT : index + 4 + size]) != crc:
        return None
    if (flags or ext_version) and _decode(buffer, index, 0, size) is None:
        return None
    return internal_id, timestamp


def _make_records(
    count: int,
    offsets: list[int],
    sizes: list[int],
    ids: range,
    timestamp: int,
    bodies: Sequence[bytes],
    trace_ids: Sequence[int] | None,
) -> list[Record]:
    """The records of a plain batch, with one ``map`` over ``Record``.

    (While Record was a frozen attrs class, filling its slots column by column was
    faster; its plain ``__init__`` now is, 2.4x, issue 19.)
    """
    traces = repeat(0, count) if trace_ids is None else trace_ids
    return list(
        map(
            Record,
            offsets,
            sizes,
            ids,
            repeat(timestamp, count),
            bodies,
            traces,
            repeat(0, count),
            repeat(b"", count),
            repeat(0, count),
        )
    )


_encode_plain_c: Final[
    Callable[
        [Sequence[bytes], int, int, int, Sequence[int] | None, type[Record]],
        tuple[bytes, list[Record], list[int]] | None,
    ]
    | None
] = None if compiled is None else compiled.encode_plain


# a twin on purpose: the compiled encode_plain's pure-Python fallback (same arguments;
# _encode_batch picks between them)
def _encode_plain_py(
    bodies: Sequence[bytes],
    timestamp: int,
    first_id: int,
    offset: int,
    trace_ids: Sequence[int] | None,
) -> tuple[bytes, list[Record], list[int]]:
    """The pure-Python twin of ``trionsq._speedups.encode_plain``.

    Every per-record step is a ``map`` over a C function, which keeps the interpreter
    out of the loop: this is the MPUB hot path.
    """
    count = len(bodies)
    if count == 1:  # a PUB: the maps' set-up would cost more than the record
        return _encode_one(bodies[0], timestamp, first_id, offset, trace_ids)
    ids = range(first_id, first_id + count)
    zeros = repeat(0, count)
    lengths = list(map(len, bodies))
    fields = map(
        _FIELDS.pack,
        repeat(timestamp, count),
        ids,
        zeros if trace_ids is None else trace_ids,
        repeat(0, count),
        repeat(0, count),
    )
    payloads = list(map(add, fields, bodies))
    prefixes = map(
        _PREFIX.pack, map(add, lengths, repeat(FIXED_SIZE - 4, count)), map(_crc32, payloads)
    )
    data = b"".join(chain.from_iterable(zip(prefixes, payloads, strict=True)))
    sizes = list(map(add, lengths, repeat(FIXED_SIZE, count)))
    offsets = list(accumulate(sizes, initial=offset))
    records = _make_records(count, offsets, sizes, ids, timestamp, bodies, trace_ids)
    return data, records, offsets


def _encode_one(
    body: bytes, timestamp: int, internal_id: int, offset: int, trace_ids: Sequence[int] | None
) -> tuple[bytes, list[Record], list[int]]:
    """:func:`_encode_plain_py` for one body, written out (8 us -> about 1 us a PUB)."""
    trace_id = 0 if trace_ids is None else trace_ids[0]
    payload = _FIELDS.pack(timestamp, internal_id, trace_id, 0, 0) + body
    size = len(body) + FIXED_SIZE
    data = _PREFIX.pack(size - 4, _crc32(payload)) + payload
    record = Record(offset, size, internal_id, timestamp, body, trace_id, 0, b"", 0)
    return data, [record], [offset, offset + size]


def write_whole(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd``: written again after a short write (raises OSError;
    part of it may be in the file then)."""
    written = os.write(fd, data)
    if written != len(data):
        view = memoryview(data)
        while written < len(data):
            step = os.write(fd, view[written:])
            if step <= 0:
                raise OSError("os.write wrote nothing")
            written += step


# a twin on purpose: the compiled append_record's pure-Python fallback (same arguments)
def _append_record_py(
    fd: int, body: bytes, timestamp: int, internal_id: int, offset: int, make: type[Record]
) -> Record:
    """The pure-Python twin of ``trionsq._speedups.append_record``: one record with no
    trace id, ext or delay written whole to ``fd`` (a PUB, issue 37), and made."""
    payload = _FIELDS.pack(timestamp, internal_id, 0, 0, 0) + body
    size = len(body) + FIXED_SIZE
    write_whole(fd, _PREFIX.pack(size - 4, _crc32(payload)) + payload)
    return make(offset, size, internal_id, timestamp, body, 0, 0, b"", 0)


_append_record: Final[Callable[[int, bytes, int, int, int, type[Record]], Record]] = (
    _append_record_py if compiled is None else compiled.append_record
)
"""A plain PUB's record written and made in one call: compiled where built (about
1 us less a PUB than encoding, writing and making it in Python)."""


_encode_ext_c: Final[
    Callable[
        [Sequence[bytes], Sequence[bytes], int, int, int, int, Sequence[int] | None, type[Record]],
        tuple[bytes, list[Record], list[int]] | None,
    ]
    | None
] = None if compiled is None else compiled.encode_ext


# a twin on purpose: _encode_plain_py's and _encode_general_py's arguments, which it
# hands on to the encoder it picks
def _encode_batch(
    bodies: Sequence[bytes],
    timestamp: int,
    first_id: int,
    offset: int,
    trace_ids: Sequence[int] | None,
    ext_version: int,
    exts: Sequence[bytes] | None,
    deliver_at: int,
) -> tuple[bytes, list[Record], list[int]]:
    """A batch's bytes, its records, its offsets and end: by the compiled encoder that
    takes it where built, else by its pure-Python twin.

    A batch with no ext and no delay: ``encode_plain`` (bytes written and checksummed
    outside the GIL; MPUB x200 0.87 -> 0.35 us a record), else :func:`_encode_plain_py`,
    which also takes a batch with a body that is not exactly ``bytes``. Ext headers
    without a delay (MPUB_EXT, PUB_EXT): ``encode_ext`` (issue 32: keyed MPUB_EXT x500
    1.5 -> 0.3 us a record); the rest, and where that is not built,
    :func:`_encode_general_py`.
    """
    if not (ext_version or deliver_at):
        if _encode_plain_c is not None:
            encoded = _encode_plain_c(bodies, timestamp, first_id, offset, trace_ids, Record)
            if encoded is not None:
                return encoded
        return _encode_plain_py(bodies, timestamp, first_id, offset, trace_ids)
    if _encode_ext_c is not None and ext_version and exts is not None and not deliver_at:
        encoded = _encode_ext_c(
            bodies, exts, ext_version, timestamp, first_id, offset, trace_ids, Record
        )
        if encoded is not None:
            return encoded
    return _encode_general_py(
        bodies, timestamp, first_id, offset, trace_ids, ext_version, exts, deliver_at
    )


# a twin on purpose: the compiled encode_ext's pure-Python fallback (same arguments;
# _encode_batch picks between them)
def _encode_general_py(
    bodies: Sequence[bytes],
    timestamp: int,
    first_id: int,
    offset: int,
    trace_ids: Sequence[int] | None,
    ext_version: int,
    exts: Sequence[bytes] | None,
    deliver_at: int,
) -> tuple[bytes, list[Record], list[int]]:
    """The pure-Python encoding of any batch; the twin of
    ``trionsq._speedups.encode_ext`` for ext headers without a delay."""
    flags = DEFERRED if deliver_at else 0
    delay = _DELIVER_AT.pack(deliver_at) if deliver_at else b""
    parts: list[bytes] = []
    records: list[Record] = []
    offsets: list[int] = []
    internal_id = first_id
    for number, body in enumerate(bodies):
        ext = exts[number] if ext_version and exts is not None else b""
        if len(ext) > MAX_EXT_LENGTH:
            raise ValueError("ext header longer than its 2-byte length allows")
        trace_id = trace_ids[number] if trace_ids is not None else 0
        middle = delay + _EXT_LENGTH.pack(len(ext)) + ext if ext_version else delay
        payload = _FIELDS.pack(timestamp, internal_id, trace_id, flags, ext_version) + middle + body
        size = len(payload) + 8
        parts.append(_PREFIX.pack(size - 4, _crc32(payload)))
        parts.append(payload)
        records.append(
            Record(
                offset, size, internal_id, timestamp, body, trace_id, ext_version, ext, deliver_at
            )
        )
        offsets.append(offset)
        internal_id += 1
        offset += size
    offsets.append(offset)
    return b"".join(parts), records, offsets
