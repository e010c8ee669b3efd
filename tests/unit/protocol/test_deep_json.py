"""JSON nested as deep as orjson allows (1023 levels) is an ordinary bad-body error on
every path that reads peer JSON (issue 14): never a RecursionError, and error texts
stay short however big the value.

The decoders run under :func:`with_stack_in_use`, a couple of hundred frames deep
as a server's handler is, since that is where a recursive walk runs out of stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import attrs
import orjson
import pytest

from trionsq.auth.authorizations import AuthReplyError, decode_auth_reply
from trionsq.broker.metadata import MetadataError, decode_metadata
from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.ext_header import MAX_EXT_HEADER_DEPTH, ExtHeader, check_ext_header
from trionsq.protocol.identify import decode_identify_request, decode_identify_response
from trionsq.protocol.lookupd import decode_identify_reply, decode_peer_info
from trionsq.protocol.server import ServerConnection
from trionsq.serialization import JsonDecodeError, short_repr, structure_json

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

DEPTHS = [500, 999, 1023]


def with_stack_in_use(frames: int, call: Callable[[], T]) -> T:
    """``call()`` from ``frames`` frames further down the stack."""
    if frames == 0:
        return call()
    return with_stack_in_use(frames - 1, call)


def nested_objects(depth: int, key: str = "a") -> bytes:
    """``{"a":{"a":...1...}}`` with ``depth`` objects."""
    return f'{{"{key}":'.encode() * depth + b"1" + b"}" * depth


def nested_arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def deep_members(depth: int) -> list[bytes]:
    """Bodies ``depth`` levels deep where a decoder expects a value of some type (an
    unknown key is ignored, as Go ignores it, however deep), or too deep for orjson."""
    return [
        b'{"version":' + nested_arrays(depth - 1) + b"}",
        b'{"client_id":' + nested_objects(depth - 1) + b"}",
        b'{"ext_filter":{"type":' + nested_objects(depth - 2) + b"}}",
        b'{"ext_filter":{"filter_data_list":' + nested_arrays(depth - 2) + b"}}",
        b'{"tcp_port":' + nested_arrays(depth - 1) + b"}",
        b'{"max_rdy_count":' + nested_objects(depth - 1) + b"}",
        nested_objects(1025),
    ]


@pytest.mark.parametrize("depth", DEPTHS)
def test_identify_body_is_bad_body(depth: int) -> None:
    for body in deep_members(depth)[1:4] + deep_members(depth)[-1:]:
        with pytest.raises(ProtocolError) as raised:
            with_stack_in_use(200, lambda body=body: decode_identify_request(body))  # type: ignore[misc]
        assert raised.value.text == "E_BAD_BODY IDENTIFY failed to decode JSON body"


def test_identify_unknown_deep_member_is_ignored_as_by_go() -> None:
    """Go decodes (and ignores) a deep unknown key: so do we, nulls and all."""
    for depth in DEPTHS:
        body = b'{"client_id":"c","unknown":' + nested_objects(depth - 1)[:-1] + b',"b":null}}'
        request = with_stack_in_use(200, lambda b=body: decode_identify_request(b))  # type: ignore[misc]
        assert request.client_id == "c"


def test_identify_through_the_server_parser() -> None:
    connection = ServerConnection()
    body = b'{"ext_filter":{"inverse":' + nested_objects(1000) + b"}}"
    events = with_stack_in_use(
        150,
        lambda: connection.receive_data(b"  V2IDENTIFY\n" + len(body).to_bytes(4, "big") + body),
    )
    assert len(events) == 1
    assert isinstance(events[0], ProtocolError)
    assert events[0].text == "E_BAD_BODY IDENTIFY failed to decode JSON body"
    assert events[0].fatal


@attrs.frozen
class Shape:
    version: str = ""
    items: tuple[int, ...] = ()


@pytest.mark.parametrize("depth", DEPTHS)
def test_client_and_lookupd_decoders(depth: int) -> None:
    """The lookupd's IDENTIFY (PeerInfo), its reply and nsqd's reply, client side."""
    version, *_, tcp_port, max_rdy, too_deep = deep_members(depth)
    for decode, bodies in (
        (decode_peer_info, (version, tcp_port, too_deep)),
        (decode_identify_reply, (version, tcp_port, too_deep)),
        (decode_identify_response, (version, max_rdy, too_deep)),
    ):
        for body in bodies:
            with pytest.raises(ProtocolError):
                with_stack_in_use(200, lambda d=decode, b=body: d(b))  # type: ignore[misc]


@pytest.mark.parametrize("depth", DEPTHS)
def test_structure_json_raises_only_its_error(depth: int) -> None:
    for body in (
        b'{"version":' + nested_arrays(depth - 1) + b"}",
        b'{"items":' + nested_arrays(depth - 1) + b"}",
        b'{"items":[1,' + nested_objects(depth - 2) + b"]}",
        nested_objects(1025),
    ):
        with pytest.raises(JsonDecodeError) as raised:
            with_stack_in_use(200, lambda b=body: structure_json(b, Shape))  # type: ignore[misc]
        assert len(str(raised.value)) < 2000


@pytest.mark.parametrize("depth", DEPTHS)
def test_auth_reply(depth: int) -> None:
    inner_objects, inner_arrays = nested_objects(depth - 2), nested_arrays(depth - 3)
    for body in (
        b'{"authorizations":' + inner_objects + b"}",
        b'{"ttl":' + nested_arrays(depth - 1) + b"}",
        b'{"authorizations":[{"topic":"t","permissions":' + inner_arrays + b"}]}",
        b'{"authorizations":[' + inner_objects + b"]}",
    ):
        with pytest.raises(AuthReplyError) as raised:
            with_stack_in_use(200, lambda b=body: decode_auth_reply(b, fetched_at=0))  # type: ignore[misc]
        assert len(str(raised.value)) < 500


@pytest.mark.parametrize("depth", [MAX_EXT_HEADER_DEPTH + 1, 500, 1023, 1024, 1100])
def test_ext_header_too_deep_is_invalid_json_header(depth: int) -> None:
    for header in (nested_objects(depth), b'{"x":' + nested_arrays(depth - 1) + b"}"):
        checked = with_stack_in_use(200, lambda h=header: check_ext_header(h))  # type: ignore[misc]
        assert isinstance(checked, ProtocolError)
        assert checked.code == "E_INVALID_JSON_HEADER"
        assert not checked.fatal


def test_ext_header_at_the_depth_limit_is_accepted_and_writable() -> None:
    header = b'{"##trace_id":"7","x":' + nested_arrays(MAX_EXT_HEADER_DEPTH - 1) + b"}"
    checked = check_ext_header(header)
    assert isinstance(checked, ExtHeader)
    assert checked.trace_id == 7
    assert orjson.loads(orjson.dumps(checked.fields)) == orjson.loads(header)


def test_metadata_file() -> None:
    body = b'{"version":1,"topics":' + nested_arrays(1000) + b"}"
    with pytest.raises(MetadataError):
        with_stack_in_use(200, lambda: decode_metadata(body))


def test_short_repr_is_bounded() -> None:
    deep: object = 1
    for _ in range(5000):
        deep = [deep]
    assert len(short_repr(deep)) < 100
    assert len(short_repr("x" * 10_000)) <= 100
    assert short_repr({"a": 1}) == "{'a': 1}"
    # broad as well as deep: long keys on every level (a fuzzed auth reply of 1,000)
    wide = [{f"k{n}" * 20: {f"j{m}" * 20: None for m in range(4)} for n in range(4)}] * 6
    assert len(short_repr(wide)) == 400
    assert short_repr(wide).endswith("...")
