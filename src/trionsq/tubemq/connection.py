"""One TCP connection of a TubeMQ client: a nursery with a reader and a writer task.

The reader (this connection's task) reads the descriptor, takes every whole frame
of a read (up to :data:`MAX_CALLS_PER_TURN` per turn) and answers them all with one
write, as V2's reader does; a run of SendMessage calls among them is read and
answered as one (:func:`~..protocol.tubemq_sends.take_sends`), without a coroutine
per call. A pull that waits for the router is answered later, from the router's
pass, through :meth:`TubeConnection.send`; the writer task puts those replies on the
socket. Bad framing closes the connection without a reply, as
TubeMQ's decoder does; a call it cannot serve gets TubeMQ's exception reply, and a
bug in a handler answers that call with one (logged) and the connection carries on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..addresses import peer_address
from ..protocol.tubemq import (
    JAVA_EXCEPTION,
    CallRefused,
    FrameError,
    FrameReader,
    Request,
    decode_request,
    encode_exception,
)
from ..protocol.tubemq_proto import rpc_pb2
from ..protocol.tubemq_sends import SendCalls, take_sends
from ..socket_writes import write_all

if TYPE_CHECKING:
    from typing import TypeAlias

    Answer: TypeAlias = bytes | Callable[[], bytes] | None
    """What answering a call gives: its reply frame; a function that makes it once the
    turn ended (a message sent is stored with the turn's others); None when the reply
    comes later through :meth:`TubeConnection.send`."""
    AnswerSends: TypeAlias = Callable[[SendCalls], Callable[[], bytes]]
    """What answering a run of SendMessage calls gives: a function that makes their
    reply frames once the turn ended."""

__all__ = ["IDLE_TIMEOUT", "MAX_CALLS_PER_TURN", "TubeConnection"]

log = logging.getLogger("trionsq.tubemq")
READ_SIZE: Final = 65536
MAX_CALLS_PER_TURN: Final = 256
IDLE_TIMEOUT: Final = 300.0
"""TubeMQ's server closes a connection that sent nothing for 5 minutes."""
WRITER_TASK: Final = "trionsq.tubemq.connection.TubeConnection._write_late"


@attrs.define(eq=False)
class TubeConnection:
    """Serves one connection until either side ends it; never raises for client faults.

    ``answer(call, connection)``: see :data:`Answer`; ``end_turn()``: called after a
    turn's calls, before their replies are made; ``max_payload``: the largest frame
    read; ``answer_sends(calls)``: see :data:`AnswerSends` (None: every call goes
    through ``answer``).
    """

    stream: trio.SocketStream
    services: frozenset[int]
    answer: Callable[[Request, TubeConnection], Awaitable[Answer]]
    max_payload: int
    end_turn: Callable[[], None]
    answer_sends: AnswerSends | None = None
    remote_address: str = attrs.field(init=False)
    _reader: FrameReader = attrs.field(init=False)
    _late: list[bytes] = attrs.field(init=False, factory=list)
    _wake: trio.Event = attrs.field(init=False, factory=trio.Event)
    _lock: trio.StrictFIFOLock = attrs.field(init=False, factory=trio.StrictFIFOLock)

    def __attrs_post_init__(self) -> None:
        self.remote_address = peer_address(self.stream.socket)
        self._reader = FrameReader(self.max_payload)

    def send(self, data: bytes) -> None:
        """A reply that was not ready when its call was read; never blocks."""
        self._late.append(data)
        self._wake.set()

    async def run(self) -> None:
        fd = self.stream.socket.fileno()
        reader = self._reader
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_late, name=WRITER_TASK)
                while not reader.closed:
                    try:
                        data = os.read(fd, READ_SIZE)
                    except BlockingIOError:
                        with trio.move_on_after(IDLE_TIMEOUT) as idle:
                            await trio.lowlevel.wait_readable(fd)
                        if idle.cancelled_caught:
                            log.info(
                                "tubemq %s: idle for %gs, closing",
                                self.remote_address,
                                IDLE_TIMEOUT,
                            )
                            break
                        continue
                    except OSError as error:
                        log.debug("tubemq %s: connection reset: %s", self.remote_address, error)
                        break
                    reader.receive_data(data)
                    await self._process()
                    await trio.lowlevel.checkpoint()  # a client that never pauses shares
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            log.debug("tubemq %s: connection reset", self.remote_address)
        except* Exception:
            log.exception("tubemq %s: connection failed", self.remote_address)
        finally:
            reader.closed = True
            await trio.aclose_forcefully(self.stream)

    async def _process(self) -> None:
        """Answer every whole frame read, a turn of calls per write."""
        reader = self._reader
        while True:
            frames = reader.next_frames(MAX_CALLS_PER_TURN)
            if not frames:
                return
            replies: list[bytes | Callable[[], bytes]] = []
            index = 0
            while index < len(frames):
                end, sends = (
                    take_sends(frames, index, self.services)
                    if self.answer_sends is not None
                    else (index, None)
                )
                if sends is not None:
                    replies.append(self._answer_sends(sends))
                    index = end
                    continue
                for frame in frames[index : max(end, index + 1)]:
                    if isinstance(frame, FrameError):
                        log.info("tubemq %s: %s, closing", self.remote_address, frame.reason)
                        break
                    call = decode_request(frame, self.services)
                    reply = (
                        encode_exception(call)
                        if isinstance(call, CallRefused)
                        else await self._answer(call)
                    )
                    if reply is not None:
                        replies.append(reply)
                index = max(end, index + 1)
            self.end_turn()
            await self._write(b"".join(r if isinstance(r, bytes) else r() for r in replies))
            if reader.closed:
                return
            await trio.lowlevel.checkpoint()  # more whole frames: let others run first

    async def _answer(self, call: Request) -> Answer:
        try:
            return await self.answer(call, self)
        except Exception as error:  # a bug: this call fails, the connection goes on
            log.exception("tubemq %s: method %d failed", self.remote_address, call.method)
            return encode_exception(_failed(call.serial_no, error, call.protocol_version))

    def _answer_sends(self, sends: SendCalls) -> bytes | Callable[[], bytes]:
        assert self.answer_sends is not None  # noqa: S101 - only called when set
        try:
            return self.answer_sends(sends)
        except Exception as error:  # a bug: these calls fail, the connection goes on
            log.exception("tubemq %s: SendMessage failed", self.remote_address)
            return b"".join(  # java.lang.Exception: named alike for every protocol version
                encode_exception(_failed(serial_no, error, 0)) for serial_no in sends.serial_nos
            )

    async def _write_late(self) -> None:
        """The writer task: replies of pulls answered after their call was read."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            late, self._late = self._late, []
            await self._write(b"".join(late))

    async def _write(self, data: bytes) -> None:
        """Put ``data`` on the socket, whole and in order with the other writer."""
        if not data:
            return
        fd = self.stream.socket.fileno()
        async with self._lock:
            error = await write_all(fd, data, trio.lowlevel.wait_writable)
        if error is not None:
            raise error


def _failed(serial_no: int, error: Exception, protocol_version: int) -> CallRefused:
    """The exception reply of a call whose handler failed (a bug, logged)."""
    return CallRefused(
        serial_no,
        JAVA_EXCEPTION,
        f"IPC server handle request error :{error}",
        rpc_pb2.ResponseHeader.FATAL,
        protocol_version,
    )
