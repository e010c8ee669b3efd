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

This module is what Spark calls on the driver (the checks, the writers, their
commit); what a task does with its rows is sink_task.py's, and where they go
(each topic's brokers) destinations.py's.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final

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

from .destinations import Destinations

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pyarrow as pa

    from .options import WriteOptions

__all__ = ["BatchWriter", "StreamWriter", "WriteSummary", "check_columns"]

_EXPECTED: Final = {
    "body": (BinaryType, StringType),
    "topic": (StringType,),
    "headers": (MapType,),
    "tag": (StringType,),
    "key": (BinaryType, StringType),
    "partition": (IntegerType, LongType),
    "idempotency_key": (StringType,),
}
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


class BatchWriter(DataSourceArrowWriter):
    """``df.write``: one id for the whole job, so retried tasks repeat their keys."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_columns(schema, options)
        self.options = options
        self.destinations = Destinations(options, schema)
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        from .sink_task import TaskPublisher  # the client and trio: in tasks only

        scope = f"job:{self.job}"
        return WriteSummary(TaskPublisher(self.options, self.destinations, scope).write(iterator))

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
        self.destinations = Destinations(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        context = TaskContext.get()
        query = context.getLocalProperty(_QUERY_ID) if context is not None else None
        batch = context.getLocalProperty(_BATCH_ID) if context is not None else None
        if query is None or batch is None:
            raise RuntimeError("trionsq sink: no streaming query id or batch id in the task")
        from .sink_task import TaskPublisher

        scope = f"stream:{query}:{batch}"
        return WriteSummary(TaskPublisher(self.options, self.destinations, scope).write(iterator))

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: the broker stored every message when its task ended."""

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo; the batch's replay repeats its keys."""
