"""nsqlookupd in trionsq: the registration DB, its TCP V1 and HTTP servers.

Upstream nsqlookupd behaviour (spec lookupd-tcp.md, http-api.md §4), plus Youzan's
additions standalone (http-api.md §5): partitioned topics created, placed and
looked up through the lookupd (``trionsq.lookupd.topics``, sans-IO too).
The registry (``trionsq.lookupd.registry``) is sans-IO and importable without trio,
so the Trio-facing names here are loaded on first attribute access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["LookupdAddresses", "LookupdConfig", "RegistrationDB", "open_lookupd", "serve_lookupd"]

if TYPE_CHECKING:
    from .config import LookupdConfig
    from .registry import RegistrationDB
    from .server import LookupdAddresses, open_lookupd, serve_lookupd


def __getattr__(name: str) -> object:
    if name == "LookupdConfig":
        from .config import LookupdConfig

        return LookupdConfig
    if name == "RegistrationDB":
        from .registry import RegistrationDB

        return RegistrationDB
    if name in ("LookupdAddresses", "open_lookupd", "serve_lookupd"):
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module 'trionsq.lookupd' has no attribute {name!r}")
