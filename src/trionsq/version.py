"""The versions trionsq reports: the nsqd release it implements, and its own.

Clients choose features by the number nsqd reports (gnsq, for one, assumes no TLS
below 0.3.x), so every place a client reads nsqd's version (``-version``, IDENTIFY,
/info, /stats, the lookupd registration) carries ``NSQD_RELEASE``; trionsq's own
version goes under its own key (``trionsq_version``) and in ``trionsq --version``.
Imports nothing heavy: ``nsqd --version`` answers from here.
"""

from __future__ import annotations

from . import __version__

__all__ = ["NSQD_RELEASE", "TRIONSQ_VERSION", "version_string"]

NSQD_RELEASE = "1.3.0"
"""The nsqd (and nsqlookupd) release whose behaviour trionsq implements."""

TRIONSQ_VERSION = __version__


def version_string(program: str) -> str:
    """nsqd's exact shape, ``nsqd v1.3.0 (built w/go1.21.5)``, built with trionsq."""
    return f"{program} v{NSQD_RELEASE} (built w/trionsq-{TRIONSQ_VERSION})"
