"""The command layer of a TCP connection: protocol events in, broker calls and
replies out, with no socket.

Each NSQ and Youzan command's rules on a connection live here: IDENTIFY, AUTH, SUB
and its Youzan variants, RDY/FIN/REQ/TOUCH/CLS, storage refusals; the publishes
(targets, ext checks, publish limits, traced replies) are the
:class:`~.publish_commands.PublishCommands` mixin. Answers go into the connection's
:class:`OutboundBuffer`; message batches come in from the router through
:meth:`CommandLayer.push`. What carries bytes (reading, the pump, TLS and
compression) is :class:`~.tcp.ClientSession`, which extends this class with the
socket, so a test can drive the commands with events and read the answers from the
buffer (tests/unit/server/test_commands.py).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from typing import TYPE_CHECKING, ClassVar, Never

import trio

from ..broker import trace_log
from ..broker.consumers import Consumer
from ..broker.health import StorageFault, go_error_text
from ..broker.offsets import OffsetError
from ..broker.rate_limits import RateLimit, Rates
from ..broker.replication import ReplicaRefusal
from ..broker.rules import (
    MAX_PARTITION_NUM,
    InFlightError,
)
from ..broker.statistics import ClientStatistics, PubCount
from ..protocol import broker_errors
from ..protocol.commands import (
    Auth,
    Cls,
    Dpub,
    Fin,
    FinMany,
    Identify,
    InternalCreateTopic,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    Pub,
    PubExt,
    PubTrace,
    Pull,
    Rdy,
    Req,
    Sub,
    SubAdvanced,
    SubOrdered,
    Touch,
)
from ..protocol.errors import ProtocolError
from ..protocol.frames import (
    CLOSE_WAIT_FRAME,
    GROUP_OWNER_FRAME,
    OK_FRAME,
    error_frame,
    response_frame,
)
from ..protocol.identify import encode_identify_response
from ..protocol.message import parse_binary_id, parse_hex_id
from ..protocol.server import ServerConnection
from .outbound import OutboundBuffer
from .publish_commands import PublishCommands
from .publish_gate import gate_for

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..auth.session import AuthSession
    from ..broker.broker import Broker
    from ..broker.consumers import Delivery
    from ..broker.subscription import Subscription
    from ..protocol.identify import IdentifyRequest, NegotiatedSettings
    from ..protocol.server import Event
    from ..protocol.settings import ServerSettings
    from .transport import TlsLayer

__all__ = ["MAX_COMMANDS_PER_TURN", "CommandLayer"]

log = logging.getLogger("trionsq.tcp")
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
_PUBLISHES: frozenset[type[Event]] = frozenset(
    {Pub, Mpub, Dpub, PubExt, MpubExt, PubTrace, MpubTrace}
)
"""Commands a topic's publish limit applies to."""
"""Publishes whose topic must exist before their body is read (spec §8.3 step 5);
PUB/MPUB are gated only when they name a partition."""


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


def _consumer_limit(negotiated: NegotiatedSettings) -> RateLimit | None:
    """The consumer's own delivery bucket, if IDENTIFY asked for a rate limit."""
    rates = Rates(negotiated.max_msgs_per_sec, negotiated.max_bytes_per_sec)
    return RateLimit(rates, trio.current_time()) if rates else None


@functools.lru_cache(maxsize=64)
def _seconds(milliseconds: int) -> float:
    """``milliseconds / 1000``, the same float object for every session."""
    return milliseconds / 1000


