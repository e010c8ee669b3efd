"""The sink's bulk MPUB_EXT parts (issue 32): compiled and pure twins agree, and each
row gets the key and the partition the row-by-row path gives it, so a task retried
by another version of the sink repeats its keys."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol.commands import ExtMessage, MpubExt
from trionsq.protocol.server import ServerConnection
from trionsq.spark.keyed_chunks import _keyed_chunks_py, idempotency_key, keyed_chunks
from trionsq.speedups import compiled

from ..protocol.wire import sized

KINDS = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]
PREFIX = b"stream:q:7|1|"


def _column(bodies: list[bytes], kind: pa.DataType, skip: int) -> pa.Array:
    """A column of ``bodies`` after ``skip`` others (a slice: its offset is not 0)."""
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    values = [b"skipped"] * skip + bodies
    column = pa.array([v.decode() for v in values] if text else values, kind)
    return column.slice(skip)


def _messages(
    chunks: list[tuple[int, int, bytes]], topic: str = "t"
) -> list[tuple[int, list[ExtMessage]]]:
    """What a broker reads from each chunk sent as one MPUB_EXT."""
    read = []
    for partition, count, parts in chunks:
        server = ServerConnection()
        wire = b"  V2MPUB_EXT t %d\n" % partition + sized(struct.pack(">i", count) + parts)
        (event,) = server.receive_data(wire)
        assert isinstance(event, MpubExt)
        assert len(event.messages) == count
        read.append((partition, list(event.messages)))
    return read


bodies = st.lists(
    st.sampled_from([b"a", b"same", "é".encode()]) | st.binary(min_size=1, max_size=300),
    max_size=40,
)
"""Bodies a broker takes (an MPUB_EXT part needs one byte of body)."""


@given(bodies, st.sampled_from(KINDS), st.integers(0, 3), st.integers(1, 5), st.integers(1, 7))
def test_keyed_chunks_give_each_row_the_row_by_row_key(
    rows: list[bytes], kind: pa.DataType, skip: int, partitions: int, batch_size: int
) -> None:
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        rows = [r.decode("utf-8", "replace").encode() for r in rows]
    seen: dict[bytes, int] = {}
    chunks = keyed_chunks(_column(rows, kind, skip), PREFIX, seen, partitions, batch_size)
    expected_seen: dict[bytes, int] = {}
    expected: dict[int, list[ExtMessage]] = {}
    for body in rows:
        key, spread = idempotency_key(PREFIX, body, b"{}", expected_seen)
        header = b'{"##idempotency_key":"%s"}' % key.encode()
        expected.setdefault(spread % partitions, []).append(
            ExtMessage(header, body, None, None, key)
        )
    got: dict[int, list[ExtMessage]] = {}
    for partition, messages in _messages(chunks):
        assert len(messages) <= batch_size
        got.setdefault(partition, []).extend(messages)
    assert got == expected
    assert {p: [m.idempotency_key for m in ms] for p, ms in got.items()} == {
        p: [m.idempotency_key for m in ms] for p, ms in expected.items()
    }
    assert seen == expected_seen


@pytest.mark.skipif(compiled is None, reason="trionsq._speedups is not built")
@given(bodies, st.sampled_from(KINDS), st.integers(0, 3), st.integers(1, 5), st.integers(1, 7))
def test_keyed_chunks_twins_agree(
    rows: list[bytes], kind: pa.DataType, skip: int, partitions: int, batch_size: int
) -> None:
    assert compiled is not None
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        rows = [r.decode("utf-8", "replace").encode() for r in rows]
    column = _column(rows, kind, skip)
    _, offsets, data = column.buffers()
    wide = kind in (pa.large_string(), pa.large_binary())
    seen_fast: dict[bytes, int] = {b"\x00" * 16: 3}
    seen_pure = dict(seen_fast)
    arguments = (offsets, data or b"", column.offset, len(column), wide, PREFIX, b"{}")
    fast = compiled.keyed_chunks(*arguments, seen_fast, partitions, batch_size)
    assert fast == _keyed_chunks_py(*arguments, seen_pure, partitions, batch_size)
    assert seen_fast == seen_pure


def test_identical_rows_get_numbered_keys_across_batches() -> None:
    seen: dict[bytes, int] = {}
    first = keyed_chunks(pa.array(["x", "x"]), PREFIX, seen, 1, 10)
    second = keyed_chunks(pa.array(["x"]), PREFIX, seen, 1, 10)
    keys = [m.idempotency_key for _, ms in _messages(first + second) for m in ms]
    assert keys[1:] == [f"{keys[0]}.1", f"{keys[0]}.2"]


def test_a_column_of_another_layout_gives_the_same_parts() -> None:
    bodies = pa.array(["one", "two", "one"])
    expected = keyed_chunks(bodies, PREFIX, {}, 2, 10)
    assert keyed_chunks(bodies.cast(pa.string_view()), PREFIX, {}, 2, 10) == expected
    assert keyed_chunks(pa.array([], pa.string()), PREFIX, {}, 1, 10) == []
