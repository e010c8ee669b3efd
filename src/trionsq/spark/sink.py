"""``df.write.format("trionsq")`` and ``writeStream``: rows published as messages.

Columns: ``body`` (binary or string, required), and optionally ``headers``
(map<string,string>), ``tag`` (Youzan's dispatch tag), ``key`` (partition key,
hashed as trionsq's and Youzan's producers hash it), ``partition`` (int, wins over
``key``) and ``idempotency_key``.

Exactly once. A Spark task that fails is run again from the start, and a stream
that restarts runs its last uncommitted micro-batch again; a sink's ``write()``
cannot know it is a repeat (it has no batch id and runs before the driver's
commit). So each message carries a deterministic ``##idempotency_key`` header and
the broker stores a key at most once per partition (docs/extensions.md,
"Idempotent publishing"): a repeated task publishes the same keys and nothing
twice. The key is the ``idempotency_key`` column when given, otherwise a digest
of the write's identity (the streaming query id and batch id, or one id per batch
write job), the Spark partition, the row's content and how many identical rows
came before it in the task. It depends on no row order, so a repeated shuffle that
hands a task its rows in another order still yields the same keys. A row with
neither ``key`` nor ``partition`` goes to the partition its idempotency key hashes
to, so a repeat also sends it to the same partition.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

import orjson
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, LongType, MapType, StringType, StructType

from ..client.blocking import BlockingProducer, connect_producer
from ..client.connection import NsqError
from ..client.partitioning import partition_for_key
from ..protocol.commands import ExtMessage
from ..protocol.ext_header import DISPATCH_TAG_KEY, IDEMPOTENCY_KEY
from .broker_http import locate_partitions, tcp_address

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pyarrow as pa

    from .options import WriteOptions

__all__ = ["BatchWriter", "StreamWriter", "WriteSummary"]

_IDEMPOTENCY_BYTES: Final = IDEMPOTENCY_KEY.encode()
_COLUMNS: Final = ("body", "headers", "tag", "key", "partition", "idempotency_key")
IN_FLIGHT: Final = 4
"""MPUBs a task keeps in flight: enough to keep the broker busy while the next is built."""
_QUERY_ID: Final = "sql.streaming.queryId"
_BATCH_ID: Final = "streaming.sql.batchId"


class WriteSummary(WriterCommitMessage):
    """What one task published (the broker may have dropped repeats of its keys)."""

    def __init__(self, published: int) -> None:
        self.published = published


def check_columns(schema: StructType) -> None:
    """Refuse, before any task runs, columns the sink would not know what to do with."""
    names = schema.fieldNames()
    if "body" not in names:
        raise ValueError("trionsq sink: the DataFrame needs a 'body' column (binary or string)")
    expected = {
        "body": (BinaryType, StringType),
        "headers": (MapType,),
        "tag": (StringType,),
        "key": (BinaryType, StringType),
        "partition": (IntegerType, LongType),
        "idempotency_key": (StringType,),
    }
    for field in schema.fields:
        kinds = expected.get(field.name)
        if kinds is None:
            raise ValueError(
                f"trionsq sink: column {field.name!r} is not one of {', '.join(_COLUMNS)}"
            )
        if not isinstance(field.dataType, kinds):
            raise ValueError(
                f"trionsq sink: column {field.name!r} has type {field.dataType.simpleString()},"
                f" expected {' or '.join(kind.typeName() for kind in kinds)}"
            )


class _Destination:
    """Where the write goes, worked out once on the driver: the TCP address of the
    broker holding each partition."""

    def __init__(self, options: WriteOptions) -> None:
        located = locate_partitions(options.topic, options.nsqd, options.lookupd)
        tcp = {address: tcp_address(address) for address in {w.address for w in located.values()}}
        self.brokers = {partition: tcp[where.address] for partition, where in located.items()}
        self.partition_count = max(located) + 1


class _TaskPublisher:
    """One task's producers (one per broker) and the rows it has turned into messages."""

    def __init__(self, options: WriteOptions, destination: _Destination, scope: str) -> None:
        self.options = options
        self.destination = destination
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

    def producer(self, partition: int) -> BlockingProducer:
        """The producer for the broker holding ``partition`` (opened on first use)."""
        address = self.destination.brokers.get(partition)
        if address is None:
            raise ValueError(
                f"trionsq sink: topic {self.options.topic!r} has no partition {partition}"
                f" (it has {self.destination.partition_count})"
            )
        with self.opening:
            producer = self.producers.get(address)
            if producer is None:
                producer = self.producers[address] = connect_producer(address)
        return producer

    def write(self, batches: Iterator[pa.RecordBatch]) -> WriteSummary:
        try:
            for batch in batches:
                self._publish(self._messages(batch))
        finally:
            self.pool.shutdown(cancel_futures=True)
            for producer in self.producers.values():
                producer.close()
        return WriteSummary(self.published)

    def _key(self, body: bytes, extra: bytes) -> tuple[str, int]:
        """The row's idempotency key, and the partition it spreads the row to."""
        fingerprint = hashlib.blake2b(self.prefix + body + extra, digest_size=16).digest()
        repeat = self.seen.get(fingerprint, 0)
        self.seen[fingerprint] = repeat + 1
        text = fingerprint.hex()
        return (f"{text}.{repeat}" if repeat else text), int.from_bytes(fingerprint[:4], "big")

    def _messages(self, batch: pa.RecordBatch) -> dict[int, list[ExtMessage]]:
        names = batch.schema.names
        if names == ["body"] and self.options.exactly_once:
            return self._keyed_bodies(batch.column(0).to_pylist())
        columns = {name: batch.column(name).to_pylist() for name in names}
        rows = batch.num_rows
        none: list[object] = [None] * rows
        bodies = columns["body"]
        headers = columns.get("headers", none)
        tags = columns.get("tag", none)
        keys = columns.get("key", none)
        partitions = columns.get("partition", none)
        given = columns.get("idempotency_key", none)
        count = self.destination.partition_count
        exactly_once = self.options.exactly_once
        out: dict[int, list[ExtMessage]] = {}
        for row in range(rows):
            body = _body(bodies[row])
            header: dict[str, object] = dict(headers[row] or ())
            tag = tags[row]
            if tag is not None:
                header[DISPATCH_TAG_KEY] = tag
            key = keys[row]
            spread = None
            if exactly_once:
                idempotency = given[row]
                if idempotency is None:
                    extra = orjson.dumps(header, option=orjson.OPT_SORT_KEYS)
                    if key is not None:
                        extra += key.encode() if isinstance(key, str) else key
                    idempotency, spread = self._key(body, extra)
                header[IDEMPOTENCY_KEY] = idempotency
            partition = partitions[row]
            if partition is None:
                if key is not None:
                    partition = partition_for_key(key, count)
                elif spread is not None:
                    partition = spread % count
                else:
                    partition = self.spread % count
                    self.spread += 1
            out.setdefault(partition, []).append(ExtMessage(orjson.dumps(header), body))
        return out

    def _keyed_bodies(self, bodies: list[object]) -> dict[int, list[ExtMessage]]:
        """The common case, bodies alone, without a dict and a JSON encoder per row."""
        count = self.destination.partition_count
        out: dict[int, list[ExtMessage]] = {}
        for value in bodies:
            body = _body(value)
            idempotency, spread = self._key(body, b"{}")
            header = b'{"%s":"%s"}' % (_IDEMPOTENCY_BYTES, idempotency.encode())
            out.setdefault(spread % count, []).append(ExtMessage(header, body))
        return out

    def _publish(self, messages: dict[int, list[ExtMessage]]) -> None:
        """Every chunk of ``batch_size`` as one MPUB(_EXT), :data:`IN_FLIGHT` at a time
        (they are pipelined on each broker's connection); raises the first refusal."""
        size = self.options.batch_size
        chunks = [
            (partition, batch[start : start + size])
            for partition, batch in messages.items()
            for start in range(0, len(batch), size)
        ]
        for published in self.pool.map(lambda job: self._send(*job), chunks):
            self.published += published

    def _send(self, partition: int, chunk: list[ExtMessage]) -> int:
        topic = self.options.topic
        producer = self.producer(partition)
        try:
            if all(message.header == b"{}" for message in chunk):
                bodies = [message.body for message in chunk]
                producer.publish_many(topic, bodies, partition=partition)
            else:
                producer.publish_many_ext(topic, chunk, partition=partition)
        except NsqError as error:
            raise _explained(error, topic) from error
        return len(chunk)


def _body(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise ValueError("trionsq sink: a row has a null 'body'")


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
        check_columns(schema)
        self.options = options
        self.destination = _Destination(options)
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        return _TaskPublisher(self.options, self.destination, f"job:{self.job}").write(iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Nothing to do: every message is stored when its task ends."""

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Nothing to undo: a broker cannot take messages back; a retry repeats keys."""


class StreamWriter(DataSourceStreamArrowWriter):
    """``writeStream``: the query id and batch id (which a restart from the
    checkpoint keeps) name the write, so a replayed micro-batch repeats its keys."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_columns(schema)
        self.options = options
        self.destination = _Destination(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        context = TaskContext.get()
        query = context.getLocalProperty(_QUERY_ID) if context is not None else None
        batch = context.getLocalProperty(_BATCH_ID) if context is not None else None
        if query is None or batch is None:
            raise RuntimeError("trionsq sink: no streaming query id or batch id in the task")
        scope = f"stream:{query}:{batch}"
        return _TaskPublisher(self.options, self.destination, scope).write(iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: the broker stored every message when its task ended."""

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo; the batch's replay repeats its keys."""
