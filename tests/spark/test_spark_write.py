"""df.write / writeStream.format("trionsq"): messages published exactly once, even
when a task fails after publishing part of its rows or a micro-batch runs again."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import urllib.request
from collections import Counter
from typing import TYPE_CHECKING

import orjson

from .conftest import create_topic, http_address
from .test_spark_read import publish, read

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

    from trionsq.nursery_tree import BoundAddresses


def publishers(broker_port: int) -> set[int]:
    """Processes (other than this one) with a TCP connection open to the broker."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == broker_port and fields[3] == "01":  # ESTABLISHED
                    inodes.add(f"socket:[{fields[9]}]")
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                        found.add(int(pid))
    return found


def stored(broker: BoundAddresses, topic: str) -> int:
    offsets = f"http://{http_address(broker)}/partition/offsets?topic={topic}"
    with urllib.request.urlopen(offsets, timeout=10) as answer:
        found = orjson.loads(answer.read())["partitions"]
    return sum(p["latest_offset"] for p in found)


@contextlib.contextmanager
def killed_midway(broker: BoundAddresses, topic: str) -> Iterator[list[int]]:
    """Kill the Spark Python worker that is publishing to ``topic`` once it has
    stored part of its rows: its task fails midway and Spark runs it again."""
    killed: list[int] = []

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            if stored(broker, topic) > 0:
                for pid in publishers(broker.tcp[1]):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield killed
    finally:
        watcher.join(60)


def rows(spark: SparkSession, count: int) -> DataFrame:
    return spark.range(count, numPartitions=2).selectExpr(
        "cast(concat('row-', id) as string) as body",
        "case when id % 3 = 0 then 'eu' end as tag",
        "map('n', cast(id as string)) as headers",
    )


def written(spark: SparkSession, broker: BoundAddresses, topic: str) -> Counter[bytes]:
    return Counter(bytes(r.body) for r in read(spark, broker, topic).collect())


def test_batch_write_publishes_each_row_once(spark: SparkSession, broker: BoundAddresses) -> None:
    create_topic(broker, "write_rows", partitions=2, ext=True)
    rows(spark, 3000).write.format("trionsq").mode("append").option(
        "nsqd", http_address(broker)
    ).save("write_rows")
    found = read(spark, broker, "write_rows").collect()
    assert Counter(bytes(r.body) for r in found) == Counter(b"row-%d" % n for n in range(3000))
    by_body = {bytes(r.body): r for r in found}
    assert by_body[b"row-3"].tag == "eu"
    assert by_body[b"row-4"].tag is None
    assert by_body[b"row-4"].headers["n"] == "4"
    assert "##idempotency_key" in by_body[b"row-4"].headers
    assert {r.partition for r in found} == {0, 1}


def test_a_task_failing_midway_publishes_nothing_twice(
    spark: SparkSession, broker: BoundAddresses
) -> None:
    create_topic(broker, "write_retry", partitions=2, ext=True)
    frame = rows(spark, 40_000).repartition(1)
    with killed_midway(broker, "write_retry") as killed:
        frame.write.format("trionsq").mode("append").option("nsqd", http_address(broker)).option(
            "batchSize", "20"
        ).save("write_retry")
    assert killed  # the first attempt died after publishing part of its rows
    assert written(spark, broker, "write_retry") == Counter(b"row-%d" % n for n in range(40_000))


def test_without_exactly_once_the_same_failure_duplicates(
    spark: SparkSession, broker: BoundAddresses
) -> None:
    """The control for the test above: what the broker's deduplication prevents."""
    create_topic(broker, "write_dupes", partitions=1)
    frame = spark.range(40_000, numPartitions=1).selectExpr(
        "cast(concat('row-', id) as string) as body"
    )
    with killed_midway(broker, "write_dupes") as killed:
        frame.write.format("trionsq").mode("append").option("nsqd", http_address(broker)).option(
            "exactlyOnce", "false"
        ).option("batchSize", "20").save("write_dupes")
    assert killed
    counts = written(spark, broker, "write_dupes")
    assert sum(counts.values()) > 40_000
    assert set(counts) == {b"row-%d" % n for n in range(40_000)}


def test_a_replayed_stream_batch_publishes_nothing_twice(
    spark: SparkSession, broker: BoundAddresses, tmp_path: Path
) -> None:
    create_topic(broker, "write_source", partitions=2)
    create_topic(broker, "write_sink", partitions=2, ext=True)
    for partition in (0, 1):
        publish(broker, "write_source", [b"s%d-%d" % (partition, n) for n in range(400)], partition)

    def run() -> None:
        query = (
            spark.readStream.format("trionsq")
            .option("nsqd", http_address(broker))
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "300")
            .load("write_source")
            .selectExpr("body", "cast(offset as string) as key")
            .writeStream.format("trionsq")
            .option("nsqd", http_address(broker))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start("write_sink")
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    commits = tmp_path / "checkpoint" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(
        missing_ok=True
    )  # the driver "died" before committing the last batch
    run()
    expected = Counter(b"s%d-%d" % (p, n) for p in (0, 1) for n in range(400))
    assert written(spark, broker, "write_sink") == expected


def test_a_named_streaming_query_writes(
    spark: SparkSession, broker: BoundAddresses, tmp_path: Path
) -> None:
    """Spark hands the sink options of its own (queryName, checkpointLocation, path):
    they are accepted, not refused as unknown."""
    create_topic(broker, "named_source")
    create_topic(broker, "named_sink", ext=True)
    publish(broker, "named_source", [b"n%d" % n for n in range(50)], 0)
    query = (
        spark.readStream.format("trionsq")
        .option("nsqd", http_address(broker))
        .option("startingOffsets", "earliest")
        .load("named_source")
        .select("body")
        .writeStream.format("trionsq")
        .queryName("named_query")
        .option("nsqd", http_address(broker))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start("named_sink")
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert written(spark, broker, "named_sink") == Counter(b"n%d" % n for n in range(50))
