"""One TCP client connection: a nursery with a reader task and a messagePump task.

The reader turns bytes into protocol events (``receive_data`` on each read, up to
:data:`MAX_COMMANDS_PER_TURN` complete commands at once) and applies them to the broker; replies go into the
connection's :class:`OutboundBuffer`. The pump owns the socket's write side: it
writes the buffer with one ``send_all`` when nsqd's rules say so, and sends
heartbeats. The router pushes message batches in through :meth:`push`; nothing on
that path awaits per message. A session registers itself with the broker for
``/stats`` (:meth:`ClientSession.statistics`) while it runs.

An IDENTIFY that negotiates TLS, snappy or deflate puts a :class:`Transport` between
the descriptor and the protocol (spec §4.1 upgrade sequence); without one, reads and
writes go to the descriptor untouched.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import ssl
import time
import weakref
from typing import TYPE_CHECKING, ClassVar, Never

import trio

from ..addresses import peer_address
from ..broker import trace_log
from ..broker.channel import ClientStatistics, Consumer, PubCount
from ..broker.health import StorageFault
from ..broker.offsets import OffsetError
from ..broker.rules import (
    EXT_TOO_LONG_REASON,
    MAX_PARTITION_NUM,
    InFlightError,
    Refusal,
    ext_refusal,
    publish_target,
)
from ..protocol import broker_errors
from ..protocol.commands import (
    Auth,
    Cls,
    Dpub,
    Fin,
    Identify,
    InternalCreateTopic,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    Pub,
    PubExt,
    PubTrace,
    Rdy,
    Req,
    Sub,
    SubAdvanced,
    SubOrdered,
    Touch,
)
from ..protocol.compression import CompressionError
from ..protocol.errors import ProtocolError
from ..protocol.frames import (
    CLOSE_WAIT_FRAME,
    HEARTBEAT_FRAME,
    OK_FRAME,
    error_frame,
    response_frame,
    traced_reply_frame,
)
from ..protocol.identify import encode_identify_response
from ..protocol.message import parse_binary_id, parse_hex_id
from ..protocol.server import ServerConnection
from .outbound import OutboundBuffer
from .transport import TlsLayer, Transport

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..auth.session import AuthSession
    from ..broker.broker import Broker
    from ..broker.channel import Delivery
    from ..broker.driver import ChannelDriver
    from ..protocol.commands import ExtMessage
    from ..protocol.identify import IdentifyRequest, NegotiatedSettings
    from ..protocol.server import Event, PublishHeader
    from ..protocol.settings import ServerSettings
    from .alarms import Alarm, AlarmClock

__all__ = ["ClientSession"]

log = logging.getLogger("trionsq.tcp")
READ_SIZE = 65536
_PUMP_TASK_NAME = "trionsq.server.tcp.ClientSession._pump"
"""Given to the pump's task, so trio does not build the same name for each one."""
MAX_COMMANDS_PER_TURN = 256
"""Commands applied before the reader lets other tasks run, so one turn stays under a
millisecond (64 KB of ``NOP`` is 16,384 commands, ~20 ms of parsing) and many busy
clients cannot hold back a quiet one: with 27 hostile clients /ping p99 went from
68 to 16 ms (1,024: worst 107 ms; 256: 56 ms). Batched paths do not notice: MPUB,
RDY 2500 consume and PUB round trips measured the same with no cap."""
_WORD_START = re.compile(r"(?<=[a-z])(?=[A-Z])")
_GATED_VERBS = frozenset({"PUB_EXT", "MPUB_EXT", "PUB_TRACE", "MPUB_TRACE"})
_AUTH_VERBS: dict[type[Event], str] = {
    Pub: "PUB",
    Mpub: "MPUB",
    Dpub: "DPUB",
    # Youzan checks every publish variant as "PUB" (spec §8.3)
    PubExt: "PUB",
    MpubExt: "PUB",
    PubTrace: "PUB",
    MpubTrace: "PUB",
    Sub: "SUB",
    SubOrdered: "SUB",
    SubAdvanced: "SUB",
}
"""Commands nsqd's CheckAuth guards, with the name its error gives them."""
"""Publishes whose topic must exist before their body is read (spec §8.3 step 5);
PUB/MPUB are gated only when they name a partition."""
EXT_VERSION_JSON = 4
"""Ext version of a record holding a PUB_EXT JSON header as sent (spec §8.3)."""
TLS_HANDSHAKE_TIMEOUT = 5.0
"""nsqd's deadline for the TLS handshake after IDENTIFY (spec §4.1)."""


