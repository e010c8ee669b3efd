"""One client connection to an nsqd: the Trio edge of :mod:`trionsq.protocol.client`.

:func:`open_connection` connects, sends the magic and IDENTIFY, applies the upgrades
the broker agreed to (TLS, then snappy or deflate: :mod:`.layers`), sends AUTH when
the broker asks for it, then runs the connection's two tasks in a nursery that the
caller's ``async with`` owns:

- the reader parses every complete frame of each read at once; replies go to the
  commands waiting for them in order, messages to the ``on_messages`` callback as a
  list per read, and heartbeats are answered with NOP;
- the writer writes everything queued since its last write at once, straight to the
  descriptor, so the FINs of a burst of handled messages, or many pipelined PUBs,
  cost one write; on an upgraded connection that write is one encode and one
  ``send_all`` through the layers instead.

Nothing here awaits per message: :meth:`Connection.send` only queues bytes.
"""

from __future__ import annotations

import logging
import math
import os
import ssl
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import trio

from ..addresses import (
    address_list,
    local_address,
    peer_address,
    split_host_port,
)
from ..protocol.client import (
    ClientConnection,
    ErrorReply,
    Frame,
    MessageFrame,
    Response,
    encode_command,
    encode_identify,
)
from ..protocol.commands import Auth, Nop
from ..protocol.errors import ProtocolError
from ..protocol.frames import MAGIC_V2
from ..protocol.identify import IdentifyResponse, decode_identify_response
from .errors import (
    ConnectionClosedError,
    NsqClientError,
    NsqConfigError,
    NsqConnectionError,
    NsqError,
    NsqTlsError,
    error_for,
)
from .groups import single_errors
from .layers import Codec, Layers
from .options import ConnectionOptions

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from ..addresses import Address
    from ..protocol.commands import Command
    from ..protocol.message import Message

__all__ = ["Connection", "ConnectionClosedError", "NsqError", "open_connection"]

TOPIC_NOT_EXIST: Final = "E_TOPIC_NOT_EXIST"

