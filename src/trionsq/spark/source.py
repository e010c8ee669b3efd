"""``spark.read.format("trionsq")`` and ``spark.readStream``: a topic's partitions by offset.

The driver turns the options into one byte range per partition, [start, end), and
each task reads its range page by page from the broker that holds the partition
(``/partition/read``), cutting the last page at ``end``. A range names the same
records every time it is read (offsets are positions in an append-only log), so a
retried task yields the same rows, and a stream that restarts from its checkpoint
(where Spark keeps each micro-batch's ranges) reads every message exactly once.
Nothing here consumes a channel: readers are invisible to NSQ consumers.

Everything a task needs travels in its :class:`PartitionRange` (picklable); the
connection is opened inside ``read()``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .broker_http import (
    BrokerAnswerError,
    PageReader,
    PartitionOffsets,
    locate_partitions,
    partition_offsets,
    post,
)
from .columns import SCHEMA, to_arrow
from .options import (
    EARLIEST,
    LATEST,
    Bound,
    ReadOptions,
    SparkOptionError,
    parse_read_options,
    parse_write_options,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["PartitionRange", "TrionsqDataSource"]

log = logging.getLogger("trionsq.spark")

NAME: Final = "trionsq"


class PartitionRange(InputPartition):
    """One task's work: records of one partition with offsets in [start, end)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        address: str,
        start: int,
        end: int,
        *,
        page_records: int,
        page_bytes: int,
        fail_on_data_loss: bool,
    ) -> None:
        super().__init__(partition)
        self.topic = topic
        self.partition = partition
        self.address = address
        self.start = start
        self.end = end
        self.page_records = page_records
        self.page_bytes = page_bytes
        self.fail_on_data_loss = fail_on_data_loss

    def __repr__(self) -> str:
        return f"PartitionRange({self.topic}/{self.partition} [{self.start}, {self.end}))"


def read_range(task: PartitionRange) -> Iterator[pa.RecordBatch]:
    """The records of ``task``'s range, a page at a time."""
    offset = task.start
    with PageReader(task.address, task.topic, task.partition) as pages:
        while offset < task.end:
            try:
                page = pages.read(offset, task.page_records, task.page_bytes)
            except BrokerAnswerError as error:
                offset = _after_loss(task, offset, error)
                continue
            if not page.count:
                raise RuntimeError(
                    f"trionsq: partition {task.partition} of {task.topic!r} ends at"
                    f" {page.latest_offset}, before this range's end {task.end}"
                    " (was the topic deleted or emptied?)"
                )
            offsets = page.offsets
            keep = page.count
            if page.next_offset > task.end:
                keep = _count_below(offsets, task.end)
            yield to_arrow(page, task.topic, task.partition, keep)
            offset = page.next_offset if keep == page.count else offsets[keep]


def _task(partition: InputPartition) -> PartitionRange:
    if not isinstance(partition, PartitionRange):
        raise TypeError(f"trionsq: not a partition this source planned: {partition!r}")
    return partition


def _count_below(offsets: memoryview, end: int) -> int:
    low, high = 0, len(offsets)
    while low < high:
        middle = (low + high) // 2
        if offsets[middle] < end:
            low = middle + 1
        else:
            high = middle
    return low


def _after_loss(task: PartitionRange, offset: int, error: BrokerAnswerError) -> int:
    """Where to go on when the broker no longer holds ``offset``: an error, unless
    ``failOnDataLoss`` is false, then the oldest record still held."""
    if task.fail_on_data_loss or "no longer held" not in error.reason:
        raise RuntimeError(
            f"trionsq: partition {task.partition} of {task.topic!r} at offset {offset}:"
            f" {error.reason} (set failOnDataLoss=false to skip what retention deleted)"
        ) from error
    (now,) = partition_offsets(task.address, task.topic, option="nsqd", partition=task.partition)
    log.warning(
        "trionsq: partition %d of %r lost offsets [%d, %d) to retention; skipped",
        task.partition,
        task.topic,
        offset,
        now.earliest,
    )
    if now.earliest <= offset:
        raise RuntimeError(f"trionsq: {error.reason}") from error
    return now.earliest


# ------------------------------------------------------------------------ planning


def _partitions(options: ReadOptions) -> dict[int, PartitionOffsets]:
    """The partitions to read, with their brokers and current offsets."""
    found = locate_partitions(options.topic, options.nsqd, options.lookupd)
    if options.partitions is None:
        return found
    missing = [p for p in options.partitions if p not in found]
    if missing:
        have = ", ".join(str(p) for p in sorted(found))
        raise SparkOptionError(
            "partitions",
            f"topic {options.topic!r} has no partition {missing[0]} (it has {have})",
        )
    return {p: found[p] for p in options.partitions}


def _resolve(option: str, bound: Bound, where: PartitionOffsets, topic: str) -> int:
    """The byte offset ``bound`` names in one partition."""
    value = bound.for_partition(where.partition)
    if value == EARLIEST:
        return where.earliest
    if value == LATEST:
        return where.latest
    if bound.timestamps:
        (answer,) = partition_offsets(
            where.address, topic, option=option, partition=where.partition, timestamp_ms=value
        )
        return answer.at_timestamp if answer.at_timestamp is not None else answer.latest
    if not where.earliest <= value <= where.latest:
        raise SparkOptionError(
            option,
            f"partition {where.partition}: offset {value} is outside what the broker"
            f" holds, [{where.earliest}, {where.latest}]",
        )
    if value < where.latest:
        with PageReader(where.address, topic, where.partition) as pages:
            try:
                pages.read(value, 1, 1)
            except BrokerAnswerError as error:
                raise SparkOptionError(
                    option, f"partition {where.partition}: {error.reason}"
                ) from error
    return value