def _wire_verb(event_class: str) -> str:
    """The command as the client spelled it: ``PubTrace`` -> ``PUB_TRACE``."""
    return _WORD_START.sub("_", event_class).upper()


def _same_topic_pubs_end(events: Sequence[Event], start: int, topic: str) -> int:
    """Where the run of PUBs to ``topic`` beginning at ``start`` ends."""
    end, count = start, len(events)
    while end < count:
        event = events[end]
        if type(event) is not Pub or event.topic != topic:
            break
        end += 1
    return end


def _storage_refusal(event: Event, reason: str) -> ProtocolError:
    """The answer to a command the broker's files refused (spec §4.11, §8.3 step 13).

    Upstream's PUB, MPUB and DPUB get nsqd's fatal ``E_PUB_FAILED PUB failed <err>``;
    Youzan's publishes (the ext and traced ones, and PUB/MPUB naming a partition)
    its non-fatal ``E_PUB_FAILED <err>``, so the client may retry on the connection.
    """
    kind = type(event)
    if kind in (Pub, Mpub):
        verb = "MPUB" if kind is Mpub else "PUB"
        youzan = event.partition is not None  # type: ignore[union-attr]
        return broker_errors.pub_failed(verb, reason, youzan=youzan)
    if kind is Dpub:
        return broker_errors.pub_failed("DPUB", reason)
    if kind in (PubExt, PubTrace):
        return broker_errors.pub_failed("PUB", reason, youzan=True)
    if kind in (MpubExt, MpubTrace):
        return broker_errors.pub_failed("MPUB", reason, youzan=True)
    if kind in (Sub, SubOrdered, SubAdvanced):
        return broker_errors.sub_failed(reason)
    if kind is InternalCreateTopic:
        return broker_errors.create_topic_failed(reason)
    return ProtocolError("E_INVALID", f"{_wire_verb(kind.__name__)} failed {reason}")


class _PublishGate:
    """The session's ``publish_gate``: it knows the broker and the grants, not the
    session, so no reference cycle keeps a closed connection for the collector.
    Sessions without AUTH share their broker's (:func:`_gate_for`)."""

    __slots__ = ("__weakref__", "auth", "broker")

    def __init__(self, broker: Broker, auth: AuthSession | None) -> None:
        self.broker = broker
        self.auth = auth

    def __call__(self, header: PublishHeader) -> ProtocolError | None:
        """Before the body (spec §8.3 steps 5-6): Youzan's publishes never create
        topics and a named partition must exist; an ordered topic needs a partition.

        PUB/MPUB reach here only when they name a partition.

        With AUTH on, the grants are checked first, so a client learns nothing of
        a topic it may not use. When that cannot be decided without awaiting (the
        grants expired, or AUTH came in this same read) nothing is refused here:
        the auth check after the body comes first, then the handler's own checks.
        """
        auth = self.auth
        if auth is not None:
            allowed = None
            if auth.state is not None:
                allowed = auth.verdict(header.topic, "", trio.current_time())
            if allowed is None:
                return None
            if not allowed:
                verb = "MPUB" if header.verb == "MPUB" else "PUB"  # Youzan's verbs check as PUB
                return broker_errors.unauthorized(verb, header.topic)
        topic = self.broker.topics.get(header.topic)
        if topic is None or (header.partition or 0) >= len(topic.partitions):
            return broker_errors.topic_not_exist()
        if header.partition is None and topic.ordered:
            return broker_errors.bad_partition_for_ordered()
        return None


_SHARED_GATES: weakref.WeakValueDictionary[int, _PublishGate] = weakref.WeakValueDictionary()
"""Each broker's gate for sessions without AUTH, by ``id(broker)``, while one is in use."""


def _gate_for(broker: Broker, auth: AuthSession | None) -> _PublishGate:
    """A gate of the session's own only with AUTH (its grants are the session's)."""
    if auth is not None:
        return _PublishGate(broker, auth)
    gate = _SHARED_GATES.get(id(broker))
    if gate is None or gate.broker is not broker:
        gate = _SHARED_GATES[id(broker)] = _PublishGate(broker, None)
    return gate


@functools.lru_cache(maxsize=64)
def _seconds(milliseconds: int) -> float:
    """``milliseconds / 1000``, the same float object for every session."""
    return milliseconds / 1000


