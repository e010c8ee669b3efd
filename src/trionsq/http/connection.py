"""One HTTP/1.1 connection: h11 parses, this loop reads, dispatches and writes.

Design §7: h11 does the HTTP, we write only the loop. Requests are answered one at a
time in arrival order, so pipelined requests get their answers in order; keep-alive
is h11's. Memory is bounded: headers by ``MAX_HEADER_BYTES``, bodies by the route's
limit (a Content-Length over it is refused before any body byte is read). A request
must arrive whole within ``REQUEST_TIMEOUT`` of its first byte, and an idle
keep-alive connection is closed after ``IDLE_TIMEOUT``. Plain connections read and
write the descriptor directly (design §8); HTTPS goes through a ``trio.SSLStream``.
"""

from __future__ import annotations

import logging
import os
import time
from http import HTTPStatus
from typing import TYPE_CHECKING, Final, Protocol

import attrs
import h11
import trio

from ..addresses import peer_address
from .messages import Request, Response
from .simple_request import parse_simple_request

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["FdTransport", "StreamTransport", "Transport", "Upgrade", "serve_http_connection"]

log = logging.getLogger("trionsq.http")

MAX_HEADER_BYTES: Final = 64 * 1024
READ_SIZE: Final = 65536
REQUEST_TIMEOUT: Final = 30.0
"""Seconds from a request's first byte to its last, and for writing its answer."""
IDLE_TIMEOUT: Final = 300.0
"""Seconds a keep-alive connection may wait for its next request."""


class Transport(Protocol):
    """The byte stream under one HTTP connection."""

    peer: str
    """The client as ``host:port``."""

    async def receive(self) -> bytes:
        """Some bytes; ``b""`` at EOF."""

    async def send(self, data: bytes) -> None:
        """All of ``data``."""


@attrs.frozen
class Upgrade:
    """A request the connection loop hands over instead of answering (a websocket
    upgrade the caller accepted): the caller continues on the socket."""

    request: Request
    """The request's head (no body: an upgrade request has none)."""
    replay: bytes
    """The request's bytes as received (rebuilt from h11's head: same line, same
    headers) and whatever followed, for a protocol library that parses them again."""


def _is_upgrade(request: h11.Request) -> bool:
    return any(
        name == b"upgrade" and value.lower() == b"websocket" for name, value in request.headers
    )


def _raw_head(request: h11.Request) -> bytes:
    lines = [b"%s %s HTTP/%s" % (request.method, request.target, request.http_version)]
    lines.extend(name + b": " + value for name, value in request.headers.raw_items())
    return b"\r\n".join(lines) + b"\r\n\r\n"


class FdTransport:
    """A plain TCP socket read and written through its descriptor (no extra passes)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._fd = stream.socket.fileno()
        self._waited = True
        self.peer = peer_address(stream.socket)

    async def receive(self) -> bytes:
        if not self._waited:  # data kept coming: let other tasks run once per read
            await trio.lowlevel.checkpoint()
        while True:
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._fd)
                self._waited = True
                continue
            self._waited = False
            return data

    async def send(self, data: bytes) -> None:
        with memoryview(data) as view:
            sent = 0
            while sent < len(view):
                try:
                    sent += os.write(self._fd, view[sent:])
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(self._fd)


class StreamTransport:
    """Any trio stream (HTTPS: an SSLStream)."""

    def __init__(self, stream: trio.abc.Stream, peer: str = "") -> None:
        self._stream = stream
        self.peer = peer

    async def receive(self) -> bytes:
        return bytes(await self._stream.receive_some(READ_SIZE))

    async def send(self, data: bytes) -> None:
        await self._stream.send_all(data)


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(seconds: int) -> str:
    """RFC 9110's IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``), in English whatever
    the locale; written here because ``email.utils`` costs start-up time."""
    t = time.gmtime(seconds)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year:04d}"
        f" {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )


class _DateHeader:
    """Go sends a Date header on every answer; formatting it once a second is enough."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def value(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = http_date(now).encode()
        return self._value


_DATE = _DateHeader()


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


_RESPONSE_HEADS_KEPT: Final = 64
_response_heads: dict[tuple[int, tuple[tuple[bytes, bytes], ...]], bytes] = {}
"""(status, headers) -> the status line and those headers, encoded once: handlers
answer with a few kinds of response again and again (``200 OK`` to a publish)."""


def encode_response(response: Response, *, close: bool = False, head: bool = False) -> bytes:
    """The whole answer as bytes for one write: status line, headers, body (none for HEAD)."""
    key = (response.status, response.headers)
    start = _response_heads.get(key)
    if start is None:
        parts = [b"HTTP/1.1 %d %s\r\n" % (response.status, _reason(response.status))]
        parts.extend(name + b": " + value + b"\r\n" for name, value in response.headers)
        start = b"".join(parts)
        if len(_response_heads) >= _RESPONSE_HEADS_KEPT:
            _response_heads.clear()
        _response_heads[key] = start
    body = response.body
    return b"%sDate: %s\r\nContent-Length: %d\r\n%s\r\n%s" % (
        start,
        _DATE.value(),
        len(body),
        b"Connection: close\r\n" if close else b"",
        b"" if head else body,
    )


