"""Consuming from Trio: one connection per nsqd and partition, found directly or
through nsqlookupd, messages as an async iterator or handed to a handler.

Each connection subscribes (SUB, SUB_ORDERED or SUB_ADVANCED) and gets its share of
``max_in_flight`` as RDY from :class:`~.readiness.ReadyControl`. Every message of a
read is handed over in one list; iterating takes them from one queue without a
scheduler pass while any are waiting, so a burst is handled in one turn and its
FINs leave in one write. A lost connection is opened again after a jittered,
capped backoff (with lookupd: only while lookupd still lists it, and the lookup is
refreshed at once); what it held is redelivered by the broker (at-least-once).

Stopping is go-nsq's ``Stop``, whatever ends the ``async with`` (the block's end, a
``break`` out of ``async for``, an exception, a cancellation) or cancels
:meth:`Consumer.handle`: RDY 0 everywhere; REQ (delay 0) what was received and not
handed out, and what arrives later; handlers get ``drain_timeout`` to finish the
messages they hold; then every message still unanswered goes back (REQ 0), CLS is
sent and each ``CLOSE_WAIT`` awaited before the connections close. So nothing waits
for its msg_timeout at the broker (Go nsqd keeps a closed connection's messages in
flight until then). The cleanup runs shielded, under deadlines, so a cancellation
cannot cut it short nor hang it.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..protocol.client import encode_req
from ..protocol.commands import Cls, OffsetSpec, Sub, SubAdvanced, SubOrdered
from ..protocol.identify import (
    MAX_ATTEMPTS_BOUND,
    MAX_BYTES_PER_SEC,
    MAX_GROUP_SESSION_TIMEOUT_MS,
    MAX_MSGS_PER_SEC,
    MIN_GROUP_SESSION_TIMEOUT_MS,
)
from .backoff import Backoff
from .connection import client_addresses, open_connection
from .consumer_settings import ConsumerSettings
from .discovery import Discovery, Placement, Target
from .errors import ConnectionClosedError, NsqConfigError, NsqError
from .groups import single_errors
from .layers import LOST
from .message import ClientMessage
from .options import ConnectionOptions
from .ordering import OffsetCheck
from .readiness import Link, ReadyControl
from .tracing import trace_consumed

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from ..addresses import Address
    from ..protocol.commands import Command
    from ..protocol.message import Message
    from .connection import Connection

    Handler = Callable[[ClientMessage], Awaitable[object]]
    GiveUp = Callable[[ClientMessage], Awaitable[object] | object]

__all__ = ["ClientMessage", "Consumer", "ConsumerSettings", "open_consumer"]

log = logging.getLogger("trionsq.client")
MAX_PULL: Final = 2500
"""The most one PULL asks of a connection (nsqd's default max RDY count)."""
BACKOFF_FIRST: Final = 0.1
BACKOFF_MAX: Final = 10.0
MIN_SESSION: Final = MIN_GROUP_SESSION_TIMEOUT_MS / 1000
MAX_SESSION: Final = MAX_GROUP_SESSION_TIMEOUT_MS / 1000
LOST_OR_CLOSED: Final[tuple[type[Exception], ...]] = (*LOST, ConnectionClosedError)
"""A connection that could not be opened or was lost: try again after a backoff."""
RETRIED: Final[tuple[type[Exception], ...]] = (*LOST_OR_CLOSED, NsqError)
"""...and a refused SUB (logged): the consumer keeps trying."""
CLOSE_WAIT_TIMEOUT: Final = 2.0
"""Seconds a stopping consumer waits for the brokers' ``CLOSE_WAIT`` answers to CLS."""


def _identified(settings: ConsumerSettings, options: ConnectionOptions) -> ConnectionOptions:
    """``options`` with what ``settings`` ask of IDENTIFY (ordered window, dead-letter
    bound, group member, rate limit), each checked first.

    Raises:
        NsqConfigError: a setting out of its range, or two that do not go together.
    """
    if settings.ordered and settings.start_at is not None:
        raise NsqConfigError("SUB_ORDERED takes no start offset: set it with /channel/setoffset")
    if settings.ordered_window < 1:
        raise NsqConfigError("ordered_window must be at least 1")
    if settings.ordered and settings.ordered_window > 1:
        identify = attrs.evolve(options.identify, ordered_window=settings.ordered_window)
        options = attrs.evolve(options, identify=identify)
    if settings.dead_letter:
        if not 0 < settings.max_attempts <= MAX_ATTEMPTS_BOUND:
            raise NsqConfigError(f"dead_letter needs max_attempts of 1 to {MAX_ATTEMPTS_BOUND}")
        identify = attrs.evolve(options.identify, max_attempts=settings.max_attempts)
        options = attrs.evolve(options, identify=identify)
    if settings.group_member:
        session = settings.group_session_timeout
        if session and not MIN_SESSION <= session <= MAX_SESSION:
            raise NsqConfigError(
                f"group_session_timeout must be 0 or {MIN_SESSION} to {MAX_SESSION}"
            )
        identify = attrs.evolve(
            options.identify,
            group_member=settings.group_member,
            group_session_timeout=round(session * 1000),
            group_notices=True,  # a takeover is not a skip in the offset check
        )
        options = attrs.evolve(options, identify=identify)
    if settings.max_msgs_per_sec or settings.max_bytes_per_sec:
        if not 0 <= settings.max_msgs_per_sec <= MAX_MSGS_PER_SEC:
            raise NsqConfigError(f"max_msgs_per_sec must be 0 to {MAX_MSGS_PER_SEC}")
        if not 0 <= settings.max_bytes_per_sec <= MAX_BYTES_PER_SEC:
            raise NsqConfigError(f"max_bytes_per_sec must be 0 to {MAX_BYTES_PER_SEC}")
        identify = attrs.evolve(
            options.identify,
            max_msgs_per_sec=settings.max_msgs_per_sec,
            max_bytes_per_sec=settings.max_bytes_per_sec,
        )
        options = attrs.evolve(options, identify=identify)
    return options


class Consumer:
    """Messages of one topic's channel (see :func:`open_consumer`)."""

    def __init__(
        self,
        topic: str,
        channel: str,
        settings: ConsumerSettings,
        options: ConnectionOptions,
        nursery: trio.Nursery,
    ) -> None:
        options = _identified(settings, options)
        self.topic = topic
        self.channel = channel
        self.settings = settings
        self.readiness = ReadyControl(
            settings.max_in_flight,
            backoff_unit=settings.backoff_unit,
            max_backoff=settings.max_backoff,
            pulling=settings.pull,
        )
        self.offsets = OffsetCheck()
        """Ordered and SUB_ADVANCED consumers: offsets per partition, and what skipped."""
        self.backing_off = False
        self.reconnects = 0
        self.received = 0
        self.failed = 0
        self.given_up = 0
        self.fenced = 0
        """Messages dropped unhandled: their connection's group session had timed out
        (this process was stopped), so the broker gave them to another member."""
        self.discovery: Discovery | None = None
        self._options = options
        self._nursery = nursery
        self._serving: set[Target] = set()
        self._waiting: deque[ClientMessage] = deque()
        self._rewinding: dict[Connection, int] = {}
        """Ordered window: a connection whose partition goes back to this offset (a
        requeued message); what arrives past it before it is dropped."""
        self._arrived = trio.Event()
        self._crowded = trio.Event()
        self.stopping = False
        """:meth:`stop` was called: nothing more is handed out."""
        self._unanswered: list[ClientMessage] = []
        """Delivered messages, some maybe answered (pruned as it grows): what a
        stopping consumer gives back."""
        self._prune_at = _prune_margin(settings)
        self._connection_scopes: set[trio.CancelScope] = set()
        """One per :meth:`_serve` task: see there."""

    @property
    def connections(self) -> int:
        """Subscribed connections now."""
        return len(self.readiness.links)

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ClientMessage:
        while True:
            if not self._waiting:  # no scheduler pass while any are waiting
                await self._wait_for_messages()
            message = self._waiting.popleft()
            if message.connection.session_timeout is None or not self._fenced(message):
                return message

    async def get(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 - as the blocking consumer's get
    ) -> ClientMessage | None:
        """The next message, as ``async for`` gives it; None once ``timeout`` seconds
        passed without one (the blocking consumer's ``get``; ``trio.move_on_after``
        around ``anext(consumer)`` does the same). A message that arrives as the time
        runs out stays for the next call."""
        with trio.move_on_after(math.inf if timeout is None else timeout):
            return await self.__anext__()
        return None

    async def next_batch(self) -> list[ClientMessage]:
        """Every message waiting now (at least one: waits for it), for callers that
        hand messages on in bulk, as the blocking client does; none once stopping."""
        while True:
            if not self._waiting:
                try:
                    await self._wait_for_messages()
                except StopAsyncIteration:
                    return []
            batch = list(self._waiting)
            self._waiting.clear()
            if self.settings.group_member:
                batch = [message for message in batch if not self._fenced(message)]
            if batch:
                return batch

    def _fenced(self, message: ClientMessage) -> bool:
        """A message of a connection whose group session timed out: dropped, counted
        (the broker closed the connection and gave the message to another member)."""
        if not message.connection.stale():
            return False
        self.fenced += 1
        return True

    async def fetch(self, count: int, *, wait: float = 1.0) -> list[ClientMessage]:
        """Pull consumption (``ConsumerSettings(pull=True)``): ask the connections for
        ``count`` messages (``PULL``) and return up to ``count`` of those there within
        ``wait`` seconds, maybe none.

        What is missing is asked of the connections that sent all they were asked
        for, shared out and rounded up; a connection still owing some (a partition
        another group member owns, or nothing left) is not asked again, so the
        requests go to the partitions that deliver. Extra messages (shares rounded up)
        wait for the next fetch.

        Raises:
            RuntimeError: the consumer was not opened with ``pull=True``.
        """
        if not self.settings.pull:
            raise RuntimeError("fetch needs ConsumerSettings(pull=True)")
        if count < 1:
            raise NsqConfigError("fetch needs a count of at least 1")
        with trio.move_on_after(wait):
            while len(self._waiting) < count:
                self._ask_for(count - len(self._waiting))
                await self._wait_arrival()
        taken = [self._waiting.popleft() for _ in range(min(count, len(self._waiting)))]
        if self.settings.group_member:
            taken = [message for message in taken if not self._fenced(message)]
        return taken

    def _ask_for(self, missing: int) -> None:
        """PULL ``missing`` messages, shared over the links that owe none."""
        idle = [link for link in self.readiness.links if not link.pulled]
        if not idle:
            return
        share = min(-(-missing // len(idle)), MAX_PULL)
        for link in idle:
            link.pull(share)

    async def _wait_for_messages(self) -> None:
        """Until a message waits. Raises StopAsyncIteration once the consumer stops."""
        while not self._waiting:
            if self.stopping:
                raise StopAsyncIteration
            await self._wait_arrival()

    async def _wait_arrival(self) -> None:
        """Until messages arrive (or the consumer stops). Several tasks may wait at
        once (handler mode): the first to wake renews the event, the others then
        wait on the new one too, so none is left on an event nobody sets."""
        arrived = self._arrived
        await arrived.wait()
        if self._arrived is arrived:
            self._arrived = trio.Event()

    # --------------------------------------------------------------- stopping

    def stop(self) -> None:
        """Stop handing out messages (iteration ends), for good: RDY 0 everywhere, and
        what was received and not handed out goes back (REQ 0), as will what still
        arrives. Messages handed out stay theirs to answer until :func:`open_consumer`
        closes. Not a checkpoint; idempotent."""
        if not self.stopping:
            self.stopping = True
            self.readiness.close()
            self._arrived.set()  # iterators waiting for messages end
        waiting, self._waiting = self._waiting, deque()
        for message in waiting:
            message.give_back()

    def give_back_held(self) -> None:
        """REQ 0 every delivered message still unanswered: the consumer is closing and
        nobody will answer them any more."""
        self.stop()
        for message in self._unanswered:
            message.give_back()
        self._unanswered = []

    async def say_goodbye(self) -> None:
        """CLS on every connection and wait for each ``CLOSE_WAIT`` (the broker sends
        nothing more after it); the caller bounds the wait."""
        async with trio.open_nursery() as nursery:
            for link in self.readiness.links:
                if not (link.connection.closed or link.connection.stale()):
                    nursery.start_soon(self._say_goodbye, link.connection)

    async def _say_goodbye(self, connection: Connection) -> None:
        try:
            await connection.request(Cls())
        except (NsqError, ConnectionClosedError) as error:  # closing anyway
            log.info("%s: CLS: %s", connection.address, error)

    # --------------------------------------------------------------- handler mode

    async def handle(
        self, handler: Handler, *, concurrency: int = 1, on_give_up: GiveUp | None = None
    ) -> None:
        """Run ``handler`` on every message until cancelled, ``concurrency`` at a time.

        A handler that returns finishes the message (unless it answered itself); one
        that raises requeues it with a delay growing with its attempts, and the
        consumer backs off. A message delivered more than ``max_attempts`` times goes
        to ``on_give_up`` (default: a warning) and is finished, except on an ordered
        consumer, where skipping it would break the order: there it is only
        reported, and handled as usual.

        Raises:
            RuntimeError: the consumer pulls (``pull=True``): use :meth:`fetch`.
        """
        if self.settings.pull:
            raise RuntimeError("handler mode needs a pushing consumer: use fetch with pull=True")
        grace = trio.CancelScope(shield=True)
        with single_errors():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._handlers, grace, handler, concurrency, on_give_up)
                try:
                    await trio.sleep_forever()
                finally:  # cancelled, or a handler task failed: stop, and drain
                    self.stop()
                    grace.deadline = trio.current_time() + self.settings.drain_timeout

    async def _handlers(
        self,
        grace: trio.CancelScope,
        handler: Handler,
        concurrency: int,
        on_give_up: GiveUp | None,
    ) -> None:
        """The handler tasks, shielded by ``grace`` until the consumer stops: then
        each finishes the message it holds (its ``async for`` ends), within the
        deadline :meth:`handle` sets."""
        with grace:
            async with trio.open_nursery() as workers:
                for _ in range(concurrency):
                    workers.start_soon(self._handle_forever, handler, on_give_up)

    async def _handle_forever(self, handler: Handler, on_give_up: GiveUp | None) -> None:
        limit = self.settings.max_attempts
        async for message in self:
            if limit and message.attempts > limit:
                self.given_up += 1
                await self._give_up(message, on_give_up)
                if not self.settings.ordered:
                    if not message.responded:
                        message.finish()
                    continue
            try:
                await handler(message)
            except Exception:
                self.failed += 1
                log.warning(
                    "handler failed on %r (attempt %d)", message.id, message.attempts, exc_info=True
                )
                if not message.responded:
                    message.requeue(self._requeue_delay(message.attempts))
            else:
                if not message.responded:
                    message.finish()

    async def _give_up(self, message: ClientMessage, on_give_up: GiveUp | None) -> None:
        if on_give_up is None:
            log.warning(
                "giving up on %r after %d attempts: %r",
                message.id,
                message.attempts,
                message.body[:200],
            )
            return
        result = on_give_up(message)
        if inspect.isawaitable(result):
            await result

    def _requeue_delay(self, attempts: int) -> float:
        settings = self.settings
        return min(settings.requeue_delay * attempts, settings.max_requeue_delay)

    # --------------------------------------------------------------- backoff

    def outcome(self, succeeded: bool) -> None:
        """A message finished or was requeued with backoff (see :class:`ReadyControl`)."""
        control = self.readiness
        wait = control.succeeded() if succeeded else control.failed()
        self.backing_off = bool(control.level or control.stopped)
        if wait is not None:
            self._nursery.start_soon(self._backoff_wait, wait)

    def requeued(self, message: ClientMessage) -> None:
        """An ordered window goes back to ``message``: drop what is waiting of its
        partition past it (the broker sends all of it again, in order)."""
        offset = message.offset
        if not (self.settings.ordered and self.settings.ordered_window > 1) or offset is None:
            return
        connection = message.connection
        self._rewinding[connection] = offset
        kept = [
            waiting
            for waiting in self._waiting
            if waiting.connection is not connection or (waiting.offset or 0) <= offset
        ]
        if len(kept) != len(self._waiting):
            self._waiting = deque(kept)

    async def _backoff_wait(self, seconds: float) -> None:
        await trio.sleep(seconds)
        self.readiness.resume()

    async def _redistribute_forever(self) -> None:
        """While connections outnumber ``max_in_flight``, move RDY on every few seconds."""
        settings = self.settings
        while True:
            await self._crowded.wait()
            await trio.sleep(settings.redistribute_interval)
            if not self.readiness.crowded:
                self._crowded = trio.Event()
                continue
            self.readiness.redistribute(trio.current_time(), settings.idle_before_redistribute)

    # --------------------------------------------------------------- connections

    def adopt(self, placement: Placement) -> None:
        """Lookupd says the topic is an ext topic: identify as extend_support, or
        every SUB would be refused with E_SUB_EXTEND_NEED."""
        if placement.extend_support and not self._options.identify.extend_support:
            identify = attrs.evolve(self._options.identify, extend_support=True)
            self._options = attrs.evolve(self._options, identify=identify)

    def placed(self, placement: Placement) -> None:
        """Lookupd's answer changed: subscribe wherever it lists that is new."""
        self.adopt(placement)
        for target in placement.targets:
            if target not in self._serving:
                self._serving.add(target)
                self._nursery.start_soon(self._serve, target, False)

    async def start(self, target: Target, *, strict: bool) -> None:
        """Subscribe to ``target`` and keep it subscribed; with ``strict`` a first
        failure is raised here."""
        if target not in self._serving:
            self._serving.add(target)
            await self._nursery.start(self._serve, target, strict)

    def _sub(self, target: Target, again: bool) -> Command:
        settings = self.settings
        if settings.ordered:
            return SubOrdered(self.topic, self.channel, target.partition)
        if settings.start_at is not None:
            start = None if again else settings.start_at
            return SubAdvanced(self.topic, self.channel, target.partition, start)
        return Sub(self.topic, self.channel, target.partition)

    async def _serve(
        self,
        target: Target,
        strict: bool,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep one subscribed connection to ``target``, reconnecting on loss.

        ``started`` once the first SUB is answered (or, unless ``strict``, failed).
        It runs in a cancel scope of its own, shielded while subscribed: a consumer
        cancelled from outside still stops gracefully over its connections, which
        :meth:`release` then cancels.
        """
        with trio.CancelScope() as scope:
            self._connection_scopes.add(scope)
            try:
                await self._keep_subscribed(target, strict, scope, task_status)
            finally:
                self._connection_scopes.discard(scope)
                self._serving.discard(target)

    def release(self) -> None:
        """End every connection (the last step of stopping)."""
        for scope in self._connection_scopes:
            scope.cancel()

    async def _keep_subscribed(
        self,
        target: Target,
        strict: bool,
        scope: trio.CancelScope,
        task_status: trio.TaskStatus[None],
    ) -> None:
        backoff = Backoff(BACKOFF_FIRST, BACKOFF_MAX)
        first: trio.TaskStatus[None] | None = task_status
        subscribed = False
        while True:
            failure: Exception | None = None
            try:
                await self._subscribed(target, subscribed, first, scope)
                subscribed, first = True, None
                backoff.reset()
            except RETRIED as error:
                if first is not None and strict:
                    raise
                failure = error
            if first is not None:
                first.started()
                first = None
            if self.stopping:
                return
            self.reconnects += 1
            if self.discovery is not None:
                self.discovery.refresh()
            delay = backoff.delay()
            if failure is not None:  # the loss itself was logged by the connection
                doing = "reconnect" if subscribed else "subscribe"
                log.warning(
                    "%s: %s failed: %s; next try in %.1fs", target.address, doing, failure, delay
                )
            await trio.sleep(delay)
            if self.discovery is not None and target not in self.discovery.placement.targets:
                return  # lookupd no longer lists it: go-nsq lets it go too

    async def _subscribed(
        self,
        target: Target,
        again: bool,
        first: trio.TaskStatus[None] | None,
        scope: trio.CancelScope,
    ) -> None:
        """One connection's life: subscribe, take part in RDY, wait for its end."""
        settings = self.settings

        def deliver(messages: list[Message]) -> None:
            self._received(link, messages)

        def owner() -> None:  # the next message starts where the channel stands
            self.offsets.restart((target.address, target.partition))

        async with open_connection(
            target.address,
            self._options,
            on_messages=deliver,
            on_group_owner=owner,
            extended=self._options.identify.extend_support,
            detail=settings.detail,
        ) as connection:
            await connection.request(self._sub(target, again))
            if again:
                log.info("%s: %s/%s: connection back", target.address, self.topic, self.channel)
            link = Link(connection, target, trio.current_time())
            self.readiness.add(link)
            if self.readiness.crowded:
                self._crowded.set()
            if first is not None:
                first.started()
            scope.shield = True  # until it ends, stopping needs it (see _serve)
            try:
                await connection.wait_closed()
            finally:
                scope.shield = False
                self.readiness.remove(link)

    def _received(self, link: Link, messages: list[Message]) -> None:
        if self.stopping:  # sent before our RDY 0 or CLS reached the broker: back at once
            link.connection.send_bytes(b"".join(encode_req(m.id, 0) for m in messages))
            return
        link.last_message = trio.current_time()
        if link.pulled:
            link.pulled = max(0, link.pulled - len(messages))
        self.received += len(messages)
        settings = self.settings
        if self._rewinding:
            messages = self._past_rewind(link, messages)
        if settings.detail:
            where = (link.target.address, link.target.partition)
            for message in messages:
                skip = self.offsets.check(where, message)
                if skip is not None:
                    log.warning("%s %s/%s: %s", link.target.address, self.topic, self.channel, skip)
        if settings.trace:
            trace_consumed(link.connection, link.target.partition, messages)
        connection, partition = link.connection, link.target.partition
        if not messages:
            return
        arrived = [ClientMessage(message, connection, self, partition) for message in messages]
        self._waiting.extend(arrived)
        held = self._unanswered
        held += arrived
        if len(held) > self._prune_at:  # amortized: at most the margin answered kept
            self._unanswered = held = [message for message in held if not message.responded]
            self._prune_at = len(held) + _prune_margin(settings)
        self._arrived.set()

    def _past_rewind(self, link: Link, messages: list[Message]) -> list[Message]:
        """Messages of a partition going back: those sent before the broker went
        back are dropped (it sends them again) until the requeued one comes."""
        connection = link.connection
        offset = self._rewinding.get(connection)
        if offset is None:
            return messages
        kept: list[Message] = []
        for message in messages:
            if offset is not None:
                if (message.offset or 0) > offset:
                    continue  # sent before the rewind: it comes again after the requeued one
                del self._rewinding[connection]
                offset = None
                self.offsets.restart((link.target.address, link.target.partition))
            kept.append(message)
        return kept


def _prune_margin(settings: ConsumerSettings) -> int:
    """How many answered messages :attr:`Consumer._unanswered` may keep before it is
    pruned: about what is in flight, so pruning costs O(1) a message."""
    return max(settings.max_in_flight, 64)


@asynccontextmanager
async def open_consumer(
    topic: str,
    channel: str,
    nsqd: Address | Sequence[Address] = (),
    *,
    lookupd: Address | Sequence[Address] = (),
    partitions: Sequence[int] | None = None,
    options: ConnectionOptions | None = None,
    settings: ConsumerSettings | None = None,
    max_in_flight: int | None = None,
    ordered: bool | None = None,
    start_at: OffsetSpec | None = None,
    trace: bool | None = None,
) -> AsyncIterator[Consumer]:
    """``async with open_consumer("t", "c", "127.0.0.1:4150") as consumer:`` then
    ``async for message in consumer: ...; message.finish()``, or
    ``await consumer.handle(handler)``.

    Connects to each ``nsqd`` TCP address (per partition when ``partitions`` names
    Youzan partitions) and to whatever the ``lookupd`` HTTP addresses list for the
    topic (one connection per partition leader, or per nsqd upstream), refreshed
    every ``lookup_interval``. ``max_in_flight``, ``ordered``, ``start_at`` and
    ``trace`` override the same fields of ``settings``.

    Raises:
        NsqError: a first SUB to a given nsqd was refused (a bad name, an ordered
            topic subscribed without ``ordered``, ...).
        NsqConnectionError: a given nsqd cannot be reached (NsqTlsError: TLS failed).
        NsqDiscoveryError: no lookupd answered.
        NsqConfigError: bad settings or addresses.
    """
    chosen = settings or ConsumerSettings()
    if max_in_flight is not None:
        chosen = attrs.evolve(chosen, max_in_flight=max_in_flight)
    if ordered is not None:
        chosen = attrs.evolve(chosen, ordered=ordered)
    if start_at is not None:
        chosen = attrs.evolve(chosen, start_at=start_at)
    if trace is not None:
        chosen = attrs.evolve(chosen, trace=trace)
    addresses, lookupds = client_addresses(nsqd), client_addresses(lookupd)
    if not addresses and not lookupds:
        raise NsqConfigError("open_consumer needs nsqd TCP addresses or lookupd HTTP addresses")
    with single_errors():  # a refused first SUB comes out as the NsqError itself
        async with trio.open_nursery() as nursery:
            consumer = Consumer(topic, channel, chosen, options or ConnectionOptions(), nursery)
            nursery.start_soon(consumer._redistribute_forever)
            try:
                await _subscribe_first(consumer, addresses, partitions, lookupds)
                yield consumer
            finally:  # a graceful stop, even when cancelled: shielded, bounded
                try:
                    consumer.give_back_held()
                    with trio.CancelScope(shield=True) as closing:
                        closing.deadline = trio.current_time() + CLOSE_WAIT_TIMEOUT
                        await consumer.say_goodbye()
                finally:
                    consumer.release()
                    nursery.cancel_scope.cancel()


async def _subscribe_first(
    consumer: Consumer,
    addresses: Sequence[str],
    partitions: Sequence[int] | None,
    lookupds: Sequence[str],
) -> None:
    """The connections ``open_consumer`` returns with: the given nsqds (a refusal is
    raised), then whatever lookupd lists (refusals are retried in the background)."""
    for address in addresses:
        for partition in partitions if partitions is not None else [None]:
            await consumer.start(Target(address, partition), strict=True)
    if lookupds:
        settings = consumer.settings
        discovery = Discovery(lookupds, consumer.topic, "r", interval=settings.lookup_interval)
        consumer.discovery = discovery
        placement = await discovery.lookup()
        consumer.adopt(placement)
        for target in placement.targets:
            await consumer.start(target, strict=False)
        discovery.on_change = consumer.placed
        consumer._nursery.start_soon(discovery.run)
