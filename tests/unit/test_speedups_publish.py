"""The compiled loops of keyed publishing (trionsq._speedups, _speedups_publish.c,
issue 32) against their pure-Python twins: the same inputs, the same results, so
the broker reads, stores and remembers keyed messages the same with or without a
C compiler. The Spark sink's ``keyed_chunks`` is held to its twin in
tests/unit/spark/test_keyed_chunks.py.
"""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.broker.idempotence import _key_digests_py, key_digests
from trionsq.protocol.commands import ExtMessage
from trionsq.protocol.keyed_parts import _read_keyed_parts_py
from trionsq.queues.record import Record
from trionsq.queues.record_codec import _decode_run_py, _encode_general_py

from .test_speedups import _compiled


@given(st.one_of(st.binary(max_size=600), st.integers(0, 3).map(lambda n: b"x" * (128 * n))))
def test_blake2b_is_hashlibs(data: bytes) -> None:
    assert _compiled().blake2b(data) == hashlib.blake2b(data, digest_size=16).digest()


@given(st.lists(st.none() | st.text(max_size=300), max_size=20))
def test_key_digests_twins_agree(keys: list[str | None]) -> None:
    assert _compiled().key_digests(keys) == _key_digests_py(keys)


def test_key_digests_leave_a_lone_surrogate_to_python() -> None:
    assert _compiled().key_digests(["a", "\udc80"]) is None
    assert key_digests(["a", "\udc80"]) == _key_digests_py(["a", "\udc80"])


_key_headers = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=260).map(
        lambda key: b'{"##idempotency_key":"' + key.encode() + b'"}'
    ),
    st.binary(max_size=30),
)


@st.composite
def _keyed_streams(draw: st.DrawFn) -> bytes:
    """MPUB_EXT parts, mostly key-only, some with sizes that lie; maybe cut short."""
    data = b""
    for _ in range(draw(st.integers(0, 6))):
        header = draw(_key_headers)
        body = draw(st.binary(max_size=30))
        part = struct.pack(">H", len(header)) + header + body
        size = draw(st.sampled_from([len(part)] * 4 + [-1, 0, 2, len(part) + 3, 5000]))
        data += struct.pack(">i", size) + part
    return data[: draw(st.integers(0, len(data)))] if draw(st.booleans()) else data


@given(
    data=_keyed_streams(),
    at=st.integers(0, 10),
    count=st.integers(0, 8),
    budget=st.integers(-5, 3_000),
    max_msg=st.integers(0, 400),
)
def test_read_keyed_parts_twins_agree(
    data: bytes, at: int, count: int, budget: int, max_msg: int
) -> None:
    at = min(at, len(data))
    pure: list[ExtMessage] = []
    fast: list[ExtMessage] = []
    expected = _read_keyed_parts_py(data, at, count, budget, max_msg, ExtMessage, pure)
    assert _compiled().read_keyed_parts(data, at, count, budget, max_msg, ExtMessage, fast) == (
        expected
    )
    assert fast == pure
    assert [m.idempotency_key for m in fast] == [m.idempotency_key for m in pure]


@st.composite
def _ext_batches(
    draw: st.DrawFn,
) -> tuple[list[bytes], list[bytes], int, int, int, list[int] | None]:
    bodies = draw(st.lists(st.binary(max_size=300), min_size=1, max_size=30))
    exts = draw(st.lists(st.binary(max_size=80), min_size=len(bodies), max_size=len(bodies)))
    traces = st.lists(st.integers(0, 2**64 - 1), min_size=len(bodies), max_size=len(bodies))
    return (
        bodies,
        exts,
        draw(st.integers(-(2**63), 2**63 - 1)),
        draw(st.integers(1, 2**63)),
        draw(st.integers(0, 2**50)),
        draw(st.none() | traces),
    )


@given(_ext_batches(), st.sampled_from([2, 4]))
def test_encode_ext_twins_agree_and_read_back(
    batch: tuple[list[bytes], list[bytes], int, int, int, list[int] | None], version: int
) -> None:
    bodies, exts, timestamp, first_id, offset, traces = batch
    encoded = _compiled().encode_ext(
        bodies, exts, version, timestamp, first_id, offset, traces, Record
    )
    assert encoded == _encode_general_py(
        bodies, timestamp, first_id, offset, traces, version, exts, 0
    )
    assert encoded is not None
    data, records, _ = encoded
    assert all(r.body is b for r, b in zip(records, bodies, strict=True))  # shared, not copied
    back: list[Record] = []
    _decode_run_py(data, 0, offset, 0, 10**6, 10**12, Record, back)
    assert back == records


def test_encode_ext_leaves_other_batches_to_python() -> None:
    compiled = _compiled()
    assert compiled.encode_ext([b"a"], [bytearray(b"{}")], 4, 1, 1, 0, None, Record) is None
    assert compiled.encode_ext([b"a"], [b"x" * 0xFFFF], 4, 1, 1, 0, None, Record) is None
    with pytest.raises(ValueError, match="one entry per body"):
        compiled.encode_ext([b"a", b"b"], [b"{}"], 4, 1, 1, 0, None, Record)


def test_keyed_chunks_let_go_of_every_buffer_they_took() -> None:
    """A refused call releases the buffers it holds: a bytearray whose buffer is
    still exported cannot grow (BufferError), so each extend below checks one."""
    compiled = _compiled()
    offsets, data, prefix, extra = (bytearray(8) for _ in range(4))
    with pytest.raises(TypeError):  # extra (argument 6) is not bytes-like
        compiled.keyed_chunks(offsets, data, 0, 1, False, prefix, 6, {}, 1, 10)
    for held in (offsets, data, prefix):
        held.extend(b"x")
    with pytest.raises(ValueError, match="bad arguments"):  # all four held: offsets too short
        compiled.keyed_chunks(offsets, data, 0, 9, False, prefix, extra, {}, 1, 10)
    for held in (offsets, data, prefix, extra):
        held.extend(b"x")
