"""spark.read.format("trionsq"): a topic's partitions by offset and by time."""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

import orjson

from trionsq.client.blocking import connect_producer
from trionsq.protocol.commands import ExtMessage

from .conftest import create_topic, http_address, tcp_address

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pytest
    from pyspark.sql import DataFrame, Row, SparkSession

    from trionsq.nursery_tree import BoundAddresses


def publish(broker: BoundAddresses, topic: str, bodies: Sequence[bytes], partition: int) -> None:
    with connect_producer(tcp_address(broker)) as producer:
        for start in range(0, len(bodies), 200):
            producer.publish_many(topic, bodies[start : start + 200], partition=partition)


def read(spark: SparkSession, broker: BoundAddresses, topic: str, **options: str) -> DataFrame:
    reader = spark.read.format("trionsq").option("nsqd", http_address(broker))
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(topic)


def by_partition(rows: list[Row]) -> dict[int, list[Row]]:
    found: dict[int, list[Row]] = {}
    for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
        found.setdefault(row.partition, []).append(row)
    return found


def test_reads_every_partition_in_offset_order(spark: SparkSession, broker: BoundAddresses) -> None:
    create_topic(broker, "spark_all", partitions=2)
    for partition in (0, 1):
        publish(broker, "spark_all", [b"p%d-%04d" % (partition, n) for n in range(300)], partition)

    frame = read(spark, broker, "spark_all")
    assert frame.schema.simpleString() == (
        "struct<topic:string,partition:int,offset:bigint,id:bigint,trace_id:string,"
        "timestamp:timestamp,attempts:int,tag:string,headers:map<string,string>,body:binary,"
        "key:binary>"
    )
    rows = by_partition(frame.collect())
    assert sorted(rows) == [0, 1]
    for partition, found in rows.items():
        assert [bytes(r.body) for r in found] == [b"p%d-%04d" % (partition, n) for n in range(300)]
        assert [r.id for r in found] == list(range(1, 301))
        assert found[0].offset == 0
        sizes = {b.offset - a.offset for a, b in itertools.pairwise(found)}
        assert len(sizes) == 1
        assert sizes.pop() > 7
        assert {r.topic for r in found} == {"spark_all"}
        assert {r.attempts for r in found} == {0}
        assert all(r.tag is None and r.headers is None and r.trace_id is None for r in found)
        assert abs(found[0].timestamp.timestamp() - time.time()) < 120


def test_reads_between_offsets(spark: SparkSession, broker: BoundAddresses) -> None:
    create_topic(broker, "spark_range", partitions=2)
    publish(broker, "spark_range", [b"m%04d" % n for n in range(500)], 0)
    publish(broker, "spark_range", [b"other"] * 10, 1)
    offsets = [r.offset for r in read(spark, broker, "spark_range", partitions="0").collect()]
    offsets.sort()
    start, end = offsets[100], offsets[250]

    frame = read(
        spark,
        broker,
        "spark_range",
        partitions="0",
        startingOffsets=orjson.dumps({"0": start}).decode(),
        endingOffsets=orjson.dumps({"0": end}).decode(),
        maxRecordsPerRequest="7",  # many pages, the last one cut at the end
    )
    rows = sorted(frame.collect(), key=lambda r: r.offset)
    assert [bytes(r.body) for r in rows] == [b"m%04d" % n for n in range(100, 250)]
    assert rows[0].offset == start
    assert rows[-1].offset < end

    # -2 = earliest, -1 = latest, as in Spark's Kafka source; partition 1 by default
    everything = read(
        spark,
        broker,
        "spark_range",
        startingOffsets=orjson.dumps({"0": -2}).decode(),
        endingOffsets=orjson.dumps({"0": offsets[3]}).decode(),
    )
    assert sorted(bytes(r.body) for r in everything.collect()) == [
        b"m0000",
        b"m0001",
        b"m0002",
        *[b"other"] * 10,
    ]


