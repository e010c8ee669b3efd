"""Asking the auth servers: nsqd's ``QueryAnyAuthd`` over trio and h11 (the shared client in http/client.py).

nsqd tries its ``--auth-http-address`` list once, starting at a random entry and
going round, and keeps the first reply that is a 200 with a valid body; a refused
connection, a timeout, another status or a bad body moves on to the next server.
When all fail the caller gets one :class:`AuthUnavailableError` naming each
server's reason (the client only ever sees ``E_AUTH_FAILED AUTH failed``).

Bounds: ``connect_timeout`` covers the TCP connect, ``request_timeout`` the whole
exchange with one server (nsqd's ``http.Client.Timeout``), and a reply body over
:data:`MAX_REPLY_BYTES` is refused without reading the rest. Not done, unlike Go's
client: following redirects, and nsqd's retry at https after a 403 carrying
``https_port`` (a convention of nsqd's own HTTP API, not of auth servers).

At most :data:`MAX_REQUESTS_AT_ONCE` queries run at once in a Trio run (others
wait their turn): each holds a socket, which the broker's descriptor budget counts
in its reserve, however many clients send AUTH together.
"""

from __future__ import annotations

import functools
import logging
import secrets
import ssl
from typing import TYPE_CHECKING, Final, Unpack

import trio

from ..addresses import join_host_port
from ..http.client import USER_AGENT, HttpClientError, http_request
from .authorizations import (
    AuthError,
    AuthReplyError,
    AuthState,
    AuthValues,
    build_auth_request,
    decode_auth_reply,
)

if TYPE_CHECKING:
    from collections.abc import Sequence


__all__ = [
    "MAX_REPLY_BYTES",
    "MAX_REQUESTS_AT_ONCE",
    "AuthQuery",
    "AuthServerError",
    "AuthUnavailableError",
    "query_auth_server",
    "query_one_auth_server",
]

log = logging.getLogger("trionsq.auth")

MAX_REPLY_BYTES: Final = 1 << 20
"""Largest reply body accepted; a grant list is a few KiB, more is a broken server."""
MAX_REQUESTS_AT_ONCE: Final = 16
"""Auth queries in flight at once (each a socket); a query takes milliseconds."""

_REQUESTS: Final = trio.lowlevel.RunVar[trio.CapacityLimiter]("trionsq_auth_requests")


def _requests() -> trio.CapacityLimiter:
    """This Trio run's limiter of auth queries in flight."""
    try:
        return _REQUESTS.get()
    except LookupError:
        limiter = trio.CapacityLimiter(MAX_REQUESTS_AT_ONCE)
        _REQUESTS.set(limiter)
        return limiter


class AuthServerError(AuthError):
    """One auth server gave no usable answer."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"failed to auth against {address} - {reason}")
        self.address = address
        self.reason = reason


class AuthUnavailableError(AuthError):
    """No auth server gave a usable answer; the text joins every server's reason."""

    def __init__(self, failures: Sequence[AuthServerError]) -> None:
        text = "; ".join(str(failure) for failure in failures) or "no auth servers configured"
        super().__init__(text)
        self.failures = tuple(failures)


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def _check_method(method: str) -> None:
    if method.lower() not in ("get", "post"):
        raise ValueError(f"auth request method must be get or post, got {method!r}")


async def query_one_auth_server(
    address: str,
    *,
    method: str = "get",
    connect_timeout: float = 2.0,
    request_timeout: float = 5.0,
    ssl_context: ssl.SSLContext | None = None,
    **values: Unpack[AuthValues],
) -> AuthState:
    """Ask one server; every way it can fail is an :class:`AuthServerError`.

    ``fetched_at`` of the result is ``trio.current_time()`` when the reply arrived,
    so expiry is on the same clock as the connection's checks. A ``method`` other
    than get/post is a configuration bug and raises ``ValueError`` directly.
    """
    _check_method(method)
    try:
        request = build_auth_request(address, method=method, user_agent=USER_AGENT, **values)
        https = request.scheme == "https"
        if https and ssl_context is None:
            ssl_context = _default_ssl_context()
        reply = await http_request(
            request.method,
            join_host_port(request.host, request.port),
            request.target,
            body=request.body,
            headers=request.headers,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            max_reply_bytes=MAX_REPLY_BYTES,
            ssl_context=ssl_context if https else None,
        )
        if reply.status != 200:
            raise AuthServerError(address, f"got response {reply.status} {reply.body[:200]!r}")
        return decode_auth_reply(reply.body, fetched_at=trio.current_time())
    except AuthServerError:
        raise
    except HttpClientError as exc:
        raise AuthServerError(address, exc.reason) from exc
    except AuthReplyError as exc:
        raise AuthServerError(address, str(exc)) from exc
    except (AuthError, ValueError) as exc:
        raise AuthServerError(address, f"{type(exc).__name__}: {exc}") from exc


class AuthQuery(AuthValues, total=False):
    """What :func:`query_auth_server` asks each server: :func:`query_one_auth_server`'s
    keywords, whose defaults stand there alone (``common_name``'s in
    :func:`~trionsq.auth.authorizations.auth_params`)."""

    method: str
    connect_timeout: float
    request_timeout: float
    ssl_context: ssl.SSLContext | None


async def query_auth_server(
    addresses: Sequence[str], *, start: int | None = None, **query: Unpack[AuthQuery]
) -> AuthState:
    """nsqd's ``QueryAnyAuthd``: the first valid reply among ``addresses``.

    Servers are tried one after another from index ``start`` (random when None, as
    nsqd, to spread load) round the list, each asked :func:`query_one_auth_server`
    with ``query``. ``ssl_context`` is for https addresses; the default is the
    system's trust store.
    """
    _check_method(query.get("method", "get"))
    count = len(addresses)
    first = secrets.randbelow(count) if start is None and count else (start or 0)
    failures: list[AuthServerError] = []
    async with _requests():
        for step in range(count):
            address = addresses[(first + step) % count]
            try:
                return await query_one_auth_server(address, **query)
            except AuthServerError as failure:
                log.debug("%s", failure)
                failures.append(failure)
    raise AuthUnavailableError(failures)
