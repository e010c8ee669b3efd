"""trionsq: an NSQ-compatible message broker on Trio.

This package root imports nothing heavy: ``trionsq.protocol`` must stay importable
without trio, so the Trio-facing API is added here only as it lands.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
