"""nsqd's AUTH: the grants an external auth server returns, and asking for them.

This package root re-exports only the pure part (``authorizations``), so importing
it does not import trio; the HTTP client is ``trionsq.auth.client``.
"""

from __future__ import annotations

from .authorizations import (
    PUBLISH,
    SUBSCRIBE,
    AuthAddressError,
    AuthError,
    Authorization,
    AuthReplyError,
    AuthRequest,
    AuthState,
    auth_params,
    build_auth_request,
    decode_auth_reply,
    encode_auth_response,
)

__all__ = [
    "PUBLISH",
    "SUBSCRIBE",
    "AuthAddressError",
    "AuthError",
    "AuthReplyError",
    "AuthRequest",
    "AuthState",
    "Authorization",
    "auth_params",
    "build_auth_request",
    "decode_auth_reply",
    "encode_auth_response",
]
