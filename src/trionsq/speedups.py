"""Which per-message loops run compiled: the consume path's (issue 19), TubeMQ's
frames and SendMessage runs (issue 36) and a plain PUB's append (issue 37).

``trionsq._speedups`` is an optional C module built by ``pip install`` where a C
compiler exists (setup.py); each of its functions has a pure-Python twin with the
same contract, which runs when the module is absent or when the environment sets
``TRIONSQ_PURE_PYTHON=1`` (for A/B measurements and the twins' own tests). Nothing
else about the broker changes with it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from types import ModuleType


def _load() -> ModuleType | None:
    """The compiled module, or None where it was not built or is switched off."""
    if os.environ.get("TRIONSQ_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from trionsq import _speedups
    except ImportError:
        return None
    return _speedups


compiled: Final = _load()
"""``trionsq._speedups`` when in use, else None."""
