"""spark.readStream.format("trionsq"): offsets in the checkpoint, exactly once across
stops, restarts and task retries."""

from __future__ import annotations

import urllib.request
from typing import TYPE_CHECKING

import orjson

from .conftest import create_topic, http_address, http_post
from .test_spark_read import publish

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

    from trionsq.nursery_tree import BoundAddresses


def run_available_now(
    spark: SparkSession, broker: BoundAddresses, topic: str, out: Path, **options: str
) -> None:
    """One run of the stream over what the topic holds now, into Parquet files (a
    sink that keeps exactly once with its own log)."""
    reader = spark.readStream.format("trionsq").option("nsqd", http_address(broker))
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load(topic)
        .select("partition", "offset", "body")
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None


def test_restarts_from_the_checkpoint_exactly_once(
    spark: SparkSession, broker: BoundAddresses, tmp_path: Path
) -> None:
    create_topic(broker, "stream_restart", partitions=2)
    for partition in (0, 1):
        publish(
            broker, "stream_restart", [b"a%d-%d" % (partition, n) for n in range(500)], partition
        )
    options = {"startingOffsets": "earliest", "maxMessagesPerTrigger": "300"}
    run_available_now(spark, broker, "stream_restart", tmp_path, **options)
    first = spark.read.parquet(str(tmp_path / "data")).collect()
    assert len(first) == 1000
    batches = sorted(p.name for p in (tmp_path / "checkpoint" / "offsets").iterdir())
    assert len(batches) >= 4  # 1,000 messages at most 300 a trigger

    for partition in (0, 1):
        publish(
            broker, "stream_restart", [b"b%d-%d" % (partition, n) for n in range(250)], partition
        )
    run_available_now(spark, broker, "stream_restart", tmp_path, **options)
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert len(rows) == 1500
    assert len({(r.partition, r.offset) for r in rows}) == 1500
    bodies = {bytes(r.body) for r in rows}
    assert {b"a0-0", b"a1-499", b"b0-0", b"b1-249"} <= bodies
    assert len(bodies) == 1500


def test_a_replayed_micro_batch_reads_the_same_range(
    spark: SparkSession, broker: BoundAddresses, tmp_path: Path
) -> None:
    """A driver that died after planning a batch but before committing it: Spark runs
    the batch again from the offsets in its log."""
    create_topic(broker, "stream_replay")
    publish(broker, "stream_replay", [b"x%d" % n for n in range(600)], 0)
    options = {"startingOffsets": "earliest", "maxMessagesPerTrigger": "200"}
    run_available_now(spark, broker, "stream_replay", tmp_path, **options)
    commits = tmp_path / "checkpoint" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)  # as if the driver stopped before the commit
    publish(broker, "stream_replay", [b"y%d" % n for n in range(100)], 0)
    run_available_now(spark, broker, "stream_replay", tmp_path, **options)
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(
        [b"x%d" % n for n in range(600)] + [b"y%d" % n for n in range(100)]
    )


def partition_zero(broker: BoundAddresses, topic: str) -> dict[str, object]:
    with urllib.request.urlopen(
        f"http://{http_address(broker)}/partition/offsets?topic={topic}&partition=0", timeout=10
    ) as answer:
        (partition,) = orjson.loads(answer.read())["partitions"]
    assert isinstance(partition, dict)
    return partition


def test_a_stream_starts_at_the_tail_by_default_and_holds_what_it_has_not_read(
    spark: SparkSession, broker: BoundAddresses, tmp_path: Path
) -> None:
    create_topic(broker, "stream_tail")
    publish(broker, "stream_tail", [b"old"] * 30, 0)
    options = {"retainUnread": "true", "readerName": "spark-test"}
    run_available_now(spark, broker, "stream_tail", tmp_path, **options)
    assert spark.read.parquet(str(tmp_path / "data")).count() == 0
    start = partition_zero(broker, "stream_tail")
    assert start["holds"] == {"spark-test": start["latest_offset"]}  # held from its start

    publish(broker, "stream_tail", [b"new"] * 40, 0)
    run_available_now(spark, broker, "stream_tail", tmp_path, **options)
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert [bytes(r.body) for r in rows] == [b"new"] * 40
    # Spark commits a batch to its source lazily (at the next one), so the hold may
    # trail what the stream read, by a batch at most: it keeps more, never less.
    now = partition_zero(broker, "stream_tail")
    held = now["holds"]
    assert isinstance(held, dict)
    assert start["latest_offset"] <= held["spark-test"] <= now["latest_offset"]
    http_post(broker, "/partition/unhold", topic="stream_tail", partition=0, reader="spark-test")
    assert partition_zero(broker, "stream_tail")["holds"] == {}
