"""Ordered consumption's check (seed 003 §5): within a partition, each message's
log offset must follow the last one's (offset + raw size), or repeat it (the same
message delivered again). Anything else is reported, never hidden."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

import attrs

if TYPE_CHECKING:
    from ..protocol.message import Message

__all__ = ["OffsetCheck", "OffsetSkip"]

KEPT_SKIPS: Final = 1000


@attrs.frozen
class OffsetSkip:
    """A message that did not come where the previous one said the next would."""

    partition: int | None
    expected: int
    got: int

    @property
    def backwards(self) -> bool:
        """Older than the last one delivered (not a redelivery of it)."""
        return self.got < self.expected

    def __str__(self) -> str:
        kind = "went back" if self.backwards else "skipped"
        return f"partition {self.partition}: {kind} from offset {self.expected} to {self.got}"


class OffsetCheck:
    """Offsets seen per partition, kept across reconnects."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int | None], tuple[int, int]] = {}
        self.skips: deque[OffsetSkip] = deque(maxlen=KEPT_SKIPS)
        """The most recent problems (the oldest are dropped past a thousand)."""
        self.checked = 0

    def restart(self, where: tuple[str, int | None]) -> None:
        """The partition went back on purpose (an ordered window after a requeue): the
        next message starts the check afresh."""
        self._last.pop(where, None)

    def check(self, where: tuple[str, int | None], message: Message) -> OffsetSkip | None:
        """Record ``message`` (detail layout) from partition ``where``; the problem, if any."""
        offset, size = message.offset, message.raw_size
        if offset is None or size is None:
            return None
        self.checked += 1
        last = self._last.get(where)
        self._last[where] = (offset, size)
        if last is None or offset == last[0]:
            return None
        expected = last[0] + last[1]
        if offset == expected:
            return None
        skip = OffsetSkip(where[1], expected, offset)
        self.skips.append(skip)
        return skip