class ClientSession:
    """One connected client: protocol state, outbound buffer, subscription.

    Kept small, since idle connections are many (issue 14: 10,000 cost 16 KB each,
    now under 8): slots, no per-session dicts of bound methods, the pump parked
    without an Event, the write order kept by two fields instead of a lock, and no
    reference cycles, so a closed connection is freed at once and not at the next
    full collection (rare with the broker's collector thresholds).
    """

    __slots__ = (
        "_alarm",
        "_closes_at_next_delivery",
        "_finished",
        "_identify_request",
        "_last_read",
        "_parked",
        "_refused",
        "_scope",
        "_send_waiters",
        "_transport",
        "_upgrade_to",
        "_woken",
        "_writing",
        "alarms",
        "auth",
        "broker",
        "client_id",
        "connected_at",
        "consumer",
        "heartbeat_interval",
        "outbound",
        "protocol",
        "pub_counts",
        "remote_address",
        "runner",
        "settings",
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
    ) -> None:
        """``tls_context``: the server's TLS (:func:`.tls.server_tls_context`), needed
        when ``settings.tls_available`` lets IDENTIFY negotiate ``tls_v1``;
        ``alarms``: the broker's clock that wakes idle pumps."""
        self.client_id = client_id
        self.alarms = alarms
        self._alarm: Alarm | None = None
        """The pump's alarm in the clock, while it is set."""
        self.tls_context = tls_context
        self.stream = stream
        self.broker = broker
        self.settings = settings
        self.remote_address = peer_address(stream.socket)
        self.auth: AuthSession | None = None
        """The grants AUTH fetched (nsqd's per-client auth state); None: auth off."""
        if settings.auth_enabled:
            from ..auth.session import AuthSession  # loaded only where AUTH is on

            self.auth = AuthSession(broker.config, remote_address=self.remote_address)
        self.protocol = ServerConnection(
            settings, publish_gate=_gate_for(broker, self.auth), gated_verbs=_GATED_VERBS
        )
        self.outbound = OutboundBuffer(
            buffer_size=settings.output_buffer_size,
            buffer_timeout=_seconds(settings.output_buffer_timeout_ms),
        )
        self.heartbeat_interval = _seconds(settings.default_heartbeat_interval_ms)
        self.consumer: Consumer | None = None
        self.runner: ChannelDriver | None = None
        self.connected_at = time.time()
        """Unix seconds (nsqd's ConnectTime)."""
        self.pub_counts: dict[str, int] | None = None
        """Messages published on this connection, per topic (nsqd's pubCounts); made
        at the first publish, as most connections only consume."""
        self._identify_request: IdentifyRequest | None = None
        self.tls_common_name = ""
        """The verified client certificate's subject CN (for AUTH, as nsqd sends it)."""
        self._transport: Transport | None = None
        """TLS/compression layers; None on a plain connection (the fast path)."""
        self._upgrade_to: NegotiatedSettings | None = None
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
        self._closes_at_next_delivery = False
        self._refused = False
        """The broker answered a command with a fatal error (the parser's own fatal
        errors end its event list instead)."""
        self._scope: trio.CancelScope | None = None
        """The connection nursery's scope while it runs: cancelling it ends both tasks."""
        self._last_read = 0.0
        """When the reader last got bytes (trio time): the pump closes the connection
        after two heartbeat intervals with none."""

    # ------------------------------------------------------------- Outbox for the router

    def push(self, deliveries: list[Delivery]) -> None:
        """A batch from the router: encode now, write when the pump decides."""
        if self._closes_at_next_delivery:
            log.info("client %d: topic upgraded to ext, client not extend_support", self.client_id)
            self._cancel()  # leaving requeues the batch for the other consumers
            return
        self.outbound.add_deliveries(deliveries, trio.current_time())
        self._wake()
        if self.broker.trace_log and self.runner is not None:
            channel = self.runner.channel
            trace_log.delivered(
                channel.topic, channel.partition, channel.name, deliveries, self.remote_address
            )

    def close(self) -> None:
        """Our channel was deleted: end the connection (nsqd closes it without a frame)."""
        self._cancel()

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

    def _count(self, topic: str, published: int) -> None:
        counts = self.pub_counts
        if counts is None:
            counts = self.pub_counts = {}
        counts[topic] = counts.get(topic, 0) + published

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

    def alarm(self) -> None:
        """The alarm clock: the pump's idle deadline (heartbeat, read deadline) came."""
        self._alarm = None
        self._wake()

    def _unpark(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        """The pump's wait was cancelled (its deadline, or the connection ending)."""
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _cancel(self) -> None:
        """End both tasks. Only a running session is subscribed or registered, so
        its scope is set whenever something has a reason to call this."""
        if self._scope is not None:
            self._scope.cancel()

    def topic_now_ext(self) -> None:
        """Youzan closes a consumer without ``extend_support`` at its next delivery
        after the upgrade (spec §8.8); it gets E_SUB_EXTEND_NEED when it comes back."""
        if not self.outbound.extended:
            self._closes_at_next_delivery = True

    def _reply(self, frame_bytes: bytes) -> None:
        """Replies come only from the reader, which writes them after each read."""
        self.outbound.add_response(frame_bytes)

    def _ready(self) -> bool:
        consumer, runner = self.consumer, self.runner
        return consumer is not None and runner is not None and runner.channel.room_for(consumer) > 0

    # ------------------------------------------------------------- tasks

    async def run(self) -> None:
        """Serve the connection until either side ends it; never raises for client faults.

        This task is the reader (nsqd's IOLoop): it reads commands until EOF or a
        fatal error, and the pump ends a silent connection. Its loop is written out
        here rather than in a coroutine of its own, a frame fewer per connection.

        The descriptor is read directly: trio's socket methods add a scheduler pass
        after every successful call, which design §8 measured as the cost that bounds
        one PUB per round trip. Each turn yields once: it waits for the socket after
        a read that emptied it (one shorter than asked), and only checkpoints after
        a full one, so a client that keeps the buffer full cannot starve the others.
        Waiting first, rather than reading until ``EAGAIN``, saves a failed read per
        round trip, and an idle connection keeps no exception's frame (0.25 KB).
        """
        self.broker.register_client(self.client_id, self)
        self._last_read = trio.current_time()
        protocol = self.protocol
        fd = self.stream.socket.fileno()
        try:
            try:
                async with trio.open_nursery() as nursery:
                    self._scope = nursery.cancel_scope
                    nursery.start_soon(self._pump, name=_PUMP_TASK_NAME)
                    drained = True  # nothing read yet: wait for the magic
                    while not protocol.closed:
                        if drained:
                            await trio.lowlevel.wait_readable(fd)
                        else:  # the last read filled the buffer: more is waiting
                            await trio.lowlevel.checkpoint()
                        try:
                            data = os.read(fd, READ_SIZE)
                        except BlockingIOError:  # woken with nothing to read after all
                            drained = True
                            continue
                        except OSError as error:  # reset: gone, as a failed read in nsqd
                            self._gone(error)
                            break
                        drained = len(data) < READ_SIZE
                        self._last_read = trio.current_time()
                        transport = self._transport
                        if transport is None or not data:
                            await self._process_all(data)
                        else:
                            await self._receive_layered(transport, data)
                        if not data:
                            break
                        del data  # not held while the connection waits (up to 64 KB)
                    self._finished = True
                    self._wake()
            except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                log.debug("client %d: connection reset", self.client_id)
        except Exception:
            log.exception("client %d: connection handler failed", self.client_id)
        finally:
            self._scope = None
            if self._alarm is not None:  # the clock's heap does not keep us alive
                self.alarms.cancel(self._alarm)
                self._alarm = None
            self.broker.unregister_client(self.client_id)
            if self.runner is not None:
                self.broker.unsubscribe(self.runner, self.client_id)
            await trio.aclose_forcefully(self.stream)

    async def _process_all(self, data: bytes) -> None:
        """Every command in ``data``, :data:`MAX_COMMANDS_PER_TURN` per turn with a
        scheduler pass between turns; the socket is not read again before the end."""
        await self._process(data)
        protocol = self.protocol
        while protocol.unparsed and not protocol.closed:
            await trio.lowlevel.checkpoint()
            await self._process(protocol.take_unparsed())

    async def _process(self, data: bytes) -> None:
        """Apply the commands of one turn, then answer them all with one write.

        PUBs to one topic that arrive together become one append (one write to a
        durable log), as an MPUB would; each still gets its own OK, in order.
        """
        handlers = self._HANDLERS
        events = self.protocol.receive_data(data, MAX_COMMANDS_PER_TURN)
        auth = self.auth
        index, count = 0, len(events)
        while index < count:
            event = events[index]
            index += 1
            if auth is not None and type(event) in _AUTH_VERBS:
                refusal = await self._check_auth(auth, event)
                if refusal is not None:
                    self._fail(refusal)
                    break
            try:
                if type(event) is Pub and index < count:
                    run = _same_topic_pubs_end(events, index, event.topic)
                    if run > index:
                        self._pub_together(event.topic, events[index - 1 : run])  # type: ignore[arg-type]
                        index = run
                        continue
                handler = handlers.get(type(event))
                if handler is not None:
                    handler(self, event)  # type: ignore[arg-type]
                else:
                    await self._handle(event)
            except StorageFault as fault:
                self._fail(_storage_refusal(event, fault.reason))
            if self._refused:
                break  # the broker's fatal answer: nothing after it is acted on, as nsqd
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
            if interval > 0:
                deadline = min(deadline, self._last_read + 2 * interval)
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
                return
            if interval > 0 and now >= self._last_read + 2 * interval:
                # after the heartbeat due at the same moment, as nsqd's two goroutines
                log.info(
                    "client %d: no command for two heartbeat intervals, closing", self.client_id
                )
                self._cancel()
                return

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
            if data:
                await self._send(data)
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
        fd = self.stream.socket.fileno()
        with memoryview(data) as view:
            sent = 0
            while sent < len(view):
                try:
                    sent += os.write(fd, view[sent:])
                except BlockingIOError:
                    await self._wait_writable(fd)
                except OSError as error:  # reset, broken pipe
                    self._gone(error)
                    return

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

    # ------------------------------------------------------------- commands

    async def _handle(self, event: Event) -> None:
        if isinstance(event, ProtocolError):
            self._reply(error_frame(event))
            if event.fatal:
                log.info("client %d: %s", self.client_id, event.text)
            return
        if isinstance(event, (Sub, SubOrdered, SubAdvanced)):
            await self._sub(event)
            return
        if isinstance(event, Auth):
            await self._auth(event)
            return
        handler = self._HANDLERS.get(type(event))
        if handler is None:
            verb = _wire_verb(type(event).__name__)
            self._fail(ProtocolError("E_INVALID", f"{verb} is not supported yet"))
            return
        handler(self, event)  # type: ignore[arg-type]

    async def _auth(self, event: Auth) -> None:
        """AUTH: ask the auth server (spec §4.2); its answer or a fatal error."""
        if self.auth is None:  # the parser refuses AUTH when auth is off
            self._fail(ProtocolError("E_AUTH_DISABLED", "AUTH disabled"))
            return
        answer = await self.auth.authenticate(event.secret)
        if isinstance(answer, ProtocolError):
            self._fail(answer)
        else:
            self._reply(response_frame(answer))

    async def _check_auth(self, auth: AuthSession, event: Event) -> ProtocolError | None:
        """nsqd's CheckAuth before a publish or SUB; awaits only to refresh grants."""
        verb = _AUTH_VERBS[type(event)]
        topic: str = event.topic  # type: ignore[union-attr]
        channel: str = getattr(event, "channel", "")
        return await auth.check(verb, topic, channel)

    def _fail(self, error: ProtocolError) -> None:
        self._reply(error_frame(error))
        if error.fatal:
            self.protocol.closed = True
            self._refused = True

    def _identify(self, event: Identify) -> None:
        settings = event.settings
        self._identify_request = event.request
        self.heartbeat_interval = settings.heartbeat_interval_ms / 1000
        self.outbound.buffer_size = settings.output_buffer_size
        self.outbound.buffer_timeout = settings.output_buffer_timeout_ms / 1000
        self._wake()  # the pump re-reads the heartbeat interval
        if settings.tls_v1 or settings.snappy or settings.deflate:
            self._upgrade_to = settings  # after this read's events (parsing stopped here)
        if event.response is None:
            self._reply(OK_FRAME)
        else:
            self._reply(response_frame(encode_identify_response(event.response)))

    def _target(self, topic_name: str, partition: int | None, *, create: bool = True) -> int:
        """The partition a publish goes to, or -1 after answering the fatal error.

        No partition: the default one, the lowest (spec §9), except on an ordered
        topic (§8.3 step 6); ``create``: a plain topic may be created by it (PUB,
        MPUB, DPUB as nsqd), Youzan's publishes never create one. A named partition
        must exist (the parser's gate checked it before the body; the topic may have
        been deleted since).
        """
        target = publish_target(self.broker.topics, topic_name, partition, create=create)
        if type(target) is int:
            return target
        if target is Refusal.BAD_PARTITION:
            self._fail(broker_errors.bad_partition_for_ordered())
        else:
            self._fail(broker_errors.topic_not_exist())
        return -1

    def _pub(self, event: Pub) -> None:
        index = self._target(event.topic, event.partition)
        if index < 0:
            return
        self.broker.publish(event.topic, [event.body], time.time_ns(), partition_index=index)
        self._count(event.topic, 1)
        self._reply(OK_FRAME)

    def _pub_together(self, topic: str, pubs: list[Pub]) -> None:
        """PUBs to one topic in one read: one append per run naming the same partition."""
        start, count = 0, len(pubs)
        while start < count:
            partition = pubs[start].partition
            end = start + 1
            while end < count and pubs[end].partition == partition:
                end += 1
            index = self._target(topic, partition)
            if index < 0:
                return
            bodies = [pub.body for pub in pubs[start:end]]
            self.broker.publish(topic, bodies, time.time_ns(), partition_index=index)
            self._count(topic, len(bodies))
            for _ in bodies:
                self._reply(OK_FRAME)
            start = end

    def _mpub(self, event: Mpub) -> None:
        index = self._target(event.topic, event.partition)
        if index < 0:
            return
        self.broker.publish(event.topic, event.bodies, time.time_ns(), partition_index=index)
        self._count(event.topic, len(event.bodies))
        self._reply(OK_FRAME)

    def _dpub(self, event: Dpub) -> None:
        if self._target(event.topic, None) < 0:
            return
        now = time.time_ns()
        defer_ns = event.defer_ms * 1_000_000
        # DPUB 0 is a plain publish in nsqd: no deferral, no place in the deferred queue
        self.broker.publish(
            event.topic, [event.body], now, deliver_at=now + defer_ns if defer_ns else 0
        )
        self._count(event.topic, 1)
        self._reply(OK_FRAME)

    # ---- Youzan ext topics (spec §8.2, §8.3)

    def _ext_refusal(self, topic_name: str, messages: Sequence[ExtMessage]) -> bool:
        """Answer the error if these headers cannot be stored in the topic (non-fatal).

        A plain topic takes no header: without Youzan's ``allow-ext-compatible``
        (not an option here, so off) that is E_EXT_NOT_SUPPORT.
        """
        refusal = ext_refusal(self.broker.topics.get(topic_name), (m.header for m in messages))
        if refusal is None:
            return False
        if refusal is Refusal.TOPIC_NOT_EXIST:  # deleted since the gate let it through
            self._fail(broker_errors.topic_not_exist())
        elif refusal is Refusal.EXT_NOT_SUPPORTED:
            self._reply(error_frame(broker_errors.ext_not_supported(topic_name)))
        else:
            error = broker_errors.pub_failed("PUB", EXT_TOO_LONG_REASON, youzan=True)
            self._reply(error_frame(error))
        return True

    def _pub_ext(self, event: PubExt) -> None:
        message = event.message
        index = self._target(event.topic, event.partition, create=False)
        if index < 0 or self._ext_refusal(event.topic, (message,)):
            return
        trace_id = message.trace_id
        records = self.broker.publish(
            event.topic,
            [message.body],
            time.time_ns(),
            partition_index=index,
            trace_ids=[trace_id or 0],
            ext_version=EXT_VERSION_JSON,
            exts=[message.header],
            source=self.remote_address,
        )
        self._count(event.topic, 1)
        if trace_id is None or not records:
            self._reply(OK_FRAME)
            return
        record = records[0]
        self._reply(
            traced_reply_frame(record.internal_id, trace_id, record.offset, record.raw_size)
        )

    def _mpub_ext(self, event: MpubExt) -> None:
        messages = event.messages
        index = self._target(event.topic, event.partition, create=False)
        if index < 0 or self._ext_refusal(event.topic, messages):
            return
        self.broker.publish(
            event.topic,
            [m.body for m in messages],
            time.time_ns(),
            partition_index=index,
            trace_ids=[m.trace_id or 0 for m in messages],
            ext_version=EXT_VERSION_JSON,
            exts=[m.header for m in messages],
            source=self.remote_address,
        )
        self._count(event.topic, len(messages))
        self._reply(OK_FRAME)

    def _pub_trace(self, event: PubTrace) -> None:
        """PUB_TRACE: stored with its trace id, answered with the 30-byte reply (§8.4)."""
        index = self._target(event.topic, event.partition, create=False)
        if index < 0:
            return
        records = self.broker.publish(
            event.topic,
            [event.body],
            time.time_ns(),
            partition_index=index,
            trace_ids=[event.trace_id],
            source=self.remote_address,
        )
        self._count(event.topic, 1)
        if not records:  # an ephemeral topic dropped it: nothing to point at
            self._reply(OK_FRAME)
            return
        record = records[0]
        self._reply(
            traced_reply_frame(record.internal_id, event.trace_id, record.offset, record.raw_size)
        )

    def _mpub_trace(self, event: MpubTrace) -> None:
        """MPUB_TRACE: the traced reply names the batch: first id and offset, trace id
        0, the raw size of all its records (§8.4)."""
        index = self._target(event.topic, event.partition, create=False)
        if index < 0:
            return
        messages = event.messages
        records = self.broker.publish(
            event.topic,
            [m.body for m in messages],
            time.time_ns(),
            partition_index=index,
            trace_ids=[m.trace_id for m in messages],
            source=self.remote_address,
        )
        self._count(event.topic, len(messages))
        if not records:
            self._reply(OK_FRAME)
            return
        first = records[0]
        raw_size = sum(record.raw_size for record in records)
        self._reply(traced_reply_frame(first.internal_id, 0, first.offset, raw_size))

    def _internal_create_topic(self, event: InternalCreateTopic) -> None:
        """Standalone creation of one partition (idempotent; ``ext`` upgrades, never
        downgrades).

        Partitions are numbered from 0 with no gaps here: creating partition ``n``
        gives the topic every partition up to ``n`` it does not have yet.
        """
        if event.partition >= MAX_PARTITION_NUM:
            reason = f"partition {event.partition} out of range 0-{MAX_PARTITION_NUM - 1}"
            self._reply(error_frame(broker_errors.create_topic_failed(reason)))
            return
        self.broker.topic(event.topic, partitions=event.partition + 1, ext=event.ext)
        self._reply(OK_FRAME)

    async def _sub(self, event: Sub | SubOrdered | SubAdvanced) -> None:
        """SUB, SUB_ORDERED and SUB_ADVANCED, with Youzan's rules (spec §8.6 rules
        4-6, 9 and 12).

        A named partition must exist (a plain SUB without one may create a plain
        topic; the Youzan verbs never create); no partition means the lowest. An
        ordered topic takes only SUB_ORDERED, which gets the detail layout and makes
        the channel ordered; SUB_ADVANCED gets the detail layout and may move the
        channel to an offset when it is the channel's only consumer. An ext topic
        takes only ``extend_support`` clients and gives them the extended layout and
        their ``desired_tag``; a plain topic refuses them and drops the tag.
        """
        negotiated = self.protocol.negotiated
        ordered = type(event) is SubOrdered
        youzan_verb = type(event) is not Sub
        topic = self.broker.topics.get(event.topic)
        partition = event.partition
        if topic is None:
            if partition is not None or youzan_verb:
                self._fail(broker_errors.topic_not_exist())
                return
        elif (partition or 0) >= len(topic.partitions):
            self._fail(broker_errors.topic_not_exist())
            return
        elif topic.ordered and not ordered:
            self._fail(broker_errors.sub_order_is_must())
            return
        ext = topic is not None and topic.ext
        if ext and not negotiated.extend_support:
            self._fail(broker_errors.sub_extend_needed())
            return
        if not ext and negotiated.extend_support:
            self._fail(broker_errors.sub_extend_forbidden())
            return
        consumer = Consumer(
            self.client_id,
            msg_timeout=negotiated.msg_timeout_ms / 1000,
            tag=(negotiated.desired_tag or None) if ext else None,
            sample_rate=negotiated.sample_rate,
        )
        self.outbound.binary_ids = self.protocol.binary_ids
        self.outbound.extended = ext
        self.outbound.detail = youzan_verb
        self.consumer = consumer
        self.runner = await self.broker.subscribe(
            event.topic, event.channel, consumer, self, partition=partition or 0, ordered=ordered
        )
        if isinstance(event, SubAdvanced) and event.offset is not None:
            try:
                await self.broker.set_channel_offset(
                    event.topic,
                    partition or 0,
                    event.channel,
                    event.offset,
                    only_consumer=self.client_id,
                )
            except OffsetError as error:
                self._fail(ProtocolError("E_INVALID", str(error)))
                return
        self._reply(OK_FRAME)

    def _internal_id(self, message_id: bytes) -> int:
        if self.protocol.binary_ids:
            return parse_binary_id(message_id)[0]
        return parse_hex_id(message_id)

    def _rdy(self, event: Rdy) -> None:
        if self.runner is not None:
            self.runner.channel.set_rdy(self.client_id, event.count)
            self.runner.wake()
            self._wake()  # readiness changed: the pump may need to flush

    def _fin(self, event: Fin) -> None:
        runner = self.runner
        if runner is None:
            return
        channel = runner.channel
        try:
            record = channel.finish(self.client_id, self._internal_id(event.message_id))
        except InFlightError as error:
            self._reply(error_frame(broker_errors.fin_failed(event.message_id, error.reason)))
            return
        if channel.latency is not None:  # only with e2e percentiles configured
            channel.record_latency(record, time.time_ns())
        if channel.ordered:
            runner.route_now()  # its one slot is free: the next message goes in this write
        else:
            runner.wake()

    def _req(self, event: Req) -> None:
        runner = self.runner
        if runner is None:
            return
        if event.timeout_ms > 0 and runner.channel.ordered:
            return  # Youzan ignores it, no answer: the message stays in flight (§8.6)
        max_ms = self.settings.max_req_timeout_ms
        delay = min(max(event.timeout_ms, 0), max_ms) / 1000
        try:
            runner.channel.requeue(
                self.client_id, self._internal_id(event.message_id), delay, trio.current_time()
            )
        except InFlightError as error:
            self._reply(error_frame(broker_errors.req_failed(event.message_id, error.reason)))
            return
        runner.deadline_changed()
        runner.wake()

    def _touch(self, event: Touch) -> None:
        runner = self.runner
        if runner is None:
            return
        try:
            runner.channel.touch(
                self.client_id, self._internal_id(event.message_id), trio.current_time()
            )
        except InFlightError as error:
            self._reply(error_frame(broker_errors.touch_failed(event.message_id, error.reason)))

    def _cls(self, event: Cls) -> None:
        if self.runner is not None:
            self.runner.channel.start_close(self.client_id)
        self._reply(CLOSE_WAIT_FRAME)

    def _nop(self, event: Nop) -> None:
        """Heartbeat answer: reading it already reset the read deadline."""

    _HANDLERS: ClassVar[dict[type[Event], Callable[[ClientSession, Never], None]]] = {
        Identify: _identify,
        Pub: _pub,
        Mpub: _mpub,
        Dpub: _dpub,
        PubExt: _pub_ext,
        MpubExt: _mpub_ext,
        PubTrace: _pub_trace,
        MpubTrace: _mpub_trace,
        InternalCreateTopic: _internal_create_topic,
        Rdy: _rdy,
        Fin: _fin,
        Req: _req,
        Touch: _touch,
        Cls: _cls,
        Nop: _nop,
    }
    """The commands answered without awaiting, by event type. A class attribute of
    plain functions: a dict of bound methods per session was 1.6 KB of each
    connection, and a reference cycle that only the collector could free."""

    # ------------------------------------------------------------- /stats

    def statistics(self) -> ClientStatistics:
        """The connection as nsqd's ``/stats`` reports a client (``ClientV2Stats``).

        Until IDENTIFY, nsqd names a client by its remote host; IDENTIFY replaces
        both names with what the client sent, even if empty.
        """
        negotiated = self.protocol.negotiated
        request = self._identify_request
        auth = self.auth
        auth_state = auth.state if auth is not None else None
        if request is None:
            host = self.remote_address.rpartition(":")[0].strip("[]")
            client_id = hostname = host
            zone = region = ""
        else:
            client_id, hostname = negotiated.client_id, negotiated.hostname
            zone, region = request.topology_zone, request.topology_region
        consumer, runner = self.consumer, self.runner
        in_flight = runner.channel.in_flight.count_for(self.client_id) if runner else 0
        tls = self._transport.tls if self._transport is not None else None
        return ClientStatistics(
            client_id=client_id,
            hostname=hostname,
            remote_address=self.remote_address,
            state=int(self.protocol.state),
            ready_count=consumer.rdy if consumer else 0,
            in_flight_count=in_flight,
            message_count=consumer.message_count if consumer else 0,
            finish_count=consumer.finish_count if consumer else 0,
            requeue_count=consumer.requeue_count if consumer else 0,
            connect_ts=int(self.connected_at),
            sample_rate=negotiated.sample_rate,
            deflate=negotiated.deflate,
            snappy=negotiated.snappy,
            user_agent=negotiated.user_agent,
            authed=auth is not None and auth.has_authorizations,
            auth_identity=auth_state.identity if auth_state is not None else "",
            auth_identity_url=auth_state.identity_url if auth_state is not None else "",
            topology_zone=zone,
            topology_region=region,
            pub_counts=tuple(PubCount(t, n) for t, n in sorted((self.pub_counts or {}).items())),
            tls=self.protocol.tls,
            tls_cipher_suite=tls.cipher_suite if tls else "",
            tls_version=tls.version if tls else "",
            tls_negotiated_protocol=tls.negotiated_protocol if tls else "",
            # Go's ConnectionState always says true; nsqd reports it for TLS clients
            tls_negotiated_protocol_is_mutual=tls is not None,
        )
