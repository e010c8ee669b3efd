"""What the server state machine needs to know about the broker's configuration.

Defaults are nsqd's (spec defaults.md); the broker builds one from its config.
"""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["DEFAULT_MAX_LINE_LENGTH", "ServerSettings"]

DEFAULT_MAX_LINE_LENGTH: Final = 16384
"""nsqd reads command lines through a 16 KiB buffer; a longer line is refused."""


@attrs.frozen
class ServerSettings:
    """Limits and switches that shape parsing, validation and IDENTIFY negotiation."""

    version: str = "0.1.0"
    """The version string sent in the IDENTIFY reply."""
    max_msg_size: int = 1_048_576
    max_body_size: int = 5_242_880
    max_rdy_count: int = 2500
    max_req_timeout_ms: int = 3_600_000
    msg_timeout_ms: int = 60_000
    max_msg_timeout_ms: int = 900_000
    client_timeout_ms: int = 60_000
    """The default heartbeat interval is half of this."""
    max_heartbeat_interval_ms: int = 60_000
    output_buffer_size: int = 16_384
    max_output_buffer_size: int = 65_536
    output_buffer_timeout_ms: int = 250
    min_output_buffer_timeout_ms: int = 10
    """Youzan's floor, not nsqd's 25: see ``NsqdConfig.min_output_buffer_timeout``."""
    max_output_buffer_timeout_ms: int = 30_000
    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True
    tls_available: bool = False
    """The server has a certificate, so ``tls_v1`` can be honoured."""
    tls_required: bool = False
    """Commands other than IDENTIFY are refused until the connection is TLS."""
    auth_enabled: bool = False
    """Auth servers are configured: AUTH is accepted and required before SUB/PUB."""
    topology_region: str = ""
    topology_zone: str = ""
    max_line_length: int = DEFAULT_MAX_LINE_LENGTH

    @property
    def default_heartbeat_interval_ms(self) -> int:
        """nsqd's default heartbeat: half the client timeout."""
        return self.client_timeout_ms // 2
