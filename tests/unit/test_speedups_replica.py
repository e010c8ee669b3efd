"""A replica's check of the records its leader shipped (``scan_copies``, issue 35):
the compiled scan (trionsq._speedups, _speedups_replica.c) against its pure-Python
twin and against what decoding the same bytes into Records finds, on whole, damaged,
torn and out-of-sequence frames. tests/unit/queues/test_verbatim_append.py runs the
durable log's copies with each twin.
"""

from __future__ import annotations

from itertools import accumulate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.queues.record import Record, RecordError, encode_record, record_size
from trionsq.queues.record_codec import _decode_run_py
from trionsq.queues.record_runs import _scan_copies_py, scan_copies

from .test_speedups import _compiled

FUTURE = 1_800_000_000_000_000_000


@st.composite
def _frames(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """(data, offset, first id): records as a leader ships them, with timestamps that
    go back and forth, maybe flipped bytes, a torn tail or an id out of sequence."""
    first = draw(st.integers(1, 2**63))
    offset = draw(st.integers(0, 2**50))
    parts = []
    internal_id = first
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 15)) == 0:  # a gap or a repeat in the ids
            internal_id += draw(st.sampled_from([-1, 1, 2]))
        ext_version = draw(st.sampled_from([0, 0, 2]))
        ext = draw(st.binary(max_size=20)) if ext_version else b""
        deliver_at = draw(st.sampled_from([0, 0, FUTURE]))
        body = draw(st.binary(max_size=80))
        size = record_size(len(body), ext_version, len(ext), deferred=deliver_at != 0)
        timestamp = draw(st.integers(-(2**63), 2**63 - 1))
        trace_id = draw(st.integers(0, 2**64 - 1))
        record = Record(
            0, size, internal_id, timestamp, body, trace_id, ext_version, ext, deliver_at
        )
        parts.append(encode_record(record))
        internal_id += 1
    data = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 2))):  # flipped bytes: checksums, sizes, fields
        if data:
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    if draw(st.booleans()):  # a torn tail
        del data[max(len(data) - draw(st.integers(1, 40)), 0) :]
    return bytes(data), offset, first


def _by_records(data: bytes, offset: int, first_id: int) -> tuple[int, int, list[int], list[int]]:
    """What the scan must find, from Records decoded with the checked cold-read loop:
    the intact records from the start whose ids run on from ``first_id``."""
    records: list[Record] = []
    _decode_run_py(data, 0, offset, 0, len(data) + 1, len(data) + 1, Record, records)
    taken = []
    for number, record in enumerate(records):
        if record.internal_id != first_id + number:
            break
        taken.append(record)
    end = taken[-1].end if taken else offset
    return (
        end - offset,
        sum(len(r.body) for r in taken),
        [r.offset for r in taken] + [end],
        list(accumulate((r.timestamp for r in taken), max)),
    )


def _plain(result: tuple[int, int, object, object]) -> tuple[int, int, list[int], list[int]]:
    at, body, offsets, stamps = result
    return at, body, list(offsets), list(stamps)  # type: ignore[call-overload]


@given(_frames())
def test_scan_copies_twins_agree_with_the_records_decoded(frame: tuple[bytes, int, int]) -> None:
    data, offset, first_id = frame
    expected = _by_records(data, offset, first_id)
    assert _plain(_scan_copies_py(data, offset, first_id)) == expected
    assert _plain(_compiled().scan_copies(data, offset, first_id)) == expected


def _encoded(ids: list[int], timestamps: list[int]) -> bytes:
    return b"".join(
        encode_record(Record(0, record_size(3), i, t, b"abc"))
        for i, t in zip(ids, timestamps, strict=True)
    )


@pytest.mark.parametrize("twin", ["compiled", "pure"])
def test_scan_copies_keeps_the_greatest_timestamp_and_refuses_what_does_not_follow(
    twin: str,
) -> None:
    scan = _compiled().scan_copies if twin == "compiled" else _scan_copies_py
    data = _encoded([7, 8, 9], [50, 20, 60])  # the clock went back for id 8
    at, body, offsets, stamps = scan(data, 1000, 7)
    assert (at, body, list(offsets), list(stamps)) == (
        len(data),
        9,
        [1000, 1037, 1074, 1111],
        [50, 50, 60],
    )
    assert scan(data, 1000, 8)[0] == 0  # the first record is not the id asked for
    assert scan(_encoded([7, 9, 9], [1, 1, 1]), 0, 7)[0] == 37  # a gap: stops before it
    assert scan(b"", 0, 1)[0] == 0


def test_scan_copies_takes_only_whole_frames_of_whole_records() -> None:
    data = _encoded([3, 4], [5, 5])
    assert scan_copies(data, 10, 3).count == 2
    for bad, first_id in ((data[:-1], 3), (data + b"\0", 3), (b"", 3), (data, 4)):
        with pytest.raises(RecordError, match="damaged, cut or out of sequence"):
            scan_copies(bad, 10, first_id)
