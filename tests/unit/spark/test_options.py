"""The data source's option checks, without Spark: each mistake names its option."""

from __future__ import annotations

import pytest

from trionsq.spark.options import (
    EARLIEST,
    LATEST,
    Bound,
    SparkOptionError,
    parse_read_options,
    parse_write_options,
)

BROKER = {"nsqd": "127.0.0.1:4151", "topic": "t"}


def test_defaults_follow_sparks_kafka_source() -> None:
    batch = parse_read_options(BROKER, streaming=False)
    assert batch.starting == Bound(EARLIEST)
    assert batch.ending == Bound(LATEST)
    stream = parse_read_options(BROKER, streaming=True)
    assert stream.starting == Bound(LATEST)
    assert stream.max_messages_per_trigger is None
    assert stream.reader_name is None


def test_offsets_json_and_timestamps() -> None:
    options = parse_read_options(
        {**BROKER, "startingoffsets": '{"0": 120, "2": -2}', "endingtimestamp": "1700000000000"},
        streaming=False,
    )
    assert options.starting.for_partition(0) == 120
    assert options.starting.for_partition(2) == EARLIEST
    assert options.starting.for_partition(1) == EARLIEST  # not named: earliest
    assert options.ending == Bound(1_700_000_000_000, timestamps=True)
    by_time = parse_read_options(
        {**BROKER, "startingoffsetsbytimestamp": '{"1": 5}'}, streaming=True
    )
    assert by_time.starting.timestamps
    assert by_time.starting.for_partition(1) == 5


def test_the_path_is_the_topic() -> None:
    assert parse_read_options({"nsqd": "h:1", "path": "orders"}, streaming=False).topic == "orders"
    assert parse_write_options({"lookupd": "h:4161", "path": "orders"}).lookupd == ("h:4161",)


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"nsqd": "h:1"}, False, "'topic': give exactly one of load()'s path, topic,"),
        ({**BROKER, "lookupd": "h:2"}, False, "'nsqd': give either"),
        ({"nsqd": "nohost", "topic": "t"}, False, "'nsqd': 'nohost' is not a host:port"),
        ({**BROKER, "topic": "bad name"}, False, "'topic': 'bad name' is not a valid"),
        ({**BROKER, "partitions": "0,x"}, False, "'partitions': 'x' is not an integer"),
        ({**BROKER, "startingoffsets": "[1]"}, False, "'startingOffsets': the JSON must be"),
        ({**BROKER, "startingoffsets": '{"0": -3}'}, False, "partition 0: -3 is not an offset"),
        ({**BROKER, "endingoffsets": '{"0": -2}'}, False, "'endingOffsets': partition 0: -2"),
        (
            {**BROKER, "startingoffsets": "earliest", "startingtimestamp": "5"},
            False,
            "give only one of startingOffsets, startingTimestamp",
        ),
        ({**BROKER, "maxmessagespertrigger": "0"}, True, "'maxMessagesPerTrigger': 0 is out"),
        ({**BROKER, "readername": "r"}, True, "'readerName': only meaningful with retainUnread"),
        ({**BROKER, "retainunread": "true"}, False, "'retainUnread': only for spark.readStream"),
        ({**BROKER, "maxbytesperrequest": "67108865"}, False, "'maxBytesPerRequest': 67108865"),
    ],
)
def test_each_mistake_names_its_option(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(SparkOptionError) as raised:
        parse_read_options(options, streaming=streaming)
    assert message in str(raised.value)
    assert str(raised.value).startswith("trionsq option '")


def test_write_options() -> None:
    options = parse_write_options({**BROKER, "exactlyonce": "false", "batchsize": "50"})
    assert (options.exactly_once, options.batch_size) == (False, 50)
    assert parse_write_options({**BROKER, "checkpointlocation": "/x"}).exactly_once
    with pytest.raises(SparkOptionError, match="'batchSize': 10001 is out of range"):
        parse_write_options({**BROKER, "batchsize": "10001"})
