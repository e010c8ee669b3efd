"""Record encoding: sizes match the encoder, round trips, torn and corrupt input."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.queues.record import (
    FIXED_SIZE,
    Record,
    RecordError,
    decode_records,
    encode_record,
    record_size,
)

records = st.builds(
    Record,
    offset=st.just(0),
    raw_size=st.just(0),
    internal_id=st.integers(1, 2**64 - 1),
    timestamp=st.integers(0, 2**63 - 1),
    body=st.binary(min_size=1, max_size=300),
    trace_id=st.integers(0, 2**64 - 1),
    ext_version=st.sampled_from([0, 2, 4]),
    ext=st.binary(max_size=100),
    deliver_at=st.sampled_from([0, 1_700_000_000_000_000_000]),
).map(
    lambda r: Record(
        0,
        record_size(
            len(r.body),
            r.ext_version,
            len(r.ext) if r.ext_version else 0,
            deferred=r.deliver_at != 0,
        ),
        r.internal_id,
        r.timestamp,
        r.body,
        r.trace_id,
        r.ext_version,
        r.ext if r.ext_version else b"",
        r.deliver_at,
    )
)


def test_plain_record_size() -> None:
    assert FIXED_SIZE == 34
    assert record_size(200) == 234
    assert record_size(5, 4, 10) == 34 + 5 + 2 + 10
    assert record_size(5, deferred=True) == 34 + 8 + 5


@given(st.lists(records, min_size=1, max_size=20))
def test_records_round_trip_with_real_offsets(batch: list[Record]) -> None:
    offset = 1000
    placed = []
    for r in batch:
        placed.append(attrs.evolve(r, offset=offset))
        offset += r.raw_size
    data = b"".join(encode_record(r) for r in placed)
    assert len(data) == sum(r.raw_size for r in placed)
    decoded, used = decode_records(data, 1000)
    assert decoded == placed
    assert used == len(data)


def test_torn_tail_is_left_for_later() -> None:
    one = encode_record(Record(0, record_size(3), 1, 5, b"abc"))
    decoded, used = decode_records(one + one[:10], 0)
    assert [r.internal_id for r in decoded] == [1]
    assert used == len(one)


def test_corrupt_record_is_detected() -> None:
    data = bytearray(encode_record(Record(0, record_size(3), 1, 5, b"abc")))
    data[-1] ^= 0xFF
    with pytest.raises(RecordError, match="checksum"):
        decode_records(bytes(data), 0)
    with pytest.raises(RecordError, match="impossible size"):
        decode_records(b"\x00\x00\x00\x01" + b"\x00" * 40, 0)
