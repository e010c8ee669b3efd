"""Ordered consumption's offset check: next = offset + size; a repeat is a
redelivery; anything else is reported."""

from __future__ import annotations

from trionsq.client.ordering import OffsetCheck, OffsetSkip
from trionsq.protocol.message import Message


def message(offset: int | None, size: int | None = 40) -> Message:
    return Message(0, 1, b"0" * 16, b"x", offset=offset, raw_size=size)


def test_consecutive_and_repeated_offsets_pass_and_partitions_are_separate() -> None:
    check = OffsetCheck()
    a, b = ("h:1", 0), ("h:1", 1)
    assert check.check(a, message(0)) is None
    assert check.check(b, message(1000)) is None
    assert check.check(a, message(40)) is None
    assert check.check(a, message(40)) is None  # delivered again
    assert check.check(a, message(80, 10)) is None
    assert check.check(b, message(1040)) is None
    assert check.check(a, message(90)) is None
    assert not check.skips
    assert check.checked == 7


def test_a_skip_forward_and_a_step_back_are_reported() -> None:
    check = OffsetCheck()
    where = ("h:1", 3)
    check.check(where, message(0))
    skip = check.check(where, message(120))
    assert skip == OffsetSkip(3, 40, 120)
    assert not skip.backwards
    assert str(skip) == "partition 3: skipped from offset 40 to 120"
    back = check.check(where, message(40))
    assert back == OffsetSkip(3, 160, 40)
    assert back.backwards
    assert list(check.skips) == [skip, back]


def test_messages_without_offsets_are_not_checked() -> None:
    check = OffsetCheck()
    assert check.check(("h", None), message(None, None)) is None
    assert check.checked == 0
