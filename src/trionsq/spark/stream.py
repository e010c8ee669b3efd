"""``spark.readStream.format("trionsq")``: micro-batches of byte ranges, offsets in
Spark's checkpoint.

Offsets are ``{"<partition>": <byte offset>}`` for one topic, and Kafka's
``{"<topic>": {"<partition>": <byte offset>}}`` for several or a pattern. Each
micro-batch reads from the last one's end to where :meth:`StreamReader.latestOffset`
said. The limits count messages (an offset is a byte position): the broker says
how many follow an offset (``after_id``) and where ``n`` of them end
(``limit_offset``), so ``maxMessagesPerTrigger`` is shared by the partitions to the
message, and ``minMessagesPerTrigger`` waits for that many, up to
``maxTriggerDelay``, as Kafka's source does.

Spark's Python data source API gives a stream reader no ``metrics`` of its own
(pyspark 4.3's ``PythonMicroBatchStream`` does not implement ReportsSourceMetrics),
so how far behind the query is, in messages, goes where progress shows what a
source reports: the ``latestOffset`` of ``query.lastProgress["sources"]``, under
``"metrics"`` (``minOffsetsBehindLatest``, ``avgOffsetsBehindLatest``,
``maxOffsetsBehindLatest``, named as Kafka's source names them), and the driver's
log.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .batch_read import read_partition, starting_option
from .broker_http import PartitionOffsets, partition_offsets, post
from .options import parse_read_options
from .planning import TopicPartition, located, make_range, resolve, shares, split_ranges

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    import pyarrow as pa

    from .options import ReadOptions

__all__ = ["StreamReader"]

log = logging.getLogger("trionsq.spark")

Offsets = dict[TopicPartition, int]
METRICS: Final = "metrics"


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``. Its options are checked, and the partitions found, when
    it is made; a failure then is raised at Spark's first call instead (pyspark
    4.3 turns an exception in a stream reader's constructor into a second one)."""

    def __init__(self, raw_options: Mapping[str, str]) -> None:
        self.failure: Exception | None = None
        self.target: Offsets | None = None
        """With ``trigger(availableNow=True)``: the ends of what there was at start."""
        self.located: dict[TopicPartition, PartitionOffsets] = {}
        """The partitions, their brokers and offsets, as :meth:`latestOffset` last
        found them: planning a batch and committing it ask the brokers nothing more."""
        self.behind: dict[TopicPartition, int] = {}
        """Messages each partition had past the end of the last batch planned."""
        self.last_trigger = time.monotonic()
        try:
            self.options: ReadOptions = parse_read_options(raw_options, streaming=True)
            self.located = located(self.options)  # an unknown topic or partition fails now
        except Exception as error:  # raised again at the first call
            self.failure = error

    def _checked(self) -> ReadOptions:
        if self.failure is not None:
            raise self.failure
        return self.options

    def prepareForTriggerAvailableNow(self) -> None:
        """Read up to what the partitions hold now, in as many micro-batches as
        ``maxMessagesPerTrigger`` makes it, and then stop."""
        self.located = located(self._checked())
        self.target = {key: where.latest for key, where in self.located.items()}

    # offsets -------------------------------------------------------------------

    def encode(self, offsets: Offsets) -> dict[str, object]:
        """Offsets as the checkpoint keeps them (module docstring)."""
        if not self._checked().nested:
            return {str(partition): offset for (_, partition), offset in offsets.items()}
        nested: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in offsets.items():
            nested.setdefault(topic, {})[str(partition)] = offset
        return dict(nested)

    def decode(self, document: Mapping[str, object]) -> Offsets:
        """A checkpoint's offsets, in either form."""
        options = self._checked()
        found: Offsets = {}
        for key, value in document.items():
            if isinstance(value, dict):
                found.update({(key, int(p)): int(o) for p, o in value.items()})
            elif isinstance(value, int) and key.isdigit():
                found[(options.topic, int(key))] = value
        return found

    def initialOffset(self) -> dict[str, object]:
        options = self._checked()
        start = {
            key: resolve(starting_option(options), options.starting, where, key[0], options.access)
            for key, where in self.located.items()
        }
        self._hold(start)
        return self.encode(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._checked().max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, object], limit: ReadLimit) -> dict[str, object]:
        options = self._checked()
        now = self.located = located(options)
        begin = self.decode(start)
        end: Offsets = {}
        for key, where in now.items():
            # a partition that appeared since the stream started is read from its start
            first = begin.get(key, where.earliest)
            latest = where.latest
            if self.target is not None:
                latest = min(latest, self.target.get(key, first))
            end[key] = max(latest, first)
        most = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        least = options.min_messages_per_trigger if self.target is None else None
        if most is not None or least is not None:
            end = self._limited(begin, end, now, most, least)
        else:
            self.behind = dict.fromkeys(end, 0)
        for key, offset in begin.items():
            end.setdefault(key, offset)
        if end != begin:
            self.last_trigger = time.monotonic()
        return self.encode(end)

    def _limited(
        self,
        begin: Offsets,
        end: Offsets,
        now: dict[TopicPartition, PartitionOffsets],
        most: int | None,
        least: int | None,
    ) -> Offsets:
        """At most ``most`` messages in all, shared by the partitions in proportion
        to their backlog in messages; none before ``least`` are there, unless
        ``maxTriggerDelay`` passed since the last batch."""
        available: dict[TopicPartition, int] = {}
        for key, stop in end.items():
            where = now[key]
            first = begin.get(key, where.earliest)
            if stop > first:
                # counted to the end ``now`` found (a later message is not in this batch)
                after = self._after(key, first).after_id
                available[key] = max(0, where.next_id - (after or where.next_id))
        total = sum(available.values())
        waited = time.monotonic() - self.last_trigger
        if least is not None and total < least and waited < self.options.max_trigger_delay:
            self.behind = available
            return {key: begin.get(key, now[key].earliest) for key in end}
        taken = shares(most, available) if most is not None else available
        limited = dict(end)
        for key, count in taken.items():
            if count < available[key]:
                first = begin.get(key, now[key].earliest)
                limit = self._after(key, first, count).limit if count else first
                limited[key] = min(end[key], limit if limit is not None else end[key])
        self.behind = {key: available.get(key, 0) - taken.get(key, 0) for key in end}
        return limited

    def _after(self, key: TopicPartition, first: int, count: int | None = None) -> PartitionOffsets:
        """Partition ``key`` seen from ``first``: the id there (``after_id``) and, with
        ``count``, where that many messages from it end (``limit``)."""
        where = self.located[key]
        (answer,) = partition_offsets(
            self.options.access,
            where.address,
            key[0],
            partition=where.partition,
            after_offset=first,
            max_messages=count,
        )
        return answer

    def reportLatestOffset(self) -> dict[str, object]:
        """The partitions' ends, and how many messages the query is behind them
        (module docstring): what Spark's progress shows as the source's latestOffset."""
        latest = self.encode({key: where.latest for key, where in self.located.items()})
        behind = list(self.behind.values())
        if behind and METRICS not in latest:
            figures = {
                "minOffsetsBehindLatest": str(min(behind)),
                "avgOffsetsBehindLatest": f"{sum(behind) / len(behind):.1f}",
                "maxOffsetsBehindLatest": str(max(behind)),
            }
            latest[METRICS] = figures
            if max(behind):
                log.info("trionsq: %s messages behind latest (per partition)", figures)
        return latest

    def partitions(
        self, start: dict[str, object], end: dict[str, object]
    ) -> Sequence[InputPartition]:
        options = self._checked()
        begin = self.decode(start)
        ranges = []
        for key, stop in self.decode(end).items():
            where = self.located.get(key)
            first = begin.get(key, where.earliest if where is not None else stop)
            if where is not None and stop > first:
                ranges.append(make_range(options, key[0], where, first, stop))
        return split_ranges(ranges, options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict[str, object]) -> None:
        self._hold(self.decode(end))

    def _hold(self, offsets: Offsets) -> None:
        """With ``retainUnread``: move this stream's hold on each partition to what
        it has yet to read, so retention keeps it."""
        options = self._checked()
        name = options.reader_name
        if name is None:
            return
        for key, offset in offsets.items():
            where = self.located.get(key)
            if where is not None:
                params = {
                    "topic": key[0],
                    "partition": where.partition,
                    "reader": name,
                    "offset": offset,
                }
                post(options.access, where.address, "/partition/hold", params)
