"""What every fuzz test shares: the example budget and a byte-mutation strategy.

``FUZZ_EXAMPLES`` (environment) sets the examples per test: 200 by default, so the
folder runs in seconds with the suite; ``FUZZ_EXAMPLES=20000`` (with ``-o faulthandler_timeout=0``) for a
long run by hand. Hypothesis keeps failing inputs in its database and replays them first.
"""

from __future__ import annotations

import os
import struct
from typing import Final

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES: Final = int(os.environ.get("FUZZ_EXAMPLES", "200"))

fuzz_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_INTERESTING_INT32: Final = [
    0,
    1,
    -1,
    2,
    4,
    0x7FFF_FFFF,
    -0x8000_0000,
    0xFFFF,
    1024 * 1024,
    1024 * 1024 + 1,
    5 * 1024 * 1024,
]


@st.composite
def mutated(draw: st.DrawFn, base: bytes, *, max_ops: int = 4) -> bytes:
    """``base`` after a few random edits: flipped bytes, inserted or deleted runs,
    duplicated runs, size fields swapped for edge values, a cut-off tail."""
    data = bytearray(base)
    for _ in range(draw(st.integers(0, max_ops))):
        op = draw(st.integers(0, 5))
        at = draw(st.integers(0, len(data)))
        if op == 0 and data:
            at = min(at, len(data) - 1)
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == 1:
            data[at:at] = draw(st.binary(max_size=16))
        elif op == 2:
            del data[at : at + draw(st.integers(1, 16))]
        elif op == 3:
            run = data[at : at + draw(st.integers(1, 64))]
            data[at:at] = run * draw(st.integers(1, 4))
        elif op == 4:
            value = draw(st.sampled_from(_INTERESTING_INT32))
            data[at : at + 4] = struct.pack(">I", value & 0xFFFF_FFFF)
        else:
            del data[at:]
    return bytes(data)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at these offsets (sorted, clamped), as reads would arrive."""
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    pieces.append(data[start:])
    return [p for p in pieces if p]


cuts = st.lists(st.integers(0, 1 << 16), max_size=8)
