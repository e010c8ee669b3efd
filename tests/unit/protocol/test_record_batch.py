"""The record batch of ``/partition/read``: layout, round trips, and refusals."""

from __future__ import annotations

import contextlib
import struct
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol.record_batch import (
    HEADER_SIZE,
    MAGIC,
    RecordBatchError,
    decode_record_batch,
    encode_record_batch,
)
from trionsq.queues.record import Record

INT64: Final = st.integers(-(2**63), 2**63 - 1)


def record(
    offset: int, internal_id: int, body: bytes, *, ext: bytes = b"", version: int = 0
) -> Record:
    return Record(
        offset,
        34 + len(body),
        internal_id,
        1_700_000_000_000_000_000 + internal_id,
        body,
        7 * internal_id,
        version,
        ext,
    )


def test_the_layout_is_the_documented_one() -> None:
    records = [record(0, 1, b"abc"), record(37, 2, b"hello", ext=b'{"a":"b"}', version=4)]
    data = encode_record_batch(records, next_offset=76, latest_offset=100, earliest_offset=0)
    assert data[:8] == MAGIC
    assert struct.unpack_from("<IIqqqq", data, 8) == (2, 0, 76, 100, 0, 0)
    position = HEADER_SIZE
    columns = {}
    for name, size in (("offsets", 16), ("ids", 16), ("timestamps", 16), ("trace_ids", 16)):
        columns[name] = struct.unpack_from("<2q" if name != "trace_ids" else "<2Q", data, position)
        position += size
    assert columns["offsets"] == (0, 37)
    assert columns["ids"] == (1, 2)
    assert columns["trace_ids"] == (7, 14)
    assert data[position : position + 2] == bytes([0, 4])
    assert data[position + 2 : position + 8] == bytes(6)  # zero padding to 8
    position += 8
    assert struct.unpack_from("<3i", data, position) == (0, 0, 9)
    position += 16  # 12 bytes of offsets, padded
    assert data[position : position + 9] == b'{"a":"b"}'
    position += 16
    assert struct.unpack_from("<3i", data, position) == (0, 3, 8)
    position += 16
    assert data[position : position + 8] == b"abchello"
    assert len(data) == position + 8


@pytest.mark.parametrize("count", [0, 1, 2, 3, 7, 8, 9])
def test_every_column_starts_8_byte_aligned(count: int) -> None:
    records = [
        record(10 * i, i + 1, b"x" * i, ext=b"t" * (i % 3), version=2 * (i % 3))
        for i in range(count)
    ]
    data = encode_record_batch(
        records, next_offset=10 * count, latest_offset=10 * count, earliest_offset=0
    )
    batch = decode_record_batch(data)
    ext_length = sum(len(r.ext) for r in records)
    body_length = sum(len(r.body) for r in records)
    sizes = [8 * count] * 4 + [count, 4 * (count + 1), ext_length, 4 * (count + 1), body_length]
    columns = [
        batch.offsets,
        batch.ids,
        batch.timestamps,
        batch.trace_ids,
        batch.ext_versions,
        batch.ext_offsets,
        batch.ext_data,
        batch.body_offsets,
        batch.body_data,
    ]
    position = HEADER_SIZE
    for size, column in zip(sizes, columns, strict=True):
        assert position % 8 == 0
        assert column.nbytes == size
        assert column.tobytes() == data[position : position + size]
        padded = position + size + (-size % 8)
        assert data[position + size : padded] == bytes(padded - position - size)
        position = padded
    assert len(data) == position


def test_an_empty_batch_keeps_the_offsets() -> None:
    data = encode_record_batch([], next_offset=500, latest_offset=500, earliest_offset=100)
    batch = decode_record_batch(data)
    assert (batch.count, batch.next_offset, batch.latest_offset, batch.earliest_offset) == (
        0,
        500,
        500,
        100,
    )
    assert batch.bodies() == []
    assert list(batch.body_offsets) == [0]
    assert len(data) == HEADER_SIZE + 8 + 8


records_strategy = st.lists(
    st.tuples(
        st.integers(0, 2**62),
        st.integers(1, 2**62),
        INT64,
        st.integers(0, 2**64 - 1),
        st.sampled_from([0, 2, 4]),
        st.binary(max_size=40),
        st.binary(max_size=300),
    ),
    max_size=40,
)


