"""MPUB_EXT parts read in bulk: those whose header is only an idempotency key.

The Spark sink's exactly-once batches are MPUB_EXTs of hundreds of parts whose JSON
header is only ``{"##idempotency_key":"<printable ASCII>"}``. The exact reader
(:mod:`.publish_readers`) takes a part in four generator steps; :func:`read_keyed_parts`
takes every whole part of that shape in what has arrived in one call (compiled where
built, else :func:`_read_keyed_parts_py`), and stops at the first part it does not
take, which the exact reader then reads, so every error keeps its one home there.
Pure: no I/O, no trio.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from ..speedups import compiled
from .ext_header import IDEMPOTENCY_KEY, MAX_IDEMPOTENCY_KEY_BYTES

if TYPE_CHECKING:
    from collections.abc import Callable

    from .commands import ExtMessage

__all__ = ["KEY_ONLY_START", "is_plain_key", "read_keyed_parts"]

KEY_ONLY_START: Final = b'{"%s":"' % IDEMPOTENCY_KEY.encode()
_PART_HEAD: Final = struct.Struct(">iH")  # part size, header length
_PLAIN_KEY_BYTES: Final = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')
"""Printable ASCII but the quote and the backslash: a JSON string that is its own text."""


def is_plain_key(key: bytes) -> bool:
    """Whether ``key`` is a key the bulk reader takes as it is (1..256 plain bytes)."""
    return 0 < len(key) <= MAX_IDEMPOTENCY_KEY_BYTES and not key.translate(None, _PLAIN_KEY_BYTES)


# a twin on purpose: _speedups.pyi's read_keyed_parts stub repeats this signature (a C
# function has none to import)
def _read_keyed_parts_py(
    data: bytes,
    at: int,
    count: int,
    budget: int,
    max_msg: int,
    make: type[ExtMessage],
    out: list[ExtMessage],
) -> tuple[int, int, int, bool]:
    """Append ``make(header, body, None, None, key)`` to ``out`` for each whole part of
    ``data`` from ``at`` on whose header is only a plain idempotency key: at most
    ``count``, each within ``budget`` (the batch's body bytes left) and ``max_msg``.

    Returns (at, taken, budget, unusual): ``unusual`` when it stopped at a part the
    exact reader must see (a size out of bounds, another header), else it stopped
    where ``data`` ends or after ``count``. The pure-Python twin of
    ``trionsq._speedups.read_keyed_parts``.
    """
    if not 0 <= at <= len(data):
        raise ValueError("at is outside data")
    unpack = _PART_HEAD.unpack_from
    start, start_length = KEY_ONLY_START, len(KEY_ONLY_START)
    length = len(data)
    taken = 0
    while taken < count and length - at >= 4:
        size = int.from_bytes(data[at : at + 4], "big", signed=True)
        if size <= 2 or size > max_msg or size + 4 > budget:
            return at, taken, budget, True
        if length - at < 6:
            break
        header_length = unpack(data, at)[1]
        if 2 + header_length >= size:
            return at, taken, budget, True
        if length - at - 4 < size:
            break
        header = data[at + 6 : at + 6 + header_length]
        key = header[start_length:-2]
        if not (header.startswith(start) and header.endswith(b'"}') and is_plain_key(key)):
            return at, taken, budget, True
        stop = at + 4 + size
        out.append(make(header, data[at + 6 + header_length : stop], None, None, key.decode()))
        at = stop
        budget -= size + 4
        taken += 1
    return at, taken, budget, False


read_keyed_parts: Final[
    Callable[
        [bytes, int, int, int, int, type[ExtMessage], list[ExtMessage]],
        tuple[int, int, int, bool],
    ]
] = _read_keyed_parts_py if compiled is None else compiled.read_keyed_parts
"""Compiled where built, else :func:`_read_keyed_parts_py`."""
