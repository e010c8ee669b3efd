"""``spark.read.format("trionsq")`` and ``spark.readStream``: topics' partitions by offset.

The driver turns the options into byte ranges, ``[start, end)`` per partition
(planning.py), and each task reads its range page by page from the broker that
holds the partition (``/partition/read``), cutting the last page at ``end``. A range
names the same records every time it is read (offsets are positions in an
append-only log), so a retried task yields the same rows, and a stream that restarts
from its checkpoint (where Spark keeps each micro-batch's ranges, stream.py) reads
every message exactly once. Nothing here consumes a channel: readers are invisible
to NSQ consumers. A broker that restarts meanwhile is waited for, up to
``brokerRetryTimeout`` (broker_http.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from pyspark.sql.datasource import DataSource

from .options import parse_read_options, parse_write_options

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

__all__ = ["TrionsqDataSource"]

NAME: Final = "trionsq"


class TrionsqDataSource(DataSource):
    """``format("trionsq")``: read and write trionsq topics (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    # Each method imports what it needs: Spark calls them in Python workers of
    # their own (one per kind of call, started at its first use in a session),
    # which then load only that (issue 32).

    def schema(self) -> str:
        from .columns import schema

        headers = str(self.options.get("includeHeaders", "true")).strip().lower()
        return schema(include_headers=headers not in ("false", "0", "no"))

    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch_read import BatchReader

        return BatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import StreamReader

        return StreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import BatchWriter

        return BatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import StreamWriter

        return StreamWriter(parse_write_options(self.options), schema)
