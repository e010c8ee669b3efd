"""The driver's arithmetic, without Spark: shares of a per-trigger limit, options."""

from __future__ import annotations

import pytest

from trionsq.spark.options import SparkOptionError, parse_read_options, parse_write_options
from trionsq.spark.planning import shares


def test_shares_add_up_to_the_limit() -> None:
    three = {("t", 0): 1000, ("t", 1): 1000, ("t", 2): 1001}
    assert sum(shares(3000, three).values()) == 3000  # 2,999 by rounding down alone
    assert shares(3000, three) == {("t", 0): 1000, ("t", 1): 1000, ("t", 2): 1000}
    assert shares(10_000, three) == three  # less there than the limit: all of it
    uneven = shares(7, {("a", 0): 1, ("b", 0): 99})
    assert uneven == {("a", 0): 0, ("b", 0): 7}
    assert sum(shares(5, {("t", p): 3 for p in range(4)}).values()) == 5


def test_kafka_names_are_aliases() -> None:
    options = parse_read_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:4151",
            "subscribe": "a,b,a",
            "maxOffsetsPerTrigger": "10",
            "minOffsetsPerTrigger": "5",
            "maxTriggerDelay": "30s",
            "startingOffsets": '{"a": {"0": 7}}',
        },
        streaming=True,
    )
    assert options.nsqd == ("127.0.0.1:4151",)
    assert options.topics == ("a", "b")
    assert options.nested
    assert (options.max_messages_per_trigger, options.min_messages_per_trigger) == (10, 5)
    assert options.max_trigger_delay == 30.0
    assert options.starting.for_partition(0, "a") == 7
    assert options.starting.for_partition(0, "b") == -2
    with pytest.raises(SparkOptionError, match="given twice"):
        parse_read_options(
            {
                "nsqd": "h:1",
                "topic": "t",
                "maxOffsetsPerTrigger": "1",
                "maxMessagesPerTrigger": "2",
            },
            streaming=True,
        )


def test_sparks_own_options_pass_and_the_topic_column_needs_no_topic() -> None:
    options = parse_write_options(
        {"nsqd": "h:1", "checkpointLocation": "/x", "queryName": "q", "brokerRetryTimeout": "5"}
    )
    assert options.topic is None
    assert options.access.retry_timeout == 5.0
