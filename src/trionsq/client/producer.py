"""Publishing from Trio: pipelined connections per nsqd, targets found directly or
through nsqlookupd, concurrent publishes batched into MPUBs.

Concurrent requests share a connection: each queues its command and waits for its
own answer (replies come back in order), and the connection's writer sends every
command queued meanwhile in one write. Plain :meth:`Producer.publish` calls go
further: those for the same topic and partition wait in a bounded queue
(:mod:`.batching`) while one MPUB is out, and leave together in the next, so many
tasks publishing one message each cost one round trip per batch.

Retries follow Youzan's smart clients: a lost connection is opened again and the
request retried; E_FAILED_ON_NOT_LEADER, E_FAILED_ON_NOT_WRITABLE and
E_TOPIC_NOT_EXIST look the topic up again first; an error about the message
itself is raised at once (:class:`~.errors.NsqError`). At-least-once: a
publish whose answer was lost may be stored twice, unless its messages carry a
``##idempotency_key`` (ext topics; the broker then stores each key once).

A publish a topic's refusing publish limit turned down (``E_PUB_FAILED ... rate
limit exceeded``, trionsq's extension) stored nothing, so it is sent again after a
backoff, for at most :attr:`ProducerSettings.rate_limit_timeout`: it cannot be
stored twice. (A throttling limit, the broker's default, only delays the answer.)

Through an outage (the broker cannot be reached, the connection was lost, lookupd
does not answer, the partition's leader is moving), a publish is tried again after
the same backoff for :attr:`ProducerSettings.publish_timeout` seconds, when set (off
by default, as NSQ clients: a retry after a lost answer may store the message twice).
With :attr:`ProducerSettings.idempotency_keys`, ext messages get a
``##idempotency_key`` before their first send, so the broker stores each once
however often it is sent (docs/extensions.md, "Idempotent publishing").
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import attrs
import orjson
import trio

from ..config_values import checked_fields, seconds
from ..protocol.broker_errors import RATE_LIMITED
from ..protocol.commands import Dpub, ExtMessage, Mpub, MpubExt, Pub, PubExt, PubTrace
from ..protocol.ext_header import IDEMPOTENCY_KEY
from .backoff import Backoff
from .batching import Batcher
from .connection import Connection, client_addresses, open_connection
from .discovery import Discovery, Placement, Target
from .errors import (
    ConnectionClosedError,
    NsqClientError,
    NsqConfigError,
    NsqConnectionError,
    NsqDiscoveryError,
    NsqError,
    NsqSecurityError,
)
from .failover import FailoverRetry
from .groups import single_errors
from .options import ConnectionOptions
from .partitioning import partition_for_key
from .tracing import trace_published

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from ..addresses import Address
    from ..protocol.client import Response, TracedReply
    from ..protocol.commands import Command

__all__ = ["Producer", "ProducerSettings", "open_producer"]

log = logging.getLogger("trionsq.client")
ATTEMPTS: Final = 3
REFRESH_ERRORS: Final = frozenset(
    {"E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE", "E_TOPIC_NOT_EXIST"}
)
PUBLISH_FAILED: Final = frozenset({"E_PUB_FAILED", "E_MPUB_FAILED", "E_DPUB_FAILED"})
FIRST_BACKOFF: Final = 0.05
"""Seconds before the first retry of a rate-limited publish (a bucket holds 50 ms of
its rate) or one an outage failed; each retry waits twice as long, up to
:data:`MAX_BACKOFF`, jittered."""
MAX_BACKOFF: Final = 1.0


@attrs.frozen(field_transformer=checked_fields)
class ProducerSettings:
    """How a producer behaves."""

    batching: bool = True
    """Gather concurrent :meth:`Producer.publish` calls into MPUBs."""
    max_batch: int = 200
    """Most bodies in one gathered MPUB."""
    max_waiting: int = 10_000
    """Bodies that may wait per topic and partition; more publishers wait for room."""
    batches_out: int = 2
    """Gathered MPUBs per topic and partition out at once (pipelined on the
    connection): with 2, the publishers that came while one batch was out leave at
    once instead of after its answer. Blocking publishes from 64 threads, 1 against 2
    in alternating rounds on a shared 2-core machine: 19.8k/23.3k/35.1k against
    25.0k/25.7k/39.0k msg/s, 19-27 against 17-22 us of CPU a message; 64 tasks: the
    same either way (their batch is every task)."""
    connections_per_nsqd: int = 1
    lookup_interval: float = attrs.field(default=60.0, converter=seconds)
    partition_count: int | None = None
    """Publishing by key without lookupd: how many partitions the topics have."""
    trace: bool = False
    """Publish with PUB_TRACE and log where each message went (``trionsq.client.trace``)."""
    failover_timeout: float = attrs.field(default=10.0, converter=seconds)
    """Seconds a publish keeps retrying (looking the topic up again, backing off)
    while its partition's leader is gone or refuses it (client/failover.py)."""
    rate_limit_timeout: float = attrs.field(default=30.0, converter=seconds)
    """Seconds a publish refused by a topic's publish limit is retried (backing off
    from 50 ms to 1 s) before its error is raised."""
    publish_timeout: float = attrs.field(default=0.0, converter=seconds)
    """Seconds a publish keeps being tried through an outage (the broker unreachable,
    the connection lost, lookupd silent, a leader moving), backing off from 50 ms to
    1 s, before the last error is raised; counted from its first send (a gathered
    publish: its batch's). 0 (the default, as NSQ clients): raised at once. A retry
    after a lost answer may store a message twice, except keyed ext messages."""
    idempotency_keys: bool = False
    """Give every ext message (:meth:`Producer.publish_ext`,
    :meth:`Producer.publish_many_ext`) without a ``##idempotency_key`` a random one
    (32 hex digits) before its first send, so that however often it is sent, the
    broker stores it once (an ext topic on trionsq; the key stays in the header)."""


