"""One client connection to an nsqd: the Trio edge of :mod:`trionsq.protocol.client`.

:func:`open_connection` connects, sends the magic and IDENTIFY (and AUTH when the
broker asks for it), then runs the connection's two tasks in a nursery that the
caller's ``async with`` owns:

- the reader parses every complete frame of each read at once; replies go to the
  commands waiting for them in order, messages to the ``on_messages`` callback as a
  list per read, and heartbeats are answered with NOP;
- the writer writes everything queued since its last write at once, straight to the
  descriptor, so the FINs of a burst of handled messages, or many pipelined PUBs,
  cost one write.

Nothing here awaits per message: :meth:`Connection.send` only queues bytes.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import trio

from ..config import split_host_port
from ..protocol.client import (
    ClientConnection,
    ErrorReply,
    MessageFrame,
    Response,
    encode_command,
    encode_identify,
)
from ..protocol.commands import Auth, Nop
from ..protocol.errors import ProtocolError
from ..protocol.frames import MAGIC_V2
from ..protocol.identify import IdentifyResponse, decode_identify_response
from .options import ConnectionOptions

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from ..protocol.commands import Command
    from ..protocol.message import Message

__all__ = ["Connection", "ConnectionClosedError", "NsqError", "open_connection"]

log = logging.getLogger("trionsq.client")
READ_SIZE: Final = 65536
NOP_BYTES: Final = encode_command(Nop())
ASYNC_ERRORS: Final = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})
"""Errors nsqd sends for a FIN, REQ or TOUCH, which have no reply of their own: they
are logged and counted, never taken as the answer to a waiting command."""
FLUSH_TIMEOUT: Final = 1.0
"""Seconds a closing connection waits for what is queued to be written."""
AUTH_NEEDED: Final = ProtocolError("E_AUTH_REQUIRED", "the broker requires AUTH: pass auth_secret")


class NsqError(Exception):
    """An error frame from the broker, as the answer to a command."""

    def __init__(self, reply: ErrorReply) -> None:
        super().__init__(f"{reply.code} {reply.error.text}".strip())
        self.code = reply.code
        self.fatal = reply.fatal


class ConnectionClosedError(Exception):
    """The connection ended before the command's answer came."""


class _Waiter:
    """One command's answer, delivered by the reader."""

    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: Response | ErrorReply | None = None


