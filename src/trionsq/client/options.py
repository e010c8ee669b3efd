"""What every client connection is opened with: IDENTIFY, AUTH and TLS settings."""

from __future__ import annotations

import ssl

import attrs

from .. import __version__
from ..protocol.identify import IdentifyRequest

__all__ = ["ConnectionOptions", "default_identify"]


def default_identify() -> IdentifyRequest:
    """go-nsq's defaults, with feature negotiation (so the broker's settings come back)."""
    return IdentifyRequest(
        feature_negotiation=True,
        user_agent=f"trionsq.client/{__version__}",
    )


def _negotiating(identify: IdentifyRequest) -> IdentifyRequest:
    """The client reads the broker's settings from the answer, so it always negotiates."""
    if identify.feature_negotiation:
        return identify
    return attrs.evolve(identify, feature_negotiation=True)


@attrs.frozen
class ConnectionOptions:
    """Shared by the connections of one producer or consumer.

    ``identify`` asks for the features (``tls_v1``, ``snappy``, ``deflate``,
    ``heartbeat_interval``, ``desired_tag``, ``extend_support``, ...); ``tls`` is the
    context used when the broker agrees to TLS (``ssl.create_default_context()``
    when None), checked against ``tls_server_name`` (the address's host when None).
    """

    identify: IdentifyRequest = attrs.field(factory=default_identify, converter=_negotiating)
    auth_secret: bytes | None = None
    tls: ssl.SSLContext | None = None
    tls_server_name: str | None = None
