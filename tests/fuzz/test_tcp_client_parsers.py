"""Fuzz the client-side stream parsers: nsqd's frames as a client reads them
(:class:`ClientConnection`, :func:`decode_message`, :func:`decode_traced_reply`)
and nsqlookupd's replies as the broker reads them (:class:`LookupClientConnection`).
Any bytes give frames, or raise :class:`ProtocolError` and nothing else; what is held
for an incomplete frame stays under the frame size limit."""

from __future__ import annotations

import contextlib
import struct

from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol.client import (
    ClientConnection,
    ErrorReply,
    MessageFrame,
    Response,
    decode_traced_reply,
)
from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.frames import frame, traced_reply
from trionsq.protocol.lookupd import LookupClientConnection
from trionsq.protocol.message import decode_message, encode_message

from ..unit.protocol.strategies import layouts, messages
from .mutations import cuts, fuzz_settings, mutated, split

MAX_FRAME = 4096


def read_frames(reads: list[bytes], *, extended: bool, detail: bool) -> None:
    connection = ClientConnection(extended=extended, detail=detail, max_frame_size=MAX_FRAME)
    for data in [*reads, b""]:
        try:
            frames = connection.receive_data(data)
        except ProtocolError:
            assert connection.error is not None
            continue
        assert all(isinstance(f, (Response, ErrorReply, MessageFrame)) for f in frames)
        assert connection.buffered <= MAX_FRAME + 4


@st.composite
def frame_streams(draw: st.DrawFn) -> tuple[bytes, bool, bool]:
    """Valid frames of every type in one layout, then mutated."""
    extended, detail = draw(layouts)
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.integers(0, 2))
        if kind == 2:
            message = draw(messages(extended=extended, detail=detail))
            parts.append(frame(2, encode_message(message, extended=extended, detail=detail)))
        elif kind == 1:
            parts.append(frame(1, draw(st.sampled_from([b"E_INVALID bad", b"E_FIN_FAILED x"]))))
        else:
            parts.append(frame(0, draw(st.sampled_from([b"OK", b"_heartbeat_", b"{}"]))))
    return draw(mutated(b"".join(parts))), extended, detail


@fuzz_settings
@given(data=st.binary(max_size=2048), layout=layouts, cut_at=cuts)
def test_frames_from_arbitrary_bytes(
    data: bytes, layout: tuple[bool, bool], cut_at: list[int]
) -> None:
    read_frames(split(data, cut_at), extended=layout[0], detail=layout[1])


@fuzz_settings
@given(stream=frame_streams(), cut_at=cuts)
def test_frames_from_mutated_valid_streams(
    stream: tuple[bytes, bool, bool], cut_at: list[int]
) -> None:
    data, extended, detail = stream
    read_frames(split(data, cut_at), extended=extended, detail=detail)


@fuzz_settings
@given(data=st.data(), layout=layouts)
def test_message_and_traced_reply_decoders(data: st.DataObject, layout: tuple[bool, bool]) -> None:
    extended, detail = layout
    message = data.draw(messages(extended=extended, detail=detail))
    raw = data.draw(
        st.one_of(
            st.binary(max_size=200),
            mutated(encode_message(message, extended=extended, detail=detail)),
        )
    )
    with contextlib.suppress(ProtocolError):
        decode_message(raw, extended=extended, detail=detail)
    reply = data.draw(st.one_of(st.binary(max_size=40), mutated(traced_reply(1, 2, 3, 4))))
    with contextlib.suppress(ProtocolError):
        decode_traced_reply(reply)


@fuzz_settings
@given(
    data=st.one_of(
        st.binary(max_size=2048),
        st.lists(st.binary(max_size=64), max_size=6).flatmap(
            lambda replies: mutated(b"".join(struct.pack(">i", len(r)) + r for r in replies))
        ),
    ),
    cut_at=cuts,
)
def test_lookupd_replies(data: bytes, cut_at: list[int]) -> None:
    connection = LookupClientConnection(max_reply_size=1024)
    for piece in [*split(data, cut_at), b""]:
        try:
            replies = connection.receive_data(piece)
        except ProtocolError:
            continue
        assert all(type(r) is bytes for r in replies)
        assert connection.buffered <= 1024 + 4
