"""A small HTTP/1.1 client on trio and h11, for what trionsq asks its own kind.

One request per connection (``Connection: close``), no redirects, https only with a
given SSL context: enough for
a broker's calls such as a lookupd's ``/channels?topic=``, and a lookupd's calls
that create topics on brokers. Bounds as Go's client with
nsqd's options: ``connect_timeout`` covers the TCP connect, ``request_timeout`` the
whole exchange, and a body over ``max_reply_bytes`` is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs
import h11
import trio

from .. import __version__
from ..config import split_host_port

if TYPE_CHECKING:
    import ssl
    from collections.abc import Iterable

__all__ = ["DEFAULT_MAX_REPLY_BYTES", "HttpClientError", "HttpReply", "http_get", "http_request"]

DEFAULT_MAX_REPLY_BYTES: Final = 1 << 20
MAX_HEADER_BYTES: Final = 64 * 1024
READ_SIZE: Final = 65536
USER_AGENT: Final = f"trionsq/{__version__}"


class HttpClientError(Exception):
    """No usable reply from ``address``: refused, timed out, closed, malformed, too large."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"{address}: {reason}")
        self.address = address
        self.reason = reason


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
    try:
        host, port = split_host_port(address)
    except ValueError as error:
        raise HttpClientError(address, str(error)) from None
    defaults = [("Host", host), ("User-Agent", USER_AGENT), ("Connection", "close")]
    if method != "GET" or body:
        defaults.append(("Content-Length", str(len(body))))
    given = list(headers)
    names = {name.lower() for name, _ in given}
    merged = [(n, v) for n, v in defaults if n.lower() not in names] + given
    with trio.move_on_after(request_timeout) as whole:
        with trio.move_on_after(connect_timeout) as connecting:
            try:
                tcp = await trio.open_tcp_stream(host, port)
            except OSError as error:
                raise HttpClientError(address, f"connect failed: {error}") from None
        if connecting.cancelled_caught:
            raise HttpClientError(address, f"connect timed out after {connect_timeout}s")
        stream: trio.abc.Stream = tcp
        if ssl_context is not None:
            stream = trio.SSLStream(tcp, ssl_context, server_hostname=host, https_compatible=True)
        try:
            return await _exchange(stream, address, (method, target, body), merged, max_reply_bytes)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            reason = f"connection failed: {type(error).__name__}: {error}"
            raise HttpClientError(address, reason) from None
        except h11.ProtocolError as error:
            raise HttpClientError(address, f"bad HTTP reply: {error}") from None
        finally:
            await trio.aclose_forcefully(stream)
    assert whole.cancelled_caught  # noqa: S101 - the body returns or raises otherwise
    raise HttpClientError(address, f"no reply within {request_timeout}s")


async def _exchange(
    stream: trio.abc.Stream,
    address: str,
    what: tuple[str, str, bytes],
    headers: list[tuple[str, str]],
    max_reply_bytes: int,
) -> HttpReply:
    method, target, body = what
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
    request = h11.Request(method=method, target=target, headers=headers)
    payload = connection.send(request) + (connection.send(h11.Data(data=body)) if body else b"")
    await stream.send_all(payload + connection.send(h11.EndOfMessage()))
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
