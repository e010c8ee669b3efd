"""IDENTIFY bodies: cattrs JSON round trips and Go-like strict decoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq import NsqdConfig
from trionsq.protocol import IdentifyRequest, ProtocolError
from trionsq.protocol.identify import (
    ExtFilter,
    ExtFilterItem,
    NegotiatedSettings,
    decode_identify_request,
    decode_identify_response,
    encode_identify_request,
    encode_identify_response,
    negotiate,
)
from trionsq.protocol.settings import ServerSettings

text = st.text(max_size=20)
int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
ext_filters = st.builds(
    ExtFilter,
    type=int32,
    inverse=st.booleans(),
    filter_ext_key=text,
    filter_data=text,
    filter_data_list=st.lists(st.builds(ExtFilterItem, text, text), max_size=3).map(tuple),
)
requests = st.builds(
    IdentifyRequest,
    client_id=text,
    hostname=text,
    user_agent=text,
    heartbeat_interval=int32,
    output_buffer_size=int32,
    output_buffer_timeout=int32,
    feature_negotiation=st.booleans(),
    tls_v1=st.booleans(),
    deflate=st.booleans(),
    deflate_level=int32,
    snappy=st.booleans(),
    sample_rate=int32,
    msg_timeout=int32,
    topology_region=text,
    topology_zone=text,
    extend_support=st.booleans(),
    desired_tag=text,
    ext_filter=st.none() | ext_filters,
    short_id=text,
    long_id=text,
)


@given(requests)
def test_identify_request_round_trips_through_json(request: IdentifyRequest) -> None:
    assert decode_identify_request(encode_identify_request(request)) == request


@given(requests)
def test_negotiate_either_settles_or_raises_a_protocol_error(request: IdentifyRequest) -> None:
    outcome: ProtocolError | None = None
    try:
        settings, response = negotiate(request, ServerSettings())
    except ProtocolError as error:
        outcome = error
    if outcome is not None:
        assert outcome.fatal
        assert outcome.code in {"E_BAD_BODY", "E_IDENTIFY_FAILED"}
        return
    assert settings.heartbeat_interval_ms in {0} | set(range(1000, 60_001))
    assert (
        10 <= settings.output_buffer_timeout_ms <= 30_000 or settings.output_buffer_timeout_ms == 0
    )
    assert not (settings.snappy and settings.deflate)
    if response is not None:
        assert decode_identify_response(encode_identify_response(response)) == response


def test_encode_omits_defaults() -> None:
    assert encode_identify_request(IdentifyRequest()) == b"{}"
    assert encode_identify_request(IdentifyRequest(snappy=True)) == b'{"snappy":true}'


@pytest.mark.parametrize(
    "body",
    [b'{"sample_rate":2147483648}', b'{"ext_filter":[]}', b'{"client_id":5}', b"null", b"NaN"],
)
def test_strict_decoding_refuses(body: bytes) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_identify_request(body)
    assert caught.value.text == "E_BAD_BODY IDENTIFY failed to decode JSON body"


def test_nested_nulls_keep_defaults() -> None:
    request = decode_identify_request(b'{"ext_filter":{"filter_data":null,"inverse":true}}')
    assert request.ext_filter == ExtFilter(inverse=True)


def test_the_default_floor_is_youzans_10ms() -> None:
    """nsqd's 25 ms refused the 10 ms Youzan users send; Youzan's nsqd keeps 10 ms."""
    assert ServerSettings().min_output_buffer_timeout_ms == 10
    assert NsqdConfig().server_settings("v").min_output_buffer_timeout_ms == 10


def settle(body: bytes) -> NegotiatedSettings:
    return negotiate(decode_identify_request(body), ServerSettings())[0]


@pytest.mark.parametrize(
    ("key", "sent", "field", "settled"),
    [
        ("output_buffer_timeout", 10, "output_buffer_timeout_ms", 10),
        ("output_buffer_timeout", 30_000, "output_buffer_timeout_ms", 30_000),
        ("output_buffer_timeout", 0, "output_buffer_timeout_ms", 250),
        ("output_buffer_timeout", -1, "output_buffer_timeout_ms", 0),
        ("heartbeat_interval", 1000, "heartbeat_interval_ms", 1000),
        ("heartbeat_interval", 60_000, "heartbeat_interval_ms", 60_000),
        ("heartbeat_interval", 0, "heartbeat_interval_ms", 30_000),
        ("heartbeat_interval", -1, "heartbeat_interval_ms", 0),
        ("output_buffer_size", 64, "output_buffer_size", 64),
        ("output_buffer_size", 65_536, "output_buffer_size", 65_536),
        ("output_buffer_size", 0, "output_buffer_size", 16_384),
        ("output_buffer_size", -1, "output_buffer_size", 1),
        ("msg_timeout", 1000, "msg_timeout_ms", 1000),
        ("msg_timeout", 900_000, "msg_timeout_ms", 900_000),
        ("msg_timeout", 0, "msg_timeout_ms", 60_000),
        ("sample_rate", 0, "sample_rate", 0),
        ("sample_rate", 99, "sample_rate", 99),
    ],
)
def test_boundary_values_accepted(key: str, sent: int, field: str, settled: int) -> None:
    assert getattr(settle(b'{"%s":%d}' % (key.encode(), sent)), field) == settled


@pytest.mark.parametrize(
    ("key", "sent", "reason"),
    [
        ("output_buffer_timeout", 9, "output buffer timeout (9) is invalid"),
        ("output_buffer_timeout", 1, "output buffer timeout (1) is invalid"),
        ("output_buffer_timeout", 30_001, "output buffer timeout (30001) is invalid"),
        ("output_buffer_timeout", -2, "output buffer timeout (-2) is invalid"),
        ("heartbeat_interval", 999, "heartbeat interval (999) is invalid"),
        ("heartbeat_interval", 60_001, "heartbeat interval (60001) is invalid"),
        ("heartbeat_interval", -2, "heartbeat interval (-2) is invalid"),
        ("output_buffer_size", 63, "output buffer size (63) is invalid"),
        ("output_buffer_size", 65_537, "output buffer size (65537) is invalid"),
        ("output_buffer_size", -2, "output buffer size (-2) is invalid"),
        ("msg_timeout", 999, "msg timeout (999) is invalid"),
        ("msg_timeout", 900_001, "msg timeout (900001) is invalid"),
        ("msg_timeout", -1, "msg timeout (-1) is invalid"),
        ("sample_rate", 100, "sample rate (100) is invalid"),
        ("sample_rate", -1, "sample rate (-1) is invalid"),
    ],
)
def test_boundary_values_refused_in_nsqds_words(key: str, sent: int, reason: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        settle(b'{"%s":%d}' % (key.encode(), sent))
    assert caught.value.fatal
    assert caught.value.text == f"E_BAD_BODY IDENTIFY {reason}"


@pytest.mark.parametrize(
    "body",
    [
        b'{"output_buffer_timeout":"10"}',
        b'{"output_buffer_timeout":10.5}',
        b'{"output_buffer_timeout":true}',
        b'{"heartbeat_interval":"30s"}',
        b'{"output_buffer_timeout":9223372036854775808}',
    ],
)
def test_wrong_types_are_refused(body: bytes) -> None:
    with pytest.raises(ProtocolError) as caught:
        settle(body)
    assert caught.value.text == "E_BAD_BODY IDENTIFY failed to decode JSON body"


def test_an_operator_floor_is_honoured() -> None:
    """--min-output-buffer-timeout keeps working both ways (nsqd's refusal text)."""
    strict = ServerSettings(min_output_buffer_timeout_ms=25)
    with pytest.raises(ProtocolError, match=r"output buffer timeout \(10\) is invalid"):
        negotiate(IdentifyRequest(output_buffer_timeout=10), strict)
    loose = ServerSettings(min_output_buffer_timeout_ms=1)
    settled, _ = negotiate(IdentifyRequest(output_buffer_timeout=1), loose)
    assert settled.output_buffer_timeout_ms == 1


@pytest.mark.parametrize(
    ("body", "session", "heartbeat"),
    [
        (b'{"group_member":"m"}', 10_000, 3333),  # a third: an idle member answers in time
        (b'{"group_member":"m","group_session_timeout":3000}', 3000, 1000),
        (b'{"group_member":"m","group_session_timeout":1800000}', 1_800_000, 30_000),
        (b'{"group_member":"m","heartbeat_interval":2000}', 10_000, 2000),
        (b'{"group_member":"m","heartbeat_interval":-1}', 10_000, 3333),
        (b'{"group_session_timeout":5000}', 0, 30_000),  # no member: no session
    ],
)
def test_a_group_member_has_a_session_and_heartbeats_within_a_third_of_it(
    body: bytes, session: int, heartbeat: int
) -> None:
    settled = settle(body)
    assert (settled.group_session_timeout_ms, settled.heartbeat_interval_ms) == (
        session,
        heartbeat,
    )


@pytest.mark.parametrize("sent", [2999, 1_800_001, -1, 1])
def test_a_group_session_timeout_out_of_range_is_refused_with_the_range(sent: int) -> None:
    for body in (
        b'{"group_member":"m","group_session_timeout":%d}',
        b'{"group_session_timeout":%d}',
    ):
        with pytest.raises(ProtocolError) as caught:
            settle(body % sent)
        assert caught.value.fatal
        assert caught.value.text == (
            f"E_BAD_BODY IDENTIFY group session timeout ({sent}) is invalid: 3000 to 1800000 ms"
        )


def test_the_session_and_notices_are_echoed_to_members_only() -> None:
    asked = IdentifyRequest(
        feature_negotiation=True, group_member="m", group_session_timeout=4000, group_notices=True
    )
    _, reply = negotiate(asked, ServerSettings())
    assert reply is not None
    document = encode_identify_response(reply)
    assert b'"group_session_timeout":4000' in document
    assert b'"group_notices":true' in document
    plain = IdentifyRequest(
        feature_negotiation=True, group_session_timeout=4000, group_notices=True
    )
    settled, reply = negotiate(plain, ServerSettings())
    assert reply is not None
    assert b"group_" not in encode_identify_response(reply)
    assert not settled.group_notices