def test_reads_by_timestamp(spark: SparkSession, broker: BoundAddresses) -> None:
    create_topic(broker, "spark_time")
    publish(broker, "spark_time", [b"early"] * 50, 0)
    time.sleep(0.01)  # two groups with distinct publish milliseconds
    publish(broker, "spark_time", [b"middle"] * 60, 0)
    time.sleep(0.01)
    publish(broker, "spark_time", [b"late"] * 70, 0)
    rows = sorted(read(spark, broker, "spark_time").collect(), key=lambda r: r.offset)
    first_middle = next(r for r in rows if bytes(r.body) == b"middle")
    first_late = next(r for r in rows if bytes(r.body) == b"late")
    start_ms = int(first_middle.timestamp.timestamp() * 1000)
    end_ms = int(first_late.timestamp.timestamp() * 1000)
    assert start_ms > int(rows[0].timestamp.timestamp() * 1000)

    window = read(
        spark, broker, "spark_time", startingTimestamp=str(start_ms), endingTimestamp=str(end_ms)
    )
    assert [bytes(r.body) for r in window.orderBy("offset").collect()] == [b"middle"] * 60

    per_partition = read(
        spark,
        broker,
        "spark_time",
        startingOffsetsByTimestamp=orjson.dumps({"0": end_ms}).decode(),
    )
    assert per_partition.count() == 70


def test_ext_headers_tags_and_trace_ids(spark: SparkSession, broker: BoundAddresses) -> None:
    create_topic(broker, "spark_ext", ext=True)
    messages = [
        ExtMessage(orjson.dumps({"##client_dispatch_tag": "eu", "user": "ann", "n": 1}), b"one"),
        ExtMessage(orjson.dumps({"plain": "yes"}), b"two"),
        ExtMessage(orjson.dumps({"##trace_id": "18446744073709551615"}), b"three"),
    ]
    with connect_producer(tcp_address(broker)) as producer:
        producer.publish_many_ext("spark_ext", messages)
        producer.publish_traced("spark_ext", b"four", 77)

    rows = read(spark, broker, "spark_ext").orderBy("offset").collect()
    assert [bytes(r.body) for r in rows] == [b"one", b"two", b"three", b"four"]
    assert rows[0].tag == "eu"
    assert rows[0].headers == {"##client_dispatch_tag": "eu", "user": "ann", "n": "1"}
    assert rows[1].tag is None
    assert rows[1].headers == {"plain": "yes"}
    assert rows[2].trace_id == "18446744073709551615"
    assert rows[3].trace_id == "77"


def test_a_task_that_fails_once_reads_the_same_rows_again(
    spark: SparkSession, broker: BoundAddresses, tmp_path: pytest.TempPathFactory
) -> None:
    create_topic(broker, "spark_retry", partitions=2)
    for partition in (0, 1):
        publish(broker, "spark_retry", [b"r%d-%d" % (partition, n) for n in range(400)], partition)
    marker = str(tmp_path) + "/failed"

    def fail_first_attempt(body: bytes) -> bytes:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0 and body == b"r0-300":
            with open(marker, "w") as note:
                note.write("failed")
            raise RuntimeError("first attempt fails on purpose")
        return body

    from pyspark.sql.functions import udf

    checked = udf(fail_first_attempt, "binary", useArrow=False)
    frame = read(spark, broker, "spark_retry", maxRecordsPerRequest="50")
    rows = frame.select("partition", "offset", checked("body").alias("body")).collect()
    with open(marker) as note:
        assert note.read() == "failed"
    assert len(rows) == 800
    assert len({(r.partition, r.offset) for r in rows}) == 800


def test_an_empty_read_gives_no_rows(spark: SparkSession, broker: BoundAddresses) -> None:
    """Nothing to read (an empty topic, the tail, a time to come): no task, 0 rows
    (Spark plans one partition of its own when a source plans none)."""
    create_topic(broker, "spark_empty", partitions=2)
    assert read(spark, broker, "spark_empty").count() == 0
    publish(broker, "spark_empty", [b"one", b"two"], 0)
    assert read(spark, broker, "spark_empty", startingOffsets="latest").count() == 0
    future = str(int(time.time() * 1000) + 3_600_000)
    assert read(spark, broker, "spark_empty", startingTimestamp=future).count() == 0
    assert read(spark, broker, "spark_empty").count() == 2