class Connection:
    """A connected, identified client connection (use :func:`open_connection`)."""

    def __init__(
        self,
        stream: trio.SocketStream,
        parser: ClientConnection,
        identified: IdentifyResponse | None,
        on_messages: Callable[[list[Message]], None] | None,
        address: str,
    ) -> None:
        self.address = address
        self.identified = identified
        """The broker's IDENTIFY answer (feature negotiation), or None for a plain OK."""
        self.parser = parser
        self.closed = False
        self.async_errors = 0
        """E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED received."""
        self._stream = stream
        self._on_messages = on_messages
        self._waiters: deque[_Waiter] = deque()
        self._outgoing = bytearray()
        self._has_output = trio.Event()
        self._closed_event = trio.Event()

    async def wait_closed(self) -> None:
        """Return once the broker has closed the connection (or it was lost)."""
        await self._closed_event.wait()

    def send(self, *commands: Command) -> None:
        """Queue commands that get no answer (FIN, REQ, TOUCH, RDY, NOP): not a checkpoint."""
        for command in commands:
            self._outgoing += encode_command(command)
        self._has_output.set()

    def send_bytes(self, data: bytes) -> None:
        """Queue already encoded commands that get no answer."""
        self._outgoing += data
        self._has_output.set()

    async def request(self, command: Command) -> Response:
        """Send a command that gets an answer (PUB, MPUB, SUB, CLS, ...) and wait for it.

        Raises:
            NsqError: the broker answered with an error frame.
            ConnectionClosedError: the connection ended first.
        """
        if self.closed:
            raise ConnectionClosedError(self.address)
        waiter = _Waiter()
        self._waiters.append(waiter)
        self._outgoing += encode_command(command)
        self._has_output.set()
        await waiter.done.wait()
        reply = waiter.reply
        if reply is None:
            raise ConnectionClosedError(self.address)
        if isinstance(reply, ErrorReply):
            raise NsqError(reply)
        return reply

    async def _write_forever(self) -> None:
        while True:
            await self._has_output.wait()
            self._has_output = trio.Event()
            await self._write_queued()

    async def _write_queued(self) -> None:
        """Write what is queued straight to the descriptor, waiting only when the
        socket is full; cancelled while waiting, the unsent rest goes back to the
        front of the queue, so nothing is half-written or lost."""
        data = bytes(self._outgoing)
        self._outgoing.clear()
        fd = self._stream.socket.fileno()
        sent = 0
        try:
            with memoryview(data) as view:
                while sent < len(data):
                    try:
                        sent += os.write(fd, view[sent:])
                    except BlockingIOError:
                        await trio.lowlevel.wait_writable(fd)
        finally:
            if sent < len(data):
                self._outgoing[0:0] = data[sent:]

    async def _write_last(self) -> None:
        """At the end, what is still queued (the FINs of the last messages handled);
        called after the writer task has stopped."""
        if self._outgoing and not self.closed:
            with trio.move_on_after(FLUSH_TIMEOUT, shield=True):
                await self._write_queued()

    async def _read_forever(self) -> None:
        stream, parser = self._stream, self.parser
        while True:
            data = await stream.receive_some(READ_SIZE)
            frames = parser.receive_data(data)
            messages: list[Message] = []
            for frame in frames:
                if type(frame) is MessageFrame:
                    messages.append(frame.message)
                elif type(frame) is Response:
                    if frame.is_heartbeat:
                        self.send_bytes(NOP_BYTES)
                    else:
                        self._answer(frame)
                elif type(frame) is ErrorReply:
                    if frame.code in ASYNC_ERRORS:
                        self.async_errors += 1
                        log.warning("%s: %s", self.address, frame.error.text)
                    else:
                        self._answer(frame)
            if messages and self._on_messages is not None:
                self._on_messages(messages)
            if not data:
                return

    def _answer(self, reply: Response | ErrorReply) -> None:
        if type(reply) is ErrorReply and reply.fatal:
            self.closed = True  # the broker closes it after this: nothing more is sent
        if self._waiters:
            waiter = self._waiters.popleft()
            waiter.reply = reply
            waiter.done.set()
        else:
            log.warning("%s: an answer nobody waited for: %r", self.address, reply)

    def _fail_waiters(self) -> None:
        self.closed = True
        self._closed_event.set()
        while self._waiters:
            self._waiters.popleft().done.set()


@asynccontextmanager
async def open_connection(
    address: str,
    options: ConnectionOptions | None = None,
    *,
    on_messages: Callable[[list[Message]], None] | None = None,
    extended: bool = False,
    detail: bool = False,
) -> AsyncIterator[Connection]:
    """Connect to ``address`` (``host:port``), identify, and serve the connection
    until the block ends or the broker closes it (then waiting commands fail with
    :class:`ConnectionClosedError` and ``connection.closed`` is set).

    ``extended``/``detail``: the message layout the SUB that follows asks for.

    Raises:
        NsqError: IDENTIFY or AUTH refused.
        OSError: the broker cannot be reached.
    """
    options = options if options is not None else ConnectionOptions()
    host, port = split_host_port(address)
    request = options.identify
    stream = await trio.open_tcp_stream(host or "127.0.0.1", port)
    try:
        parser = ClientConnection(extended=extended, detail=detail)
        await stream.send_all(MAGIC_V2 + encode_identify(request))
        first = await _one_reply(stream, parser)
        identified = None
        if first.data != b"OK":
            identified = decode_identify_response(first.data)
        connection = Connection(stream, parser, identified, on_messages, address)
        if identified is not None and identified.auth_required:
            if options.auth_secret is None:
                raise NsqError(ErrorReply(AUTH_NEEDED))
            await stream.send_all(encode_command(Auth(options.auth_secret)))
            await _one_reply(stream, parser)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection._write_forever)

                async def read() -> None:
                    try:
                        await connection._read_forever()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                        log.info("%s: connection lost: %s", address, error)
                    connection._fail_waiters()  # the broker closed it (not our cancel)

                nursery.start_soon(read)
                try:
                    yield connection
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            await connection._write_last()
    finally:
        await trio.aclose_forcefully(stream)


async def _one_reply(stream: trio.SocketStream, parser: ClientConnection) -> Response:
    """The answer to IDENTIFY or AUTH, before the reader task runs."""
    while True:
        data = await stream.receive_some(READ_SIZE)
        for frame in parser.receive_data(data):
            if isinstance(frame, ErrorReply):
                raise NsqError(frame)
            if isinstance(frame, Response) and not frame.is_heartbeat:
                return frame
        if not data:
            raise ConnectionClosedError("closed before answering")
