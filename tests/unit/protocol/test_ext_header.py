"""check_ext_header: the one home of Youzan's ext header rules (spec tcp-protocol §8.3).

TCP PUB_EXT and HTTP /pub_ext both call it, so these cases pin what both accept,
what they refuse and with which (TCP wire) text.
"""

from __future__ import annotations

import pytest

from trionsq.protocol import ExtHeader, ProtocolError, check_ext_header


def soft(code: str, description: str) -> ProtocolError:
    return ProtocolError(code, description, fatal=False)


def test_a_json_object_is_accepted_with_its_fields() -> None:
    checked = check_ext_header(b'{"a":"1","n":2,"nested":{"x":[1]}}')
    assert checked == ExtHeader({"a": "1", "n": 2, "nested": {"x": [1]}}, None, None)


def test_text_is_accepted_as_well_as_bytes() -> None:
    assert check_ext_header('{"a":"é"}') == ExtHeader({"a": "é"}, None, None)


def test_trace_id_string_holding_a_uint64_gives_the_trace_id() -> None:
    for raw, value in (("0", 0), ("99", 99), ("007", 7), (str(2**64 - 1), 2**64 - 1)):
        checked = check_ext_header(b'{"##trace_id":"%s"}' % raw.encode())
        assert isinstance(checked, ExtHeader)
        assert checked.trace_id == value


def test_trace_id_null_counts_as_absent() -> None:
    checked = check_ext_header(b'{"##trace_id":null}')
    assert isinstance(checked, ExtHeader)
    assert checked.trace_id is None


def test_trace_id_not_a_string_is_invalid_trace_id() -> None:
    for value in (b"5", b"true", b"[]", b"{}"):
        checked = check_ext_header(b'{"##trace_id":%s}' % value)
        assert checked == soft("INVALID_TRACE_ID", "passin trace id should be string")


def test_trace_id_string_not_a_uint64_is_invalid_trace_id() -> None:
    for value in ("", "x1", "-1", "+1", " 1", "1.0", str(2**64)):
        checked = check_ext_header(f'{{"##trace_id":"{value}"}}'.encode())
        assert checked == soft("INVALID_TRACE_ID", "invalid trace id"), value


def test_dispatch_tag_is_read_only_when_a_string() -> None:
    checked = check_ext_header(b'{"##client_dispatch_tag":"eu"}')
    assert isinstance(checked, ExtHeader)
    assert checked.tag == "eu"
    checked = check_ext_header(b'{"##client_dispatch_tag":1}')
    assert isinstance(checked, ExtHeader)
    assert checked.tag is None


def test_not_json_is_e_invalid_json_header_with_the_parser_reason() -> None:
    for raw in (b"", b"{", b"not json", '{"a":"\ud800"}'):
        checked = check_ext_header(raw)
        assert isinstance(checked, ProtocolError), raw
        assert (checked.code, checked.fatal) == ("E_INVALID_JSON_HEADER", False)
        assert checked.text.startswith("E_INVALID_JSON_HEADER fail to parse json header:")


def test_json_that_is_not_an_object_is_e_invalid_json_header() -> None:
    for raw in (b"[]", b"1", b'"s"', b"null"):
        checked = check_ext_header(raw)
        assert checked == soft(
            "E_INVALID_JSON_HEADER", "fail to parse json header:not a JSON object"
        )


def test_overrides_add_and_replace_keys_before_the_rules_apply() -> None:
    checked = check_ext_header(b'{"a":"1","b":"2"}', {"b": "x", "c": "y"})
    assert checked == ExtHeader({"a": "1", "b": "x", "c": "y"}, None, None)


@pytest.mark.parametrize(
    ("header", "overrides", "expected"),
    [
        (b'{"##trace_id":5}', {"##trace_id": "6"}, 6),  # an override repairs a bad value
        (b"{}", {"##trace_id": "42"}, 42),
    ],
)
def test_overrides_of_trace_id_are_checked_and_used(
    header: bytes, overrides: dict[str, str], expected: int
) -> None:
    checked = check_ext_header(header, overrides)
    assert isinstance(checked, ExtHeader)
    assert checked.trace_id == expected


def test_an_override_that_is_not_a_uint64_is_invalid_trace_id() -> None:
    checked = check_ext_header(b'{"##trace_id":"1"}', {"##trace_id": "abc"})
    assert checked == soft("INVALID_TRACE_ID", "invalid trace id")


def test_overrides_do_not_rescue_a_header_that_is_not_an_object() -> None:
    checked = check_ext_header(b"[1]", {"a": "b"})
    assert isinstance(checked, ProtocolError)
    assert checked.code == "E_INVALID_JSON_HEADER"
