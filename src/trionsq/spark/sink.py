"""``df.write.format("trionsq")`` and ``writeStream``: rows published as messages.

Columns: ``body`` (binary or string, required; Kafka's ``value`` is taken for it),
and optionally ``topic`` (each row's topic when no ``topic`` option or path is
given, as in Kafka's sink, where the option wins), ``headers``
(map<string,string>), ``tag`` (Youzan's dispatch tag), ``key`` (stored with the
message as the ``##key`` header, read back as the source's ``key`` column, and
hashed to choose the partition as trionsq's and Youzan's producers hash it),
``partition`` (int, wins over ``key``) and ``idempotency_key``.

Exactly once. A Spark task that fails is run again from the start, and a stream
that restarts runs its last uncommitted micro-batch again; a sink's ``write()``
cannot know it is a repeat (it has no batch id and runs before the driver's
commit). So each message carries a deterministic ``##idempotency_key`` header and
the broker stores a key at most once per partition (docs/extensions.md,
"Idempotent publishing"; the broker keeps its keys across restarts): a repeated
task publishes the same keys and nothing twice. The key is the
``idempotency_key`` column when given, otherwise a digest of the write's identity
(the streaming query id and batch id, or one id per batch write job), the Spark
partition, the row's content and how many identical rows came before it in the
task. It depends on no row order, so a repeated shuffle that hands a task its rows
in another order still yields the same keys. A row with neither ``key`` nor
``partition`` goes to the partition its idempotency key hashes to, so a repeat also
sends it to the same partition. A broker that cannot be reached is retried, and
what was being sent is sent again, for up to ``brokerRetryTimeout``.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

import orjson
import trio
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructType,
)

from ..client.blocking import BlockingProducer, connect_producer
from ..client.connection import ConnectionClosedError, NsqError
from ..client.options import ConnectionOptions
from ..client.partitioning import partition_for_key
from ..protocol.client import encode_mpub_ext_parts
from ..protocol.commands import ExtMessage
from ..protocol.ext_header import DISPATCH_TAG_KEY, IDEMPOTENCY_KEY
from .broker_http import locate_partitions, retrying, tcp_address
from .columns import KEY_HEADER
from .keyed_chunks import idempotency_key, keyed_chunks

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import pyarrow as pa

    from .options import WriteOptions

__all__ = ["BatchWriter", "StreamWriter", "WriteSummary"]

_IDEMPOTENCY_BYTES: Final = IDEMPOTENCY_KEY.encode()
_EXPECTED: Final = {
    "body": (BinaryType, StringType),
    "topic": (StringType,),
    "headers": (MapType,),
    "tag": (StringType,),
    "key": (BinaryType, StringType),
    "partition": (IntegerType, LongType),
    "idempotency_key": (StringType,),
}
Chunk = list[ExtMessage] | tuple[int, bytes]
"""A batch of messages for one partition, or (how many, their MPUB_EXT parts)."""
IN_FLIGHT: Final = 4
"""MPUBs a task keeps in flight: enough to keep the broker busy while the next is built."""
_LOST: Final = (OSError, ConnectionClosedError, trio.BrokenResourceError, trio.ClosedResourceError)
"""What a publish raises when the broker cannot be reached or its connection broke."""
_QUERY_ID: Final = "sql.streaming.queryId"
_BATCH_ID: Final = "streaming.sql.batchId"


class WriteSummary(WriterCommitMessage):
    """What one task published (the broker may have dropped repeats of its keys)."""

    def __init__(self, published: int) -> None:
        self.published = published


def check_columns(schema: StructType, options: WriteOptions) -> None:
    """Refuse, before any task runs, columns the sink would not know what to do with."""
    names = schema.fieldNames()
    if "body" not in names and "value" not in names:
        raise ValueError("trionsq sink: the DataFrame needs a 'body' column (binary or string)")
    if "body" in names and "value" in names:
        raise ValueError("trionsq sink: give 'body' or Kafka's 'value', not both")
    if options.topic is None and "topic" not in names:
        raise ValueError(
            "trionsq sink: no topic: give the topic option (or save()'s path) or a 'topic' column"
        )
    for field in schema.fields:
        name = "body" if field.name == "value" else field.name
        kinds = _EXPECTED.get(name)
        if kinds is None:
            raise ValueError(
                f"trionsq sink: column {field.name!r} is not one of {', '.join(_EXPECTED)}"
            )
        if isinstance(field.dataType, NullType) and name == "body":
            raise ValueError("trionsq sink: the 'body' column is always null")
        if not isinstance(field.dataType, kinds):
            raise ValueError(
                f"trionsq sink: column {field.name!r} has type {field.dataType.simpleString()},"
                f" expected {' or '.join(kind.typeName() for kind in kinds)}"
            )


def _needs_ext(schema: StructType, options: WriteOptions) -> str | None:
    """What the write puts in headers (so the topic must be an ext topic), if anything."""
    if options.exactly_once:
        return "idempotency keys (exactlyOnce)"
    carried = [n for n in ("headers", "tag", "idempotency_key") if n in schema.fieldNames()]
    return f"the {', '.join(carried)} column(s)" if carried else None


class _Topic:
    """Where one topic's rows go: the TCP address of the broker holding each of its
    partitions, and whether it takes headers."""

    def __init__(self, options: WriteOptions, name: str) -> None:
        access = options.access
        located = locate_partitions(access, name, options.nsqd, options.lookupd)
        addresses = {where.address for where in located.values()}
        tcp = {address: tcp_address(access, address) for address in addresses}
        self.name = name
        self.brokers = {partition: tcp[where.address] for partition, where in located.items()}
        self.count = max(located) + 1
        self.ext = all(where.ext for where in located.values())


class _Destinations:
    """The topics of a write, found once per topic (on the driver for the ``topic``
    option, in the task for each new value of a ``topic`` column)."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.needs_ext = _needs_ext(schema, options)
        self.topics: dict[str, _Topic] = {}
        if options.topic is not None:
            self.get(options.topic)

    def get(self, name: str) -> _Topic:
        found = self.topics.get(name)
        if found is None:
            found = self.topics[name] = _Topic(self.options, name)
            if self.needs_ext is not None and not found.ext:
                raise ValueError(
                    f"trionsq sink: topic {name!r} is not an ext topic, so it cannot carry"
                    f" {self.needs_ext}: create it with ext=true, or write only 'body' with"
                    " exactlyOnce=false"
                )
        return found


