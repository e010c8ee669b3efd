"""One TCP client connection: a nursery with a reader task and a messagePump task.

The reader turns bytes into protocol events (``receive_data`` on each read, up to
:data:`MAX_COMMANDS_PER_TURN` complete commands at once) and hands them to the
command layer it extends (:class:`~.commands.CommandLayer`), whose replies go into
the connection's :class:`OutboundBuffer`; then it answers them all with one write.
The pump owns the rest of the write side: it writes the buffer when nsqd's rules say
so, sends heartbeats and closes a silent connection; while idle it is parked, woken
by the broker's alarm clock (:mod:`.alarms`). The router pushes message batches in
through ``push``; nothing on that path awaits per message.

An IDENTIFY that negotiates TLS, snappy or deflate puts a :class:`Transport` between
the descriptor and the protocol (spec §4.1 upgrade sequence); without one, reads and
writes go to the descriptor untouched.
"""

from __future__ import annotations

import logging
import math
import os
import ssl
from typing import TYPE_CHECKING

import trio

from ..addresses import peer_address
from ..protocol.compression import CompressionError
from ..protocol.errors import ProtocolError
from ..protocol.frames import (
    HEARTBEAT_FRAME,
    OK_FRAME,
    error_frame,
)
from ..socket_writes import write_all
from .commands import MAX_COMMANDS_PER_TURN, CommandLayer
from .transport import TlsLayer, Transport

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..broker.broker import Broker
    from ..protocol.identify import NegotiatedSettings
    from ..protocol.settings import ServerSettings
    from .alarms import Alarm, AlarmClock

__all__ = ["ClientSession"]

log = logging.getLogger("trionsq.tcp")
READ_SIZE = 65536
_PUMP_TASK_NAME = "trionsq.server.tcp.ClientSession._pump"
"""Given to the pump's task, so trio does not build the same name for each one."""
TLS_HANDSHAKE_TIMEOUT = 5.0
"""nsqd's deadline for the TLS handshake after IDENTIFY (spec §4.1)."""


