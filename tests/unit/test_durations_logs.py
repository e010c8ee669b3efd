"""Go duration syntax and nsqd's log line format."""

from __future__ import annotations

import logging
import re

import pytest

from trionsq.durations import format_duration, parse_duration
from trionsq.logs import NsqdFormatter


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60.0),
        ("100ms", 0.1),
        ("1m30s", 90.0),
        ("1h", 3600.0),
        ("1.5h", 5400.0),
        ("250us", 0.00025),
        ("0", 0.0),
        ("-2s", -2.0),
        ("10ns", 1e-8),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5x", "s", "1m-2s", "1.2.3s"])
def test_parse_duration_refuses_like_go(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f'time: invalid duration "{text}"')):
        parse_duration(text)


def test_format_duration_round_trips() -> None:
    for seconds in (0.025, 0.25, 60.0, 900.0, 3600.0, 2.0):
        assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)
    assert format_duration(60.0) == "1m0s"
    assert format_duration(3600.0) == "1h0m0s"


def test_nsqd_log_line() -> None:
    record = logging.LogRecord("trionsq", logging.WARNING, __file__, 1, "TCP: %s", ("x",), None)
    line = NsqdFormatter().format(record)
    assert re.fullmatch(r"\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} WARNING: TCP: x", line)