class Producer:
    """Publishes to the nsqd addresses or lookupds it was opened with (see
    :func:`open_producer`)."""

    def __init__(
        self,
        nsqd: Sequence[str],
        lookupd: Sequence[str],
        nursery: trio.Nursery,
        options: ConnectionOptions,
        settings: ProducerSettings,
    ) -> None:
        self._nsqd = [Target(address) for address in nsqd]
        self._lookupd = list(lookupd)
        self._nursery = nursery
        self._options = options
        self.settings = settings
        self.retries = 0
        self.rate_limited = 0
        """Publishes a refusing publish limit turned down, each sent again later."""
        self.outage_retries = 0
        """Publishes an outage failed, each tried again later (``publish_timeout``)."""
        self._connections: dict[tuple[str, int], Connection] = {}
        self._connecting: dict[tuple[str, int], trio.Event] = {}
        self._slots = itertools.cycle(range(settings.connections_per_nsqd))
        self._turns: dict[str, itertools.count[int]] = {}
        self._discoveries: dict[str, Discovery] = {}
        self._batchers: dict[tuple[str, Target], Batcher] = {}
        self._lost: set[str] = set()
        """Addresses whose connection was lost: the next one opened is logged."""

    # ---------------------------------------------------------------- publishing

    # twin: BlockingProducer.publish repeats this signature (it gathers from threads)
    async def publish(
        self,
        topic: str,
        body: bytes,
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
    ) -> None:
        """PUB one message (to ``partition``, or the partition ``key`` hashes to).

        Concurrent calls for the same place are sent together as one MPUB.
        """
        if self.settings.trace:
            await self.publish_traced(topic, body, 0, partition=partition, key=key)
            return
        if not self.settings.batching:
            await self._request(topic, partition, key, lambda t: Pub(topic, body, t.partition))
            return
        batcher = await self.batcher_for(topic, partition, key)
        await batcher.publish(body)

    async def batcher_for(
        self, topic: str, partition: int | None = None, key: bytes | str | None = None
    ) -> Batcher:
        """The queue gathering single publishes for where ``topic`` (``partition``,
        ``key``) goes next (for the blocking producer's threads)."""
        target = await self._target(topic, partition, key)
        batcher = self._batchers.get((topic, target))
        return batcher if batcher is not None else self._batcher(topic, target)

    async def publish_many(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
    ) -> None:
        """MPUB: all stored, or none."""
        batch = tuple(bodies)
        await self._request(topic, partition, key, lambda t: Mpub(topic, batch, t.partition))

    async def publish_deferred(self, topic: str, body: bytes, delay: float) -> None:
        """DPUB: delivered ``delay`` seconds from now."""
        await self._request(topic, None, None, lambda t: Dpub(topic, round(delay * 1000), body))

    async def publish_ext(
        self,
        topic: str,
        message: ExtMessage,
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
    ) -> None:
        """PUB_EXT: a body with Youzan's JSON header (an ext topic)."""
        if self.settings.idempotency_keys:
            message = with_idempotency_key(message)
        await self._request(topic, partition, key, lambda t: PubExt(topic, message, t.partition))

    async def publish_many_ext(
        self,
        topic: str,
        messages: Sequence[ExtMessage],
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
    ) -> None:
        """MPUB_EXT: bodies with Youzan's JSON headers (an ext topic), all stored or none.

        With a ``##idempotency_key`` in each header, a retry after a lost answer stores
        nothing twice: the broker keeps one message per key (docs/extensions.md).
        """
        batch = tuple(messages)
        if not batch:
            raise NsqConfigError("publish_many_ext needs at least one message")
        if self.settings.idempotency_keys:
            batch = tuple(map(with_idempotency_key, batch))
        await self._request(topic, partition, key, lambda t: MpubExt(topic, batch, t.partition))

    async def publish_encoded(self, topic: str, partition: int, command: bytes) -> None:
        """A publish to ``partition`` of ``topic`` encoded already (e.g. by
        :func:`~..protocol.client.encode_mpub_ext_parts`), sent and retried as any."""
        await self._request(topic, partition, None, lambda _: command)

    async def publish_traced(
        self,
        topic: str,
        body: bytes,
        trace_id: int,
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
    ) -> TracedReply:
        """PUB_TRACE: where the message went (its id, trace id, offset and size)."""
        where: list[tuple[Connection, Target]] = []

        def command(target: Target) -> Command:
            return PubTrace(topic, trace_id, body, target.partition)

        reply = await self._request(topic, partition, key, command, where)
        traced = reply.traced()
        if self.settings.trace:
            connection, target = where[-1]
            trace_published(connection, topic, target.partition, traced)
        return traced

    # ---------------------------------------------------------------- where to

    def _batcher(self, topic: str, target: Target) -> Batcher:
        settings = self.settings

        async def send(bodies: tuple[bytes, ...]) -> None:
            command: Command = (
                Pub(topic, bodies[0], target.partition)
                if len(bodies) == 1
                else Mpub(topic, bodies, target.partition)
            )
            await self._request(topic, target.partition, None, lambda _: command, pinned=target)

        batcher = Batcher(
            send,
            max_batch=settings.max_batch,
            max_waiting=settings.max_waiting,
            batches_out=settings.batches_out,
        )
        self._batchers[(topic, target)] = batcher
        self._nursery.start_soon(batcher.run)
        return batcher

    async def _placement(self, topic: str) -> Placement:
        discovery = self._discoveries.get(topic)
        if discovery is None:
            discovery = Discovery(self._lookupd, topic, "w", interval=self.settings.lookup_interval)
            await discovery.lookup()
            self._discoveries[topic] = discovery
            self._nursery.start_soon(discovery.run)
        return discovery.placement

    async def _target(self, topic: str, partition: int | None, key: bytes | str | None) -> Target:
        """Where the next request for ``topic`` goes."""
        targets: Sequence[Target] = self._nsqd
        count = self.settings.partition_count
        if self._lookupd:
            placement = await self._placement(topic)
            if placement.targets:
                targets, count = placement.targets, placement.partition_count
            elif not targets:  # upstream: a new topic lives wherever it is first published
                targets = await self._discoveries[topic].nodes()
        if not targets:
            raise NsqDiscoveryError(f"no nsqd to publish {topic!r} to")
        if key is not None:
            if count is None:
                raise NsqConfigError(
                    "publishing by key needs the partition count: use lookupd, "
                    "or ProducerSettings(partition_count=...)"
                )
            partition = partition_for_key(key, count)
        if partition is not None:
            owners = [t for t in targets if t.partition == partition]
            if owners:
                return owners[0]
            targets = [Target(t.address, partition) for t in targets if t.partition is None]
            if not targets:
                raise NsqDiscoveryError(f"no nsqd leads partition {partition} of {topic!r}")
        turn = self._turns.setdefault(topic, itertools.count())
        return targets[next(turn) % len(targets)]

    async def _request(
        self,
        topic: str,
        partition: int | None,
        key: bytes | str | None,
        command: Callable[[Target], Command | bytes],
        where: list[tuple[Connection, Target]] | None = None,
        *,
        pinned: Target | None = None,
    ) -> Response:
        """Send a request where it belongs, retrying as the error table says; again
        after a backoff while a topic's publish limit refuses it, or an outage fails
        it (with ``publish_timeout``)."""
        backoff = Backoff(FIRST_BACKOFF, MAX_BACKOFF)
        outage_ends = trio.current_time() + self.settings.publish_timeout
        limit_ends: float | None = None
        while True:
            try:
                return await self._attempts(topic, partition, key, command, where, pinned)
            except NsqClientError as error:
                limited = _rate_limited(error)
                if limited:
                    if limit_ends is None:
                        limit_ends = trio.current_time() + self.settings.rate_limit_timeout
                    delay = backoff.delay_before(limit_ends)
                elif self.settings.publish_timeout and _outage(error):
                    delay = backoff.delay_before(outage_ends)
                else:
                    raise
                if delay is None:
                    raise
                if limited:
                    self.rate_limited += 1
                else:
                    self.outage_retries += 1
                    log.warning("publish to %r failed: %s; next try in %.2fs", topic, error, delay)
                await trio.sleep(delay)

    async def _attempts(
        self,
        topic: str,
        partition: int | None,
        key: bytes | str | None,
        command: Callable[[Target], Command | bytes],
        where: list[tuple[Connection, Target]] | None,
        pinned: Target | None,
    ) -> Response:
        """One request, retried over lost connections and stale placements, and for
        up to ``failover_timeout`` while a replicated partition changes leader."""
        failover = FailoverRetry(self.settings.failover_timeout)
        attempt = 0
        while True:
            try:
                target = pinned or await self._target(topic, partition, key)
            except NsqDiscoveryError:  # a partition without a leader yet (being elected)
                if topic not in self._discoveries or not await self._again(
                    topic, attempt, failover, unreachable=True
                ):
                    raise
                attempt += 1
                continue
            slot = next(self._slots)
            try:
                connection = await self._connection(target.address, slot)
                reply = await connection.request(command(target))
            except NsqConnectionError as error:
                self._connections.pop((target.address, slot), None)
                if isinstance(error, NsqSecurityError):
                    raise
                unreachable = not isinstance(error, ConnectionClosedError)
                if not await self._again(topic, attempt, failover, unreachable=unreachable):
                    raise
            except NsqError as error:
                if error.code not in REFRESH_ERRORS:
                    raise
                if error.fatal:
                    self._connections.pop((target.address, slot), None)
                if not await self._again(topic, attempt, failover):
                    raise
                pinned = None  # the refreshed lookup decides again
            else:
                if where is not None:
                    where.append((connection, target))
                return reply
            attempt += 1
            self.retries += 1

    async def _again(
        self, topic: str, attempt: int, failover: FailoverRetry, *, unreachable: bool = False
    ) -> bool:
        """Whether to try again: at once for the first retries, then, for a topic
        found through lookupd (whose leaders may move), after a backoff while the
        failover window lasts; the topic is looked up again first. A broker named
        directly that cannot be reached fails at once, as always."""
        discovery = self._discoveries.get(topic)
        if discovery is None and (unreachable or attempt >= ATTEMPTS - 1):
            return False
        if attempt >= ATTEMPTS - 1 and not await failover.wait():
            return False
        if discovery is not None:
            with contextlib.suppress(NsqDiscoveryError):  # the last placement stands meanwhile
                await discovery.lookup()
        return True

    async def _connection(self, address: str, slot: int) -> Connection:
        """The open connection to ``address`` (pool ``slot``); one task opens it,
        the others wait for it."""
        key = (address, slot)
        while True:
            connection = self._connections.get(key)
            if connection is not None and not connection.closed:
                return connection
            opening = self._connecting.get(key)
            if opening is None:
                break
            await opening.wait()
        opening = self._connecting[key] = trio.Event()
        try:
            opened: Connection = await self._nursery.start(self._serve, address)
            self._connections[key] = opened
            return opened
        finally:
            del self._connecting[key]
            opening.set()

    async def _serve(
        self, address: str, *, task_status: trio.TaskStatus[Connection] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with open_connection(address, self._options) as connection:
            if address in self._lost:
                self._lost.discard(address)
                log.info("%s: producer connection back", address)
            task_status.started(connection)
            await connection.wait_closed()
            if connection.lost:  # logged as a WARNING by the connection
                self._lost.add(address)


def _rate_limited(error: NsqClientError) -> bool:
    """A refusing publish limit turned it down: nothing was stored."""
    return (
        isinstance(error, NsqError)
        and not error.fatal
        and error.code in PUBLISH_FAILED
        and RATE_LIMITED in str(error)
    )


def _outage(error: NsqClientError) -> bool:
    """The broker, its connection or lookupd failed, or the partition's leader is
    moving: worth trying again later (TLS and AUTH failures are not)."""
    if isinstance(error, NsqError):
        return error.code in REFRESH_ERRORS
    return isinstance(error, NsqConnectionError | NsqDiscoveryError) and not isinstance(
        error, NsqSecurityError
    )


def with_idempotency_key(message: ExtMessage) -> ExtMessage:
    """``message`` with a random ``##idempotency_key`` added to its JSON header,
    unless it has one (or its header is no JSON object: the broker refuses it)."""
    try:
        header = orjson.loads(message.header) if message.header else {}
    except orjson.JSONDecodeError:
        return message
    if not isinstance(header, dict) or IDEMPOTENCY_KEY in header:
        return message
    header[IDEMPOTENCY_KEY] = os.urandom(16).hex()
    return ExtMessage(orjson.dumps(header), message.body)


@asynccontextmanager
async def open_producer(
    nsqd: Address | Sequence[Address] = (),
    *,
    lookupd: Address | Sequence[Address] = (),
    options: ConnectionOptions | None = None,
    settings: ProducerSettings | None = None,
    trace: bool | None = None,
) -> AsyncIterator[Producer]:
    """``async with open_producer("127.0.0.1:4150") as producer:``, or
    ``open_producer(lookupd="127.0.0.1:4161")`` to publish wherever lookupd says
    each topic's partitions are led. Every connection is a task of this block's
    nursery and ends with it."""
    addresses, lookupds = client_addresses(nsqd), client_addresses(lookupd)
    if not addresses and not lookupds:
        raise NsqConfigError("open_producer needs nsqd TCP addresses or lookupd HTTP addresses")
    chosen = settings or ProducerSettings()
    if trace is not None:
        chosen = attrs.evolve(chosen, trace=trace)
    with single_errors():
        async with trio.open_nursery() as nursery:
            producer = Producer(
                addresses, lookupds, nursery, options or ConnectionOptions(), chosen
            )
            try:
                yield producer
            finally:
                nursery.cancel_scope.cancel()