_VERSION_NOT_SUPPORTED: Final = (
    b"HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    b"505 HTTP Version Not Supported: unsupported protocol version"
)
"""Go's net/http answer, byte for byte (no Content-Length: the close ends it)."""


def _version_supported(request: h11.Request) -> bool:
    """Go's HTTP/1 server takes any ``HTTP/1.x`` (and ``PRI * HTTP/2.0``, the HTTP/2
    preface, for handlers to upgrade); ``HTTP/0.x`` and ``HTTP/2+`` get 505. h11
    has already refused versions not of the form ``HTTP/<digit>.<digit>`` with
    400, as Go refuses them as malformed."""
    version = request.http_version
    if version.startswith(b"1."):
        return True
    return version == b"2.0" and request.method == b"PRI" and request.target == b"*"


def _keeps_alive(request: h11.Request) -> bool:
    """HTTP/1.1 or a later 1.x without ``Connection: close`` (Go's ``ProtoAtLeast(1,
    1)``); 1.0 clients get one answer, and so does the HTTP/2 preface, as in Go."""
    version = request.http_version
    if version < b"1.1" or not version.startswith(b"1."):
        return False
    return not any(
        name == b"connection" and b"close" in value.lower() for name, value in request.headers
    )


@attrs.define
class _Idle:
    """Whether the connection waits for a request, and since when (trio time)."""

    waiting: bool
    since: float


_DEADLINE_SLACK: Final = 1.0
"""How far a plain request's deadline may be earlier than ``REQUEST_TIMEOUT`` from its
first byte before it is moved: moving it for every request (and back to the idle
deadline after) cost ~4 µs of each HTTP ``/pub`` in Trio's deadline heap (issue 37)."""


async def serve_http_connection(
    transport: Transport,
    dispatch: Callable[[Request], Awaitable[Response]],
    body_limit: Callable[[Request, int | None], Response | int],
    upgrade: Callable[[Request], bool | Response] | None = None,
) -> Upgrade | None:
    """Answer requests until the client closes, errs, or stays silent too long.

    h11 parses each request; a fresh parser per request carries the bytes that
    followed (pipelining) over, and the answer is written here in one piece: h11's
    response writer and state machine cost as much as its parsing, and answers are
    always whole (Content-Length) so there is nothing for them to decide.
    ``body_limit(head, content_length)`` (``head``: the request without its body) returns the most body bytes the
    route reads, or the refusal to send when Content-Length is already too big.
    ``upgrade(head)``: whether to hand over a websocket upgrade request on its path;
    then this returns the :class:`Upgrade` (else None when the connection is done); a
    :class:`Response` instead is the refusal to answer (and close) with.

    One cancel scope bounds each request (``REQUEST_TIMEOUT`` from its first byte) and,
    between requests, the wait for the next: that wait keeps the last request's
    deadline, and when it passes the connection waits on, in a new scope, until
    ``IDLE_TIMEOUT`` after its last answer. So a keep-alive client's requests move the
    deadline about once a second instead of twice per request.
    """
    idle = _Idle(waiting=True, since=trio.current_time())
    while True:
        with trio.CancelScope(deadline=idle.since + IDLE_TIMEOUT) as scope:
            return await _serve_requests(transport, scope, idle, dispatch, body_limit, upgrade)
        if idle.waiting and trio.current_time() < idle.since + IDLE_TIMEOUT:
            continue  # the last request's deadline passed while idle: wait on
        log.debug("http: connection timed out")
        return None


async def _serve_requests(
    transport: Transport,
    scope: trio.CancelScope,
    idle: _Idle,
    dispatch: Callable[[Request], Awaitable[Response]],
    body_limit: Callable[[Request, int | None], Response | int],
    upgrade: Callable[[Request], bool | Response] | None,
) -> Upgrade | None:
    """The requests of :func:`serve_http_connection`, within ``scope``."""
    leftover = b""
    while True:
        if not leftover:
            idle.waiting = True
            leftover = await transport.receive()  # idle until the next request begins
            idle.waiting = False
            if not leftover:
                return None
        due = trio.current_time() + REQUEST_TIMEOUT
        if not due - _DEADLINE_SLACK <= scope.deadline <= due:
            scope.deadline = due
        simple = await _answer_simple(transport, leftover, dispatch, body_limit)
        if simple is not None:
            leftover = simple
            idle.since = trio.current_time()
            continue
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        conn.receive_data(leftover)
        event = await _next_event(transport, conn)
        if not isinstance(event, h11.Request):
            return None  # EOF inside a request, or a malformed one (already answered)
        if not _version_supported(event):
            log.debug("http: HTTP/%s not supported", event.http_version.decode())
            await transport.send(_VERSION_NOT_SUPPORTED)
            return None
        if upgrade is not None and _is_upgrade(event):
            handed = _hand_over(conn, event, transport.peer, upgrade)
            if isinstance(handed, Response):  # refused before the upgrade
                await transport.send(encode_response(handed, close=True))
                return None
            if handed is not None:
                return handed
        answer, whole = await _answer(transport, conn, event, dispatch, body_limit)
        if answer is None:
            return None
        keep_alive = whole and _keeps_alive(event)
        head = event.method == b"HEAD"
        await transport.send(encode_response(answer, close=not keep_alive, head=head))
        if not keep_alive:
            return None
        leftover, closed = conn.trailing_data
        if closed and not leftover:
            return None
        idle.since = trio.current_time()


