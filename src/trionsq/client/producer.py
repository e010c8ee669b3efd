"""Publishing from Trio: one pipelined connection per nsqd, chosen round robin.

Concurrent publishes share the connection: each queues its command and waits for its
own answer (replies come back in order), and the connection's writer sends every
command queued meanwhile in one write, so many tasks publishing at once cost few
writes and no lock. A lost connection is opened again once and the publish retried
(at-least-once: a PUB whose answer was lost may be stored twice); an error frame is
raised as :class:`~.connection.NsqError`.
"""

from __future__ import annotations

import itertools
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from ..protocol.commands import Dpub, Mpub, Pub, PubExt, PubTrace
from .connection import Connection, ConnectionClosedError, open_connection
from .options import ConnectionOptions

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from ..protocol.client import Response, TracedReply
    from ..protocol.commands import Command, ExtMessage

__all__ = ["Producer", "open_producer"]


class Producer:
    """Publishes to the nsqd addresses it was opened with (see :func:`open_producer`)."""

    def __init__(
        self,
        addresses: Sequence[str],
        nursery: trio.Nursery,
        options: ConnectionOptions,
    ) -> None:
        self._addresses = list(addresses)
        self._nursery = nursery
        self._options = options
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, trio.Event] = {}
        self._turn = itertools.cycle(self._addresses)

    async def publish(self, topic: str, body: bytes, *, partition: int | None = None) -> None:
        """PUB (to ``partition`` with Youzan's extension)."""
        await self._request(Pub(topic, body, partition))

    async def publish_many(
        self, topic: str, bodies: Sequence[bytes], *, partition: int | None = None
    ) -> None:
        """MPUB: all stored, or none."""
        await self._request(Mpub(topic, tuple(bodies), partition))

    async def publish_deferred(self, topic: str, body: bytes, delay: float) -> None:
        """DPUB: delivered ``delay`` seconds from now."""
        await self._request(Dpub(topic, round(delay * 1000), body))

    async def publish_ext(
        self, topic: str, message: ExtMessage, *, partition: int | None = None
    ) -> None:
        """PUB_EXT: a body with Youzan's JSON header (an ext topic)."""
        await self._request(PubExt(topic, message, partition))

    async def publish_traced(
        self, topic: str, body: bytes, trace_id: int, *, partition: int | None = None
    ) -> TracedReply:
        """PUB_TRACE: where the message went (its id, trace id, offset and size)."""
        reply = await self._request(PubTrace(topic, trace_id, body, partition))
        return reply.traced()

    async def _request(self, command: Command) -> Response:
        address = next(self._turn)
        for attempt in range(2):
            connection = await self._connection(address)
            try:
                return await connection.request(command)
            except ConnectionClosedError:
                self._connections.pop(address, None)
                if attempt:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connection(self, address: str) -> Connection:
        """The open connection to ``address``; one task opens it, the others wait."""
        while True:
            connection = self._connections.get(address)
            if connection is not None and not connection.closed:
                return connection
            opening = self._connecting.get(address)
            if opening is None:
                break
            await opening.wait()
        opening = self._connecting[address] = trio.Event()
        try:
            opened: Connection = await self._nursery.start(self._serve, address)
            self._connections[address] = opened
            return opened
        finally:
            del self._connecting[address]
            opening.set()

    async def _serve(
        self, address: str, *, task_status: trio.TaskStatus[Connection] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with open_connection(address, self._options) as connection:
            task_status.started(connection)
            await trio.sleep_forever()


@asynccontextmanager
async def open_producer(
    addresses: Sequence[str] | str,
    *,
    options: ConnectionOptions | None = None,
) -> AsyncIterator[Producer]:
    """``async with open_producer("127.0.0.1:4150") as producer:``; every connection
    is a task of this block's nursery and ends with it."""
    chosen = [addresses] if isinstance(addresses, str) else list(addresses)
    if not chosen:
        raise ValueError("open_producer needs at least one nsqd address")
    async with trio.open_nursery() as nursery:
        producer = Producer(chosen, nursery, options or ConnectionOptions())
        try:
            yield producer
        finally:
            nursery.cancel_scope.cancel()