class ClientSession(CommandLayer):
    """One connected client: the command layer with its socket, reader and pump.

    Kept small, since idle connections are many (issue 14: 10,000 cost 16 KB each,
    now 7): slots, the pump parked without an Event and its idle timeout in the
    broker's alarm clock, the write order kept by two fields instead of a lock, and
    no reference cycles, so a closed connection is freed at once and not at the
    next full collection (rare with the broker's collector thresholds).
    """

    __slots__ = (
        "_alarm",
        "_finished",
        "_last_read",
        "_on_close",
        "_parked",
        "_scope",
        "_send_waiters",
        "_transport",
        "_woken",
        "_writing",
        "alarms",
        "stream",
        "tls_common_name",
        "tls_context",
    )

    def __init__(
        self,
        client_id: int,
        stream: trio.SocketStream,
        broker: Broker,
        settings: ServerSettings,
        alarms: AlarmClock,
        tls_context: ssl.SSLContext | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        """``tls_context``: the server's TLS (:func:`.tls.server_tls_context`), needed
        when ``settings.tls_available`` lets IDENTIFY negotiate ``tls_v1``;
        ``alarms``: the broker's clock that wakes idle pumps; ``on_close``: called
        once the connection has ended (the descriptor budget's count)."""
        super().__init__(client_id, broker, settings, peer_address(stream.socket))
        self.alarms = alarms
        self._alarm: Alarm | None = None
        """The pump's alarm in the clock, while it is set."""
        self.tls_context = tls_context
        self.stream = stream
        self.tls_common_name = ""
        """The verified client certificate's subject CN (for AUTH, as nsqd sends it)."""
        self._transport: Transport | None = None
        """TLS/compression layers; None on a plain connection (the fast path)."""
        self._woken = False
        """The pump has something to look at (set while it is not parked)."""
        self._parked: trio.lowlevel.Task | None = None
        """The pump's task while it waits: :meth:`_wake` reschedules it."""
        self._writing = False
        """Reader (replies) and pump (messages, heartbeats) both write, like nsqd's
        IOLoop and messagePump; one writes at a time, so each write stays whole and in
        order (see :meth:`_acquire_send`)."""
        self._send_waiters: trio.lowlevel.ParkingLot | None = None
        """Who waits to write, in order; made at the first wait (a full socket)."""
        self._finished = False
        self._scope: trio.CancelScope | None = None
        """The connection nursery's scope while it runs: cancelling it ends both tasks."""
        self._last_read = 0.0
        """When the reader last got bytes (trio time): the pump closes the connection
        after two heartbeat intervals with none."""
        self._on_close = on_close

    def _tls(self) -> TlsLayer | None:
        return self._transport.tls if self._transport is not None else None

    async def _hold(self, until: float) -> None:
        """Throttled by a publish limit: the OKs so far go out, then the reader waits.

        The wait is the broker's doing, not the client's silence: the read deadline
        (two heartbeat intervals) counts from its end. The pump goes on meanwhile
        (heartbeats, deliveries), and a connection that breaks cancels the wait."""
        if len(self.outbound):
            await self._write()
        self._last_read = max(self._last_read, until)
        await trio.sleep_until(until)

    # ------------------------------------------------------------- hooks, pump parking

    def _gone(self, error: OSError) -> None:
        """The socket failed (reset, broken pipe): nothing more goes either way, so the
        connection ends by cancellation, not by an exception through its nursery.

        Trio's exception group for a failed child keeps a reference cycle (the
        sibling's Cancelled traceback reaches the group), and with it the whole
        session: with the broker's collector thresholds, bursts of reset
        connections held about 15 KB each until a full collection (issue 14).
        """
        log.debug("client %d: connection reset: %s", self.client_id, error)
        self.protocol.closed = True
        self.outbound.take()
        self._cancel()

    def _wake(self) -> None:
        """Something for the pump: reschedule it if it waits, else it looks on its own.

        The pump parks itself rather than wait on a ``trio.Event``: an Event, its
        parking lot and the wait's frames were 0.9 KB of each idle connection, and a
        new Event per wake-up was garbage on every batch pushed.
        """
        task = self._parked
        if task is not None:
            self._parked = None
            trio.lowlevel.reschedule(task)
        else:
            self._woken = True

    def _write_now(self) -> None:
        """Answers released by a commit (a replicated publish's OK): written from here
        when nobody writes and the socket takes them all, a scheduler pass sooner
        than the pump would; what does not fit, or a layered connection's, is the
        pump's (:meth:`_wake`)."""
        if self._writing or self._transport is not None:
            self._wake()
            return
        data = self.outbound.take()
        try:
            sent = os.write(self.stream.socket.fileno(), data)
        except BlockingIOError:
            sent = 0
        except OSError as error:  # reset, broken pipe
            self._gone(error)
            return
        if sent < len(data):
            self.outbound.add_response(data[sent:])
            self._wake()

    def alarm(self) -> None:
        """The alarm clock: the pump's idle deadline (heartbeat, read deadline) came."""
        self._alarm = None
        self._wake()

    def _unpark(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        """The pump's wait was cancelled (its deadline, or the connection ending)."""
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _end_after_flush(self) -> None:
        """The pump writes what is queued, then ends the connection."""
        self._finished = True
        self._wake()

    def _cancel(self) -> None:
        """End both tasks. Only a running session is subscribed or registered, so
        its scope is set whenever something has a reason to call this."""
        if self._scope is not None:
            self._scope.cancel()

    # ------------------------------------------------------------- tasks

    async def run(self) -> None:
        """Serve the connection until either side ends it.

        This task is the reader (nsqd's IOLoop): it reads commands until EOF or a
        fatal error, and the pump ends a silent connection. Its loop is written out
        here rather than in a coroutine of its own, a frame fewer per connection. A
        failure (a reset socket, a bug) ends only this connection: the listener's
        task around it logs it and closes the socket (listen.py).

        The descriptor is read directly: trio's socket methods add a scheduler pass
        after every successful call, which design §8 measured as the cost that bounds
        one PUB per round trip. After each read it reads again at once, and waits for
        the socket only when that read finds nothing: a read that gets the next
        command costs far less than registering with epoll and being woken (PUB round
        trips 42k/s against 28k/s when it waited first). When that read does bring
        data, the reader yields once (a checkpoint) before acting on it, so a client
        whose data keeps coming cannot starve the others; a read that finds nothing
        needs no such pass, since the wait is one (issue 37: a PUB round trip's broker
        CPU, medians of three runs of 4-5 alternating rounds, 32.8/30.0/38.9 µs against
        33.2/33.8/40.1 when every read yielded first: within a shared machine's noise
        round by round, lower in each run). The wait
        happens outside the ``BlockingIOError`` handler, so an idle connection keeps
        no exception (0.25 KB), and that handler is in :func:`_read_nowait`, so no
        traceback ever makes a frame object of this coroutine's frame (0.25 KB more).
        After a read that brought FINs into a consumer's window still over three
        quarters full, it pauses for as long as
        :meth:`~trionsq.broker.subscription.Subscription.read_pause` allows, so the
        FINs of a client that writes one per message are read in batches.
        """
        self.broker.register_client(self.client_id, self, self.remote_address)
        self._last_read = trio.current_time()
        protocol = self.protocol
        fd = self.stream.socket.fileno()
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                nursery.start_soon(self._pump, name=_PUMP_TASK_NAME)
                waited = True  # nothing read yet: no need to yield first
                while not protocol.closed:
                    try:
                        data = _read_nowait(fd)
                    except OSError as error:  # reset: gone, as a failed read in nsqd
                        self._gone(error)
                        break
                    if data is None:  # outside the handler: no exception kept
                        await trio.lowlevel.wait_readable(fd)
                        waited = True
                        continue
                    if not waited:  # data kept coming: the others run once per read
                        await trio.lowlevel.checkpoint()
                    waited = False
                    self._last_read = trio.current_time()
                    transport = self._transport
                    if transport is None or not data:
                        await self._process_all(data)
                    else:
                        await self._receive_layered(transport, data)
                    if not data:
                        break
                    del data  # not held while the connection waits (up to 64 KB)
                    subscription = self.subscription
                    if subscription is not None:
                        pause = subscription.read_pause(trio.current_time())
                        if pause:  # FINs of a full window: let the next ones gather
                            await trio.sleep(pause)
                            waited = True
                self._finished = True
                self._wake()
        finally:
            self._scope = None
            if self._alarm is not None:  # the clock's heap does not keep us alive
                self.alarms.cancel(self._alarm)
                self._alarm = None
            self.broker.unregister_client(self.client_id)
            if self.subscription is not None:
                self.subscription.leave()
            await trio.aclose_forcefully(self.stream)
            if self._on_close is not None:
                self._on_close()

    async def _process_all(self, data: bytes) -> None:
        """Every command in ``data``, :data:`MAX_COMMANDS_PER_TURN` per turn with a
        scheduler pass between turns; the socket is not read again before the end."""
        await self._process(data)
        protocol = self.protocol
        while protocol.unparsed and not protocol.closed:
            await trio.lowlevel.checkpoint()
            await self._process(protocol.take_unparsed())

    async def _process(self, data: bytes) -> None:
        """Apply the commands of one turn, then answer them all with one write."""
        events = self.protocol.receive_data(data, MAX_COMMANDS_PER_TURN)
        if not self.apply_alone(events):
            await self.apply(events)
        if self._upgrade_to is not None:  # IDENTIFY ended the list: what follows is upgraded
            await self._upgrade(self._upgrade_to)
            return
        if self.outbound.flush_due(trio.current_time(), ready=self._ready()):
            # answer every command of this read with one write, without a task switch
            await self._write()

    async def _pump(self) -> None:
        """Write what the flush rules say, send heartbeats, and end the connection
        after two heartbeat intervals with no read (nsqd's read deadline).

        The read deadline lives here, not in a cancel scope around the reader: the
        pump wakes for heartbeats anyway, and one scope fewer per connection is
        about 600 bytes of 10,000 idle ones (issue 14); reads only note their time.
        """
        outbound = self.outbound
        interval = self.heartbeat_interval
        next_heartbeat = trio.current_time() + interval if interval > 0 else math.inf
        while True:
            deadline = next_heartbeat
            flush_at = outbound.flush_deadline()
            if flush_at is not None and flush_at < deadline:
                deadline = flush_at
            if self.silence_limit > 0:
                deadline = min(deadline, self._last_read + self.silence_limit)
            if self._woken:
                self._woken = False
                await trio.lowlevel.checkpoint()
            elif flush_at is not None and flush_at <= deadline:  # busy: a short wait
                with trio.move_on_at(deadline):
                    self._parked = trio.lowlevel.current_task()
                    await trio.lowlevel.wait_task_rescheduled(self._unpark)
            else:  # idle until a heartbeat or the read deadline: the clock wakes us
                alarm = self._alarm
                if deadline < math.inf and (alarm is None or alarm.due > deadline):
                    if alarm is not None:
                        self.alarms.cancel(alarm)
                    self._alarm = self.alarms.set(deadline, self)
                # parked here, not in a helper coroutine: a frame fewer while idle
                self._parked = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._unpark)
            now = trio.current_time()
            if interval != self.heartbeat_interval:  # IDENTIFY changed it
                interval = self.heartbeat_interval
                next_heartbeat = now + interval if interval > 0 else math.inf
            if now >= next_heartbeat:
                outbound.add_response(HEARTBEAT_FRAME)
                next_heartbeat = now + interval
            if outbound.flush_due(now, ready=self._ready()) or (self._finished and len(outbound)):
                await self._write()
            if self._finished and not len(outbound):
                self._cancel()  # the reader may still wait on the socket (_end_after_flush)
                return
            if self.silence_limit > 0 and now >= self._last_read + self.silence_limit:
                # after the heartbeat due at the same moment, as nsqd's two goroutines
                self._silent()
                return

    @property
    def silence_limit(self) -> float:
        """Seconds without a read after which the connection is closed (0: never):
        nsqd's two heartbeat intervals, or a group member's session timeout."""
        session_ms = self.protocol.negotiated.group_session_timeout_ms
        return session_ms / 1000 if session_ms else 2 * self.heartbeat_interval

    def _silent(self) -> None:
        """Nothing read for the silence limit: close the connection. A group member's
        session is over: its other connections here are closed too (fenced), so what
        they hold goes to the partitions' next owners and nothing it still holds can
        be finished late (docs/extensions.md, "Consumer groups")."""
        member = self.protocol.negotiated.group_member
        if not member:
            log.info("client %d: no command for two heartbeat intervals, closing", self.client_id)
        else:
            log.info(
                "client %d: group member %r silent for its session timeout (%gs), fenced",
                self.client_id,
                member,
                self.silence_limit,
            )
        subscription = self.subscription
        if member and subscription is not None:
            channel = subscription.channel
            self.broker.group_coordinator.fence(channel.topic, channel.name, member)
        self._cancel()

    async def _write(self) -> None:
        """Write everything buffered, straight to the descriptor; wait only when full.

        The right to write is taken without a checkpoint when free, so an answer that
        fits in the kernel's buffer costs no task switch at all.
        """
        if self._writing:
            await self._acquire_send()
        else:
            self._writing = True
        try:
            data = self.outbound.take()
            transport = self._transport
            if transport is not None:
                data = transport.encode(data)
            if data:  # write_all straight from here (not via _send): no frame more per flush
                error = await write_all(self.stream.socket.fileno(), data, self._wait_writable)
                if error is not None:  # reset, broken pipe
                    self._gone(error)
        finally:
            self._release_send()

    async def _acquire_send(self) -> None:
        """The right to write, in FIFO order: a lock of two fields instead of a
        ``trio.StrictFIFOLock`` (with its parking lot, 0.3 KB of every connection),
        since the other writer is mid-write only while the socket is full."""
        if not self._writing:
            self._writing = True
            return
        waiters = self._send_waiters
        if waiters is None:
            waiters = self._send_waiters = trio.lowlevel.ParkingLot()
        await waiters.park()  # the writer before hands over: ``_writing`` stays set

    def _release_send(self) -> None:
        waiters = self._send_waiters
        if waiters:
            waiters.unpark()
        else:
            self._writing = False

    async def _send(self, data: bytes) -> None:
        """Put ``data`` on the descriptor, waiting only when the socket is full; the
        caller has the right to write. No checkpoint when it all fits."""
        error = await write_all(self.stream.socket.fileno(), data, self._wait_writable)
        if error is not None:  # reset, broken pipe
            self._gone(error)

    async def _wait_writable(self, fd: int) -> None:
        """Wait for room in the socket, at most one heartbeat interval (spec §6).

        nsqd gives every write a deadline of one heartbeat interval; here each wait
        for room has it, so a client that reads slowly keeps its connection and one
        that reads nothing for that long is dropped (its messages are requeued).
        """
        interval = self.heartbeat_interval
        if interval <= 0:  # heartbeats disabled: no write deadline either
            await trio.lowlevel.wait_writable(fd)
            return
        with trio.move_on_after(interval):
            await trio.lowlevel.wait_writable(fd)
            return
        log.info("client %d: nothing written for a heartbeat interval, closing", self.client_id)
        raise trio.BrokenResourceError("write deadline passed")

    # ------------------------------------------------------------- TLS and compression

    async def _receive_layered(self, transport: Transport, data: bytes) -> None:
        """Raw bytes through the layers into the protocol (``b""``: what they hold).

        The decoder hands back a bounded piece per call (about two plain reads); the
        rest is drained in turn, each piece answered, then a scheduler pass, before
        the next. The socket is not read again until it is all drained, so memory
        and the work done per turn stay bounded however far the bytes expand. Bytes
        that are not a valid TLS or compressed stream close the connection without a
        frame, as nsqd's failed read does.
        """
        try:
            plain = transport.decode(data)
            while True:
                if plain:
                    await self._process_all(plain)
                if self.protocol.closed or self._transport is not transport:
                    return  # closed, or a second IDENTIFY upgraded again and went on
                if not transport.pending:
                    break
                await trio.lowlevel.checkpoint()  # as a plain read does between reads
                plain = transport.decode(b"")
        except (CompressionError, ssl.SSLError) as error:
            log.info("client %d: bad upgraded stream, closing: %s", self.client_id, error)
            self.outbound.take()  # nothing more is sent on a broken stream
            self.protocol.closed = True
            return
        if transport.peer_closed:
            await self._process(b"")  # close_notify is the client's EOF
        elif transport.wants_write:
            await self._write()

    async def _upgrade(self, negotiated: NegotiatedSettings) -> None:
        """IDENTIFY's upgrade sequence, in nsqd's order (spec §4.1).

        The JSON reply goes out as the stream was; then the TLS handshake on the raw
        socket (with what followed IDENTIFY in the same read as its first input) and
        ``OK`` through TLS; then snappy or deflate and ``OK`` through that. The right
        to write is held throughout, so a heartbeat cannot land inside the handshake or
        ahead of an ``OK``. Bytes the client sent after the upgrade are then
        processed through the new layers.
        """
        self._upgrade_to = None
        trailing = self.protocol.trailing_data
        self.protocol.trailing_data = b""
        await self._acquire_send()
        try:
            transport = self._transport
            data = self.outbound.take()
            await self._send(transport.encode(data) if transport is not None else data)
            transport = transport if transport is not None else Transport()
            failure = ""
            if negotiated.tls_v1:
                if transport.tls is not None or self.tls_context is None:
                    failure = "connection is already TLS"
                else:
                    tls = TlsLayer(self.tls_context)
                    failure = await self._handshake(tls, trailing)
                    if not failure:
                        trailing = b""  # it was TLS input
                        transport.tls = tls
                        self._transport = transport
                        self.protocol.tls_established()
                        self.tls_common_name = tls.peer_common_name
                        if self.auth is not None:  # the auth server is told both
                            self.auth.tls = True
                            self.auth.common_name = tls.peer_common_name
                        await self._send(transport.encode(OK_FRAME))
            if not failure and (negotiated.snappy or negotiated.deflate):
                if transport.compressed:
                    failure = "connection is already compressed"
                else:
                    if negotiated.snappy:
                        transport.compress_snappy()
                    else:
                        transport.compress_deflate(negotiated.deflate_level)
                    self._transport = transport
                    await self._send(transport.encode(OK_FRAME))
            if failure:
                error = ProtocolError("E_IDENTIFY_FAILED", f"IDENTIFY failed {failure}", fatal=True)
                log.info("client %d: %s", self.client_id, error.text)
                frame_bytes = error_frame(error)
                current = self._transport
                await self._send(current.encode(frame_bytes) if current else frame_bytes)
                self.protocol.closed = True
                return
        finally:
            self._release_send()
        await self._receive_layered(transport, trailing)

    async def _handshake(self, tls: TlsLayer, first_input: bytes) -> str:
        """Run the server handshake on the raw socket; ``""`` or why it failed.

        nsqd gives it 5 seconds. On failure the TLS alert goes out, then the caller's
        error frame, in the clear, as nsqd writes it to the raw connection.
        """
        if first_input:
            tls.feed(first_input)
        fd = self.stream.socket.fileno()
        try:
            with trio.move_on_after(TLS_HANDSHAKE_TIMEOUT):
                while not tls.handshake():
                    flight = tls.outgoing()
                    if flight:
                        await self._send(flight)
                    data = await self._receive_raw(fd)
                    if not data:
                        return "EOF during the TLS handshake"
                    tls.feed(data)
                flight = tls.outgoing()
                if flight:
                    await self._send(flight)
                return ""
        except ssl.SSLError as error:
            alert = tls.outgoing()
            if alert:
                await self._send(alert)
            return f"tls: {error.reason or error}".lower().replace("_", " ")
        return "tls: handshake timed out"

    async def _receive_raw(self, fd: int) -> bytes:
        while True:
            try:
                return os.read(fd, READ_SIZE)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(fd)


def _read_nowait(fd: int) -> bytes | None:
    """What the socket holds, or None when nothing has come yet.

    The ``BlockingIOError`` an empty socket raises is caught in this frame, which
    ends at once: a traceback through the reader's long-lived frame would give it a
    frame object (0.25 KB of each idle connection, kept while it lives).
    """
    try:
        return os.read(fd, READ_SIZE)
    except BlockingIOError:
        return None