def _hand_over(
    conn: h11.Connection,
    event: h11.Request,
    peer: str,
    upgrade: Callable[[Request], bool | Response],
) -> Upgrade | Response | None:
    """The upgrade to hand over, when the caller takes this request (path, headers);
    the caller's refusal to answer instead (403: not from this origin)."""
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in event.headers}
    target = event.target.decode("utf-8", "surrogateescape")
    head = Request.from_target(
        event.method.decode("ascii", "replace"), target, headers, remote_address=peer
    )
    decision = upgrade(head)
    if isinstance(decision, Response):
        return decision
    if not decision:
        return None
    following, _ = conn.trailing_data
    return Upgrade(head, _raw_head(event) + following)


async def _next_event(transport: Transport, conn: h11.Connection) -> object:
    """The next h11 event, reading as needed; a malformed request is answered here."""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as error:
            await _refuse(transport, conn, error)
            return None
        if event is not h11.NEED_DATA:
            return event
        if conn.they_are_waiting_for_100_continue:
            await transport.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        conn.receive_data(await transport.receive())


async def _answer_simple(
    transport: Transport,
    data: bytes,
    dispatch: Callable[[Request], Awaitable[Response]],
    body_limit: Callable[[Request, int | None], Response | int],
) -> bytes | None:
    """Answer the plain request at the front of ``data`` without h11 (see
    :mod:`.simple_request`); returns what followed it, or None to let h11 take it (an
    unusual request, a body still coming, one the route refuses by its size)."""
    simple = parse_simple_request(data, MAX_HEADER_BYTES)
    if simple is None:
        return None
    length = len(simple.body) if "content-length" in simple.headers else None
    request = Request.from_target(
        simple.method, simple.target, simple.headers, simple.body, remote_address=transport.peer
    )
    limit = body_limit(request, length)  # looks at the head only
    if isinstance(limit, Response) or len(simple.body) > limit:
        return None
    answer = await _dispatched(dispatch, request, simple.target)
    await transport.send(encode_response(answer))
    return data[simple.size :]


async def _dispatched(
    dispatch: Callable[[Request], Awaitable[Response]], request: Request, target: str
) -> Response:
    """The handler's answer; a handler that fails is a 500, logged in one line and a
    traceback (``target`` as sent: it may be long, a query)."""
    try:
        return await dispatch(request)
    except Exception:
        log.exception("http: handler for %s %.200s failed", request.method, target)
        return Response.error(500, "INTERNAL_ERROR")


async def _answer(
    transport: Transport,
    conn: h11.Connection,
    request: h11.Request,
    dispatch: Callable[[Request], Awaitable[Response]],
    body_limit: Callable[[Request, int | None], Response | int],
) -> tuple[Response | None, bool]:
    """Read the body within the route's limit and run the handler.

    Returns the answer (None: the connection is unusable) and whether the request
    was read whole, so the connection can serve another.
    """
    method = request.method.decode("ascii", "replace")
    target = request.target.decode("utf-8", "surrogateescape")
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in request.headers}
    length_header = headers.get("content-length")
    length = int(length_header) if length_header is not None else None
    head = Request.from_target(method, target, headers, remote_address=transport.peer)
    limit = body_limit(head, length)
    if isinstance(limit, Response):
        return limit, length == 0  # refused on its Content-Length; the body is not read
    chunks: list[bytes] = []
    size = 0
    whole = False
    while True:
        event = await _next_event(transport, conn)
        if isinstance(event, h11.Data):
            size += len(event.data)
            if size > limit:  # keep limit + 1 bytes, as Go's LimitReader: the route decides
                chunks.append(event.data[: len(event.data) - (size - limit - 1)])
                break
            chunks.append(event.data)
            continue
        if isinstance(event, h11.EndOfMessage):
            whole = True
            break
        return None, False  # closed mid-body, or malformed (answered)
    body = b"".join(chunks)
    return await _dispatched(dispatch, attrs.evolve(head, body=body), target), whole


async def _refuse(
    transport: Transport, conn: h11.Connection, error: h11.RemoteProtocolError
) -> None:
    """Answer a malformed request (or a TCP client on this port) with a 4xx and close.

    go-nsq recognises ``HTTP/1.1`` in reply to its magic and says it reached an HTTP
    port instead of the TCP one.
    """
    status = error.error_status_hint
    log.debug("http: bad request: %s", error)
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = b"%d %s" % (status, _reason(status))
    head = (
        b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (status, _reason(status), len(body))
    )
    await transport.send(head + body)