def _starting_option(options: ReadOptions) -> str:
    return "startingTimestamp" if options.starting.timestamps else "startingOffsets"


def _ending_option(options: ReadOptions) -> str:
    return "endingTimestamp" if options.ending.timestamps else "endingOffsets"


def _range(options: ReadOptions, where: PartitionOffsets, start: int, end: int) -> PartitionRange:
    return PartitionRange(
        options.topic,
        where.partition,
        where.address,
        start,
        end,
        page_records=options.page_records,
        page_bytes=options.page_bytes,
        fail_on_data_loss=options.fail_on_data_loss,
    )


class BatchReader(DataSourceReader):
    """``spark.read``: the ranges are fixed when the query is planned."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        ranges = []
        for where in _partitions(options).values():
            start = _resolve(_starting_option(options), options.starting, where, options.topic)
            end = _resolve(_ending_option(options), options.ending, where, options.topic)
            if end < start:
                raise SparkOptionError(
                    _ending_option(options),
                    f"partition {where.partition}: ends at {end}, before its start {start}",
                )
            if end > start:
                ranges.append(_range(options, where, start, end))
        self.ranges = ranges

    def partitions(self) -> Sequence[InputPartition]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(_task(partition))


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: offsets are ``{"<partition>": <byte offset>}`` in the
    checkpoint; each micro-batch reads from the last one's end to where
    :meth:`latestOffset` said."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.target: dict[str, int] | None = None
        """With ``trigger(availableNow=True)``: the ends of what there was at start."""
        self.located = _partitions(options)  # an unknown topic or partition fails now
        """The partitions, their brokers and offsets, as :meth:`latestOffset` last
        found them: planning a batch and committing it ask the brokers nothing more."""

    def prepareForTriggerAvailableNow(self) -> None:
        """Read up to what the partitions hold now, in as many micro-batches as
        ``maxMessagesPerTrigger`` makes it, and then stop."""
        self.located = _partitions(self.options)
        self.target = {str(key): where.latest for key, where in self.located.items()}

    # offsets -------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        options = self.options
        start = {
            str(where.partition): _resolve(
                _starting_option(options), options.starting, where, options.topic
            )
            for where in self.located.values()
        }
        self._hold(start)
        return start

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        now = self.located = _partitions(self.options)
        end = {}
        for key, where in now.items():
            # a partition that appeared since the stream started is read from its start
            first = start.get(str(key), where.earliest)
            latest = where.latest
            if self.target is not None:
                latest = min(latest, self.target.get(str(key), first))
            end[str(key)] = max(latest, first)
        if isinstance(limit, ReadMaxRows):
            end = self._limited(start, end, now, limit.max_rows)
        return end

    def _limited(
        self,
        start: dict[str, int],
        end: dict[str, int],
        now: dict[int, PartitionOffsets],
        max_rows: int,
    ) -> dict[str, int]:
        """At most ``max_rows`` messages in all: shared by the partitions in
        proportion to their backlog in bytes (each with something to read gets at
        least one), each cut where that many messages end."""
        backlog = {
            key: end[key] - start.get(key, now[int(key)].earliest)
            for key in end
            if end[key] > start.get(key, now[int(key)].earliest)
        }
        total = sum(backlog.values())
        limited = dict(end)
        for key, size in backlog.items():
            share = max(1, max_rows * size // total)
            where = now[int(key)]
            first = start.get(key, where.earliest)
            (answer,) = partition_offsets(
                where.address,
                self.options.topic,
                option="maxMessagesPerTrigger",
                partition=where.partition,
                after_offset=first,
                max_messages=share,
            )
            if answer.limit is not None:
                limited[key] = min(end[key], answer.limit)
        for key in start:
            limited.setdefault(key, start[key])
        return limited

    def reportLatestOffset(self) -> dict[str, int]:
        return {str(key): where.latest for key, where in self.located.items()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        located = self.located
        ranges = []
        for key, stop in end.items():
            where = located.get(int(key))
            first = start.get(key, where.earliest if where is not None else stop)
            if where is not None and stop > first:
                ranges.append(_range(self.options, where, first, stop))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(_task(partition))

    def commit(self, end: dict[str, int]) -> None:
        self._hold(end)

    def _hold(self, offsets: dict[str, int]) -> None:
        """With ``retainUnread``: move this stream's hold on each partition to what
        it has yet to read, so retention keeps it."""
        name = self.options.reader_name
        if name is None:
            return
        for key, offset in offsets.items():
            where = self.located.get(int(key))
            if where is not None:
                params = {
                    "topic": self.options.topic,
                    "partition": where.partition,
                    "reader": name,
                    "offset": offset,
                }
                post(where.address, "/partition/hold", params, option="retainUnread")


class TrionsqDataSource(DataSource):
    """``format("trionsq")``: read and write trionsq topics (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import BatchWriter

        return BatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import StreamWriter

        return StreamWriter(parse_write_options(self.options), schema)
