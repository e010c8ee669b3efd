"""IDENTIFY bodies: cattrs JSON round trips and Go-like strict decoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol import IdentifyRequest, ProtocolError
from trionsq.protocol.identify import (
    ExtFilter,
    ExtFilterItem,
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
        25 <= settings.output_buffer_timeout_ms <= 30_000 or settings.output_buffer_timeout_ms == 0
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