log = logging.getLogger("trionsq.client")
READ_SIZE: Final = 65536
NOP_BYTES: Final = encode_command(Nop())
ASYNC_ERRORS: Final = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})
"""Errors nsqd sends for a FIN, REQ or TOUCH, which have no reply of their own: they
are logged and counted, never taken as the answer to a waiting command."""
FLUSH_TIMEOUT: Final = 1.0
"""Seconds a closing connection waits for what is queued to be written."""
AUTH_NEEDED: Final = ProtocolError("E_AUTH_REQUIRED", "the broker requires AUTH: pass auth_secret")


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
        layers: Layers,
        parser: ClientConnection,
        identified: IdentifyResponse | None,
        on_messages: Callable[[list[Message]], None] | None,
        address: str,
        on_group_owner: Callable[[], None] | None = None,
    ) -> None:
        """``on_group_owner``: the broker says this connection's group member now owns
        its partition (trionsq's ``_group_owner_``), after the messages before it."""
        self.address = address
        self.identified = identified
        """The broker's IDENTIFY answer (feature negotiation), or None for a plain OK."""
        self.parser = parser
        self.closed = False
        session_ms = identified.group_session_timeout if identified is not None else 0
        self.session_timeout = session_ms / 1000 if session_ms else None
        """A group member's session timeout (seconds), as the broker settled it: after
        that long without a word from us, it closes the connection (None: not a member)."""
        self.last_sent = trio.current_time()
        """When we last wrote to the broker (heartbeat answers included)."""
        self.fenced = False
        """We were silent for the session timeout (a process stopped, then resumed):
        the broker closed the connection and gave what we hold to another member, so
        nothing more of it is handled here."""
        self.lost = False
        """The connection ended without warning (not after a fatal error frame)."""
        self._on_group_owner = on_group_owner
        self.async_errors = 0
        """E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED received."""
        self._socket = layers.socket
        self._stream = layers.stream
        self._codec = layers.codec
        self._upgraded = layers.upgraded
        self._lost = layers.lost
        """The exceptions that mean the connection is gone."""
        self._broken = False
        """A layered send was cut short: the stream cannot go on."""
        self._sending: trio.CancelScope | None = None
        self._send_deadline = math.inf
        self._leftover = layers.held.take_rest()
        """Read during the handshake, after its last frame: the reader starts with it."""
        self._on_messages = on_messages
        self._waiters: deque[_Waiter] = deque()
        self._outgoing = bytearray()
        self._has_output = trio.Event()
        self._closed_event = trio.Event()

    @property
    def local_address(self) -> str:
        """This end's ``host:port`` (for trace logs)."""
        return local_address(self._socket.socket)

    @property
    def remote_address(self) -> str:
        """The broker's ``host:port`` as connected (for trace logs)."""
        return peer_address(self._socket.socket)

    def stale(self) -> bool:
        """Whether the broker has given up on us (:attr:`fenced`): nothing written for
        the session timeout. Looked at before anything is written, read or handed
        to the application, so a process that resumes after a stop finds it first."""
        timeout = self.session_timeout
        if (
            timeout is not None
            and not self.fenced
            and trio.current_time() - self.last_sent >= timeout
        ):
            self.fenced = True
            log.warning(
                "%s: silent for the group session timeout (%gs): fenced, dropping what "
                "this connection holds",
                self.address,
                timeout,
            )
        return self.fenced

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

    async def request(self, command: Command | bytes) -> Response:
        """Send a command that gets an answer (PUB, MPUB, SUB, CLS, ...) and wait for it;
        ``bytes`` are a command encoded already.

        Raises:
            NsqError: the broker answered with an error frame.
            ConnectionClosedError: the connection ended first.
        """
        if self.closed:
            raise ConnectionClosedError(self.address)
        waiter = _Waiter()
        self._waiters.append(waiter)
        self._outgoing += command if isinstance(command, bytes) else encode_command(command)
        self._has_output.set()
        await waiter.done.wait()
        reply = waiter.reply
        if reply is None:
            raise ConnectionClosedError(self.address)
        if isinstance(reply, ErrorReply):
            raise error_for(self._described(reply, command))
        return reply

    def _described(self, reply: ErrorReply, command: Command | bytes) -> ErrorReply:
        """``E_TOPIC_NOT_EXIST`` comes with no description (as from Youzan's nsqd): say
        which topic, which partition and where, from the command it answers."""
        topic: str | None = getattr(command, "topic", None)
        if reply.code != TOPIC_NOT_EXIST or reply.error.description or topic is None:
            return reply
        partition: int | None = getattr(command, "partition", None)
        missing = "does not exist" if partition is None else f"has no partition {partition}"
        text = f"topic {topic!r} {missing} on {self.address}"
        return ErrorReply(ProtocolError(reply.code, text, fatal=reply.fatal))

    async def _write_forever(self) -> None:
        write = self._send_layered if self._upgraded else self._write_queued
        while True:
            await self._has_output.wait()
            self._has_output = trio.Event()
            self.stale()  # before this write makes the silence look shorter
            await write()
            self.last_sent = trio.current_time()

    async def _write_queued(self) -> None:
        """Write what is queued straight to the descriptor, waiting only when the
        socket is full; cancelled while waiting, the unsent rest goes back to the
        front of the queue, so nothing is half-written or lost."""
        data = bytes(self._outgoing)
        self._outgoing.clear()
        fd = self._socket.socket.fileno()
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

    async def _send_layered(self) -> None:
        """Through TLS and/or compression: one encode and one send per write.

        Neither a TLS record nor a compressed stream resumes from the middle of a
        write, and a cancelled ``send_all`` may have sent any part of it, so the send
        is shielded: closing gives it :data:`FLUSH_TIMEOUT` (:meth:`_stop_sending`),
        and one cut short then leaves the connection broken."""
        data = bytes(self._outgoing)
        self._outgoing.clear()
        if self._codec is not None:
            data = self._codec.encode(data)
        self._broken = True
        with trio.CancelScope(shield=True, deadline=self._send_deadline) as self._sending:
            await self._stream.send_all(data)
            self._broken = False
        self._sending = None

    def _stop_sending(self) -> None:
        """The connection is closing: a layered send gets :data:`FLUSH_TIMEOUT` more."""
        if self._send_deadline == math.inf:
            self._send_deadline = trio.current_time() + FLUSH_TIMEOUT
            if self._sending is not None:
                self._sending.deadline = self._send_deadline

    async def _write_last(self) -> None:
        """At the end, what is still queued (the FINs of the last messages handled);
        called after the writer task has stopped."""
        if not self._outgoing or self.closed or self._broken:
            return
        if not self._upgraded:
            with trio.move_on_after(FLUSH_TIMEOUT, shield=True):
                await self._write_queued()
            return
        self._stop_sending()
        try:
            await self._send_layered()
        except self._lost as error:
            log.info("%s: last write lost: %s", self.address, error)

    async def _read_forever(self) -> None:
        stream, parser, codec, route = self._stream, self.parser, self._codec, self._route
        if self._leftover:
            route(parser.receive_data(self._leftover))
            self._leftover = b""
        while True:
            data = await stream.receive_some(READ_SIZE)
            if self.session_timeout is not None and self.stale():
                return  # what the broker sent before it gave up on us is not ours
            if codec is None or not data:
                route(parser.receive_data(data))
            else:
                for plain in codec.decode(data):
                    route(parser.receive_data(plain))
            if parser.error is not None:  # the parser keeps it for its next call: now
                raise parser.error
            if not data:
                return

    def _route(self, frames: list[Frame]) -> None:
        """One read's frames: replies to their waiters, messages to ``on_messages``."""
        messages: list[Message] = []
        for frame in frames:
            if type(frame) is MessageFrame:
                messages.append(frame.message)
            elif type(frame) is Response:
                if frame.is_heartbeat:
                    self.send_bytes(NOP_BYTES)
                elif frame.is_group_owner:
                    if messages and self._on_messages is not None:
                        self._on_messages(messages)  # those came before it
                    messages = []
                    if self._on_group_owner is not None:
                        self._on_group_owner()
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

    def _answer(self, reply: Response | ErrorReply) -> None:
        if type(reply) is ErrorReply and reply.fatal:
            self.closed = True  # the broker closes it after this: nothing more is sent
        if self._waiters:
            waiter = self._waiters.popleft()
            waiter.reply = reply
            waiter.done.set()
        else:
            log.warning("%s: an answer nobody waited for: %r", self.address, reply)

    def _ended(self, error: Exception | None) -> None:
        """The broker closed the connection (``error`` None) or it was lost: a WARNING,
        unless that was to be expected (after a fatal error frame, or once fenced)."""
        if not self._closed_event.is_set():
            why = "closed by the broker" if error is None else str(error) or repr(error)
            self.lost = not (self.closed or self.fenced)
            level = logging.WARNING if self.lost else logging.INFO
            log.log(level, "%s: connection lost: %s", self.address, why)
        self._fail_waiters()

    def _fail_waiters(self) -> None:
        self.closed = True
        self._closed_event.set()
        while self._waiters:
            self._waiters.popleft().done.set()


