"""What one Spark task of the ``trionsq`` sink does: its rows to messages, and their
publishing (sink.py has the writers Spark calls and says how exactly once works).

Apart from sink.py so that only the tasks import the client and trio: the driver's
Python workers that create and commit a write (one each, started for the first
write of a session) load sink.py alone.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

import orjson
import trio
from pyspark import TaskContext

from ..client.blocking import BlockingProducer, connect_producer
from ..client.connection import ConnectionClosedError, NsqError
from ..client.options import ConnectionOptions
from ..client.partitioning import partition_for_key
from ..protocol.client import encode_mpub_ext_parts
from ..protocol.commands import ExtMessage
from ..protocol.ext_header import DISPATCH_TAG_KEY, IDEMPOTENCY_KEY
from .broker_http import retrying
from .columns import KEY_HEADER
from .keyed_chunks import idempotency_key, keyed_chunks

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import pyarrow as pa

    from .destinations import Destinations, Topic
    from .options import WriteOptions

__all__ = ["TaskPublisher"]

Chunk = list[ExtMessage] | tuple[int, bytes]
"""A batch of messages for one partition, or (how many, their MPUB_EXT parts)."""
IN_FLIGHT: Final = 4
"""MPUBs a task keeps in flight: enough to keep the broker busy while the next is built."""
_LOST: Final = (OSError, ConnectionClosedError, trio.BrokenResourceError, trio.ClosedResourceError)
"""What a publish raises when the broker cannot be reached or its connection broke."""


class TaskPublisher:
    """One task's producers (one per broker) and the rows it has turned into messages."""

    def __init__(self, options: WriteOptions, destinations: Destinations, scope: str) -> None:
        self.options = options
        self.destinations = destinations
        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        self.prefix = f"{scope}|{task}|".encode()
        self.seen: dict[bytes, int] = {}
        self.producers: dict[str, BlockingProducer] = {}
        self.opening = threading.Lock()
        self.pool = ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="trionsq-sink")
        self.published = 0
        self.spread = 0
        """Rows sent round robin (no key, partition or idempotency key)."""
        secret = options.access.auth_secret
        self.connection = ConnectionOptions(auth_secret=secret.encode() if secret else None)

    def producer(self, address: str) -> BlockingProducer:
        """The producer for the broker at ``address`` (opened on first use)."""
        with self.opening:
            producer = self.producers.get(address)
            if producer is None:
                producer = connect_producer(address, options=self.connection)
                self.producers[address] = producer
        return producer

    def write(self, batches: Iterator[pa.RecordBatch]) -> int:
        """Publish every batch; a batch is turned into messages while the one before
        it is being sent. Returns how many messages the task published."""
        try:
            sending: list[Future[int]] = []
            for batch in batches:
                chunks = self._chunks(batch)
                self._sent(sending)
                sending = [self.pool.submit(self._send, *chunk) for chunk in chunks]
            self._sent(sending)
        finally:
            self.pool.shutdown(cancel_futures=True)
            for producer in self.producers.values():
                producer.close()
        return self.published

    def _sent(self, sending: list[Future[int]]) -> None:
        """Wait for these sends; raises the first refusal."""
        for future in sending:
            self.published += future.result()

    def _key(self, body: bytes, extra: bytes) -> tuple[str, int]:
        """The row's idempotency key, and the partition it spreads the row to."""
        return idempotency_key(self.prefix, body, extra, self.seen)

    def _chunks(self, batch: pa.RecordBatch) -> list[tuple[str, int, Chunk]]:
        """The batch's rows as (topic, partition, chunk) of ``batchSize`` at most."""
        names = ["body" if name == "value" else name for name in batch.schema.names]
        if batch.column(names.index("body")).null_count:
            raise ValueError(
                "trionsq sink: a row has a null 'body' (nothing of its batch was sent)"
            )
        size = self.options.batch_size
        if names == ["body"] and self.options.exactly_once:
            name = self.options.topic
            assert name is not None  # noqa: S101 - no topic column
            count = self.destinations.get(name).count
            built = keyed_chunks(batch.column(0), self.prefix, self.seen, count, size)
            return [(name, partition, (n, parts)) for partition, n, parts in built]
        messages = self._messages(batch, names)
        return [
            (topic, partition, rows[start : start + size])
            for (topic, partition), rows in messages.items()
            for start in range(0, len(rows), size)
        ]

    def _messages(
        self, batch: pa.RecordBatch, names: list[str]
    ) -> dict[tuple[str, int], list[ExtMessage]]:
        columns = {name: batch.column(index).to_pylist() for index, name in enumerate(names)}
        rows = batch.num_rows
        none: list[object] = [None] * rows
        bodies = columns["body"]
        topics = columns.get("topic", none) if self.options.topic is None else none
        headers = columns.get("headers", none)
        tags = columns.get("tag", none)
        keys = columns.get("key", none)
        partitions = columns.get("partition", none)
        given = columns.get("idempotency_key", none)
        out: dict[tuple[str, int], list[ExtMessage]] = {}
        for row in range(rows):
            topic = self._topic(topics[row])
            body = _body(bodies[row])
            header: dict[str, object] = dict(headers[row] or ())
            if tags[row] is not None:
                header[DISPATCH_TAG_KEY] = tags[row]
            key = keys[row]
            if key is not None and topic.ext:
                header[KEY_HEADER] = _key_text(key)
            spread = None
            if self.options.exactly_once:
                idempotency = given[row]
                if idempotency is None:
                    extra = orjson.dumps(header, option=orjson.OPT_SORT_KEYS)
                    idempotency, spread = self._key(body, extra + topic.name.encode())
                header[IDEMPOTENCY_KEY] = idempotency
            partition = partitions[row]
            if partition is None:
                if key is not None:
                    partition = partition_for_key(key, topic.count)
                elif spread is not None:
                    partition = spread % topic.count
                else:
                    partition = self.spread % topic.count
                    self.spread += 1
            message = ExtMessage(orjson.dumps(header) if header else b"{}", body)
            out.setdefault((topic.name, partition), []).append(message)
        return out

    def _topic(self, name: object) -> Topic:
        if name is None:
            name = self.options.topic
            if name is None:
                raise ValueError("trionsq sink: a row has a null 'topic' and no topic option")
        return self.destinations.get(str(name))

    def _send(self, topic: str, partition: int, chunk: Chunk) -> int:
        """One chunk as one MPUB(_EXT), :data:`IN_FLIGHT` at a time (pipelined on each
        broker's connection), sent again (on a new connection) while the broker cannot
        be reached, up to ``brokerRetryTimeout``: a repeat stores nothing twice when
        the messages carry idempotency keys."""
        destination = self.destinations.get(topic)
        address = destination.brokers.get(partition)
        if address is None:
            raise ValueError(
                f"trionsq sink: topic {topic!r} has no partition {partition}"
                f" (it has {destination.count})"
            )
        publish = _publisher(topic, partition, chunk)

        def attempt() -> None:
            producer = self.producer(address)
            try:
                publish(producer)
            except _LOST as error:
                self._drop(address, producer)
                raise ConnectionError(str(error) or type(error).__name__) from error

        try:
            retrying(self.options.access, address, attempt)
        except NsqError as error:
            raise _explained(error, topic) from error
        return chunk[0] if isinstance(chunk, tuple) else len(chunk)

    def _drop(self, address: str, producer: BlockingProducer) -> None:
        """Forget a producer whose connection failed: the next attempt opens another."""
        with self.opening:
            if self.producers.get(address) is producer:
                del self.producers[address]
        producer.close()


