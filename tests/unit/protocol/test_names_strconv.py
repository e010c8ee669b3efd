"""Names, Go quoting and Go number parsing used in error texts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol.names import go_quote, is_ephemeral, is_valid_name
from trionsq.protocol.strconv import go_atoi, go_parse_bool, go_parse_uint64, parse_base10, to_int64


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        (b"t", True),
        (b"a.b_c-D9", True),
        (b"t#ephemeral", True),
        (b"x" * 64, True),
        (b"x" * 65, False),
        (b"x" * 54 + b"#ephemeral", True),
        (b"x" * 55 + b"#ephemeral", False),
        (b"", False),
        (b"#ephemeral", False),
        (b"t#eph", False),
        (b"a b", False),
        (b"a\n", False),
        (b"caf\xc3\xa9", False),
    ],
)
def test_names(name: bytes, valid: bool) -> None:
    assert is_valid_name(name) is valid


def test_ephemeral() -> None:
    assert is_ephemeral("c#ephemeral")
    assert not is_ephemeral("c")


@pytest.mark.parametrize(
    ("raw", "quoted"),
    [
        (b"abc", '"abc"'),
        (b'a"b', '"a\\"b"'),
        (b"a\\b", '"a\\\\b"'),
        (b"\n\t\r", '"\\n\\t\\r"'),
        (b"\x01\x7f", '"\\x01\\x7f"'),
        (b"\xff", '"\\xff"'),
        ("é".encode(), '"é"'),
    ],
)
def test_go_quote(raw: bytes, quoted: str) -> None:
    assert go_quote(raw) == quoted


def test_go_atoi() -> None:
    assert go_atoi(b"12") == 12
    assert go_atoi(b"-1") == -1
    assert go_atoi(b"+7") == 7
    assert go_atoi(b"") == 'strconv.Atoi: parsing "": invalid syntax'
    assert go_atoi(b"1a") == 'strconv.Atoi: parsing "1a": invalid syntax'
    assert go_atoi(b"9223372036854775808") == (
        'strconv.Atoi: parsing "9223372036854775808": value out of range'
    )


def test_go_parse_bool() -> None:
    for raw in (b"1", b"t", b"T", b"TRUE", b"true", b"True"):
        assert go_parse_bool(raw) is True
    for raw in (b"0", b"f", b"F", b"FALSE", b"false", b"False"):
        assert go_parse_bool(raw) is False
    assert go_parse_bool(b"yes") == 'strconv.ParseBool: parsing "yes": invalid syntax'


def test_parse_base10() -> None:
    assert parse_base10(b"") == 0
    assert parse_base10(b"0042") == 42
    assert parse_base10(b"-1") is None
    assert parse_base10(b"1 ") is None


@given(st.integers(min_value=0, max_value=10**80))
def test_parse_base10_wraps_like_go_uint64(value: int) -> None:
    assert parse_base10(str(value).encode()) == value % 2**64


def test_parse_base10_accepts_more_digits_than_int_allows() -> None:
    assert parse_base10(b"0" * 10_000 + b"7") == 7
    assert go_parse_uint64(b"0" * 10_000 + b"7") == 7
    assert go_parse_uint64(b"18446744073709551616") is None
    assert to_int64(2**64 - 1) == -1
