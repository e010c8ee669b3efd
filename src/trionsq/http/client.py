"""A small HTTP/1.1 client on trio and h11, for what trionsq asks its own kind.

One request per connection (``Connection: close``), no redirects, https only with a
given SSL context: enough for
a broker's calls such as a lookupd's ``/channels?topic=``, and a lookupd's calls
that create topics on brokers. ``http/kept_connections.py`` reuses its pieces
(:func:`send_request`, :func:`read_reply`) for connections kept alive between
calls. Bounds as Go's client with nsqd's options: ``connect_timeout`` covers the
TCP connect, ``request_timeout`` the whole exchange, and a body over
``max_reply_bytes`` is refused.
"""

from __future__ import annotations

import ssl
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

import attrs
import h11
import trio

from .. import __version__
from ..config import split_host_port

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = [
    "DEFAULT_MAX_REPLY_BYTES",
    "HttpClientError",
    "HttpReply",
    "connection_failure",
    "failures_named",
    "http_get",
    "http_request",
    "open_http_stream",
    "read_reply",
    "request_headers",
    "send_request",
]

DEFAULT_MAX_REPLY_BYTES: Final = 1 << 20
MAX_HEADER_BYTES: Final = 64 * 1024
READ_SIZE: Final = 65536
USER_AGENT: Final = f"trionsq/{__version__}"


class HttpClientError(Exception):
    """No usable reply from ``address``: refused, timed out, closed, malformed, too large."""

    def __init__(self, address: str, reason: str, *, tls: bool = False) -> None:
        super().__init__(f"{address}: {reason}")
        self.address = address
        self.reason = reason
        self.tls = tls
        """The TLS handshake or session failed (a certificate refused by either side,
        TLS spoken to a plain listener): no retry will fix it."""


def connection_failure(address: str, error: Exception) -> HttpClientError:
    """A broken connection as an :class:`HttpClientError`, naming the TLS failure
    behind it (trio's ``BrokenResourceError`` carries the ``ssl.SSLError`` as its
    cause) so that a refused certificate reads as one."""
    cause = error.__cause__
    if isinstance(cause, ssl.SSLError):
        detail = getattr(cause, "verify_message", "") or ""
        reason = f"{cause.reason}: {detail}" if detail else str(cause.reason or cause)
        return HttpClientError(address, f"TLS failed: {reason}", tls=True)
    return HttpClientError(address, f"connection failed: {type(error).__name__}: {error}")


