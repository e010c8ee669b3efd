"""The publish rules TCP and HTTP share: one definition, answered by each its own way."""

from __future__ import annotations

import pytest

from trionsq.broker.rules import (
    MAX_EXT_LENGTH,
    MAX_PARTITION_NUM,
    Refusal,
    ext_refusal,
    publish_target,
)
from trionsq.broker.topic import Topic


def topic(name: str, **kwargs: object) -> Topic:
    return Topic(name, max_msg_timeout=900.0, mem_queue_size=10, **kwargs)  # type: ignore[arg-type]


TOPICS = {
    "plain": topic("plain"),
    "parted": topic("parted", partitions=3),
    "ordered": topic("ordered", partitions=2, ordered=True),
    "ext": topic("ext", ext=True),
}


@pytest.mark.parametrize(
    ("name", "partition", "create", "expected"),
    [
        ("new", None, True, 0),  # nsqd's PUB creates the topic
        ("new", None, False, Refusal.TOPIC_NOT_EXIST),  # Youzan's never does
        ("new", 0, True, Refusal.TOPIC_NOT_EXIST),  # nor does naming a partition
        ("plain", None, False, 0),
        ("parted", 2, False, 2),
        ("parted", 3, True, Refusal.TOPIC_NOT_EXIST),
        ("parted", -1, True, Refusal.TOPIC_NOT_EXIST),
        ("ordered", None, True, Refusal.BAD_PARTITION),
        ("ordered", 1, False, 1),
    ],
)
def test_where_a_publish_goes(
    name: str, partition: int | None, create: bool, expected: int | Refusal
) -> None:
    assert publish_target(TOPICS, name, partition, create=create) == expected


def test_json_headers_need_an_ext_topic_and_fit_the_record() -> None:
    fits = b"x" * MAX_EXT_LENGTH
    assert ext_refusal(TOPICS["ext"], [b"{}", fits]) is None
    assert ext_refusal(TOPICS["ext"], [fits + b"x"]) is Refusal.EXT_TOO_LONG
    assert ext_refusal(TOPICS["plain"], [b"{}"]) is Refusal.EXT_NOT_SUPPORTED
    assert ext_refusal(None, [b"{}"]) is Refusal.TOPIC_NOT_EXIST


def test_the_partition_limit_is_youzans() -> None:
    assert MAX_PARTITION_NUM == 255
