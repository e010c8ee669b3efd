"""The compiled loops (trionsq._speedups) against their pure-Python twins.

Both twins get the same inputs (well-formed logs, damaged records, torn tails, odd
start points and limits) and must give the same results, so the broker behaves the
same with or without a C compiler; the pure twins also run the rest of the suite
under ``TRIONSQ_PURE_PYTHON=1``.
"""

from __future__ import annotations

import gc
import shutil
import struct
import sys
import sysconfig
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.broker.channel import Delivery
from trionsq.protocol import tubemq, tubemq_sends
from trionsq.protocol.message import parse_binary_id
from trionsq.protocol.tubemq_proto import rpc_pb2
from trionsq.queues import record_codec
from trionsq.queues.record import Record, encode_record, record_size
from trionsq.queues.record_codec import _decode_run_py, _encode_plain_py
from trionsq.server.outbound import _binary_id_frames_py, _hex_id_frames_py

if TYPE_CHECKING:
    from types import ModuleType


def _compiled() -> ModuleType:
    """The C module; its absence fails here unless this machine cannot build it (no C
    compiler, or no Python headers, as Debian's python3 without python3-dev)."""
    try:
        from trionsq import _speedups
    except ImportError:
        compiler = shutil.which("cc") or shutil.which("gcc")
        headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
        assert compiler is None or not headers.exists(), (
            f"{compiler} and {headers} are here but trionsq._speedups was not built:"
            " pip install -e . again"
        )
        pytest.skip("this machine cannot build C extensions: the pure-Python twins run alone")
    return _speedups


def _record(internal_id: int, body: bytes, ext_version: int, ext: bytes, deliver_at: int) -> Record:
    size = record_size(
        len(body), ext_version, len(ext) if ext_version else 0, deferred=deliver_at != 0
    )
    return Record(
        0,
        size,
        internal_id,
        1_700_000_000_000_000_000 + internal_id % 2**60,
        body,
        internal_id * 7 % 2**64,
        ext_version,
        ext if ext_version else b"",
        deliver_at,
    )


@st.composite
def _logs(draw: st.DrawFn) -> bytes:
    """A run of encoded records with consecutive ids, maybe damaged or torn."""
    count = draw(st.integers(0, 12))
    first = draw(st.integers(1, 2**64 - 20))
    parts = [
        encode_record(
            _record(
                first + n,
                draw(st.binary(max_size=80)),
                draw(st.sampled_from([0, 0, 2])),
                draw(st.binary(max_size=20)),
                draw(st.sampled_from([0, 0, 1_800_000_000_000_000_000])),
            )
        )
        for n in range(count)
    ]
    data = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 2))):  # flipped bytes: checksums, sizes, fields
        if data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= draw(st.integers(1, 255))
    cut = draw(st.integers(0, 40))  # a torn tail
    return bytes(data[: max(len(data) - cut, 0)] if draw(st.booleans()) else data)


@given(
    buffer=_logs(),
    at=st.integers(0, 60),
    base=st.integers(0, 2**40),
    from_id=st.one_of(st.integers(-5, 2**63 - 1), st.integers(2**63, 2**64 - 1)),
    wanted=st.integers(1, 15),
    budget=st.integers(1, 3_000),
)
def test_decode_run_twins_agree(
    buffer: bytes, at: int, base: int, from_id: int, wanted: int, budget: int
) -> None:
    compiled = _compiled()
    at = min(at, len(buffer))
    if buffer and at:  # start on a record boundary, as cold reads do, or anywhere
        at = at if at % 2 else 0
    pure: list[Record] = []
    fast: list[Record] = []
    expected = _decode_run_py(buffer, at, base, from_id, wanted, budget, Record, pure)
    got = compiled.decode_run(buffer, at, base, from_id, wanted, budget, Record, fast)
    assert got == expected
    assert fast == pure


def test_decode_run_reads_every_kind_of_record() -> None:
    compiled = _compiled()
    records = [
        _record(1, b"plain", 0, b"", 0),
        _record(2, b"", 0, b"", 0),
        _record(3, b"with ext", 2, b'{"##tag":"a"}', 0),
        _record(4, b"deferred", 0, b"", 1_800_000_000_000_000_000),
        _record(5, b"both", 2, b"{}", 1_800_000_000_000_000_000),
    ]
    buffer = b"".join(map(encode_record, records))
    out: list[Record] = []
    at, wanted, budget, damaged = compiled.decode_run(buffer, 0, 100, 0, 10, 10**6, Record, out)
    assert (at, wanted, damaged) == (len(buffer), 5, False)
    assert budget == 10**6 - len(buffer)
    offsets = [100]
    for r in records[:-1]:
        offsets.append(offsets[-1] + r.raw_size)
    assert out == [
        Record(o, r.raw_size, r.internal_id, r.timestamp, r.body, *_tail(r))
        for o, r in zip(offsets, records, strict=True)
    ]


