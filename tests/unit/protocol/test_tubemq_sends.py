"""SendMessage calls read a run at a time (:func:`take_sends`) are read exactly as
:func:`decode_request` reads each alone, and anything it could read otherwise is left
to it; a stored message's reply (:func:`encode_sent`) is byte for byte the one
:func:`encode_reply` makes."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trionsq.protocol import tubemq as t
from trionsq.protocol.tubemq_proto import broker_pb2, rpc_pb2
from trionsq.protocol.tubemq_sends import encode_sent, take_sends

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SERVICES = frozenset({t.Service.BROKER_READ, t.Service.BROKER_WRITE})

requests = st.builds(
    broker_pb2.SendMessageRequestP2B,
    clientId=st.text(max_size=20),
    topicName=st.text(max_size=20),
    partitionId=st.integers(-(2**31), 2**31 - 1),
    data=st.binary(max_size=300),
    flag=st.integers(-(2**31), 2**31 - 1),
    checkSum=st.integers(-(2**31), 2**31 - 1),
    sentAddr=st.integers(-(2**31), 2**31 - 1),
    msgType=st.one_of(st.none(), st.text(max_size=10)),
)


def frames_of(data: bytes) -> list[t.Frame | t.FrameError]:
    reader = t.FrameReader(1 << 22)
    reader.receive_data(data)
    return reader.next_frames(10_000)


def each_alone(frames: list[t.Frame | t.FrameError]) -> list[t.Request | t.CallRefused]:
    """What decode_request makes of each (and the envelope prefixes it has seen)."""
    return [t.decode_request(f, SERVICES) for f in frames if isinstance(f, t.Frame)]


def body_frame(serial: int, body: bytes, service: int = t.Service.BROKER_WRITE) -> bytes:
    """A call whose RequestBody is ``body``, written as it is."""
    payload = (
        t._delimited(rpc_pb2.RpcConnHeader(flag=0))
        + t._delimited(rpc_pb2.RequestHeader(serviceType=service, protocolVer=2))
        + t._varint_bytes(len(body))
        + body
    )
    return t.encode_frame(serial, payload)


def good(serial: int = 1, data: bytes = b"x") -> bytes:
    request = broker_pb2.SendMessageRequestP2B(
        clientId="p", topicName="t", partitionId=0, data=data, flag=0, checkSum=-1, sentAddr=0
    )
    return t.encode_request(serial, t.Service.BROKER_WRITE, t.Method.SEND_MESSAGE, request)


@FAST
@given(
    calls=st.lists(
        st.tuples(st.integers(0, 2**32 - 1), requests, st.sampled_from(sorted(SERVICES))),
        min_size=1,
        max_size=8,
    )
)
def test_a_run_is_read_as_each_call_alone(
    calls: list[tuple[int, broker_pb2.SendMessageRequestP2B, int]],
) -> None:
    data = b"".join(
        t.encode_request(serial, service, t.Method.SEND_MESSAGE, request)
        for serial, request, service in calls
    )
    frames = frames_of(data)
    alone = each_alone(frames)
    index = 0
    while index < len(frames):
        end, sends = take_sends(frames, index, SERVICES)
        assert sends is not None, "every call here is one of a run"
        for offset, (serial, request) in enumerate(zip(*sends, strict=True)):
            call = alone[index + offset]
            assert isinstance(call, t.Request)
            assert (call.serial_no, call.method, call.body) == (serial, 13, request)
        index = end
    assert index == len(frames)


def test_a_run_ends_at_another_call_and_needs_a_served_service() -> None:
    pull = broker_pb2.GetMessageRequestC2B(
        clientId="c", partitionId=0, groupName="g", topicName="t"
    )
    data = (
        good(1)
        + good(2)
        + t.encode_request(3, t.Service.BROKER_WRITE, t.Method.GET_MESSAGE, pull)
        + good(4)
    )
    frames = frames_of(data)
    each_alone(frames)
    end, sends = take_sends(frames, 0, SERVICES)
    assert end == 2
    assert sends is not None
    assert sends.serial_nos == [1, 2]
    assert take_sends(frames, 2, SERVICES) == (2, None)  # read alone
    assert take_sends(frames, 0, frozenset({t.Service.MASTER})) == (0, None)


def test_an_envelope_never_seen_is_read_alone_first() -> None:
    request = broker_pb2.SendMessageRequestP2B(
        clientId="p", topicName="t", partitionId=0, data=b"x", flag=0, checkSum=-1, sentAddr=0
    )
    data = t.encode_request(1, t.Service.BROKER_WRITE, 13, request, protocol_version=1234567)
    frames = frames_of(data)
    assert take_sends(frames, 0, SERVICES) == (0, None)
    each_alone(frames)
    end, sends = take_sends(frames, 0, SERVICES)
    assert (end, sends is not None) == (1, True)


def full_request(**changes: object) -> broker_pb2.SendMessageRequestP2B:
    fields: dict[str, object] = {
        "clientId": "p",
        "topicName": "t",
        "partitionId": 0,
        "data": b"x",
        "flag": 0,
        "checkSum": -1,
        "sentAddr": 0,
    }
    fields.update(changes)
    return broker_pb2.SendMessageRequestP2B(**fields)  # type: ignore[arg-type]


def method_first(request: bytes) -> bytes:
    return rpc_pb2.RequestBody(method=13, timeout=9, request=request).SerializePartialToString()


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("a required field missing", method_first(b"\x0a\x01p\x12\x01t")),
        ("an unreadable request", method_first(b"\xff\xff\xff")),
        # TubeMQ reads `request` as bytes: the last one counts, and it lacks fields
        (
            "the request given twice",
            method_first(full_request().SerializeToString())
            + rpc_pb2.RequestBody(request=b"\x0a\x01q").SerializePartialToString(),
        ),
        (
            "a field written twice",
            method_first(
                full_request().SerializeToString()
                + broker_pb2.SendMessageRequestP2B(flag=1).SerializePartialToString()
            ),
        ),
    ],
)
def test_a_run_with_an_unusual_call_is_left_to_be_read_alone(name: str, body: bytes) -> None:
    frames = frames_of(good(1) + body_frame(2, body) + good(3))
    alone = each_alone(frames)
    assert take_sends(frames, 0, SERVICES) == (3, None), name
    assert [isinstance(call, t.Request) for call in alone] == [
        True,
        name == "a field written twice",  # read alone, the last flag counts
        True,
    ]


def payload_of(frame_bytes: bytes) -> bytes:
    [frame] = frames_of(frame_bytes)
    assert isinstance(frame, t.Frame)
    return frame.payload


@pytest.mark.parametrize("odd", ["fields in another order", "a byte after the body", "cut short"])
def test_a_call_whose_body_is_not_laid_out_as_the_sdks_write_it_ends_a_run(odd: str) -> None:
    body = method_first(full_request().SerializeToString())
    payload = payload_of(body_frame(2, body))
    second = {
        "fields in another order": body_frame(
            2, rpc_pb2.RequestBody(timeout=9).SerializePartialToString() + body
        ),
        "a byte after the body": t.encode_frame(2, payload + b"\x00"),
        "cut short": t.encode_frame(2, payload[:-1]),
    }[odd]
    frames = frames_of(good(1) + second + good(3))
    each_alone(frames)
    end, sends = take_sends(frames, 0, SERVICES)
    assert (end, sends is not None) == (1, True)
    assert take_sends(frames, 1, SERVICES) == (1, None)
    assert take_sends(frames, 2, SERVICES)[0] == 3


@attrs.frozen
class Stored:
    internal_id: int
    timestamp: int
    offset: int


@FAST
@given(
    replies=st.lists(
        st.tuples(
            st.integers(0, 2**32 - 1),
            st.integers(0, 2**63 - 1),
            st.integers(0, 2**63 - 1),
            st.integers(0, 2**63 - 1),
        ),
        max_size=5,
    )
)
def test_a_stored_messages_reply_is_encode_replys(
    replies: list[tuple[int, int, int, int]],
) -> None:
    expected = b"".join(
        t.encode_reply(
            serial,
            t.Method.SEND_MESSAGE,
            broker_pb2.SendMessageResponseB2P(
                success=True,
                errCode=200,
                errMsg=str(message_id),
                requireAuth=False,
                messageId=message_id,
                appendTime=timestamp // 1_000_000,
                appendOffset=offset,
            ),
        )
        for serial, message_id, timestamp, offset in replies
    )
    stored = [Stored(message_id, timestamp, offset) for _, message_id, timestamp, offset in replies]
    assert encode_sent([serial for serial, *_ in replies], stored) == expected
