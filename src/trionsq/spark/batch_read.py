"""``spark.read``: the plan of a batch read (a byte range per partition) and the
reading of a range by a task. See source.py for how the source reads.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition

from .arrow_page import to_arrow
from .broker_http import BrokerAnswerError, PageReader, partition_offsets
from .options import SparkOptionError
from .planning import PartitionRange, located, make_range, resolve, split_ranges

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pyarrow as pa

    from .options import ReadOptions

__all__ = ["BatchReader", "read_partition", "starting_option"]

log = logging.getLogger("trionsq.spark")


def read_range(task: PartitionRange) -> Iterator[pa.RecordBatch]:
    """The records of ``task``'s range, a page at a time."""
    offset = task.start
    with PageReader(task.access, task.address, task.topic, task.partition) as pages:
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
            yield to_arrow(
                page, task.topic, task.partition, keep, include_headers=task.include_headers
            )
            offset = page.next_offset if keep == page.count else offsets[keep]


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A task's rows. Spark hands a source that planned no partition one
    ``InputPartition(None)`` of its own: that one reads nothing."""
    if isinstance(partition, PartitionRange):
        return read_range(partition)
    if type(partition) is InputPartition and partition.value is None:
        return iter(())
    raise TypeError(f"trionsq: not a partition this source planned: {partition!r}")


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
    (now,) = partition_offsets(task.access, task.address, task.topic, partition=task.partition)
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


def starting_option(options: ReadOptions) -> str:
    return "startingTimestamp" if options.starting.timestamps else "startingOffsets"


def _ending_option(options: ReadOptions) -> str:
    return "endingTimestamp" if options.ending.timestamps else "endingOffsets"


class BatchReader(DataSourceReader):
    """``spark.read``: the ranges are fixed when the query is planned."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        access = options.access
        ranges = []
        for (topic, _), where in located(options).items():
            start = resolve(starting_option(options), options.starting, where, topic, access)
            end = resolve(_ending_option(options), options.ending, where, topic, access)
            if end < start:
                raise SparkOptionError(
                    _ending_option(options),
                    f"{topic!r} partition {where.partition}: ends at {end}, before its start {start}",
                )
            if end > start:
                ranges.append(make_range(options, topic, where, start, end))
        self.ranges = split_ranges(ranges, options.min_partitions)

    def partitions(self) -> Sequence[InputPartition]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
