"""Go's durations: ``time.ParseDuration`` syntax, which nsqd's flags and config files
use, and ``Duration.String``, which its flags' defaults and /stats print."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["format_duration", "go_duration_string", "parse_duration"]

_UNITS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds from ``"60s"``, ``"100ms"``, ``"1m30s"``, ``"-1.5h"``; ``"0"`` is 0.

    Raises:
        ValueError: Go's ``time: invalid duration "<text>"`` wording.
    """
    raw = text.strip()
    sign = -1.0 if raw.startswith("-") else 1.0
    body = raw.lstrip("+-")
    if body == "0":
        return 0.0
    position = 0
    total = 0.0
    while position < len(body):
        match = _PART.match(body, position)
        if match is None:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not body or position != len(body):
        raise ValueError(f'time: invalid duration "{text}"')
    return sign * total


def format_duration(seconds: float) -> str:
    """A short Go-style rendering for help texts: ``60s``, ``250ms``, ``15m0s``, ``1h0m0s``."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h0m0s"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m0s"
    if seconds >= 1:
        return f"{seconds:g}s"
    return f"{seconds * 1000:g}ms"


def go_duration_string(nanoseconds: int) -> str:
    """Go's ``time.Duration.String()``: ``0s``, ``1.5ms``, ``2m3.25s``, ``1h0m0s``."""
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    magnitude = abs(nanoseconds)
    if magnitude < 1_000:
        return f"{sign}{magnitude}ns"
    if magnitude < 1_000_000:
        return f"{sign}{_decimal(magnitude, 3)}µs"
    if magnitude < 1_000_000_000:
        return f"{sign}{_decimal(magnitude, 6)}ms"
    whole, fraction = divmod(magnitude, 1_000_000_000)
    hours, rest = divmod(whole, 3600)
    minutes, seconds = divmod(rest, 60)
    text = _decimal(seconds * 1_000_000_000 + fraction, 9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _decimal(value: int, digits: int) -> str:
    """``value / 10**digits`` without trailing zeros in the fraction (Go's fmtFrac)."""
    whole, fraction = divmod(value, 10**digits)
    decimals = f"{fraction:0{digits}d}".rstrip("0")
    return f"{whole}.{decimals}" if decimals else str(whole)