def _tail(r: Record) -> tuple[int, int, bytes, int]:
    return r.trace_id, r.ext_version, r.ext, r.deliver_at


def test_decode_run_stops_at_a_damaged_record_and_points_at_it() -> None:
    compiled = _compiled()
    good = encode_record(_record(1, b"a" * 10, 0, b"", 0))
    bad = bytearray(encode_record(_record(2, b"b" * 10, 0, b"", 0)))
    bad[-1] ^= 0xFF
    buffer = good + bytes(bad) + good
    for decode in (compiled.decode_run, _decode_run_py):
        out: list[Record] = []
        assert decode(buffer, 0, 0, 0, 10, 10**6, Record, out) == (
            len(good),
            9,
            10**6 - len(good),
            True,
        )
        assert [r.internal_id for r in out] == [1]


@st.composite
def _plain_batches(
    draw: st.DrawFn,
) -> tuple[list[bytes], int, int, int, list[int] | None]:
    bodies = draw(st.lists(st.binary(max_size=300), min_size=1, max_size=30))
    traces = st.lists(st.integers(0, 2**64 - 1), min_size=len(bodies), max_size=len(bodies) + 2)
    return (
        bodies,
        draw(st.integers(-(2**63), 2**63 - 1)),
        draw(st.integers(1, 2**63)),
        draw(st.integers(0, 2**50)),
        draw(st.none() | traces),
    )


@given(_plain_batches())
def test_encode_plain_twins_agree_and_read_back(
    batch: tuple[list[bytes], int, int, int, list[int] | None],
) -> None:
    compiled = _compiled()
    bodies, timestamp, first_id, offset, trace_ids = batch
    encoded = compiled.encode_plain(bodies, timestamp, first_id, offset, trace_ids, Record)
    assert encoded == _encode_plain_py(bodies, timestamp, first_id, offset, trace_ids)
    assert encoded is not None
    data, records, _ = encoded
    assert all(r.body is b for r, b in zip(records, bodies, strict=True))  # shared, not copied
    back: list[Record] = []
    decoded = _decode_run_py(data, 0, offset, 0, 10**6, 10**12, Record, back)
    assert decoded == (len(data), 10**6 - len(bodies), 10**12 - len(data), False)
    assert back == records


def test_encode_plain_leaves_other_bodies_to_python() -> None:
    compiled = _compiled()
    assert compiled.encode_plain([b"a", bytearray(b"b")], 1, 1, 0, None, Record) is None
    with pytest.raises(ValueError, match="one entry per body"):
        compiled.encode_plain([b"a", b"b"], 1, 1, 0, [7], Record)


@given(st.binary(max_size=5_000))
def test_crc32_is_zlibs(data: bytes) -> None:
    assert _compiled().crc32(data) == zlib.crc32(data)


deliveries = st.lists(
    st.builds(
        lambda internal_id, timestamp, body, attempts, trace_id: Delivery(
            Record(0, 0, internal_id, timestamp, body, trace_id), attempts
        ),
        st.integers(0, 2**64 - 1),
        st.integers(-(2**63), 2**63 - 1),
        st.binary(max_size=300),
        st.integers(0, 0xFFFF),
        st.sampled_from([0, 0, 1, 2**64 - 1]) | st.integers(0, 2**64 - 1),
    ),
    max_size=20,
)


@given(deliveries)
def test_hex_id_frames_twins_agree(batch: list[Delivery]) -> None:
    assert _compiled().hex_id_frames(batch) == _hex_id_frames_py(batch)


def test_hex_id_frames_are_nsqd_message_frames() -> None:
    batch = [Delivery(Record(0, 0, 0xABC, 5, b"hello"), 3)]
    frames = _compiled().hex_id_frames(batch)
    size, frame_type, timestamp, attempts = struct.unpack_from(">IIqH", frames)
    assert (size, frame_type, timestamp, attempts) == (30 + 5, 2, 5, 3)
    assert frames[18:] == b"0000000000000abchello"


@given(deliveries)
def test_binary_id_frames_twins_agree(batch: list[Delivery]) -> None:
    assert _compiled().binary_id_frames(batch) == _binary_id_frames_py(batch)


def test_binary_id_frames_are_youzan_message_frames() -> None:
    """The 16-byte id is the internal id then the trace id, as Youzan's clients parse
    it (and as the slow path's ``binary_id`` packs it)."""
    batch = [Delivery(Record(0, 0, 0xABC, 5, b"hello", 2**64 - 2), 3)]
    frames = _compiled().binary_id_frames(batch)
    size, frame_type, timestamp, attempts = struct.unpack_from(">IIqH", frames)
    assert (size, frame_type, timestamp, attempts) == (30 + 5, 2, 5, 3)
    assert parse_binary_id(frames[18:34]) == (0xABC, 2**64 - 2)
    assert frames[34:] == b"hello"