def client_addresses(addresses: Address | Sequence[Address]) -> list[str]:
    """``"host:port"`` strings for the addresses a caller gave, in either shape; one
    that is neither is the caller's configuration mistake (:class:`NsqConfigError`)."""
    try:
        return address_list(addresses)
    except ValueError as error:
        raise NsqConfigError(str(error)) from error


@asynccontextmanager
async def open_connection(
    address: Address,
    options: ConnectionOptions | None = None,
    *,
    on_messages: Callable[[list[Message]], None] | None = None,
    on_group_owner: Callable[[], None] | None = None,
    extended: bool = False,
    detail: bool = False,
) -> AsyncIterator[Connection]:
    """Connect to ``address`` (``host:port`` or ``(host, port)``), identify, upgrade,
    and serve the connection until the block ends or the broker closes it (then
    waiting commands fail with :class:`ConnectionClosedError` and
    ``connection.closed`` is set).

    ``extended``/``detail``: the message layout the SUB that follows asks for;
    ``on_messages``: each read's messages; ``on_group_owner``: a group member's
    connection now owns its partition (IDENTIFY ``group_notices``).

    Raises:
        NsqError: IDENTIFY or an upgrade refused, or an answer that breaks the
            protocol (its code); :class:`NsqAuthError` for AUTH.
        NsqConnectionError: the broker cannot be reached or closed the connection
            during the handshake (``__cause__``: the ``OSError``...).
        NsqTlsError: the TLS handshake failed (``__cause__``: the
            :class:`ssl.SSLError`, e.g. a certificate that does not verify).
        NsqConfigError: ``address`` is not ``host:port``.
    """
    options = options if options is not None else ConnectionOptions()
    (address,) = client_addresses(address)
    host, port = split_host_port(address)
    host = host or "127.0.0.1"
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError as error:
        raise NsqConnectionError(f"{address}: cannot connect: {error}") from error
    parser = ClientConnection(extended=extended, detail=detail)
    layers = Layers(stream, parser.max_frame_size)
    try:
        identified = await _identified(layers, parser, options, host, address)
        connection = Connection(
            layers, parser, identified, on_messages, address, on_group_owner=on_group_owner
        )
        try:
            with single_errors():
                async with trio.open_nursery() as nursery:

                    async def write() -> None:
                        try:
                            await connection._write_forever()
                        except connection._lost as error:  # the reader's set: one meaning
                            connection._ended(error)

                    async def read() -> None:
                        try:
                            await connection._read_forever()
                        except connection._lost as error:
                            connection._ended(error)
                        else:
                            connection._ended(None)  # the broker closed it (not our cancel)

                    nursery.start_soon(write)
                    nursery.start_soon(read)
                    try:
                        yield connection
                    finally:
                        connection._stop_sending()
                        nursery.cancel_scope.cancel()
        finally:
            await connection._write_last()
    finally:
        await trio.aclose_forcefully(layers.stream)


