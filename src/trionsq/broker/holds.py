"""A partition's reader holds in memory: who holds which record, and the lowest one,
the floor below which the partition may release records.

Kept apart from their files and the moving of them (``broker/reader_holds.py``, which
reads the log), so that a partition can hold them without importing that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..protocol.names import is_ephemeral

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["ReaderHold", "ReaderHolds"]


@attrs.frozen
class ReaderHold:
    """One reader's position: nothing from ``internal_id`` (at ``offset``) on is released."""

    reader: str
    offset: int
    internal_id: int


class ReaderHolds:
    """A partition's holds by reader name."""

    def __init__(self) -> None:
        self._holds: dict[str, ReaderHold] = {}

    def __len__(self) -> int:
        return len(self._holds)

    def __iter__(self) -> Iterator[ReaderHold]:
        return iter(sorted(self._holds.values(), key=_reader))

    def get(self, reader: str) -> ReaderHold | None:
        return self._holds.get(reader)

    def put(self, hold: ReaderHold) -> ReaderHold | None:
        """Create or move a hold; returns the one it replaced."""
        previous = self._holds.get(hold.reader)
        self._holds[hold.reader] = hold
        return previous

    def pop(self, reader: str) -> ReaderHold | None:
        return self._holds.pop(reader, None)

    def floor(self, floor: int) -> int:
        """``floor``, lowered to the lowest hold's id: what may be released."""
        for hold in self._holds.values():
            floor = min(floor, hold.internal_id)
        return floor

    def durable(self) -> tuple[ReaderHold, ...]:
        """The holds that are saved (not ``#ephemeral``), sorted by reader."""
        return tuple(hold for hold in self if not is_ephemeral(hold.reader))


def _reader(hold: ReaderHold) -> str:
    return hold.reader
