"""Each bad option gives one clear message that names it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from pyspark.errors import StreamingQueryException

from .conftest import create_topic, http_address

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession

    from trionsq.nursery_tree import BoundAddresses


@pytest.fixture(scope="module")
def topic(broker: BoundAddresses) -> str:
    create_topic(broker, "spark_options", partitions=2)
    return "spark_options"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        # Spark hands a source its option names in lower case
        (
            "startingOfsets",
            "earliest",
            "trionsq option 'startingofsets': unknown option; did you mean startingOffsets",
        ),
        (
            "startingOffsets",
            "{not json",
            "trionsq option 'startingOffsets': '{not json' is neither",
        ),
        ("startingOffsets", '{"x": 1}', "trionsq option 'startingOffsets': 'x' is not a partition"),
        (
            "startingOffsets",
            '{"0": 3}',
            "trionsq option 'startingOffsets': 'spark_options' partition 0: offset 3",
        ),
        ("endingOffsets", "earliest", "trionsq option 'endingOffsets': 'earliest' makes no sense"),
        (
            "startingTimestamp",
            "soon",
            "trionsq option 'startingTimestamp': 'soon' is not an integer",
        ),
        (
            "partitions",
            "0,7",
            "trionsq option 'partitions': topic 'spark_options' has no partition 7",
        ),
        ("maxRecordsPerRequest", "0", "trionsq option 'maxRecordsPerRequest': 0 is out of range"),
        ("failOnDataLoss", "perhaps", "trionsq option 'failOnDataLoss': 'perhaps' is not true"),
    ],
)
def test_bad_read_option(
    spark: SparkSession, broker: BoundAddresses, topic: str, option: str, value: str, message: str
) -> None:
    reader = spark.read.format("trionsq").option("nsqd", http_address(broker)).option(option, value)
    with pytest.raises(Exception, match=message):
        reader.load(topic).collect()


def test_unreachable_broker(spark: SparkSession) -> None:
    """An outage reads as one: the broker, how long it was retried, why."""
    reader = spark.read.format("trionsq").option("nsqd", "127.0.0.1:1")
    with pytest.raises(
        Exception,
        match=r"trionsq: broker 127\.0\.0\.1:1 unreachable, retried for 1 s"
        r" \(brokerRetryTimeout\): \[Errno 111\] Connection refused",
    ):
        reader.option("brokerRetryTimeout", "1s").load("anything").collect()


def test_unknown_topic(spark: SparkSession, broker: BoundAddresses) -> None:
    reader = spark.read.format("trionsq").option("nsqd", http_address(broker))
    with pytest.raises(Exception, match=r"trionsq option 'topic': no broker .* has topic 'nope'"):
        reader.load("nope").collect()


def test_stream_only_and_batch_only_options(
    spark: SparkSession, broker: BoundAddresses, topic: str, tmp_path: Path
) -> None:
    batch = spark.read.format("trionsq").option("nsqd", http_address(broker))
    with pytest.raises(Exception, match=r"'maxMessagesPerTrigger': only for spark\.readStream"):
        batch.option("maxMessagesPerTrigger", "5").load(topic).collect()
    for option, value, message in [
        ("endingOffsets", "latest", "'endingOffsets': a stream has no end"),
        ("retainUnread", "true", "'readerName': required with retainUnread"),
    ]:
        stream = spark.readStream.format("trionsq").option("nsqd", http_address(broker))
        query = (
            stream.option(option, value)
            .load(topic)
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / option))
            .start()
        )
        with pytest.raises(StreamingQueryException, match=message):
            query.awaitTermination(60)


def test_bad_write_options_and_columns(
    spark: SparkSession, broker: BoundAddresses, topic: str
) -> None:
    frame = spark.createDataFrame([(b"x",)], "body binary")

    def writer(data: DataFrame = frame) -> DataFrameWriter:
        return data.write.format("trionsq").mode("append").option("nsqd", http_address(broker))

    with pytest.raises(Exception, match="trionsq option 'batchSize': 'many' is not an integer"):
        writer().option("batchSize", "many").save(topic)
    with pytest.raises(Exception, match="trionsq option 'colour': unknown option"):
        writer().option("colour", "red").save(topic)
    wrong = spark.createDataFrame([(b"x", 1)], "body binary, extra int")
    with pytest.raises(Exception, match="column 'extra' is not one of body"):
        writer(wrong).save(topic)
    with pytest.raises(Exception, match="topic 'spark_options' is not an ext topic"):
        writer().save(topic)
