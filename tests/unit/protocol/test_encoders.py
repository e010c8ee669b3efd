"""Exact bytes of every server-to-client encoder."""

from __future__ import annotations

import struct

import pytest

from trionsq.protocol import (
    CLOSE_WAIT_FRAME,
    HEARTBEAT_FRAME,
    OK_FRAME,
    IdentifyRequest,
    Message,
    ProtocolError,
    ServerSettings,
    binary_id,
    decode_message,
    encode_message,
    encode_message_frame,
    encode_message_frames,
    error_frame,
    hex_id,
    response_frame,
    traced_reply,
    traced_reply_frame,
)
from trionsq.protocol.identify import encode_identify_response, negotiate
from trionsq.protocol.message import parse_binary_id, parse_hex_id


def test_response_and_error_frames() -> None:
    assert OK_FRAME == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    assert HEARTBEAT_FRAME == b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_"
    assert CLOSE_WAIT_FRAME == b"\x00\x00\x00\x0e\x00\x00\x00\x00CLOSE_WAIT"
    assert response_frame(b"") == b"\x00\x00\x00\x04\x00\x00\x00\x00"
    assert (
        error_frame(ProtocolError("E_INVALID", "x"))
        == b"\x00\x00\x00\x0f\x00\x00\x00\x01E_INVALID x"
    )
    assert error_frame(ProtocolError("E_BAD_PROTOCOL", None)) == (
        b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL"
    )
    assert error_frame(ProtocolError("E_TOPIC_NOT_EXIST", "")).endswith(b"E_TOPIC_NOT_EXIST ")


def test_plain_message_frame_layout() -> None:
    frame = encode_message_frame(1_700_000_000_000_000_000, 1, hex_id(0xABC), b"body")
    size, frame_type = struct.unpack(">Ii", frame[:8])
    assert (size, frame_type) == (4 + 26 + 4, 2)
    assert frame[8:16] == struct.pack(">q", 1_700_000_000_000_000_000)
    assert frame[16:18] == b"\x00\x01"
    assert frame[18:34] == b"0000000000000abc"
    assert frame[34:] == b"body"
    message = Message(1_700_000_000_000_000_000, 1, hex_id(0xABC), b"body")
    assert encode_message_frames([message, message]) == frame + frame
    assert frame[8:] == encode_message(message)


def test_extended_and_detail_layouts() -> None:
    header = b'{"##client_dispatch_tag":"a"}'
    message = Message(5, 2, binary_id(8, 99), b"b", 4, header, offset=239, raw_size=32)
    data = encode_message(message, extended=True, detail=True)
    assert data == (
        struct.pack(">qH", 5, 2)
        + struct.pack(">QQ", 8, 99)
        + b"\x04"
        + struct.pack(">H", len(header))
        + header
        + struct.pack(">QI", 239, 32)
        + b"b"
    )
    assert decode_message(data, extended=True, detail=True) == message
    plain_ext = Message(5, 2, binary_id(8), b"b", 0, b"")
    assert (
        encode_message(plain_ext, extended=True)
        == struct.pack(">qH", 5, 2) + binary_id(8) + b"\x00b"
    )
    ordered = Message(5, 1, binary_id(3), b"xyz", offset=64, raw_size=33)
    assert encode_message(ordered, detail=True)[26:38] == struct.pack(">QI", 64, 33)


def test_decode_message_too_short_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        decode_message(b"\x00" * 25)
    with pytest.raises(ProtocolError):
        decode_message(b"\x00" * 26, detail=True)
    with pytest.raises(ProtocolError):
        decode_message(b"\x00" * 26 + b"\x04\x00\x09{}", extended=True)


def test_message_ids() -> None:
    assert hex_id(1) == b"0000000000000001"
    assert parse_hex_id(b"00000000000000ff") == 255
    assert parse_hex_id(b"0x000000000000ff") == -1
    assert parse_hex_id(b"short") == -1
    assert binary_id(2, 0x0A200A200A200A20) == bytes.fromhex("0000000000000002 0a200a200a200a20")
    assert parse_binary_id(binary_id(7, 9)) == (7, 9)


def test_traced_reply_matches_youzan_example() -> None:
    # spec tcp-protocol §9: the reply captured from Youzan's nsqd
    expected = bytes.fromhex("4f4b 0000000000000002 0a200a200a200a20 0000000000000020 00000026")
    assert traced_reply(2, 0x0A200A200A200A20, 0x20, 0x26) == expected
    assert len(expected) == 30
    assert traced_reply_frame(2, 0x0A200A200A200A20, 0x20, 0x26) == response_frame(expected)


def test_identify_reply_json_in_nsqd_key_order() -> None:
    _, response = negotiate(
        IdentifyRequest(feature_negotiation=True), ServerSettings(version="1.3.0")
    )
    assert response is not None
    assert encode_identify_response(response) == (
        b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,'
        b'"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,'
        b'"sample_rate":0,"auth_required":false,"output_buffer_size":16384,'
        b'"output_buffer_timeout":250,"topology_region":"","topology_zone":""}'
    )
    _, tagged = negotiate(
        IdentifyRequest(feature_negotiation=True, desired_tag="tagA"), ServerSettings()
    )
    assert tagged is not None
    assert encode_identify_response(tagged).endswith(b',"desired_tag":"tagA"}')


def test_identify_without_feature_negotiation_has_no_json_reply() -> None:
    settings, response = negotiate(IdentifyRequest(), ServerSettings())
    assert response is None
    assert settings.heartbeat_interval_ms == 30_000
    assert settings.output_buffer_timeout_ms == 250


def test_deflate_level_defaults_and_caps() -> None:
    def level(asked: int, maximum: int = 6) -> int:
        request = IdentifyRequest(deflate=True, deflate_level=asked)
        return negotiate(request, ServerSettings(max_deflate_level=maximum))[0].deflate_level

    assert level(0) == 6
    assert level(-3) == 6
    assert level(3) == 3
    assert level(9) == 6
    assert level(9, maximum=9) == 9