class CommandLayer(PublishCommands):
    """One connection's protocol state and command rules, without its socket.

    Slotted and free of bound-method tables, since idle connections are many
    (issue 14). :meth:`_wake`, :meth:`_cancel` and :meth:`_tls` are where the
    connection's I/O side (:class:`~.tcp.ClientSession`) hooks in; here they do
    nothing, so the layer runs on its own in tests.
    """

    __slots__ = (
        "_closes_at_next_delivery",
        "_identify_request",
        "_refused",
        "_upgrade_to",
        "auth",
        "broker",
        "client_id",
        "connected_at",
        "heartbeat_interval",
        "outbound",
        "protocol",
        "remote_address",
        "settings",
        "subscription",
    )

    def __init__(
        self, client_id: int, broker: Broker, settings: ServerSettings, remote_address: str
    ) -> None:
        super().__init__()
        self.client_id = client_id
        self.broker = broker
        self.settings = settings
        self.remote_address = remote_address
        self.auth: AuthSession | None = None
        """The grants AUTH fetched (nsqd's per-client auth state); None: auth off."""
        if settings.auth_enabled:
            from ..auth.session import AuthSession  # loaded only where AUTH is on

            self.auth = AuthSession(broker.config, remote_address=remote_address)
        self.protocol = ServerConnection(
            settings,
            publish_gate=gate_for(broker, self.auth),
            gated_verbs=_GATED_VERBS,
            fin_runs=True,
        )
        self.outbound = OutboundBuffer(
            buffer_size=settings.output_buffer_size,
            buffer_timeout=_seconds(settings.output_buffer_timeout_ms),
        )
        self.heartbeat_interval = _seconds(settings.default_heartbeat_interval_ms)
        self.subscription: Subscription | None = None
        """The consumer's hold on its channel, after SUB."""
        self.connected_at = time.time()
        """Unix seconds (nsqd's ConnectTime)."""
        self._identify_request: IdentifyRequest | None = None
        self._upgrade_to: NegotiatedSettings | None = None
        """What IDENTIFY negotiated when it asks for TLS or compression: the I/O side
        upgrades the stream after this turn's events."""
        self._closes_at_next_delivery = False
        self._refused = False
        """The broker answered a command with a fatal error (the parser's own fatal
        errors end its event list instead)."""

    # ------------------------------------------------------------- hooks of the I/O side

    def _wake(self) -> None:
        """Something to write or a setting changed (the pump looks again)."""

    def _write_now(self) -> None:
        """Answers outside the reader's turn: write them now if the I/O side can, else
        :meth:`_wake` the pump."""
        self._wake()

    def _cancel(self) -> None:
        """End the connection."""

    def _tls(self) -> TlsLayer | None:
        """The connection's TLS layer, for /stats."""
        return None

    async def _hold(self, until: float) -> None:
        """A throttling publish limit holds the next command until ``until``: read
        nothing more until then."""
        await trio.sleep_until(until)

    # ------------------------------------------------------------- Outbox for the router

    def push(self, deliveries: list[Delivery]) -> None:
        """A batch from the router: encode now, write when the pump decides."""
        if self._closes_at_next_delivery:
            log.info("client %d: topic upgraded to ext, client not extend_support", self.client_id)
            self._cancel()  # leaving requeues the batch for the other consumers
            return
        self.outbound.add_deliveries(deliveries, trio.current_time())
        self._wake()
        if self.broker.trace_log and self.subscription is not None:
            channel = self.subscription.channel
            trace_log.delivered(
                channel.topic, channel.partition, channel.name, deliveries, self.remote_address
            )

    def close(self) -> None:
        """Our channel was deleted (or group member fenced): end the connection quietly."""
        self._cancel()

    def group_owner(self) -> None:
        """Our group member owns the partition now: say so if asked (``group_notices``)."""
        if self.protocol.negotiated.group_notices:
            self.outbound.add_response(GROUP_OWNER_FRAME)
            self._wake()

    def leadership_lost(self) -> None:
        """Youzan's broker closes a consumer of a partition it no longer leads with a
        fatal ``E_FAILED_ON_NOT_LEADER``; the client looks the leader up again. Nothing
        more is delivered here: the pump writes the error and ends the connection."""
        log.info("client %d: leadership of its partition moved; closing", self.client_id)
        self.outbound.add_response(error_frame(broker_errors.failed_on_not_leader(fatal=True)))
        self.protocol.closed = True
        self._end_after_flush()

    def _end_after_flush(self) -> None:
        """Write what is queued, then end the connection (the I/O side's hook)."""
        self._cancel()

    def topic_now_ext(self) -> None:
        """Youzan closes a consumer without ``extend_support`` at its next delivery
        after the upgrade (spec §8.8); it gets E_SUB_EXTEND_NEED when it comes back."""
        if not self.outbound.extended:
            self._closes_at_next_delivery = True

    def _reply(self, frame_bytes: bytes) -> None:
        """Replies come only from the reader, which writes them after each read; behind
        a replicated publish's answer they wait for it (publish_commands.py)."""
        held = self.held_replies
        if held:
            held.append((frame_bytes, None))
            return
        self.outbound.add_response(frame_bytes)

    def _ready(self) -> bool:
        subscription = self.subscription
        return subscription is not None and subscription.room() > 0

    # ------------------------------------------------------------- one turn

    def apply_alone(self, events: Sequence[Event]) -> bool:
        """:meth:`apply` for a turn of one PUB that takes the short way (issue 37:
        one PUB per round trip), without its loop or an await; False, having done
        nothing, for any other turn (then await :meth:`apply`)."""
        if len(events) != 1 or self.auth is not None:
            return False
        event = events[0]
        if type(event) is not Pub:
            return False
        topic = self._plain_topic(event)
        if topic is None:
            return False
        try:
            self._pub_plain(topic, event)
        except StorageFault as fault:
            self._fail(_storage_refusal(event, fault.reason))
        return True

    async def apply(self, events: Sequence[Event]) -> None:
        """Apply the commands of one turn; their answers go into :attr:`outbound`.

        PUBs to one topic that arrive together become one append (one write to a
        durable log), as an MPUB would; each still gets its own OK, in order. A
        publish to a topic with a publish limit goes on its own, and one a throttling
        limit holds back waits here, the rest of the turn (and the socket) with it. A
        fatal answer ends the list: nothing after it is acted on, as nsqd.
        """
        handlers = self._HANDLERS
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
                if type(event) in _PUBLISHES:
                    topic: str = event.topic  # type: ignore[union-attr]
                    limit = self._publish_limit(topic)
                    if limit is not None:  # each publish on its own; a throttled one waits
                        until = self._throttled_until(topic, limit)
                        if until is not None:
                            await self._hold(until)
                    elif type(event) is Pub and index < count:
                        run = _same_topic_pubs_end(events, index, topic)
                        if run > index:
                            self._pub_together(topic, events[index - 1 : run])  # type: ignore[arg-type]
                            index = run
                            continue
                handler = handlers.get(type(event))
                if handler is not None:
                    handler(self, event)  # type: ignore[arg-type]
                else:
                    await self._handle(event)
            except StorageFault as fault:
                self._fail(_storage_refusal(event, fault.reason))
            except ReplicaRefusal as refusal:  # Youzan: fatal for SUB, not for publishes
                if type(event) in _PUBLISHES:
                    self._reply(error_frame(refusal.error(fatal=False)))
                else:
                    self._fail(refusal.error(fatal=True))
            if self._refused:
                break  # the broker's fatal answer: nothing after it is acted on, as nsqd
        if self.held_replies:  # replicated publishes: answered as they commit
            self.release_replies()
            await self._settle_replies()

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
        if isinstance(event, InternalCreateTopic):
            await self._internal_create_topic(event)
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
        self.heartbeat_interval = _seconds(settings.heartbeat_interval_ms)
        self.outbound.buffer_size = settings.output_buffer_size
        self.outbound.buffer_timeout = _seconds(settings.output_buffer_timeout_ms)
        self._wake()  # the pump re-reads the heartbeat interval
        if settings.tls_v1 or settings.snappy or settings.deflate:
            self._upgrade_to = settings  # after this read's events (parsing stopped here)
        if event.response is None:
            self._reply(OK_FRAME)
        else:
            self._reply(response_frame(encode_identify_response(event.response)))
        events = self.broker.events
        if events.watchers:
            events.emit(
                "client",
                "client_identified",
                client_id=str(self.client_id),
                remote_address=self.remote_address,
                hostname=settings.hostname,
                user_agent=settings.user_agent,
                tls=settings.tls_v1,
                snappy=settings.snappy,
                deflate=settings.deflate,
            )

    async def _internal_create_topic(self, event: InternalCreateTopic) -> None:
        """Standalone creation of one partition (idempotent; ``ext`` upgrades, never
        downgrades), answered once metadata.json holds it, as HTTP's ``/topic/create``.

        Partitions are numbered from 0 with no gaps here: creating partition ``n``
        gives the topic every partition up to ``n`` it does not have yet.
        """
        if event.partition >= MAX_PARTITION_NUM:
            reason = f"partition {event.partition} out of range 0-{MAX_PARTITION_NUM - 1}"
            self._reply(error_frame(broker_errors.create_topic_failed(reason)))
            return
        self.broker.topic(event.topic, partitions=event.partition + 1, ext=event.ext)
        storage = self.broker.storage
        if storage is not None:
            try:
                await storage.save_metadata_now(self.broker)
            except OSError as error:
                reason = go_error_text(error)
                self._reply(error_frame(broker_errors.create_topic_failed(reason)))
                return
        self._reply(OK_FRAME)

    async def _sub(self, event: Sub | SubOrdered | SubAdvanced) -> None:
        """SUB, SUB_ORDERED and SUB_ADVANCED, with Youzan's rules (spec §8.6 rules
        4-6, 9 and 12).

        A named partition must exist (a plain SUB without one may create a plain
        topic; the Youzan verbs never create); no partition means the lowest (of a
        replicated topic, the lowest this broker leads). An
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
            ordered_window=negotiated.ordered_window,
            max_attempts=negotiated.max_attempts,
            member=negotiated.group_member or None,
            rate_limit=_consumer_limit(negotiated),
        )
        self.outbound.binary_ids = self.protocol.binary_ids
        self.outbound.extended = ext
        self.outbound.detail = youzan_verb
        if partition is None:
            partition = self.broker.default_partition(event.topic, 0)
        self.subscription = await self.broker.subscribe(
            event.topic, event.channel, consumer, self, partition=partition, ordered=ordered
        )
        self.broker.events.emit(
            "client",
            "client_subscribed",
            event.topic,
            client_id=str(self.client_id),
            remote_address=self.remote_address,
            channel=event.channel,
            partition=partition or 0,
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
        if consumer.member is not None and self.subscription.channel.group.owner == consumer.member:
            self.group_owner()  # it owns the partition already (a connection come back)

    def _internal_id(self, message_id: bytes) -> int:
        if self.protocol.binary_ids:
            return parse_binary_id(message_id)[0]
        return parse_hex_id(message_id)

    def _rdy(self, event: Rdy) -> None:
        if self.subscription is not None:
            self.subscription.ready(event.count)
            self._wake()  # readiness changed: the pump may need to flush

    def _pull(self, event: Pull) -> None:
        if self.subscription is not None:
            self.subscription.pull(event.count)
            self._wake()

    def _fin(self, event: Fin) -> None:
        if self.subscription is not None:
            self._settle(event.message_id, self.subscription.finish, broker_errors.fin_failed)

    def _settle(
        self,
        message_id: bytes,
        act: Callable[[int], None],
        failed: Callable[[bytes, str], ProtocolError],
    ) -> None:
        """FIN's and TOUCH's step: ``act`` on the id's message, or its E_*_FAILED."""
        try:
            act(self._internal_id(message_id))
        except InFlightError as error:
            self._reply(error_frame(failed(message_id, error.reason)))

    def _fin_many(self, event: FinMany) -> None:
        """A run of FINs read together: one pass over the channel, one routing pass;
        each refused one gets its own E_FIN_FAILED, in order, as a lone FIN would."""
        if self.subscription is None:
            return
        refused = self.subscription.finish_many(event.internal_ids)
        if not refused:
            return
        ids, sent_as, at = event.internal_ids, event.message_ids, 0
        for internal_id, reason in refused:  # in the order sent: find each one's id bytes
            while ids[at] != internal_id:
                at += 1
            self._reply(error_frame(broker_errors.fin_failed(sent_as[at], reason)))
            at += 1

    def _req(self, event: Req) -> None:
        if self.subscription is None:
            return
        delay_ms = min(max(event.timeout_ms, 0), self.settings.max_req_timeout_ms)
        try:
            self.subscription.requeue(
                self._internal_id(event.message_id), delay_ms / 1000, timed=event.timeout_ms > 0
            )
        except InFlightError as error:
            self._reply(error_frame(broker_errors.req_failed(event.message_id, error.reason)))

    def _touch(self, event: Touch) -> None:
        if self.subscription is not None:
            self._settle(event.message_id, self.subscription.touch, broker_errors.touch_failed)

    def _cls(self, event: Cls) -> None:
        if self.subscription is not None:
            self.subscription.close()
        self._reply(CLOSE_WAIT_FRAME)

    def _nop(self, event: Nop) -> None:
        """Heartbeat answer: reading it already reset the read deadline."""

    _HANDLERS: ClassVar[dict[type[Event], Callable[[CommandLayer, Never], None]]] = {
        Identify: _identify,
        Pub: PublishCommands._pub,
        Mpub: PublishCommands._mpub,
        Dpub: PublishCommands._dpub,
        PubExt: PublishCommands._pub_ext,
        MpubExt: PublishCommands._mpub_ext,
        PubTrace: PublishCommands._pub_trace,
        MpubTrace: PublishCommands._mpub_trace,
        Rdy: _rdy,
        Pull: _pull,
        Fin: _fin,
        FinMany: _fin_many,
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
        subscription = self.subscription
        consumer = subscription.consumer if subscription is not None else None
        in_flight = subscription.in_flight() if subscription is not None else 0
        tls = self._tls()
        return ClientStatistics(
            client_id=client_id,
            hostname=hostname,
            remote_address=self.remote_address,
            state=int(self.protocol.state),
            ready_count=(consumer.credit if consumer.credit is not None else consumer.rdy)
            if consumer
            else 0,
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
            group_member=negotiated.group_member,
            max_msgs_per_sec=negotiated.max_msgs_per_sec if consumer else 0,
            max_bytes_per_sec=negotiated.max_bytes_per_sec if consumer else 0,
        )