class _TaskPublisher:
    """One task's producers (one per broker) and the rows it has turned into messages."""

    def __init__(self, options: WriteOptions, destinations: _Destinations, scope: str) -> None:
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

    def write(self, batches: Iterator[pa.RecordBatch]) -> WriteSummary:
        """Publish every batch; a batch is turned into messages while the one before
        it is being sent."""
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
        return WriteSummary(self.published)

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
            if built is not None:
                return [(name, partition, (n, parts)) for partition, n, parts in built]
            messages = self._keyed_bodies(name, batch.column(0).to_pylist())
        else:
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

    def _topic(self, name: object) -> _Topic:
        if name is None:
            name = self.options.topic
            if name is None:
                raise ValueError("trionsq sink: a row has a null 'topic' and no topic option")
        return self.destinations.get(str(name))

    def _keyed_bodies(
        self, name: str, bodies: list[bytes | str]
    ) -> dict[tuple[str, int], list[ExtMessage]]:
        """The common case, bodies alone, without a dict and a JSON encoder per row."""
        count = self.destinations.get(name).count
        out: dict[tuple[str, int], list[ExtMessage]] = {}
        key = self._key
        for value in bodies:
            body = value if isinstance(value, bytes) else value.encode()
            idempotency, spread = key(body, b"{}")
            header = b'{"%s":"%s"}' % (_IDEMPOTENCY_BYTES, idempotency.encode())
            out.setdefault((name, spread % count), []).append(ExtMessage(header, body))
        return out

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


class BatchWriter(DataSourceArrowWriter):
    """``df.write``: one id for the whole job, so retried tasks repeat their keys."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_columns(schema, options)
        self.options = options
        self.destinations = _Destinations(options, schema)
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        scope = f"job:{self.job}"
        return _TaskPublisher(self.options, self.destinations, scope).write(iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Nothing to do: every message is stored when its task ends."""

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Nothing to undo: a broker cannot take messages back; a retry repeats keys."""


class StreamWriter(DataSourceStreamArrowWriter):
    """``writeStream``: the query id and batch id (which a restart from the
    checkpoint keeps) name the write, so a replayed micro-batch repeats its keys."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_columns(schema, options)
        self.options = options
        self.destinations = _Destinations(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        context = TaskContext.get()
        query = context.getLocalProperty(_QUERY_ID) if context is not None else None
        batch = context.getLocalProperty(_BATCH_ID) if context is not None else None
        if query is None or batch is None:
            raise RuntimeError("trionsq sink: no streaming query id or batch id in the task")
        scope = f"stream:{query}:{batch}"
        return _TaskPublisher(self.options, self.destinations, scope).write(iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: the broker stored every message when its task ended."""

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo; the batch's replay repeats its keys."""
