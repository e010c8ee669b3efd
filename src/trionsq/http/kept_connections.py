"""HTTP/1.1 connections kept alive between calls, for a client that calls one
server many times (the etcd client: a TCP connect, and over ``https://`` a TLS
handshake on both sides, cost more than the call itself).

One connection per call in flight: a call takes an idle connection (or opens
one), has it to itself until the reply is complete, then gives it back; two
requests never share a connection. Nothing runs in the background: a connection
the server closed while idle is found when a call takes it (its socket reads as
ready: EOF, a reset, or bytes nobody asked for) and closed then. A call that ends
any other way than with a complete reply (a timeout, cancellation, a malformed or
too large reply) closes its connection, so none is given back half-read.

The server may still close an idle connection just as a call sends on it. A
reused connection that fails before the request is fully sent is tried once more
on a new one (the server cannot have acted on a partial request); one that fails
after, before any byte of the reply, is tried again only for an ``idempotent``
call: the server may have done it.

The owner closes the pool (:meth:`KeptConnections.aclose`) when it is done.
"""

from __future__ import annotations

import select
from typing import TYPE_CHECKING, Final

import attrs
import h11
import trio

from .client import (
    MAX_HEADER_BYTES,
    READ_SIZE,
    HttpClientError,
    HttpReply,
    connection_failure,
    failures_named,
    open_http_stream,
    read_reply,
    request_headers,
    send_request,
)

if TYPE_CHECKING:
    import ssl
    from collections.abc import Iterable

__all__ = ["KeptConnections"]

MAX_IDLE: Final = 4
"""Idle connections kept per address: more calls at once than this open more, and
close the extra ones when they end."""
_HUNG_UP: Final = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP


@attrs.define(eq=False)
class _Connection:
    """One kept connection: its stream, the TCP under it, its HTTP state."""

    stream: trio.abc.Stream
    tcp: trio.SocketStream
    http: h11.Connection

    def looks_alive(self) -> bool:
        """Whether the idle socket has nothing to read: EOF, a reset or stray bytes
        mean the server is done with it (one poll, no waiting)."""
        poller = select.poll()
        poller.register(self.tcp.socket.fileno(), _HUNG_UP)
        return not poller.poll(0)

    def close(self) -> None:
        """Close at once, without a TLS goodbye (as ``trio.aclose_forcefully``), and
        without a checkpoint: a cancelled owner closing many still closes them all."""
        self.tcp.socket.close()

    def reusable(self) -> bool:
        """After a complete reply: whether both sides may start another exchange."""
        return (
            self.http.our_state is h11.DONE
            and self.http.their_state is h11.DONE
            and not self.http.trailing_data[0]
        )


class _NoReply(Exception):
    """A connection failed before any byte of the reply came."""

    def __init__(self, error: HttpClientError, *, sent: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent
        """The whole request was written: the server may have acted on it."""


@attrs.define(eq=False)
class KeptConnections:
    """Idle HTTP/1.1 connections per ``host:port``, reused by :meth:`request`."""

    max_idle: int = MAX_IDLE
    opened: int = attrs.field(default=0, init=False)
    """Connections opened so far (for tests and figures)."""
    _idle: dict[str, list[_Connection]] = attrs.field(factory=dict, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    async def request(
        self,
        method: str,
        address: str,
        target: str,
        *,
        body: bytes = b"",
        headers: Iterable[tuple[str, str]] = (),
        request_timeout: float,
        max_reply_bytes: int,
        ssl_context: ssl.SSLContext | None = None,
        idempotent: bool,
    ) -> HttpReply:
        """As :func:`~.client.http_request`, on a kept connection when one is idle;
        ``request_timeout`` bounds the whole call (connect, and a second try).

        Raises:
            HttpClientError: whatever kept a complete reply from arriving in time.
        """
        merged = request_headers(address, method, body, headers, keep_alive=True)
        what = (method, target, body)
        with trio.move_on_after(request_timeout):
            kept = self._take(address)
            if kept is not None:
                try:
                    return await self._exchange(kept, address, what, merged, max_reply_bytes)
                except _NoReply as failure:
                    if failure.sent and not idempotent:
                        raise _reused(failure.error) from None
                except HttpClientError as error:
                    raise _reused(error) from None
            connection = await self._open(address, request_timeout, ssl_context)
            try:
                return await self._exchange(connection, address, what, merged, max_reply_bytes)
            except _NoReply as failure:
                raise failure.error from None
        raise HttpClientError(address, f"no reply within {request_timeout}s")

    async def aclose(self) -> None:
        """Close every idle connection; a call in flight closes its own when it ends
        (a closed pool keeps none)."""
        self._closed = True
        for kept in self._idle.values():
            for connection in kept:
                connection.close()
        self._idle.clear()
        await trio.lowlevel.checkpoint()

    def _take(self, address: str) -> _Connection | None:
        """The most recently used idle connection to ``address`` that looks alive
        (the others, closed by the server, are closed on the way)."""
        idle = self._idle.get(address, [])
        while idle:
            connection = idle.pop()
            if connection.looks_alive():
                return connection
            connection.close()
        return None

    def _give_back(self, address: str, connection: _Connection) -> bool:
        """Keep ``connection`` for the next call, after a complete reply; whether kept."""
        if self._closed or not connection.reusable():
            return False
        idle = self._idle.setdefault(address, [])
        if len(idle) >= self.max_idle:
            return False
        connection.http.start_next_cycle()
        idle.append(connection)
        return True

    async def _open(
        self, address: str, connect_timeout: float, ssl_context: ssl.SSLContext | None
    ) -> _Connection:
        stream = await open_http_stream(address, connect_timeout, ssl_context)
        tcp = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
        assert isinstance(tcp, trio.SocketStream)  # noqa: S101 - open_http_stream's streams
        self.opened += 1
        http = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        return _Connection(stream, tcp, http)

    async def _exchange(
        self,
        connection: _Connection,
        address: str,
        what: tuple[str, str, bytes],
        headers: list[tuple[str, str]],
        max_reply_bytes: int,
    ) -> HttpReply:
        """One request and its reply on ``connection``; given back to the idle ones
        after a complete reply, closed on any other way out.

        Raises:
            _NoReply: nothing of the reply came (``sent``: after the whole request).
            HttpClientError: a broken, malformed or too large reply.
        """
        stream = connection.stream
        complete = False
        try:
            try:
                await send_request(stream, connection.http, what, headers)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                raise _NoReply(connection_failure(address, error), sent=False) from None
            try:
                first = await stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                raise _NoReply(connection_failure(address, error), sent=True) from None
            if not first:
                closed = HttpClientError(address, "connection closed before a complete reply")
                raise _NoReply(closed, sent=True)
            with failures_named(address):
                connection.http.receive_data(bytes(first))
                reply = await read_reply(stream, connection.http, address, max_reply_bytes)
            complete = True
        finally:
            if not (complete and self._give_back(address, connection)):
                connection.close()
        return reply


def _reused(error: HttpClientError) -> HttpClientError:
    """``error`` said to come from a connection that had served a call before: not a
    server speaking another protocol (TLS to a plain client), and never ``tls`` (its
    handshake and certificates passed: a TLS error now is a broken connection, such
    as a record cut by the server going away, which a retry may well fix)."""
    return HttpClientError(error.address, f"reused connection: {error.reason}")
