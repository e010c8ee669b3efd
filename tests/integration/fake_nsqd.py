"""A broker that keeps the one rule of Go nsqd where trionsq differs on purpose: the
messages a consumer's connection holds stay in flight when it closes (nsqd requeues
them only at msg_timeout, 60 s by default; trionsq at once, docs/internals.md). So a
client that leaves without answering what it holds shows here as messages still in
flight, as it would in Go nsqd's /stats.

It speaks protocol V2 through trionsq's sans-IO server state machine (the magic,
IDENTIFY answered ``OK`` as nsqd does without feature negotiation, SUB, RDY, FIN,
REQ, TOUCH, NOP, CLS answered ``CLOSE_WAIT``, commands in the states nsqd allows) and
delivers from one queue of bodies, at most RDY in flight per connection, as nsqd.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import TYPE_CHECKING

import attrs
import trio

from trionsq.protocol.commands import Cls, Fin, FinMany, Identify, Nop, Rdy, Req, Sub, Touch
from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.frames import CLOSE_WAIT_FRAME, error_frame, response_frame
from trionsq.protocol.message import encode_message_frame, hex_id
from trionsq.protocol.server import ServerConnection

if TYPE_CHECKING:
    from trionsq.protocol.commands import Command

OK = response_frame(b"OK")


@attrs.define
class Held:
    """A message in flight: the body and the connection holding it."""

    body: bytes
    attempts: int
    connection: int


@attrs.define
class FakeNsqd:
    """One topic and channel; counters for the tests."""

    pending: deque[tuple[int, bytes, int]] = attrs.field(factory=deque)
    """(id, body, attempts) waiting to be delivered, in order."""
    in_flight: dict[int, Held] = attrs.field(factory=dict)
    finished: list[bytes] = attrs.field(factory=list)
    requeues: list[tuple[bytes, int]] = attrs.field(factory=list)
    """(body, delay ms) of each REQ."""
    delivered: int = 0
    log: list[str] = attrs.field(factory=list)
    """Each connection's commands as ``<n> VERB`` (``<n> RDY <count>``) and
    ``<n> closed`` (n from 1)."""
    open_connections: int = 0
    address: str = ""
    """``host:port``, once :meth:`serve` listens."""
    _next_id: int = 1
    _wake: trio.Event = attrs.field(factory=trio.Event)

    def publish(self, *bodies: bytes) -> None:
        for body in bodies:
            self.pending.append((self._next_id, body, 0))
            self._next_id += 1
        self._wake.set()

    def held_by(self, connection: int) -> int:
        return sum(1 for held in self.in_flight.values() if held.connection == connection)

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept connections on 127.0.0.1 (``host:port`` handed back) until cancelled."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        host, port = listeners[0].socket.getsockname()[:2]
        count = 0
        async with trio.open_nursery() as nursery:

            async def accept_forever() -> None:
                nonlocal count
                for listener in listeners:
                    async with listener:
                        while True:
                            stream = await listener.accept()
                            count += 1
                            nursery.start_soon(self._connection, stream, count)

            nursery.start_soon(accept_forever)
            self.address = f"{host}:{port}"
            task_status.started(self.address)

    async def _connection(self, stream: trio.SocketStream, number: int) -> None:
        parser = ServerConnection()
        state = {"rdy": 0, "closing": False}
        self.open_connections += 1
        try:
            async with stream, trio.open_nursery() as nursery:
                nursery.start_soon(self._deliver, stream, number, state)
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    while data := await stream.receive_some(65536):
                        replies = b"".join(
                            self._apply(event, number, state) for event in parser.receive_data(data)
                        )
                        if replies:
                            await stream.send_all(replies)
                        self._wake.set()
                nursery.cancel_scope.cancel()
        finally:
            self.open_connections -= 1
            self.log.append(f"{number} closed")  # what it held stays in flight, as in nsqd
            self._wake.set()

    def _apply(
        self, event: Command | FinMany | ProtocolError, number: int, state: dict[str, int]
    ) -> bytes:
        if isinstance(event, ProtocolError):
            self.log.append(f"{number} {event.code}")
            return error_frame(event)
        verb = type(event).__name__.upper()
        self.log.append(
            f"{number} {verb} {event.count}" if isinstance(event, Rdy) else f"{number} {verb}"
        )
        if isinstance(event, Identify | Sub):
            return OK
        if isinstance(event, Rdy):
            state["rdy"] = event.count
        elif isinstance(event, Fin):
            held = self.in_flight.pop(int(event.message_id, 16))
            self.finished.append(held.body)
        elif isinstance(event, Req):
            key = int(event.message_id, 16)
            held = self.in_flight.pop(key)
            self.requeues.append((held.body, event.timeout_ms))
            self.pending.appendleft((key, held.body, held.attempts))
        elif isinstance(event, Cls):
            state["closing"] = True
            return CLOSE_WAIT_FRAME
        elif not isinstance(event, Nop | Touch):  # FinMany: only with fin_runs
            raise AssertionError(f"the fake nsqd has no {event!r}")
        return b""

    async def _deliver(self, stream: trio.SocketStream, number: int, state: dict[str, int]) -> None:
        """nsqd's rule: send while the connection holds fewer than its RDY."""
        while True:
            frames = []
            while self.pending and not state["closing"] and self.held_by(number) < state["rdy"]:
                key, body, attempts = self.pending.popleft()
                self.in_flight[key] = Held(body, attempts + 1, number)
                frames.append(encode_message_frame(0, attempts + 1, hex_id(key), body))
            if frames:
                self.delivered += len(frames)
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(b"".join(frames))
            else:
                await self._wake.wait()
                self._wake = trio.Event()
