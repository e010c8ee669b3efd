"""The broker's configuration: nsqd's option names and defaults (spec defaults.md).

Durations are seconds here; the CLI accepts nsqd's Go syntax (``60s``, ``100ms``).
Only options for what exists are present; each later issue adds its own.
"""

from __future__ import annotations

import attrs

from .protocol.settings import ServerSettings

__all__ = ["NsqdConfig"]


@attrs.frozen
class NsqdConfig:
    """Options of ``trionsq serve`` / ``serve_nsqd``; field = nsqd flag with ``_``."""

    tcp_address: str = "0.0.0.0:4150"
    mem_queue_size: int = 10_000
    msg_timeout: float = 60.0
    max_msg_timeout: float = 900.0
    max_msg_size: int = 1_048_576
    max_body_size: int = 5_242_880
    max_req_timeout: float = 3600.0
    max_rdy_count: int = 2500
    max_heartbeat_interval: float = 60.0
    max_output_buffer_size: int = 65_536
    max_output_buffer_timeout: float = 30.0
    min_output_buffer_timeout: float = 0.025
    output_buffer_timeout: float = 0.25
    client_timeout: float = 60.0
    """Not a flag in nsqd; the default heartbeat interval is half of it."""

    @property
    def tcp_host_port(self) -> tuple[str, int]:
        """``tcp_address`` split; an empty host means every interface."""
        host, _, port = self.tcp_address.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - nsqd's default

    def server_settings(self, version: str) -> ServerSettings:
        """What the protocol state machine needs. TLS, snappy, deflate and AUTH arrive
        with their issue; until then IDENTIFY answers as a server without them."""

        def ms(seconds: float) -> int:
            return round(seconds * 1000)

        return ServerSettings(
            version=version,
            max_msg_size=self.max_msg_size,
            max_body_size=self.max_body_size,
            max_rdy_count=self.max_rdy_count,
            max_req_timeout_ms=ms(self.max_req_timeout),
            msg_timeout_ms=ms(self.msg_timeout),
            max_msg_timeout_ms=ms(self.max_msg_timeout),
            client_timeout_ms=ms(self.client_timeout),
            max_heartbeat_interval_ms=ms(self.max_heartbeat_interval),
            max_output_buffer_size=self.max_output_buffer_size,
            output_buffer_timeout_ms=ms(self.output_buffer_timeout),
            min_output_buffer_timeout_ms=ms(self.min_output_buffer_timeout),
            max_output_buffer_timeout_ms=ms(self.max_output_buffer_timeout),
            deflate=False,
            snappy=False,
        )
