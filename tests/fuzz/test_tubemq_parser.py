"""Fuzz TubeMQ's RPC codec (:mod:`trionsq.protocol.tubemq`): any bytes, split into
reads anywhere, give whole frames and at most one :class:`FrameError`, which ends the
list and closes the reader; every frame decodes to a call or to an exception reply,
and a reply frame decodes or raises ``ValueError``; a run of SendMessage calls read in
one go (:func:`take_sends`) holds exactly the calls read one by one; what the reader
holds stays within its bound."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol import tubemq as t
from trionsq.protocol.tubemq_proto import broker_pb2, master_pb2
from trionsq.protocol.tubemq_sends import take_sends

from .mutations import cuts, fuzz_settings, mutated, split

BOUND = 64 * 1024
SERVICES = frozenset({1, 2, 3})


def run(reads: list[bytes]) -> None:
    reader = t.FrameReader(BOUND)
    for data in [*reads, b""]:
        was_closed = reader.closed
        reader.receive_data(data)
        found = reader.next_frames(1000)
        if was_closed:
            assert found == []
        calls: list[t.Request | t.CallRefused] = []
        for index, frame in enumerate(found):
            if isinstance(frame, t.FrameError):
                assert index == len(found) - 1, "an error ends the list"
                assert reader.closed
                continue
            call = t.decode_request(frame, SERVICES)
            calls.append(call)
            assert isinstance(call, t.Request | t.CallRefused)
            if isinstance(call, t.CallRefused):
                t.encode_exception(call)  # always encodable
            with contextlib.suppress(ValueError):
                t.decode_reply(frame)
        same_as_read_alone(found, calls)
        assert reader.buffered <= BOUND + t.MAX_BLOCK + 12 + max(len(r) for r in [*reads, b""])


def same_as_read_alone(
    frames: list[t.Frame | t.FrameError], calls: list[t.Request | t.CallRefused]
) -> None:
    index = 0
    while index < len(frames):
        end, sends = take_sends(frames, index, SERVICES)
        assert index <= end <= len(frames)
        if sends is not None:
            assert len(sends.serial_nos) == end - index
            for offset, (serial, request) in enumerate(zip(*sends, strict=True)):
                call = calls[index + offset]
                assert isinstance(call, t.Request)
                assert (call.serial_no, call.method, call.body) == (serial, 13, request)
        index = max(end, index + 1)


REQUESTS = [
    t.encode_request(
        1,
        1,
        1,
        master_pb2.RegisterRequestP2M(
            clientId="p", brokerCheckSum=-1, hostName="h", topicList=["t"]
        ),
    ),
    t.encode_request(
        2,
        1,
        5,
        master_pb2.HeartRequestC2M(
            clientId="c",
            groupName="g",
            reportSubscribeInfo=True,
            subscribeInfo=["c@g#1:h:8123#t:0"],
        ),
    ),
    t.encode_request(
        3,
        2,
        13,
        broker_pb2.SendMessageRequestP2B(
            clientId="p",
            topicName="t",
            partitionId=0,
            data=b"x" * 9000,
            flag=0,
            checkSum=-1,
            sentAddr=0,
        ),
    ),
    t.encode_request(
        4,
        2,
        17,
        broker_pb2.GetMessageRequestC2B(clientId="c", partitionId=0, groupName="g", topicName="t"),
    ),
    t.encode_reply(
        5,
        17,
        broker_pb2.GetMessageResponseB2C(
            success=True,
            errCode=200,
            messages=[
                broker_pb2.TransferedMessage(messageId=1, checkSum=2, payLoadData=b"p", flag=0)
            ],
        ),
    ),
    t.encode_exception(t.CallRefused(6, t.STANDBY_EXCEPTION, "standby")),
]


@fuzz_settings
@given(data=st.binary(max_size=2048), token=st.booleans(), cut_at=cuts)
def test_arbitrary_bytes(data: bytes, token: bool, cut_at: list[int]) -> None:
    run(split((t.encode_frame(0, b"")[:4] if token else b"") + data, cut_at))


@fuzz_settings
@given(
    data=st.data(), picks=st.lists(st.sampled_from(REQUESTS), min_size=1, max_size=4), cut_at=cuts
)
def test_mutated_valid_frames(data: st.DataObject, picks: list[bytes], cut_at: list[int]) -> None:
    run(split(data.draw(mutated(b"".join(picks))), cut_at))


@fuzz_settings
@given(payload=st.binary(max_size=512), serial=st.integers(0, 2**32 - 1))
def test_arbitrary_payloads_in_good_frames(payload: bytes, serial: int) -> None:
    run([t.encode_frame(serial, payload)])


def test_a_length_past_the_index_range_is_unreadable() -> None:
    # found by CI's fuzzing: protobuf's own reader raised OverflowError on this varint
    frame = t.Frame(0, b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01")
    with pytest.raises(ValueError, match="index-sized"):
        t.decode_reply(frame)
    assert isinstance(t.decode_request(frame, SERVICES), t.CallRefused)
