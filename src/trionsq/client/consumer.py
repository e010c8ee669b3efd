"""Consuming from Trio: one connection per nsqd (and partition), messages as an async
iterator, acknowledgements that only queue bytes.

Each connection subscribes, sets its share of ``max_in_flight`` as RDY (as go-nsq
divides it, at least 1 each), and hands every message of a read to the consumer in
one list. Iterating takes them from one queue without a scheduler pass while any
are waiting, so a burst is handled in one turn and its FINs leave in one write. A
lost connection is opened again after a jittered, capped backoff; what it held is
redelivered by the broker (at-least-once).
"""

from __future__ import annotations

import logging
import random
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import trio

from ..protocol.client import encode_fin, encode_req, encode_touch
from ..protocol.commands import Rdy, Sub
from .connection import Connection, ConnectionClosedError, NsqError, open_connection
from .options import ConnectionOptions

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from ..protocol.message import Message

__all__ = ["ClientMessage", "Consumer", "open_consumer"]

log = logging.getLogger("trionsq.client")
BACKOFF_FIRST: Final = 0.1
BACKOFF_MAX: Final = 10.0


class ClientMessage:
    """A delivered message and what its consumer may answer (each at most once)."""

    __slots__ = ("_connection", "message", "responded")

    def __init__(self, message: Message, connection: Connection) -> None:
        self.message = message
        self._connection = connection
        self.responded = False

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def id(self) -> bytes:
        return self.message.id

    @property
    def attempts(self) -> int:
        return self.message.attempts

    def finish(self) -> None:
        """FIN: done with it. Queued, not awaited."""
        self._respond(encode_fin(self.message.id))

    def requeue(self, delay: float = 0.0) -> None:
        """REQ: deliver it again after ``delay`` seconds."""
        self._respond(encode_req(self.message.id, round(delay * 1000)))

    def touch(self) -> None:
        """TOUCH: more time before the broker redelivers it (may be repeated)."""
        self._connection.send_bytes(encode_touch(self.message.id))

    def _respond(self, command: bytes) -> None:
        if self.responded:
            raise RuntimeError("this message was already finished or requeued")
        self.responded = True
        if not self._connection.closed:  # else the broker redelivers it anyway
            self._connection.send_bytes(command)


class Consumer:
    """Messages of one topic's channel (see :func:`open_consumer`)."""

    def __init__(self, topic: str, channel: str, max_in_flight: int) -> None:
        self.topic = topic
        self.channel = channel
        self.max_in_flight = max_in_flight
        self.reconnects = 0
        self._waiting: deque[ClientMessage] = deque()
        self._arrived = trio.Event()

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ClientMessage:
        waiting = self._waiting
        while not waiting:
            await self._arrived.wait()
            self._arrived = trio.Event()
        return waiting.popleft()

    def _received(self, connection: Connection, messages: list[Message]) -> None:
        self._waiting.extend(ClientMessage(message, connection) for message in messages)
        self._arrived.set()

    async def _serve(
        self,
        address: str,
        partition: int | None,
        rdy: int,
        options: ConnectionOptions,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep one subscribed connection to ``address`` open, reconnecting on loss.

        ``started`` once the first SUB is answered; a refused first SUB is raised.
        """
        backoff = BACKOFF_FIRST
        first: trio.TaskStatus[None] | None = task_status
        while True:
            try:
                async with open_connection(
                    address,
                    options,
                    on_messages=lambda messages: self._received(connection, messages),
                    extended=options.identify.extend_support,
                ) as connection:
                    await connection.request(Sub(self.topic, self.channel, partition))
                    connection.send(Rdy(rdy))
                    if first is not None:
                        first.started()
                        first = None
                    backoff = BACKOFF_FIRST
                    await connection.wait_closed()
            except (OSError, ConnectionClosedError) as error:
                if first is not None:
                    raise
                log.info("%s: consumer connection lost: %s", address, error)
            except NsqError as error:
                if first is not None:
                    raise
                log.warning("%s: %s", address, error)
            self.reconnects += 1
            await trio.sleep(backoff * random.uniform(0.5, 1.0))  # noqa: S311 - jitter
            backoff = min(backoff * 2, BACKOFF_MAX)


@asynccontextmanager
async def open_consumer(
    topic: str,
    channel: str,
    addresses: Sequence[str] | str,
    *,
    max_in_flight: int = 200,
    partitions: Sequence[int] | None = None,
    options: ConnectionOptions | None = None,
) -> AsyncIterator[Consumer]:
    """``async with open_consumer("t", "c", "127.0.0.1:4150") as consumer:`` then
    ``async for message in consumer: ...; message.finish()``.

    One connection per address, or per address and partition when ``partitions``
    names Youzan partitions; ``max_in_flight`` is shared among them as RDY.

    Raises:
        NsqError: the first SUB was refused (a bad name, an ordered topic, ...).
    """
    chosen = [addresses] if isinstance(addresses, str) else list(addresses)
    targets: list[tuple[str, int | None]] = [
        (address, partition)
        for address in chosen
        for partition in (partitions if partitions is not None else [None])
    ]
    if not targets:
        raise ValueError("open_consumer needs at least one nsqd address")
    consumer = Consumer(topic, channel, max_in_flight)
    rdy = max(1, max_in_flight // len(targets))
    async with trio.open_nursery() as nursery:
        for address, partition in targets:
            await nursery.start(
                consumer._serve, address, partition, rdy, options or ConnectionOptions()
            )
        try:
            yield consumer
        finally:
            nursery.cancel_scope.cancel()
