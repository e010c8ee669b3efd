"""One client's authorization, as nsqd keeps it per connection (``clientV2``'s auth).

AUTH fetches the grants for a secret; every later SUB/PUB-family command is checked
against them, and an expired state is fetched again (with the same secret, remote
address, TLS flag and certificate name) before the check. TCP connections hold one
session each; the HTTP API keeps sessions by secret and address for publishing.

The errors are nsqd's (spec tcp-protocol §4.2): reasons for a failed fetch go to
the log only, so nothing about the auth server leaks to an untrusted client.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from ..protocol import broker_errors
from ..protocol.errors import ProtocolError
from .authorizations import AuthError, AuthState, encode_auth_response
from .client import query_auth_server

if TYPE_CHECKING:
    from ..config import NsqdConfig

__all__ = ["AuthSession", "remote_ip_of"]

log = logging.getLogger("trionsq.auth")


def remote_ip_of(address: str) -> str:
    """The bare IP nsqd sends as ``remote_ip``: ``host:port`` and ``[v6]:port`` lose
    their port and brackets; anything else (a unix socket's path) is ``""``, as nsqd
    sends for a non-TCP client."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return ""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


class AuthSession:
    """The secret a client gave and the grants it brought, refreshed at expiry."""

    def __init__(self, config: NsqdConfig, *, remote_address: str, tls: bool = False) -> None:
        self.config = config
        self.remote_ip = remote_ip_of(remote_address)
        self.tls = tls
        """Whether the client's connection is TLS (sent to the auth server)."""
        self.common_name = ""
        """The client certificate's CN after a TLS handshake with one."""
        self.state: AuthState | None = None
        self._secret: bytes = b""
        self._verdicts: dict[tuple[str, str], bool] = {}
        """(topic, channel) -> allowed, for the state in hand (cleared on refresh)."""

    @property
    def has_authorizations(self) -> bool:
        """nsqd's HasAuthorizations: AUTH succeeded with at least one grant."""
        return self.state is not None and self.state.has_authorizations

    async def authenticate(self, secret: bytes) -> bytes | ProtocolError:
        """AUTH: fetch the grants; the JSON answer, or the fatal error to send."""
        self._secret = secret
        if not await self._fetch():
            return broker_errors.auth_failed()
        if not self.has_authorizations:
            return broker_errors.auth_no_authorizations()
        assert self.state is not None  # noqa: S101 - has_authorizations said so
        return encode_auth_response(self.state)

    def verdict(self, topic: str, channel: str, now: float) -> bool | None:
        """Allowed or not by the grants in hand; None when they expired (then
        :meth:`check` must fetch them again first). No await: the hot path."""
        state = self.state
        if state is None:
            return False
        if state.is_expired(now):
            return None
        key = (topic, channel)
        allowed = self._verdicts.get(key)
        if allowed is None:
            allowed = self._verdicts[key] = state.is_allowed(topic, channel)
        return allowed

    async def check(self, verb: str, topic: str, channel: str = "") -> ProtocolError | None:
        """nsqd's CheckAuth for ``verb`` on topic/channel (channel "" for publishes):
        None if allowed, else the fatal error (E_AUTH_FIRST, E_AUTH_FAILED,
        E_UNAUTHORIZED)."""
        if not self.has_authorizations:
            return ProtocolError("E_AUTH_FIRST", f"AUTH required before {verb}")
        allowed = self.verdict(topic, channel, trio.current_time())
        if allowed is None:
            if not await self._fetch():
                return broker_errors.auth_failed()
            allowed = self.verdict(topic, channel, trio.current_time())
        if not allowed:
            return broker_errors.unauthorized(verb, topic, channel)
        return None

    async def _fetch(self) -> bool:
        config = self.config
        try:
            state = await query_auth_server(
                config.auth_http_addresses,
                remote_ip=self.remote_ip,
                tls=self.tls,
                secret=self._secret,
                common_name=self.common_name,
                method=config.auth_http_request_method,
                connect_timeout=config.http_client_connect_timeout,
                request_timeout=config.http_client_request_timeout,
            )
        except AuthError as error:
            log.warning("AUTH failed for %s: %s", self.remote_ip, error)
            return False
        self.state = state
        self._verdicts = {}
        return True
