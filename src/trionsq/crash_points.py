"""Named crash points, for crash tests of a real broker process (issue 30).

``TRIONSQ_CRASH_AT=<point>:<n>`` in a broker's environment makes the process kill
itself with SIGKILL (no cleanup, as ``kill -9``) the ``n``-th time it passes
``<point>`` once it serves; tests/e2e/test_dead_letter_crash.py uses it to stop a
broker at exact moments of a dead-letter move. Read once, at import. Unset (always,
outside such tests) it costs one test of a module constant at each point::

    if crash_points.ARMED:
        crash_points.reached("dead_letter.appended")

Points are not counted until :func:`arm` (the broker calls it once every listener
accepts), so what recovery does at start is not counted.
"""

from __future__ import annotations

import os
import signal
from typing import Final

__all__ = ["ARMED", "arm", "reached"]

_SPEC: Final = os.environ.get("TRIONSQ_CRASH_AT", "")
_POINT, _, _COUNT = _SPEC.rpartition(":")
ARMED: Final = bool(_POINT) and _COUNT.isdigit()
"""Whether a crash point is set for this process."""
_passes: dict[str, int] = {}
_counting = False


def arm() -> None:
    """Start counting passes (the broker serves)."""
    global _counting
    _counting = True


def reached(point: str) -> None:
    """``point`` is passed: the process dies here if this is its chosen pass."""
    if not _counting or point != _POINT:
        return
    count = _passes.get(point, 0) + 1
    _passes[point] = count
    if count == int(_COUNT):
        os.kill(os.getpid(), signal.SIGKILL)
