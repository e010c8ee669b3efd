"""An MPUB's bodies on the publish fast path (``mpub_bodies``): the compiled walk
(trionsq._speedups, _speedups_bodies.c) against its pure-Python twin on whole,
truncated, oversized, negative and overrunning parts, and the parser's answers to
MPUBs cut at every byte with each twin (tests/unit/protocol has the texts)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol import whole_publishes
from trionsq.protocol.commands import Mpub
from trionsq.protocol.whole_publishes import _INCOMPLETE, _mpub_bodies_py

from .test_speedups import _compiled

_I32 = struct.Struct(">i")


@st.composite
def _walks(draw: st.DrawFn) -> tuple[bytes, int, int, int, int, int]:
    """(data, cursor, count, stop, end, max_msg): count-prefixed parts after a prefix,
    with sizes that may be 0, negative, over max_msg or past the body; the body's
    stop maybe before or after what has come, and what has come maybe cut short."""
    prefix = draw(st.binary(max_size=8))
    parts = []
    for _ in range(draw(st.integers(0, 8))):
        body = draw(st.binary(max_size=40))
        size = draw(
            st.one_of(
                st.just(len(body)),
                st.integers(-(2**31), 2**31 - 1),
                st.sampled_from([0, -1, len(body) + 1, 2**31 - 1]),
            )
        )
        parts.append(_I32.pack(size) + body)
    data = prefix + b"".join(parts) + draw(st.binary(max_size=8))
    cursor = len(prefix)
    count = draw(st.integers(1, len(parts) + 2))
    end = draw(st.integers(cursor, len(data)))
    stop = draw(st.integers(cursor, len(data) + 50))
    max_msg = draw(st.sampled_from([1, 16, 40, 1 << 20]))
    return data, cursor, count, stop, end, max_msg


@given(_walks())
def test_mpub_bodies_twins_agree(walk: tuple[bytes, int, int, int, int, int]) -> None:
    assert _compiled().mpub_bodies(*walk) == _mpub_bodies_py(*walk)


def test_mpub_bodies_whole_incomplete_and_invalid() -> None:
    data = b"xx" + _I32.pack(3) + b"abc" + _I32.pack(2) + b"de"
    for walk in (_compiled().mpub_bodies, _mpub_bodies_py):
        assert walk(data, 2, 2, len(data), len(data), 10) == ([b"abc", b"de"], len(data))
        assert walk(data, 2, 2, len(data), len(data) - 1, 10) == _INCOMPLETE  # last byte to come
        assert walk(data, 2, 3, len(data) + 4, len(data), 10) == _INCOMPLETE  # a size to come
        assert walk(data, 2, 3, len(data), len(data), 10) == -1  # a third part past the body
        assert walk(data, 2, 2, len(data) - 1, len(data), 10) == -1  # the last overruns it
        assert walk(data, 2, 2, len(data), len(data), 2) == -1  # over max_msg
        negative = b"xx" + _I32.pack(-5) + b"abc"
        assert walk(negative, 2, 1, len(negative), len(negative), 10) == -1


def test_mpub_bodies_claiming_a_million_parts_allocates_nothing_first() -> None:
    """A header claiming more parts than have come answers INCOMPLETE without a list
    of that many slots (the walk checks before it builds)."""
    data = _I32.pack(1) + b"a"
    assert _compiled().mpub_bodies(data, 0, 1_000_000, 10_000_000, len(data), 10) == _INCOMPLETE


@pytest.fixture(params=["compiled", "python"])
def twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    walk = _compiled().mpub_bodies if request.param == "compiled" else _mpub_bodies_py
    monkeypatch.setattr(whole_publishes, "_mpub_bodies", walk)
    return str(request.param)


def test_an_mpub_cut_at_every_byte_parses_the_same_with_each_twin(twin: str) -> None:
    """Fed in two reads cut at every byte, an MPUB gives the same one event."""
    from trionsq.protocol.server import ServerConnection

    bodies = [b"first", b"2", b"third" * 30]
    payload = _I32.pack(len(bodies)) + b"".join(_I32.pack(len(b)) + b for b in bodies)
    frame = b"MPUB orders\n" + _I32.pack(len(payload)) + payload
    for cut in range(len(frame) + 1):
        connection = ServerConnection()
        events = list(connection.receive_data(b"  V2"))
        for piece in (frame[:cut], frame[cut:]):
            if piece:  # an empty read is the end of the stream
                events += connection.receive_data(piece)
        mpubs = [event for event in events if isinstance(event, Mpub)]
        assert [(m.topic, list(m.bodies), m.partition) for m in mpubs] == [
            ("orders", bodies, None)
        ], (twin, cut)