def _publisher(topic: str, partition: int, chunk: Chunk) -> Callable[[BlockingProducer], None]:
    """How to publish a chunk: parts built in bulk as they are, bodies without
    headers as an MPUB, other messages as an MPUB_EXT."""
    if isinstance(chunk, tuple):
        command = encode_mpub_ext_parts(topic, partition, *chunk)
        return lambda producer: producer.publish_encoded(topic, partition, command)
    if all(message.header == b"{}" for message in chunk):
        bodies = [message.body for message in chunk]
        return lambda producer: producer.publish_many(topic, bodies, partition=partition)
    return lambda producer: producer.publish_many_ext(topic, chunk, partition=partition)


def _body(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise ValueError("trionsq sink: a row has a null 'body'")


def _key_text(key: bytes | str) -> str:
    if isinstance(key, str):
        return key
    try:
        return key.decode()
    except UnicodeDecodeError:
        raise ValueError(
            f"trionsq sink: a 'key' of {len(key)} bytes is not UTF-8 text (headers are JSON)"
        ) from None


def _explained(error: NsqError, topic: str) -> Exception:
    if error.code == "E_EXT_NOT_SUPPORT":
        return ValueError(
            f"trionsq sink: topic {topic!r} is not an ext topic, so it cannot carry headers"
            " or idempotency keys: create it with ext=true, or write only 'body' with"
            " exactlyOnce=false"
        )
    return RuntimeError(f"trionsq sink: publishing to {topic!r} failed: {error}")
