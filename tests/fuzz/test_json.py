"""Fuzz every decoder of JSON a peer sends: IDENTIFY (and its negotiation), the ext
header, nsqlookupd's and nsqd's IDENTIFY replies, the auth server's reply, and the
metadata file. Any bytes, any JSON value (deeply nested included) give a value or
the decoder's documented error, never another exception."""

from __future__ import annotations

import contextlib
import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from trionsq.auth.authorizations import AuthReplyError, decode_auth_reply
from trionsq.broker.metadata import MetadataError, decode_metadata
from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.ext_header import ExtHeader, check_ext_header
from trionsq.protocol.identify import decode_identify_request, decode_identify_response, negotiate
from trionsq.protocol.lookupd import decode_identify_reply, decode_peer_info
from trionsq.protocol.settings import ServerSettings

from .mutations import fuzz_settings, mutated

KEYS = [
    "client_id",
    "hostname",
    "heartbeat_interval",
    "output_buffer_size",
    "output_buffer_timeout",
    "feature_negotiation",
    "tls_v1",
    "deflate",
    "deflate_level",
    "snappy",
    "sample_rate",
    "msg_timeout",
    "extend_support",
    "desired_tag",
    "ext_filter",
    "filter_data_list",
    "group_member",
    "group_session_timeout",
    "group_notices",
    "type",
    "tcp_port",
    "version",
    "ttl",
    "authorizations",
    "topic",
    "channels",
    "permissions",
    "identity",
    "topics",
    "channels",
    "##trace_id",
    "##client_dispatch_tag",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=5),
    ),
    max_leaves=30,
)


def encode(value: object) -> bytes:
    """JSON text, big integers included (orjson writes only 64-bit ones)."""
    return json.dumps(value).encode()


@st.composite
def deep(draw: st.DrawFn) -> bytes:
    """A known key holding a value nested far deeper than any decoder needs."""
    depth = draw(st.integers(200, 1100))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    leaf = b"[]" if opener == b"[" else b"1"
    key = draw(st.sampled_from(KEYS)).encode()
    return b'{"' + key + b'":' + opener * depth + leaf + closer * depth + b"}"


documents = st.one_of(
    st.binary(max_size=300),
    json_values.map(encode),
    st.dictionaries(st.sampled_from(KEYS), json_values, max_size=8).map(encode),
    deep(),
).flatmap(lambda raw: st.one_of(st.just(raw), mutated(raw)))


@fuzz_settings
@given(body=documents)
def test_identify(body: bytes) -> None:
    try:
        request = decode_identify_request(body)
    except ProtocolError as caught:
        refused: ProtocolError | None = caught
    else:
        refused = None
        with contextlib.suppress(ProtocolError):
            negotiate(request, ServerSettings())  # nsqd's E_BAD_BODY/E_IDENTIFY_FAILED checks
    if refused is not None:
        assert refused.code == "E_BAD_BODY"


@fuzz_settings
@given(header=documents, overrides=st.dictionaries(st.text(max_size=8), st.text(max_size=8)))
def test_ext_header(header: bytes, overrides: dict[str, str]) -> None:
    checked = check_ext_header(header, overrides)
    if isinstance(checked, ProtocolError):
        assert checked.code in ("E_INVALID_JSON_HEADER", "INVALID_TRACE_ID")
        assert not checked.fatal
        return
    assert isinstance(checked, ExtHeader)
    orjson.dumps(checked.fields)  # HTTP stores it re-serialized: that must work


@fuzz_settings
@given(body=documents)
def test_lookupd_and_identify_replies(body: bytes) -> None:
    for decode in (decode_peer_info, decode_identify_reply, decode_identify_response):
        with contextlib.suppress(ProtocolError):
            decode(body)


@fuzz_settings
@given(body=documents)
def test_auth_reply(body: bytes) -> None:
    text = ""
    try:
        decode_auth_reply(body, fetched_at=0.0)
    except AuthReplyError as error:
        text = str(error)
    assert len(text) < 1000  # what goes to the log stays short


@fuzz_settings
@given(body=documents)
def test_metadata(body: bytes) -> None:
    with contextlib.suppress(MetadataError):
        decode_metadata(body)
