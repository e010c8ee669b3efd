"""trionsq: an NSQ-compatible message broker on Trio.

The package root imports nothing heavy (not even ``typing``: ``nsqd --version``
answers from here and ``version``): ``trionsq.protocol`` must stay importable
without trio, so the Trio-facing API (``serve_nsqd``, ``open_nsqd``, ``NsqdConfig``)
is loaded on first attribute access.
"""

from __future__ import annotations

TYPE_CHECKING = False
"""``typing.TYPE_CHECKING`` without importing typing (about 10 ms at every start of
the commands; type checkers honour the name)."""

__version__ = "0.2.0"

__all__ = [
    "Address",
    "BoundAddresses",
    "NsqdConfig",
    "__version__",
    "normalize_address",
    "open_nsqd",
    "serve_nsqd",
]

if TYPE_CHECKING:
    from .addresses import Address, normalize_address
    from .config import NsqdConfig
    from .nursery_tree import BoundAddresses, open_nsqd, serve_nsqd


def __getattr__(name: str) -> object:
    if name == "NsqdConfig":
        from .config import NsqdConfig

        return NsqdConfig
    if name in ("Address", "normalize_address"):
        from . import addresses

        return getattr(addresses, name)
    if name in ("BoundAddresses", "open_nsqd", "serve_nsqd"):
        from . import nursery_tree

        return getattr(nursery_tree, name)
    raise AttributeError(f"module 'trionsq' has no attribute {name!r}")
