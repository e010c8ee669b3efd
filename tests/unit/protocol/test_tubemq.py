"""TubeMQ's client RPC codec: frames round-trip whatever the reads, calls decode to
what was encoded or to TubeMQ's exception replies, and the formats inside the fields
round-trip."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trionsq.protocol import tubemq as t
from trionsq.protocol import tubemq_formats as f
from trionsq.protocol.tubemq_proto import broker_pb2, master_pb2, rpc_pb2

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = 1 << 22


def frames_of(data: bytes, cuts: list[int], *, limit: int = 1000) -> list[t.Frame | t.FrameError]:
    reader = t.FrameReader(BIG)
    found: list[t.Frame | t.FrameError] = []
    start = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        if cut > start:
            reader.receive_data(data[start:cut])
            found += reader.next_frames(limit)
        start = cut
    reader.receive_data(b"")
    found += reader.next_frames(limit)
    return found


@FAST
@given(
    frames=st.lists(st.tuples(st.integers(0, 2**32 - 1), st.binary(max_size=20_000)), max_size=5),
    cuts=st.lists(st.integers(0, 200_000), max_size=8),
)
def test_frames_round_trip_in_any_reads(frames: list[tuple[int, bytes]], cuts: list[int]) -> None:
    data = b"".join(t.encode_frame(serial, payload) for serial, payload in frames)
    assert frames_of(data, cuts) == [t.Frame(serial, payload) for serial, payload in frames]


def test_blocks_are_cut_at_8192_bytes() -> None:
    data = t.encode_frame(9, bytes(20_000))
    token, serial, count = struct.unpack_from(">III", data)
    assert (token, serial, count) == (0xFF7FF4FE, 9, 3)
    lengths = []
    pos = 12
    for _ in range(count):
        (length,) = struct.unpack_from(">i", data, pos)
        lengths.append(length)
        pos += 4 + length
    assert lengths == [8192, 8192, 20_000 - 16_384]
    assert pos == len(data)


def test_a_block_of_8196_bytes_is_read_and_one_more_closes() -> None:
    head = struct.pack(">III", t.BEGIN_TOKEN, 1, 1)
    fits = head + struct.pack(">i", 8196) + bytes(8196)
    assert frames_of(fits, []) == [t.Frame(1, bytes(8196))]
    over = head + struct.pack(">i", 8197) + bytes(8197)
    assert frames_of(over, []) == [t.FrameError("block length 8197 is outside 0..8196")]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"  V2" + bytes(20), "unknown protocol: begin token 0x20205632"),
        (struct.pack(">III", t.BEGIN_TOKEN, 1, 0), "list size 0 is outside 1..3584"),
        (struct.pack(">III", t.BEGIN_TOKEN, 1, 3585), "list size 3585 is outside 1..3584"),
        (struct.pack(">IIIi", t.BEGIN_TOKEN, 1, 1, -1), "block length -1 is outside 0..8196"),
        (
            struct.pack(">IIIi", t.BEGIN_TOKEN, 1, 1, 10) + b"abc",
            "the connection ended inside a frame",
        ),
    ],
)
def test_bad_framing_is_one_error_that_closes(data: bytes, reason: str) -> None:
    reader = t.FrameReader(BIG)
    reader.receive_data(data + t.encode_frame(2, b"after"))
    if reason.startswith("the connection ended"):
        reader = t.FrameReader(BIG)
        reader.receive_data(data)
        reader.receive_data(b"")
    assert reader.next_frames(10) == [t.FrameError(reason)]
    assert reader.closed
    reader.receive_data(t.encode_frame(3, b"more"))
    assert reader.next_frames(10) == []


def test_a_frame_over_the_bound_closes_before_it_is_buffered() -> None:
    reader = t.FrameReader(10_000)
    reader.receive_data(t.encode_frame(1, bytes(9_000)))
    assert reader.next_frames(5) == [t.Frame(1, bytes(9_000))]
    reader.receive_data(t.encode_frame(2, bytes(10_001))[:9000])
    assert reader.next_frames(5) == [t.FrameError("frame longer than 10000 bytes")]
    assert reader.buffered == 0


def test_next_frames_gives_at_most_the_limit_and_keeps_the_rest() -> None:
    reader = t.FrameReader(BIG)
    reader.receive_data(b"".join(t.encode_frame(n, b"x") for n in range(5)))
    assert [fr.serial_no for fr in reader.next_frames(2) if isinstance(fr, t.Frame)] == [0, 1]
    assert [fr.serial_no for fr in reader.next_frames(10) if isinstance(fr, t.Frame)] == [2, 3, 4]


MESSAGES = [
    (
        t.Service.MASTER,
        t.Method.PRODUCER_REGISTER,
        master_pb2.RegisterRequestP2M(
            clientId="p", brokerCheckSum=-1, hostName="h", topicList=["a", "b"]
        ),
    ),
    (
        t.Service.MASTER,
        t.Method.CONSUMER_HEARTBEAT,
        master_pb2.HeartRequestC2M(clientId="c", groupName="g", reportSubscribeInfo=False),
    ),
    (
        t.Service.BROKER_READ,
        t.Method.SEND_MESSAGE,
        broker_pb2.SendMessageRequestP2B(
            clientId="p",
            topicName="t",
            partitionId=3,
            data=b"\x00" * 20_000,
            flag=0,
            checkSum=-1,
            sentAddr=1,
        ),
    ),
    (
        t.Service.BROKER_WRITE,
        t.Method.SEND_MESSAGE,
        broker_pb2.SendMessageRequestP2B(
            clientId="p",
            topicName="t",
            partitionId=0,
            data=b"d",
            flag=1,
            checkSum=5,
            sentAddr=0,
            msgType="x",
        ),
    ),
    (
        t.Service.BROKER_READ,
        t.Method.GET_MESSAGE,
        broker_pb2.GetMessageRequestC2B(
            clientId="c", partitionId=1, groupName="g", topicName="t", lastPackConsumed=True
        ),
    ),
]


@pytest.mark.parametrize(("service", "method", "message"), MESSAGES)
def test_requests_round_trip(service: int, method: int, message: object) -> None:
    data = t.encode_request(77, service, method, message, protocol_version=2, timeout_ms=1234)  # type: ignore[arg-type]
    [frame] = frames_of(data, [])
    assert isinstance(frame, t.Frame)
    request = t.decode_request(frame, frozenset({1, 2, 3}))
    assert request == t.Request(77, service, method, message, 2, 1234)  # type: ignore[arg-type]


def test_replies_round_trip_and_keep_the_serial_number() -> None:
    reply = broker_pb2.GetMessageResponseB2C(
        success=True,
        errCode=200,
        messages=[
            broker_pb2.TransferedMessage(messageId=n, checkSum=1, payLoadData=bytes(5000), flag=0)
            for n in range(3)
        ],
    )
    [frame] = frames_of(t.encode_reply(0xFFFF_FFFF, t.Method.GET_MESSAGE, reply), [])
    assert isinstance(frame, t.Frame)
    assert t.decode_reply(frame) == t.Reply(0xFFFF_FFFF, t.Method.GET_MESSAGE, reply)


def refused(frame_bytes: bytes, services: frozenset[int] = frozenset({1})) -> t.CallRefused:
    [frame] = frames_of(frame_bytes, [])
    assert isinstance(frame, t.Frame)
    result = t.decode_request(frame, services)
    assert isinstance(result, t.CallRefused)
    return result


def raw_request(service: int, method: int, body: bytes, version: int = 3) -> bytes:
    request = rpc_pb2.RequestBody(method=method, request=body)
    payload = (
        t._delimited(rpc_pb2.RpcConnHeader(flag=0))
        + t._delimited(rpc_pb2.RequestHeader(serviceType=service, protocolVer=version))
        + t._delimited(request)
    )
    return t.encode_frame(5, payload)


def test_unknown_method_is_tubemqs_fatal_exception() -> None:
    result = refused(raw_request(1, 99, b""))
    assert result == t.CallRefused(
        5,
        "java.lang.Exception",
        "IPC server handle request error :Unsupported method ID :99",
        rpc_pb2.ResponseHeader.FATAL,
        3,
    )


def test_missing_required_field_names_it() -> None:
    partial = master_pb2.RegisterRequestP2M(clientId="c").SerializePartialToString()
    result = refused(raw_request(1, 1, partial))
    assert result.exception == "com.google.protobuf.InvalidProtocolBufferException"
    assert result.text == (
        "IPC server handle request error :Message missing required fields: brokerCheckSum, hostName"
    )
    assert result.status == rpc_pb2.ResponseHeader.FATAL


def test_method_of_another_service_and_service_not_served() -> None:
    body = broker_pb2.GetMessageRequestC2B(
        clientId="c", partitionId=0, groupName="g", topicName="t"
    )
    wrong = refused(raw_request(1, 17, body.SerializeToString()))
    assert (wrong.text, wrong.status) == (
        "Unsupported method 17in service type 1!",
        rpc_pb2.ResponseHeader.ERROR,
    )
    elsewhere = refused(raw_request(2, 17, body.SerializeToString()))
    assert elsewhere.text == "No service 2 found on the server"
    invalid = refused(raw_request(9, 17, body.SerializeToString()))
    assert invalid.text == "Service Type is invalid!"


def test_unreadable_envelope_is_fatal() -> None:
    result = refused(t.encode_frame(5, b"\x05\x08"))
    assert result.status == rpc_pb2.ResponseHeader.FATAL
    assert result.text.startswith("IPC server unable to read call parameters:")


def test_exception_reply_names_the_class_as_the_clients_version_knows_it() -> None:
    standby = t.CallRefused(4, t.STANDBY_EXCEPTION, "not master", protocol_version=2)
    [frame] = frames_of(t.encode_exception(standby), [])
    assert isinstance(frame, t.Frame)
    reply = t.decode_reply(frame)
    assert reply == t.Reply(
        4,
        exception="com.apache.tubemq.corerpc.exception.StandbyException",
        text="not master",
        status=rpc_pb2.ResponseHeader.ERROR,
    )
    assert t.exception_name(t.STANDBY_EXCEPTION, 3) == t.STANDBY_EXCEPTION
    assert t.exception_name(t.STANDBY_EXCEPTION, 1).startswith("com.tencent.tubemq.")


# ----------------------------------------------------------------------- formats


@FAST
@given(
    attributes=st.dictionaries(
        st.text(
            st.characters(blacklist_characters=",= ", blacklist_categories=["Cs", "Zs", "Cc"]),
            min_size=1,
            max_size=8,
        ),
        st.text(
            st.characters(blacklist_characters=",= ", blacklist_categories=["Cs", "Zs", "Cc"]),
            max_size=8,
        ),
        max_size=5,
    ),
    payload=st.binary(max_size=64),
)
def test_payload_and_attributes_round_trip(attributes: dict[str, str], payload: bytes) -> None:
    text = f.format_attributes(attributes)
    data, flag = f.join_payload(text, payload)
    assert f.split_payload(data, flag) == (text, payload)
    assert f.parse_attributes(text) == attributes


def test_attribute_section_longer_than_the_data_is_refused() -> None:
    with pytest.raises(ValueError, match="beyond"):
        f.split_payload(struct.pack(">i", 10) + b"a=b", f.ATTRIBUTES_FLAG)
    assert f.split_payload(b"plain", 0) == ("", b"plain")


def test_strings_in_tubemqs_formats() -> None:
    ref = f.PartitionRef(7, "10.0.0.1", 8123, "orders", 3)
    assert str(ref) == "7:10.0.0.1:8123#orders:3"
    assert ref.key == "7:orders:3"
    assert f.parse_partition(str(ref)) == ref
    info = f.SubscribeInfo("c_1.2-x", "group-a", ref)
    assert str(info) == "c_1.2-x@group-a#7:10.0.0.1:8123#orders:3"
    assert f.parse_subscribe_info(str(info)) == info
    assert f.topic_info("orders", 7, 4, 1024) == "orders#7:4:1#1024"
    assert f.broker_info(7, "h", 8123) == "7:h:8123"
    assert f.checksum(b"abc") == 0x352441C2 & 0x7FFFFFFF
    with pytest.raises(ValueError, match="is not consumerId@group"):
        f.parse_subscribe_info("nogroup#1:h:1#t:0")
