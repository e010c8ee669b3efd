"""What a user of Spark's Kafka source and sink expects, on local[2]: Kafka's option
names as aliases, several topics and patterns, minPartitions, per-trigger limits
counted to the message, the key and topic columns of the sink, lag in progress,
errors at plan time, and AUTH."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

import orjson
import pytest
import trio

from trionsq.config import NsqdConfig
from trionsq.testing import ThreadedNsqd

from ..auth_server import AuthServer, grant
from .conftest import create_topic, http_address
from .test_spark_read import publish, read

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pyspark.sql import DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from trionsq.nursery_tree import BoundAddresses


@pytest.fixture(scope="module")
def three(broker: BoundAddresses) -> str:
    """A topic of 3 partitions holding 1,000, 1,000 and 1,001 messages."""
    create_topic(broker, "kafka_three", partitions=3)
    for partition, count in enumerate((1000, 1000, 1001)):
        publish(
            broker, "kafka_three", [b"t%d-%04d" % (partition, n) for n in range(count)], partition
        )
    return "kafka_three"


def stream(
    spark: SparkSession,
    broker: BoundAddresses,
    out: Path,
    *,
    available_now: bool = True,
    **options: str,
) -> StreamingQuery:
    reader = spark.readStream.format("trionsq")
    for name, value in {"kafka.bootstrap.servers": http_address(broker), **options}.items():
        reader = reader.option(name, value)
    writer = (
        reader.load()
        .select("topic", "partition", "offset", "body", "key")
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
    )
    return writer.trigger(availableNow=True).start() if available_now else writer.start()


def batch_sizes(query: StreamingQuery) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_max_offsets_per_trigger_shares_to_the_message(
    spark: SparkSession, broker: BoundAddresses, three: str, tmp_path: Path
) -> None:
    """Kafka's maxOffsetsPerTrigger, subscribe and kafka.bootstrap.servers; 3,000 over
    three partitions of 1,000, 1,000 and 1,001 is 3,000 (it was 2,999)."""
    query = stream(
        spark,
        broker,
        tmp_path,
        subscribe=three,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="3000",
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert batch_sizes(query) == [3000, 1]
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert len({(r.partition, r.offset) for r in rows}) == len(rows) == 3001
    latest = orjson.loads(query.recentProgress[0]["sources"][0]["latestOffset"])
    assert latest["metrics"] == {  # one message left behind after the first batch
        "minOffsetsBehindLatest": "0",
        "avgOffsetsBehindLatest": "0.3",
        "maxOffsetsBehindLatest": "1",
    }


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(
    spark: SparkSession, broker: BoundAddresses, tmp_path: Path
) -> None:
    create_topic(broker, "kafka_min")
    publish(broker, "kafka_min", [b"a"] * 10, 0)
    query = stream(
        spark,
        broker,
        tmp_path,
        available_now=False,
        subscribe="kafka_min",
        startingOffsets="earliest",
        minOffsetsPerTrigger="50",
        maxTriggerDelay="4s",
    )
    try:
        time.sleep(1.5)
        assert batch_sizes(query) == []  # 10 < 50: no batch yet
        publish(broker, "kafka_min", [b"b"] * 45, 0)
        deadline = time.monotonic() + 60
        while sum(batch_sizes(query)) < 55 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert batch_sizes(query) == [55]
        publish(broker, "kafka_min", [b"c"] * 5, 0)  # fewer than 50: after the delay
        while sum(batch_sizes(query)) < 60 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert batch_sizes(query) == [55, 5]
    finally:
        query.stop()
    assert query.exception() is None


def test_several_topics_a_pattern_and_assign(spark: SparkSession, broker: BoundAddresses) -> None:
    for topic in ("multi_a", "multi_b", "other_c"):
        create_topic(broker, topic, partitions=2)
        publish(broker, topic, [topic.encode()] * 3, 0)
        publish(broker, topic, [topic.encode()] * 2, 1)

    def topics(frame: DataFrame) -> Counter[str]:
        return Counter(r.topic for r in frame.collect())

    def base() -> DataFrameReader:
        return spark.read.format("trionsq").option("kafka.bootstrap.servers", http_address(broker))

    assert topics(base().option("subscribe", "multi_a,multi_b").load()) == {
        "multi_a": 5,
        "multi_b": 5,
    }
    assert topics(base().option("subscribePattern", "multi_.*").load()) == {
        "multi_a": 5,
        "multi_b": 5,
    }
    assigned = base().option("assign", '{"multi_a": [1], "other_c": [0, 1]}').load()
    assert topics(assigned) == {"multi_a": 2, "other_c": 5}
    # Kafka's offsets JSON: {"topic": {"partition": offset}}, -2 earliest, -1 latest
    offsets = sorted(r.offset for r in read(spark, broker, "multi_b", partitions="0").collect())
    starting = orjson.dumps({"multi_b": {"0": offsets[1], "1": -1}}).decode()
    ranged = base().option("subscribe", "multi_a,multi_b").option("startingOffsets", starting)
    assert topics(ranged.load()) == {"multi_a": 5, "multi_b": 2}


def test_min_partitions_splits_a_partition_into_tasks(
    spark: SparkSession, broker: BoundAddresses, three: str
) -> None:
    frame = read(spark, broker, three, minPartitions="7")
    assert frame.rdd.getNumPartitions() == 7
    rows = frame.collect()
    assert len({(r.partition, r.offset) for r in rows}) == len(rows) == 3001
    assert read(spark, broker, three, minPartitions="2").rdd.getNumPartitions() == 3


def test_include_headers_false_drops_the_column(
    spark: SparkSession, broker: BoundAddresses, three: str
) -> None:
    frame = read(spark, broker, three, includeHeaders="false")
    assert "headers" not in frame.columns
    assert frame.count() == 3001


def test_the_sink_routes_by_topic_column_and_keeps_the_key(
    spark: SparkSession, broker: BoundAddresses
) -> None:
    create_topic(broker, "route_a", partitions=2, ext=True)
    create_topic(broker, "route_b", ext=True)
    frame = spark.createDataFrame(
        [("route_a", "k1", "v1"), ("route_b", "k2", "v2"), ("route_a", None, "v3")],
        "topic string, key string, value string",
    )
    frame.write.format("trionsq").mode("append").option(
        "kafka.bootstrap.servers", http_address(broker)
    ).save()
    a = {bytes(r.body): r for r in read(spark, broker, "route_a").collect()}
    b = {bytes(r.body): r for r in read(spark, broker, "route_b").collect()}
    assert set(a) == {b"v1", b"v3"}
    assert set(b) == {b"v2"}
    assert bytes(a[b"v1"].key) == b"k1"
    assert a[b"v3"].key is None
    assert bytes(b[b"v2"].key) == b"k2"
    # the topic option wins over the column, as in Kafka's sink
    frame.write.format("trionsq").mode("append").option("nsqd", http_address(broker)).save(
        "route_b"
    )
    assert read(spark, broker, "route_b").count() == 4


def test_errors_at_plan_time(spark: SparkSession, broker: BoundAddresses) -> None:
    create_topic(broker, "plain_sink")
    tagged = spark.createDataFrame([("x", "eu")], "body string, tag string")
    writer = tagged.write.format("trionsq").mode("append").option("nsqd", http_address(broker))
    with pytest.raises(Exception, match="initialize Python data source writer") as raised:
        writer.option("exactlyOnce", "false").save("plain_sink")
    assert "topic 'plain_sink' is not an ext topic, so it cannot carry the tag column" in str(
        raised.value
    )
    null = spark.range(1).selectExpr("null as body")
    with pytest.raises(Exception, match="initialize Python data source writer") as raised:
        null.write.format("trionsq").mode("append").option("nsqd", http_address(broker)).save(
            "plain_sink"
        )
    assert "the 'body' column is always null" in str(raised.value)
    for option, near in (
        ("maxMessagePerTrigger", "maxMessagesPerTrigger"),
        ("subscribepatern", "subscribePattern"),
        ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
    ):
        reader = spark.read.format("trionsq").option("nsqd", http_address(broker))
        with pytest.raises(Exception, match=f"did you mean {near}\\?"):
            reader.option(option, "5").load("plain_sink").collect()


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BoundAddresses]:
    """A broker whose auth server grants everything to secret ``s``."""
    server = AuthServer(replies={"s": grant()})
    token: list[trio.lowlevel.TrioToken] = []
    scope = trio.CancelScope()
    started = threading.Event()

    async def serve() -> None:
        token.append(trio.lowlevel.current_trio_token())
        with scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve)
                started.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert started.wait(10)
    data = tmp_path_factory.mktemp("auth-broker")
    config = NsqdConfig.loopback(data_path=str(data), auth_http_addresses=(server.address,))
    threaded = ThreadedNsqd(config)
    addresses = threaded.start()
    try:
        yield addresses
    finally:
        threaded.stop()
        trio.from_thread.run_sync(scope.cancel, trio_token=token[0])
        thread.join(10)


def test_auth_secret(spark: SparkSession, auth_broker: BoundAddresses) -> None:
    create_topic(auth_broker, "guarded", ext=True)
    address = http_address(auth_broker)
    spark.createDataFrame([("one",), ("two",)], "body string").write.format("trionsq").mode(
        "append"
    ).option("nsqd", address).option("authSecret", "s").save("guarded")
    reader = spark.read.format("trionsq").option("nsqd", address)
    rows = reader.option("authSecret", "s").load("guarded").collect()
    assert sorted(bytes(r.body) for r in rows) == [b"one", b"two"]
    with pytest.raises(Exception, match=r"answered 401.*give the authSecret option"):
        spark.read.format("trionsq").option("nsqd", address).load("guarded").collect()
