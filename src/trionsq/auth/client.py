"""Asking the auth servers: nsqd's ``QueryAnyAuthd`` over trio and h11.

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
"""

from __future__ import annotations

import functools
import logging
import secrets
import ssl
from typing import TYPE_CHECKING, Final

import h11
import trio

from .. import __version__
from .authorizations import (
    AuthError,
    AuthReplyError,
    AuthState,
    build_auth_request,
    decode_auth_reply,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .authorizations import AuthRequest

__all__ = [
    "MAX_REPLY_BYTES",
    "AuthServerError",
    "AuthUnavailableError",
    "query_auth_server",
    "query_one_auth_server",
]

log = logging.getLogger("trionsq.auth")

MAX_REPLY_BYTES: Final = 1 << 20
"""Largest reply body accepted; a grant list is a few KiB, more is a broken server."""
MAX_HEADER_BYTES: Final = 64 * 1024
READ_SIZE: Final = 65536
USER_AGENT: Final = f"trionsq/{__version__}"


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


def _content_length(response: h11.Response) -> int | None:
    for name, value in response.headers:
        if name == b"content-length":
            return int(value)
    return None


def _check_method(method: str) -> None:
    if method.lower() not in ("get", "post"):
        raise ValueError(f"auth request method must be get or post, got {method!r}")


async def _receive_reply(
    stream: trio.abc.Stream, connection: h11.Connection, address: str
) -> tuple[int, bytes]:
    status = 0
    chunks: list[bytes] = []
    size = 0
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(bytes(await stream.receive_some(READ_SIZE)))
        elif isinstance(event, h11.Response):
            status = event.status_code
            declared = _content_length(event)
            if declared is not None and declared > MAX_REPLY_BYTES:
                raise AuthServerError(address, f"reply of {declared} bytes is over the limit")
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > MAX_REPLY_BYTES:
                raise AuthServerError(address, f"reply is over {MAX_REPLY_BYTES} bytes")
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return status, b"".join(chunks)
        elif isinstance(event, h11.ConnectionClosed):
            raise AuthServerError(address, "connection closed before a reply")
        # InformationalResponse (1xx): keep reading for the real one


async def _exchange(
    request: AuthRequest,
    address: str,
    *,
    connect_timeout: float,
    ssl_context: ssl.SSLContext | None,
) -> tuple[int, bytes]:
    with trio.move_on_after(connect_timeout) as connecting:
        tcp = await trio.open_tcp_stream(request.host, request.port)
    if connecting.cancelled_caught:
        raise AuthServerError(address, f"connect timed out after {connect_timeout}s")
    stream: trio.abc.Stream = tcp
    if request.scheme == "https":
        context = ssl_context if ssl_context is not None else _default_ssl_context()
        stream = trio.SSLStream(tcp, context, server_hostname=request.host, https_compatible=True)
    try:
        connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        out = connection.send(
            h11.Request(method=request.method, target=request.target, headers=list(request.headers))
        )
        if request.body:
            out += connection.send(h11.Data(data=request.body))
        out += connection.send(h11.EndOfMessage())
        await stream.send_all(out)
        return await _receive_reply(stream, connection, address)
    finally:
        await trio.aclose_forcefully(stream)


async def query_one_auth_server(
    address: str,
    *,
    remote_ip: str,
    tls: bool,
    secret: str | bytes,
    common_name: str = "",
    method: str = "get",
    connect_timeout: float = 2.0,
    request_timeout: float = 5.0,
    ssl_context: ssl.SSLContext | None = None,
) -> AuthState:
    """Ask one server; every way it can fail is an :class:`AuthServerError`.

    ``fetched_at`` of the result is ``trio.current_time()`` when the reply arrived,
    so expiry is on the same clock as the connection's checks. A ``method`` other
    than get/post is a configuration bug and raises ``ValueError`` directly.
    """
    _check_method(method)
    try:
        request = build_auth_request(
            address,
            method=method,
            remote_ip=remote_ip,
            tls=tls,
            secret=secret,
            common_name=common_name,
            user_agent=USER_AGENT,
        )
        with trio.fail_after(request_timeout):
            status, body = await _exchange(
                request, address, connect_timeout=connect_timeout, ssl_context=ssl_context
            )
        if status != 200:
            raise AuthServerError(address, f"got response {status} {body[:200]!r}")
        return decode_auth_reply(body, fetched_at=trio.current_time())
    except AuthServerError:
        raise
    except AuthReplyError as exc:
        raise AuthServerError(address, str(exc)) from exc
    except trio.TooSlowError as exc:
        raise AuthServerError(address, f"no reply within {request_timeout}s") from exc
    except (AuthError, OSError, trio.BrokenResourceError, h11.ProtocolError, ValueError) as exc:
        raise AuthServerError(address, f"{type(exc).__name__}: {exc}") from exc


async def query_auth_server(
    addresses: Sequence[str],
    *,
    remote_ip: str,
    tls: bool,
    secret: str | bytes,
    common_name: str = "",
    method: str = "get",
    connect_timeout: float = 2.0,
    request_timeout: float = 5.0,
    ssl_context: ssl.SSLContext | None = None,
    start: int | None = None,
) -> AuthState:
    """nsqd's ``QueryAnyAuthd``: the first valid reply among ``addresses``.

    Servers are tried one after another from index ``start`` (random when None, as
    nsqd, to spread load) round the list. ``ssl_context`` is for https addresses;
    the default is the system's trust store.
    """
    _check_method(method)
    count = len(addresses)
    first = secrets.randbelow(count) if start is None and count else (start or 0)
    failures: list[AuthServerError] = []
    for step in range(count):
        address = addresses[(first + step) % count]
        try:
            return await query_one_auth_server(
                address,
                remote_ip=remote_ip,
                tls=tls,
                secret=secret,
                common_name=common_name,
                method=method,
                connect_timeout=connect_timeout,
                request_timeout=request_timeout,
                ssl_context=ssl_context,
            )
        except AuthServerError as failure:
            log.debug("%s", failure)
            failures.append(failure)
    raise AuthUnavailableError(failures)
