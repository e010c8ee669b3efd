"""How trionsq names itself where nsqd prints its version (``-version``, /stats text)."""

from __future__ import annotations

import platform

from . import __version__

__all__ = ["version_string"]


def version_string(program: str) -> str:
    """nsqd's shape, ``nsqd v1.3.0 (built w/go1.21.5)``, with Python in place of Go."""
    return f"{program} v{__version__} (built w/python{platform.python_version()})"
