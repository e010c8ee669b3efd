"""nsqd's AUTH: the grants an external auth server returns, and asking for them.

This package root re-exports only the pure part (``authorizations``), so importing
it does not import trio; the HTTP client is ``trionsq.auth.client``.
"""

from __future__ import annotations

from . import authorizations
from .authorizations import *  # noqa: F403  (the pure part, named once: its __all__)

__all__: list[str] = []
__all__ += authorizations.__all__