def test_hex_id_frames_refuses_what_no_frame_can_carry() -> None:
    compiled = _compiled()
    with pytest.raises(OverflowError):
        compiled.hex_id_frames([Delivery(Record(0, 0, 1, 5, b"x"), 70_000)])
    with pytest.raises(TypeError):
        compiled.hex_id_frames([Delivery(Record(0, 0, 1, 5, "text"), 1)])  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        compiled.hex_id_frames([object()])
    with pytest.raises(OverflowError):
        compiled.binary_id_frames([Delivery(Record(0, 0, 1, 5, b"x", -1), 1)])
    with pytest.raises(OverflowError):
        compiled.binary_id_frames([Delivery(Record(0, 0, 1, 5, b"x"), 70_000)])


# ---- TubeMQ (issue 36): frames of a read, and the frames of a run of SendMessage calls

_SEND = tubemq_sends._METHOD_FIRST
_PREFIX = tubemq._delimited(rpc_pb2.RpcConnHeader(flag=0)) + tubemq._delimited(
    rpc_pb2.RequestHeader(serviceType=3, protocolVer=2)
)


@st.composite
def _tubemq_stream(draw: st.DrawFn) -> bytes:
    """Frames as clients write them, some cut, some of several blocks, some broken."""
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        serial = draw(st.integers(0, 2**32 - 1))
        payload = draw(st.binary(max_size=300))
        kind = draw(st.sampled_from(["one", "one", "blocks", "token", "long"]))
        frame = tubemq.encode_frame(serial, payload)
        if kind == "blocks":
            frame = struct.pack(">IIIi", tubemq.BEGIN_TOKEN, serial, 2, 1) + b"x"
            frame += struct.pack(">i", len(payload)) + payload
        elif kind == "token":
            frame = b"\x00" + frame[1:]
        elif kind == "long":
            frame = frame[:12] + struct.pack(">i", 10_000) + frame[16:]
        parts.append(frame)
    data = b"".join(parts)
    return data[: draw(st.integers(0, len(data)))]


@given(
    _tubemq_stream(),
    st.integers(-3, 400),
    st.integers(0, 8),
    st.integers(0, 300),
    st.integers(0, 3),
)
def test_tubemq_frames_twins_agree(
    buffer: bytes, pos: int, limit: int, longest: int, already: int
) -> None:
    outs: list[list[tubemq.Frame | tubemq.FrameError]] = [
        [tubemq.FrameError("x")] * already for _ in range(2)
    ]
    if pos < 0:  # the Python twin is never called so: compare from the start
        pos = 0
    ends = [
        _compiled().tubemq_frames(buffer, pos, limit, longest, tubemq.Frame, outs[0]),
        tubemq._split_frames_py(buffer, pos, limit, longest, tubemq.Frame, outs[1]),
    ]
    assert ends[0] == ends[1]
    assert outs[0] == outs[1]
    assert [type(frame) for frame in outs[0]] == [type(frame) for frame in outs[1]]


def test_tubemq_frames_needs_a_tuple_type_and_bytes() -> None:
    with pytest.raises(TypeError):
        _compiled().tubemq_frames(b"", 0, 1, 1, dict, [])
    with pytest.raises(TypeError):
        _compiled().tubemq_frames(bytearray(), 0, 1, 1, tubemq.Frame, [])


@st.composite
def _send_frames(draw: st.DrawFn) -> list[tubemq.Frame | tubemq.FrameError]:
    """Payloads that are SendMessage calls behind _PREFIX, and others like them."""
    frames: list[tubemq.Frame | tubemq.FrameError] = []
    for serial in range(draw(st.integers(0, 6))):
        body = _SEND + draw(st.binary(max_size=200))
        payload = _PREFIX + tubemq._varint_bytes(len(body)) + body
        kind = draw(st.sampled_from(["call", "call", "cut", "longer", "other", "prefix"]))
        if kind == "cut":
            payload = payload[: draw(st.integers(0, len(payload)))]
        elif kind == "longer":
            payload += b"\x00"
        elif kind == "other":
            payload = payload.replace(_SEND, b"\x08\x11", 1)
        elif kind == "prefix":
            payload = b"\x02" + payload[1:]
        frames.append(tubemq.Frame(serial, payload))
    if draw(st.booleans()):
        frames.append(tubemq.FrameError("the end"))
    return frames