@given(records_strategy, INT64, INT64, INT64)
def test_round_trip(
    fields: list[tuple[int, int, int, int, int, bytes, bytes]],
    next_offset: int,
    latest: int,
    earliest: int,
) -> None:
    records = [
        Record(offset, 0, internal_id, timestamp, body, trace_id, version, ext)
        for offset, internal_id, timestamp, trace_id, version, ext, body in fields
    ]
    data = encode_record_batch(
        records, next_offset=next_offset, latest_offset=latest, earliest_offset=earliest
    )
    batch = decode_record_batch(data)
    assert batch.count == len(records)
    assert (batch.next_offset, batch.latest_offset, batch.earliest_offset) == (
        next_offset,
        latest,
        earliest,
    )
    assert list(batch.offsets) == [r.offset for r in records]
    assert list(batch.ids) == [r.internal_id for r in records]
    assert list(batch.timestamps) == [r.timestamp for r in records]
    assert list(batch.trace_ids) == [r.trace_id for r in records]
    assert list(batch.ext_versions) == [r.ext_version for r in records]
    assert batch.bodies() == [r.body for r in records]
    assert batch.exts() == [r.ext for r in records]
    assert len(data) % 8 == 0


@given(st.binary(max_size=400))
def test_any_bytes_decode_or_raise_record_batch_error(data: bytes) -> None:
    with contextlib.suppress(RecordBatchError):
        decode_record_batch(MAGIC + data)


@given(records_strategy, st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=6))
def test_a_damaged_batch_decodes_or_raises_record_batch_error(
    fields: list[tuple[int, int, int, int, int, bytes, bytes]], damage: list[tuple[int, int]]
) -> None:
    records = [
        Record(offset, 0, internal_id, timestamp, body, trace_id, version, ext)
        for offset, internal_id, timestamp, trace_id, version, ext, body in fields
    ]
    data = bytearray(
        encode_record_batch(records, next_offset=0, latest_offset=0, earliest_offset=0)
    )
    for position, value in damage:
        data[8 + position % (len(data) - 8)] = value
    with contextlib.suppress(RecordBatchError):
        batch = decode_record_batch(bytes(data))
        assert len(batch.bodies()) == len(batch.exts()) == batch.count


@given(records_strategy, st.data())
def test_a_truncated_or_extended_batch_is_refused(
    fields: list[tuple[int, int, int, int, int, bytes, bytes]], data: st.DataObject
) -> None:
    records = [
        Record(offset, 0, internal_id, timestamp, body, trace_id, version, ext)
        for offset, internal_id, timestamp, trace_id, version, ext, body in fields
    ]
    encoded = encode_record_batch(records, next_offset=0, latest_offset=0, earliest_offset=0)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(RecordBatchError, match="truncated"):
        decode_record_batch(encoded[:cut])
    with pytest.raises(RecordBatchError, match="after its last column"):
        decode_record_batch(encoded + bytes(8))


def test_refusals_say_what_is_wrong() -> None:
    good = encode_record_batch(
        [record(0, 1, b"abc")], next_offset=37, latest_offset=37, earliest_offset=0
    )
    with pytest.raises(RecordBatchError, match="not a record batch: magic"):
        decode_record_batch(b"XXXXXXXX" + good[8:])
    with pytest.raises(RecordBatchError, match="flags 0x1 are not supported"):
        decode_record_batch(good[:12] + struct.pack("<I", 1) + good[16:])
    with pytest.raises(RecordBatchError, match="cannot hold 1000 records"):
        decode_record_batch(good[:8] + struct.pack("<I", 1000) + good[12:])
    body_offsets_at = HEADER_SIZE + 4 * 8 + 8 + 8
    bad_start = good[:body_offsets_at] + struct.pack("<i", 1) + good[body_offsets_at + 4 :]
    with pytest.raises(RecordBatchError, match="body_offsets start at 1, not 0"):
        decode_record_batch(bad_start)
    backwards = encode_record_batch(
        [record(0, 1, b"abc"), record(37, 2, b"de")],
        next_offset=0,
        latest_offset=0,
        earliest_offset=0,
    )
    at = HEADER_SIZE + 2 * 8 * 4 + 8 + 16  # the body offsets (0, 3, 5)
    assert struct.unpack_from("<3i", backwards, at) == (0, 3, 5)
    backwards = backwards[:at] + struct.pack("<3i", 0, 4, 3) + backwards[at + 12 :]
    with pytest.raises(RecordBatchError, match="body_offsets go back"):
        decode_record_batch(backwards)
    with pytest.raises(RecordBatchError, match="header alone is 48"):
        decode_record_batch(MAGIC)


def test_columns_are_typed_views() -> None:
    data = encode_record_batch(
        [record(0, 1, b"abc")], next_offset=37, latest_offset=37, earliest_offset=0
    )
    batch = decode_record_batch(data)
    assert (batch.offsets.format, batch.ids.format, batch.timestamps.format) == ("q", "q", "q")
    assert (batch.trace_ids.format, batch.ext_versions.format) == ("Q", "B")
    assert (batch.ext_offsets.format, batch.body_offsets.format) == ("i", "i")
    assert bytes(batch.body_data) == b"abc"