@attrs.frozen
class HttpReply:
    """A complete reply: status, headers (lower-case names) and body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


async def http_get(
    address: str,
    target: str,
    *,
    headers: Iterable[tuple[str, str]] = (),
    connect_timeout: float,
    request_timeout: float,
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
) -> HttpReply:
    """GET ``target`` (path and query, already encoded) from ``address`` (``host:port``).

    Raises:
        HttpClientError: whatever kept a complete reply from arriving in time.
    """
    return await http_request(
        "GET",
        address,
        target,
        headers=headers,
        connect_timeout=connect_timeout,
        request_timeout=request_timeout,
        max_reply_bytes=max_reply_bytes,
    )


async def http_request(
    method: str,
    address: str,
    target: str,
    *,
    body: bytes = b"",
    headers: Iterable[tuple[str, str]] = (),
    connect_timeout: float,
    request_timeout: float,
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ssl_context: ssl.SSLContext | None = None,
) -> HttpReply:
    """``method`` ``target`` on ``address`` (``host:port``) with ``body`` (sent with a
    Content-Length for any method but GET); over TLS with ``ssl_context`` (https).

    ``headers`` replace the defaults of the same name (Host, User-Agent, Connection,
    Content-Length).

    Raises:
        HttpClientError: whatever kept a complete reply from arriving in time.
    """
    merged = request_headers(address, method, body, headers, keep_alive=False)
    with trio.move_on_after(request_timeout) as whole:
        stream = await open_http_stream(address, connect_timeout, ssl_context)
        try:
            with failures_named(address):
                connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
                await send_request(stream, connection, (method, target, body), merged)
                return await read_reply(stream, connection, address, max_reply_bytes)
        finally:
            await trio.aclose_forcefully(stream)
    assert whole.cancelled_caught  # noqa: S101 - the body returns or raises otherwise
    raise HttpClientError(address, f"no reply within {request_timeout}s")


async def open_http_stream(
    address: str, connect_timeout: float, ssl_context: ssl.SSLContext | None = None
) -> trio.abc.Stream:
    """A TCP connection to ``address`` (``host:port``), wrapped in TLS (its handshake
    made on the first send) when ``ssl_context`` is given.

    Raises:
        HttpClientError: a bad address, or no connection within ``connect_timeout``.
    """
    try:
        host, port = split_host_port(address)
    except ValueError as error:
        raise HttpClientError(address, str(error)) from None
    with trio.move_on_after(connect_timeout):
        try:
            tcp = await trio.open_tcp_stream(host, port)
        except OSError as error:
            raise HttpClientError(address, f"connect failed: {error}") from None
        if ssl_context is None:
            return tcp
        return trio.SSLStream(tcp, ssl_context, server_hostname=host, https_compatible=True)
    raise HttpClientError(address, f"connect timed out after {connect_timeout}s")


def request_headers(
    address: str, method: str, body: bytes, given: Iterable[tuple[str, str]], *, keep_alive: bool
) -> list[tuple[str, str]]:
    """The request's headers: ``given`` and the defaults they do not name (Host,
    User-Agent, Content-Length for any method but GET, ``Connection: close`` unless
    ``keep_alive``).

    Raises:
        HttpClientError: ``address`` is no ``host:port``.
    """
    try:
        host = split_host_port(address)[0]
    except ValueError as error:
        raise HttpClientError(address, str(error)) from None
    defaults = [("Host", host), ("User-Agent", USER_AGENT)]
    if not keep_alive:
        defaults.append(("Connection", "close"))
    if method != "GET" or body:
        defaults.append(("Content-Length", str(len(body))))
    listed = list(given)
    names = {name.lower() for name, _ in listed}
    return [(n, v) for n, v in defaults if n.lower() not in names] + listed


@contextmanager
def failures_named(address: str) -> Iterator[None]:
    """A broken connection or a malformed reply as an :class:`HttpClientError`."""
    try:
        yield
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
        raise connection_failure(address, error) from None
    except h11.ProtocolError as error:
        raise HttpClientError(address, f"bad HTTP reply: {error}") from None


async def send_request(
    stream: trio.abc.Stream,
    connection: h11.Connection,
    what: tuple[str, str, bytes],
    headers: list[tuple[str, str]],
) -> None:
    """Write one whole request (method, target, body) in one send."""
    method, target, body = what
    request = h11.Request(method=method, target=target, headers=headers)
    payload = connection.send(request) + (connection.send(h11.Data(data=body)) if body else b"")
    await stream.send_all(payload + connection.send(h11.EndOfMessage()))


async def read_reply(
    stream: trio.abc.Stream, connection: h11.Connection, address: str, max_reply_bytes: int
) -> HttpReply:
    """Read until the reply is complete (what ``connection`` already holds first).

    Raises:
        HttpClientError: too large, or the connection closed before its end.
    """
    response: h11.Response | None = None
    chunks: list[bytes] = []
    size = 0
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(bytes(await stream.receive_some(READ_SIZE)))
        elif isinstance(event, h11.Response):
            response = event
            declared = _content_length(event)
            if declared is not None and declared > max_reply_bytes:
                raise HttpClientError(address, f"reply of {declared} bytes is over the limit")
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > max_reply_bytes:
                raise HttpClientError(address, f"reply is over {max_reply_bytes} bytes")
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            assert response is not None  # noqa: S101 - h11 gives the head first
            return HttpReply(response.status_code, tuple(response.headers), b"".join(chunks))
        elif isinstance(event, h11.ConnectionClosed):
            raise HttpClientError(address, "connection closed before a complete reply")
        # InformationalResponse (1xx): read on for the real one


def _content_length(response: h11.Response) -> int | None:
    for name, value in response.headers:
        if name == b"content-length":
            return int(value)
    return None