async def _identified(
    layers: Layers, parser: ClientConnection, options: ConnectionOptions, host: str, address: str
) -> IdentifyResponse | None:
    """:func:`_handshake`, its failures raised as the client's errors with their cause."""
    try:
        return await _handshake(layers, parser, options, host)
    except NsqClientError:
        raise
    except trio.BrokenResourceError as error:
        if layers.tls and isinstance(error.__cause__, ssl.SSLError):
            why = error.__cause__
            raise NsqTlsError(f"{address}: TLS handshake failed: {why}") from why
        raise NsqConnectionError(f"{address}: lost during the handshake: {error!r}") from error
    except (trio.ClosedResourceError, OSError) as error:
        raise NsqConnectionError(f"{address}: lost during the handshake: {error}") from error
    except ProtocolError as error:
        raise error_for(ErrorReply(error)) from error


async def _handshake(
    layers: Layers, parser: ClientConnection, options: ConnectionOptions, host: str
) -> IdentifyResponse | None:
    """MAGIC and IDENTIFY; the upgrades the broker agreed to, in nsqd's order, each
    confirmed by an ``OK`` through its new layer; then AUTH, through them all."""
    await layers.send(MAGIC_V2 + encode_identify(options.identify))
    first = await _one_reply(layers, parser)
    if first.data == b"OK":
        return None
    identified = decode_identify_response(first.data)
    if identified.tls_v1:
        context = options.tls or ssl.create_default_context()
        await layers.start_tls(context, options.tls_server_name or host)
        await _expect_ok(layers, parser, "TLS")
    codec = Codec.negotiated(identified)
    if codec is not None:
        layers.start_codec(codec)
        await _expect_ok(layers, parser, codec.name)
    if identified.auth_required:
        if options.auth_secret is None:
            raise error_for(ErrorReply(AUTH_NEEDED))
        await layers.send(encode_command(Auth(options.auth_secret)))
        await _one_reply(layers, parser)
    return identified


async def _one_reply(layers: Layers, parser: ClientConnection) -> Response:
    """The answer to IDENTIFY or AUTH, or an upgrade's OK, before the reader task runs."""
    while (frame := await layers.next_frame()) is not None:
        for reply in parser.receive_data(frame):
            if isinstance(reply, ErrorReply):
                raise error_for(reply)
            if isinstance(reply, Response) and not reply.is_heartbeat:
                return reply
    raise ConnectionClosedError("closed before answering")


async def _expect_ok(layers: Layers, parser: ClientConnection, upgrade: str) -> None:
    """nsqd confirms each upgrade with an ``OK`` that already went through it."""
    reply = await _one_reply(layers, parser)
    if reply.data != b"OK":
        text = f"{upgrade} upgrade answered {reply.data[:40]!r}, not OK"
        raise error_for(ErrorReply(ProtocolError("E_IDENTIFY_FAILED", text)))
