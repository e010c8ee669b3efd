"""The replication protocol's frames: round trips, any chunking, bad input refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol.replication import (
    MAGIC,
    Ack,
    Commit,
    Follow,
    FrameReader,
    Records,
    Refuse,
    ReplicationError,
    Start,
    State,
    encode,
)

_int = st.integers(-(2**63), 2**63 - 1)
_frames = st.one_of(
    st.builds(
        Follow, st.text(max_size=20), st.integers(0, 255), _int, st.text(max_size=10), _int, _int
    ),
    st.builds(Start, _int, _int, _int),
    st.builds(Records, _int, _int, _int, _int, st.binary(max_size=200)),
    st.builds(Ack, _int),
    st.builds(Commit, _int),
    st.builds(Refuse, st.text(max_size=30)),
    st.builds(State, st.binary(max_size=100)),
)


@given(st.lists(_frames, max_size=10), st.lists(st.integers(1, 50), min_size=1, max_size=20))
def test_frames_round_trip_in_any_chunks(frames: list[object], cuts: list[int]) -> None:
    data = MAGIC + b"".join(encode(f) for f in frames)  # type: ignore[arg-type]
    reader = FrameReader(expect_magic=True)
    got: list[object] = []
    position = 0
    for cut in cuts * (len(data) // max(sum(cuts), 1) + 1):
        got += reader.feed(data[position : position + cut])
        position += cut
        if position >= len(data):
            break
    got += reader.feed(data[position:])
    assert got == frames


def test_bad_magic_size_type_and_shape_are_refused() -> None:
    with pytest.raises(ReplicationError, match="bad magic"):
        FrameReader(expect_magic=True).feed(b"  V2")
    with pytest.raises(ReplicationError, match="out of range"):
        FrameReader().feed(b"\xff\xff\xff\xff\x01")
    with pytest.raises(ReplicationError, match="unknown frame type 9"):
        FrameReader().feed(b"\x00\x00\x00\x01\x09")
    with pytest.raises(ReplicationError, match="ACK frame of 3 bytes"):
        FrameReader().feed(b"\x00\x00\x00\x04\x04abc")
    with pytest.raises(ReplicationError, match="partition must be a int"):
        FrameReader().feed(b"\x00\x00\x00\x0e\x01" + b'{"topic":"t"}')


def test_follow_is_json_with_every_field() -> None:
    frame = Follow("t", 2, 5, "b1", 4, 100)
    assert encode(frame)[5:] == (
        b'{"topic":"t","partition":2,"epoch":5,"follower":"b1","last_epoch":4,"end":100}'
    )