@given(_send_frames(), st.integers(0, 6))
def test_tubemq_send_run_twins_agree(
    frames: list[tubemq.Frame | tubemq.FrameError], start: int
) -> None:
    start = min(start, len(frames))
    results = []
    for run in (_compiled().tubemq_send_run, tubemq_sends._send_run_py):
        leads: dict[int, bytes | None] = {}

        def lead_for(room: int, leads: dict[int, bytes | None] = leads) -> bytes | None:
            leads[room] = tubemq_sends._lead(room)
            return leads[room]

        results.append(run(frames, start, tubemq.Frame, _PREFIX, _SEND, leads, lead_for, b"\x0a"))
    assert results[0] == results[1]
    end, serials, joined = results[0]
    run = [frame for frame in frames[start:end] if isinstance(frame, tubemq.Frame)]
    assert len(run) == end - start
    assert serials == [frame.serial_no for frame in run]
    assert joined == b"".join(b"\x0a" + frame.payload[len(_PREFIX) :] for frame in run)


def test_tubemq_send_run_passes_on_what_lead_for_raises_or_returns_amiss() -> None:
    body = _SEND + b"x"
    frames: list[tubemq.Frame | tubemq.FrameError] = [
        tubemq.Frame(1, _PREFIX + tubemq._varint_bytes(len(body)) + body)
    ]
    for run in (_compiled().tubemq_send_run, tubemq_sends._send_run_py):

        def fails(room: int) -> bytes | None:
            raise ZeroDivisionError

        with pytest.raises(ZeroDivisionError):
            run(frames, 0, tubemq.Frame, _PREFIX, _SEND, {}, fails, b"\x0a")
        with pytest.raises(TypeError):
            run(frames, 0, tubemq.Frame, _PREFIX, _SEND, {4: 5}, fails, b"\x0a")  # type: ignore[dict-item]


# ---- how the compiled loops make Records: slots filled in place (use_record_layout)


def test_the_compiled_loops_make_records_without_calling_the_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled = _compiled()
    calls: list[object] = []
    original = Record.__init__

    def counted(self: Record, *fields: object) -> None:
        calls.append(fields)
        original(self, *fields)  # type: ignore[arg-type]

    monkeypatch.setattr(Record, "__init__", counted)
    _, records, _ = compiled.encode_plain([b"a"] * 10, 7, 1, 0, None, Record)
    assert len(records) == 10
    assert calls == []  # unregistered: ten calls
    Record(0, 1, 2, 3, b"")
    assert len(calls) == 1  # the patch is in place


def test_records_made_in_place_are_records_equal_to_those_called() -> None:
    """``encode_plain``, ``decode_run`` and ``append_record`` fill a Record's slots
    in place (record_codec registers the class); the records are Records, equal and
    hashed as made by calling the class, tracked by the collector, and hold their
    fields' references (a body's count returns to where it was once they go)."""
    assert record_codec.record_layout_is_plain()
    compiled = _compiled()
    body = b"in place " * 20
    before = sys.getrefcount(body)
    _, records, _ = compiled.encode_plain([body] * 50, 7, 100, 5000, [9] * 50, Record)
    size = record_size(len(body), 0, 0, deferred=False)
    for number, record in enumerate(records):
        expected = Record(5000 + number * size, size, 100 + number, 7, body, 9)
        assert type(record) is Record
        assert record == expected
        assert hash(record) == hash(expected)
        assert gc.is_tracked(record)
    del expected
    assert sys.getrefcount(body) == before + 50
    del records, record
    assert sys.getrefcount(body) == before


def test_a_make_that_is_not_the_registered_class_is_called() -> None:
    made: list[tuple[object, ...]] = []

    def make(*fields: object) -> tuple[object, ...]:
        made.append(fields)
        return fields

    _, records, _ = _compiled().encode_plain([b"a", b"b"], 7, 1, 0, None, make)
    assert [fields[4] for fields in made] == [b"a", b"b"]
    assert records == made


def test_use_record_layout_takes_only_writable_object_slots() -> None:
    compiled = _compiled()

    class NoSlots:
        pass

    names = tuple(field.name for field in attrs.fields(Record))
    with pytest.raises(AttributeError):
        compiled.use_record_layout(NoSlots, names)
    with pytest.raises(TypeError, match="nine"):
        compiled.use_record_layout(Record, names[:8])
    with pytest.raises(TypeError, match="writable slot"):
        compiled.use_record_layout(Record, (*names[:8], "end"))  # a property
    with pytest.raises(TypeError, match="class"):
        compiled.use_record_layout(object(), names)
    compiled.use_record_layout(Record, names)  # what record_codec registered: still in use
    _, records, _ = compiled.encode_plain([b"x"], 1, 1, 0, None, Record)
    assert records == [Record(0, record_size(1, 0, 0, deferred=False), 1, 1, b"x")]
