"""Planning a read on the driver: which partitions, which byte ranges, how many tasks.

A read names topics (one, a list, or a pattern) and perhaps partitions; each
partition found becomes a range ``[start, end)`` of byte offsets, one task each, or
several with ``minPartitions`` (Spark's Kafka source's option): a range is then cut
where a message starts, into parts of about as many messages (the broker says where
``n`` messages from an offset end). Everything a task needs travels in its
:class:`PartitionRange` (picklable).
"""

from __future__ import annotations

import copy
import itertools
import re
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import attrs
from pyspark.sql.datasource import InputPartition

from .broker_http import (
    BrokerAnswerError,
    PageReader,
    PartitionOffsets,
    list_topics,
    locate_partitions,
    partition_offsets,
)
from .options import EARLIEST, LATEST, Bound, BrokerAccess, ReadOptions, SparkOptionError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "PartitionRange",
    "TopicPartition",
    "located",
    "make_range",
    "resolve",
    "shares",
    "split_ranges",
]

TopicPartition: TypeAlias = tuple[str, int]
K = TypeVar("K", bound=tuple[str, int] | tuple[str, int, int])


def _access(access: BrokerAccess | None) -> BrokerAccess:
    return access or BrokerAccess()


@attrs.define(slots=False, eq=False, on_setattr=attrs.setters.NO_OP)
class PartitionRange(InputPartition):
    """One task's work: records of one partition with offsets in [start, end).

    A plain object as Spark's ``InputPartition`` it extends (whose ``value`` is the
    partition): not slotted, compared by identity, attributes set as given."""

    topic: str
    partition: int
    address: str
    start: int
    end: int
    page_records: int = attrs.field(kw_only=True)
    page_bytes: int = attrs.field(kw_only=True)
    fail_on_data_loss: bool = attrs.field(kw_only=True)
    include_headers: bool = attrs.field(kw_only=True, default=True)
    access: BrokerAccess = attrs.field(kw_only=True, default=None, converter=_access)

    def __attrs_post_init__(self) -> None:
        super().__init__(self.partition)

    def __repr__(self) -> str:
        return f"PartitionRange({self.topic}/{self.partition} [{self.start}, {self.end}))"


def located(options: ReadOptions) -> dict[TopicPartition, PartitionOffsets]:
    """The partitions to read, with their brokers and current offsets."""
    access = options.access
    topics: tuple[str, ...] | list[str] = options.topics
    if options.pattern is not None:
        pattern = re.compile(options.pattern)
        every = list_topics(access, options.nsqd, options.lookupd)
        topics = [t for t in every if pattern.fullmatch(t) and not t.endswith("#ephemeral")]
    found: dict[TopicPartition, PartitionOffsets] = {}
    for topic in topics:
        # a topic a pattern matched may be deleted meanwhile: not an error then
        partitions = locate_partitions(
            access, topic, options.nsqd, options.lookupd, required=options.pattern is None
        )
        wanted = options.assigned.get(topic, options.partitions)
        if wanted is not None:
            missing = [p for p in wanted if p not in partitions]
            if missing:
                have = ", ".join(str(p) for p in sorted(partitions))
                raise SparkOptionError(
                    "assign" if options.assigned else "partitions",
                    f"topic {topic!r} has no partition {missing[0]} (it has {have})",
                )
            partitions = {p: partitions[p] for p in wanted}
        found.update({(topic, p): where for p, where in sorted(partitions.items())})
    return found


def resolve(
    option: str, bound: Bound, where: PartitionOffsets, topic: str, access: BrokerAccess
) -> int:
    """The byte offset ``bound`` names in one partition."""
    value = bound.for_partition(where.partition, topic)
    if value == EARLIEST:
        return where.earliest
    if value == LATEST:
        return where.latest
    if bound.timestamps:
        (answer,) = partition_offsets(
            access, where.address, topic, partition=where.partition, timestamp_ms=value
        )
        return answer.at_timestamp if answer.at_timestamp is not None else answer.latest
    if not where.earliest <= value <= where.latest:
        raise SparkOptionError(
            option,
            f"{topic!r} partition {where.partition}: offset {value} is outside what the broker"
            f" holds, [{where.earliest}, {where.latest}]",
        )
    if value < where.latest:
        with PageReader(access, where.address, topic, where.partition) as pages:
            try:
                pages.read(value, 1, 1)
            except BrokerAnswerError as error:
                raise SparkOptionError(
                    option, f"{topic!r} partition {where.partition}: {error.reason}"
                ) from error
    return value


def make_range(
    options: ReadOptions, topic: str, where: PartitionOffsets, start: int, end: int
) -> PartitionRange:
    return PartitionRange(
        topic,
        where.partition,
        where.address,
        start,
        end,
        page_records=options.page_records,
        page_bytes=options.page_bytes,
        fail_on_data_loss=options.fail_on_data_loss,
        include_headers=options.include_headers,
        access=options.access,
    )


def shares(limit: int, available: Mapping[K, int]) -> dict[K, int]:
    """``limit`` messages shared by partitions in proportion to what each has, to the
    message: rounded down, then one more to those with the largest remainders, so
    the shares add up to ``limit`` (or all there is, when that is less)."""
    total = sum(available.values())
    if total <= limit:
        return dict(available)
    given = {key: limit * count // total for key, count in available.items()}
    left = limit - sum(given.values())
    by_remainder = sorted(available, key=lambda key: (-(limit * available[key] % total), key))
    for key in by_remainder[:left]:
        given[key] += 1
    return given


def split_ranges(ranges: list[PartitionRange], min_partitions: int | None) -> list[PartitionRange]:
    """With ``minPartitions`` more than the ranges: each range cut into parts of
    about as many messages, where messages start, so there are that many tasks."""
    if min_partitions is None or not ranges or len(ranges) >= min_partitions:
        return ranges
    counts = {(r.topic, r.partition, r.start): _messages(r) for r in ranges}
    extra = shares(min_partitions - len(ranges), counts)
    out: list[PartitionRange] = []
    for task in ranges:
        count = counts[(task.topic, task.partition, task.start)]
        parts = min(count, 1 + extra[(task.topic, task.partition, task.start)])
        cuts = [_offset_after(task, count * n // parts) for n in range(1, parts)]
        edges = [task.start, *cuts, task.end]
        for start, end in itertools.pairwise(edges):
            if end > start:
                out.append(_part(task, start, end))
    return out


def _messages(task: PartitionRange) -> int:
    """Messages in a range (ids, holes included), from the ids at its two ends."""
    (start,) = partition_offsets(
        task.access, task.address, task.topic, partition=task.partition, after_offset=task.start
    )
    (end,) = partition_offsets(
        task.access, task.address, task.topic, partition=task.partition, after_offset=task.end
    )
    return max(0, (end.after_id or 0) - (start.after_id or 0))


def _offset_after(task: PartitionRange, count: int) -> int:
    (answer,) = partition_offsets(
        task.access,
        task.address,
        task.topic,
        partition=task.partition,
        after_offset=task.start,
        max_messages=max(1, count),
    )
    return min(task.end, answer.limit if answer.limit is not None else task.end)


def _part(task: PartitionRange, start: int, end: int) -> PartitionRange:
    """The part ``[start, end)`` of a task's range, as a task of its own."""
    part = copy.copy(task)
    part.start, part.end = start, end
    return part
