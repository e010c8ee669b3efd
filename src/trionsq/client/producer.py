"""Publishing from Trio: pipelined connections per nsqd, targets found directly or
through nsqlookupd, concurrent publishes batched into MPUBs.

Concurrent requests share a connection: each queues its command and waits for its
own answer (replies come back in order), and the connection's writer sends every
command queued meanwhile in one write. Plain :meth:`Producer.publish` calls go
further: those for the same topic and partition wait in a bounded queue
(:mod:`.batching`) while one MPUB is out, and leave together in the next, so many
tasks publishing one message each cost one round trip per batch.

Retries follow seed 003's table: a lost connection is opened again and the
request retried; E_FAILED_ON_NOT_LEADER, E_FAILED_ON_NOT_WRITABLE and
E_TOPIC_NOT_EXIST look the topic up again first; an error about the message
itself is raised at once (:class:`~.connection.NsqError`). At-least-once: a
publish whose answer was lost may be stored twice, unless its messages carry a
``##idempotency_key`` (ext topics; the broker then stores each key once).

A publish a topic's refusing publish limit turned down (``E_PUB_FAILED ... rate
limit exceeded``, trionsq's extension) stored nothing, so it is sent again after a
backoff, for at most :attr:`ProducerSettings.rate_limit_timeout`: it cannot be
stored twice. (A throttling limit, the broker's default, only delays the answer.)
"""

from __future__ import annotations

import contextlib
import itertools
import random
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..protocol.broker_errors import RATE_LIMITED
from ..protocol.commands import Dpub, Mpub, MpubExt, Pub, PubExt, PubTrace
from .batching import Batcher
from .connection import Connection, ConnectionClosedError, NsqError, open_connection
from .discovery import Discovery, LookupError_, Placement, Target
from .failover import FailoverRetry
from .groups import single_errors
from .options import ConnectionOptions
from .partitioning import partition_for_key
from .tracing import trace_published

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from ..protocol.client import Response, TracedReply
    from ..protocol.commands import Command, ExtMessage

__all__ = ["Producer", "ProducerSettings", "open_producer"]

ATTEMPTS: Final = 3
REFRESH_ERRORS: Final = frozenset(
    {"E_FAILED_ON_NOT_LEADER", "E_FAILED_ON_NOT_WRITABLE", "E_TOPIC_NOT_EXIST"}
)
PUBLISH_FAILED: Final = frozenset({"E_PUB_FAILED", "E_MPUB_FAILED", "E_DPUB_FAILED"})
FIRST_BACKOFF: Final = 0.05
"""Seconds before the first retry of a rate-limited publish (a bucket holds 50 ms of
its rate); each retry waits twice as long, up to :data:`MAX_BACKOFF`, jittered."""
MAX_BACKOFF: Final = 1.0


@attrs.frozen
class ProducerSettings:
    """How a producer behaves."""

    batching: bool = True
    """Gather concurrent :meth:`Producer.publish` calls into MPUBs."""
    max_batch: int = 200
    """Most bodies in one gathered MPUB."""
    max_waiting: int = 10_000
    """Bodies that may wait per topic and partition; more publishers wait for room."""
    connections_per_nsqd: int = 1
    lookup_interval: float = 60.0
    partition_count: int | None = None
    """Publishing by key without lookupd: how many partitions the topics have."""
    trace: bool = False
    """Publish with PUB_TRACE and log where each message went (``trionsq.client.trace``)."""
    failover_timeout: float = 10.0
    """Seconds a publish keeps retrying (looking the topic up again, backing off)
    while its partition's leader is gone or refuses it (client/failover.py)."""
    rate_limit_timeout: float = 30.0
    """Seconds a publish refused by a topic's publish limit is retried (backing off
    from 50 ms to 1 s) before its error is raised."""


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
        self._connections: dict[tuple[str, int], Connection] = {}
        self._connecting: dict[tuple[str, int], trio.Event] = {}
        self._slots = itertools.cycle(range(settings.connections_per_nsqd))
        self._turns: dict[str, itertools.count[int]] = {}
        self._discoveries: dict[str, Discovery] = {}
        self._batchers: dict[tuple[str, Target], Batcher] = {}

    # ---------------------------------------------------------------- publishing

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
        target = await self._target(topic, partition, key)
        batcher = self._batchers.get((topic, target))
        if batcher is None:
            batcher = self._batcher(topic, target)
        await batcher.publish(body)

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
            raise ValueError("publish_many_ext needs at least one message")
        await self._request(topic, partition, key, lambda t: MpubExt(topic, batch, t.partition))

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

        batcher = Batcher(send, max_batch=settings.max_batch, max_waiting=settings.max_waiting)
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
            raise LookupError_(f"no nsqd to publish {topic!r} to")
        if key is not None:
            if count is None:
                raise ValueError(
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
                raise LookupError_(f"no nsqd leads partition {partition} of {topic!r}")
        turn = self._turns.setdefault(topic, itertools.count())
        return targets[next(turn) % len(targets)]

    async def _request(
        self,
        topic: str,
        partition: int | None,
        key: bytes | str | None,
        command: Callable[[Target], Command],
        where: list[tuple[Connection, Target]] | None = None,
        *,
        pinned: Target | None = None,
    ) -> Response:
        """Send a request where it belongs, retrying as the error table says, and
        again after a backoff while a topic's publish limit refuses it."""
        backoff, give_up = FIRST_BACKOFF, None
        while True:
            try:
                return await self._attempts(topic, partition, key, command, where, pinned)
            except NsqError as error:
                if (
                    error.fatal
                    or error.code not in PUBLISH_FAILED
                    or RATE_LIMITED not in str(error)
                ):
                    raise
                now = trio.current_time()
                if give_up is None:
                    give_up = now + self.settings.rate_limit_timeout
                delay = backoff * random.uniform(0.5, 1.0)  # noqa: S311 - jitter
                if now + delay > give_up:
                    raise
                self.rate_limited += 1
                await trio.sleep(delay)
                backoff = min(2 * backoff, MAX_BACKOFF)

    async def _attempts(
        self,
        topic: str,
        partition: int | None,
        key: bytes | str | None,
        command: Callable[[Target], Command],
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
            except LookupError_:  # a partition without a leader yet (being elected)
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
            except (ConnectionClosedError, OSError) as error:
                self._connections.pop((target.address, slot), None)
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
            with contextlib.suppress(LookupError_):  # the last placement stands meanwhile
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
            task_status.started(connection)
            await connection.wait_closed()


@asynccontextmanager
async def open_producer(
    nsqd: Sequence[str] | str = (),
    *,
    lookupd: Sequence[str] | str = (),
    options: ConnectionOptions | None = None,
    settings: ProducerSettings | None = None,
    trace: bool | None = None,
) -> AsyncIterator[Producer]:
    """``async with open_producer("127.0.0.1:4150") as producer:``, or
    ``open_producer(lookupd="127.0.0.1:4161")`` to publish wherever lookupd says
    each topic's partitions are led. Every connection is a task of this block's
    nursery and ends with it."""
    addresses = [nsqd] if isinstance(nsqd, str) else list(nsqd)
    lookupds = [lookupd] if isinstance(lookupd, str) else list(lookupd)
    if not addresses and not lookupds:
        raise ValueError("open_producer needs nsqd TCP addresses or lookupd HTTP addresses")
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
