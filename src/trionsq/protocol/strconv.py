"""Number parsing with the acceptance rules and error texts of nsqd's Go code.

Python's ``int()`` refuses strings over 4300 digits, so nothing here hands it an
unbounded string: Go's fixed-width results only ever need the last digits.
"""

from __future__ import annotations

from typing import Final

from .names import go_quote

__all__ = [
    "decimal_text",
    "go_atoi",
    "go_parse_bool",
    "go_parse_uint64",
    "parse_base10",
    "parse_decimal",
    "to_int64",
]

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64: Final = 2**64
_TRUE: Final = frozenset({b"1", b"t", b"T", b"TRUE", b"true", b"True"})
_FALSE: Final = frozenset({b"0", b"f", b"F", b"FALSE", b"false", b"False"})


def parse_base10(raw: bytes) -> int | None:
    """nsqd's ``ByteToBase10``: ASCII digits only, no sign, empty is 0; else ``None``.

    Like Go's uint64 arithmetic it wraps modulo 2**64 (10**64 is a multiple of
    2**64, so only the last 64 digits matter).
    """
    if not raw:
        return 0
    if not raw.isdigit():
        return None
    return int(raw[-64:]) % _UINT64


def parse_decimal(raw: bytes) -> int | None:
    """What :func:`parse_base10` accepts, read exactly instead of modulo 2**64: a value
    of 2**64 or more comes back as 2**64, above every bound it is checked against, so
    a huge number is refused rather than wrapped into range (issue 30, PULL and DPUB).
    """
    if not raw:
        return 0
    if not raw.isdigit():
        return None
    digits = raw.lstrip(b"0")
    return _UINT64 if len(digits) > 20 else min(int(digits or b"0"), _UINT64)


def decimal_text(raw: bytes) -> str:
    """A number :func:`parse_decimal` accepted, as sent, for an error text: its
    digits without leading zeros (Go's ``%d`` of the same value)."""
    return raw.lstrip(b"0").decode("ascii") or "0"


def to_int64(value: int) -> int:
    """Reinterpret a uint64 as Go's int64 conversion does."""
    return value - _UINT64 if value > _INT64_MAX else value


def go_parse_uint64(raw: bytes) -> int | None:
    """Go's ``strconv.ParseUint(s, 10, 64)``: the value, or ``None`` on any error."""
    if not raw or not raw.isdigit():
        return None
    digits = raw.lstrip(b"0") or b"0"
    if len(digits) > 20:
        return None
    value = int(digits)
    return value if value < _UINT64 else None


def go_atoi(raw: bytes) -> int | str:
    """Go's ``strconv.Atoi`` on 64-bit: the int, or Go's error text."""
    sign = raw[:1] if raw[:1] in (b"+", b"-") else b""
    digits = raw[len(sign) :]
    if not digits or not digits.isdigit():
        return f"strconv.Atoi: parsing {go_quote(raw)}: invalid syntax"
    significant = digits.lstrip(b"0") or b"0"
    value = int(significant) if len(significant) <= 19 else _INT64_MAX + 1
    if sign == b"-":
        value = -value
    if not _INT64_MIN <= value <= _INT64_MAX:
        return f"strconv.Atoi: parsing {go_quote(raw)}: value out of range"
    return value


def go_parse_bool(raw: bytes) -> bool | str:
    """Go's ``strconv.ParseBool``: the bool, or Go's error text."""
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    return f"strconv.ParseBool: parsing {go_quote(raw)}: invalid syntax"
