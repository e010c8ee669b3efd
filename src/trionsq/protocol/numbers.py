"""Number parsing with the exact acceptance rules and error texts nsqd's Go code has."""

from __future__ import annotations

from typing import Final

from .names import go_quote

__all__ = ["go_atoi", "go_parse_bool", "parse_base10"]

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_TRUE: Final = frozenset({b"1", b"t", b"T", b"TRUE", b"true", b"True"})
_FALSE: Final = frozenset({b"0", b"f", b"F", b"FALSE", b"false", b"False"})


def parse_base10(raw: bytes) -> int | None:
    """nsqd's ``ByteToBase10``: ASCII digits only, no sign; empty is 0; else ``None``."""
    if not raw:
        return 0
    if not raw.isdigit():
        return None
    return int(raw)


def go_atoi(raw: bytes) -> int | str:
    """Go's ``strconv.Atoi`` on 64-bit: the int, or Go's error text."""
    digits = raw[1:] if raw[:1] in (b"+", b"-") else raw
    if not digits or not digits.isdigit():
        return f"strconv.Atoi: parsing {go_quote(raw)}: invalid syntax"
    value = int(raw)
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
