"""What TubeMQ's messages carry inside their fields: codes, strings and message data.

TubeMQ packs metadata into strings (``brokerId:host:port``,
``topic#brokerId:partitions:stores#maxSize``,
``consumerId@group#brokerId:host:port#topic:partition``) and a message's attributes
into its data (``[4-byte length][k=v,k=v][payload]`` with flag bit 1). The
formats, error codes and constants here are TubeMQ's (docs/tubemq.md); pure, no I/O.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import Final

import attrs

__all__ = [
    "ATTRIBUTES_FLAG",
    "MSG_TIME_KEY",
    "MSG_TYPE_KEY",
    "ErrCode",
    "EventStatus",
    "EventType",
    "PartitionRef",
    "ReadStatus",
    "SubscribeInfo",
    "broker_info",
    "checksum",
    "format_attributes",
    "join_payload",
    "parse_attributes",
    "parse_partition",
    "parse_subscribe_info",
    "split_payload",
    "topic_info",
]

ATTRIBUTES_FLAG: Final = 0x01
"""Message flag bit: the data starts with an attribute section."""
MSG_TYPE_KEY: Final = "$msgType$"
"""The attribute a producer's ``msgType`` (stream id) is kept under; consumers filter on it."""
MSG_TIME_KEY: Final = "$msgTime$"
REGISTER: Final = 31
"""``RegisterRequestC2B.opType``: take the partition."""
UNREGISTER: Final = 32
"""``RegisterRequestC2B.opType``: give the partition back."""
_ATTR_LENGTH: Final = struct.Struct(">i")


class ErrCode(enum.IntEnum):
    """TubeMQ's ``errCode`` values (one code per class of error; ``errMsg`` says which)."""

    SUCCESS = 200
    MOVED = 301
    BAD_REQUEST = 400
    UNAUTHORIZED = 401
    FORBIDDEN = 403
    NOT_FOUND = 404
    PARTITION_OCCUPIED = 410
    HB_NO_NODE = 411
    DUPLICATE_PARTITION = 412
    CERTIFICATE_FAILURE = 415
    SERVER_RECEIVE_OVERFLOW = 419
    TOPIC_NOT_DEPLOYED = 431
    SERVER_CONSUME_SPEED_LIMIT = 452
    INTERNAL_SERVER_ERROR = 500
    SERVICE_UNAVAILABLE = 503


class ReadStatus(enum.IntEnum):
    """``RegisterRequestC2B.readStatus``: where a consumer starts on a partition."""

    NORMAL = 0
    """Where the group left off; a new group starts at the oldest message."""
    FROM_MAX = 1
    """Where the group left off; a new group starts at the latest."""
    FROM_MAX_ALWAYS = 2
    """At the latest, every time."""


class EventType(enum.IntEnum):
    """``EventProto.opType``: what a rebalance asks a consumer to do."""

    CONNECT = 1
    DISCONNECT = 2
    ONLY_CONNECT = 10
    ONLY_DISCONNECT = 20


class EventStatus(enum.IntEnum):
    TODO = 0
    PROCESSING = 1
    DONE = 2


@attrs.frozen
class PartitionRef:
    """``brokerId:host:port#topic:partitionId``: one partition of one broker."""

    broker_id: int
    host: str
    port: int
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.broker_id}:{self.host}:{self.port}#{self.topic}:{self.partition}"

    @property
    def key(self) -> str:
        """TubeMQ's partition key, ``brokerId:topic:partitionId``."""
        return f"{self.broker_id}:{self.topic}:{self.partition}"


@attrs.frozen
class SubscribeInfo:
    """``consumerId@group#brokerId:host:port#topic:partitionId``."""

    consumer_id: str
    group: str
    partition: PartitionRef

    def __str__(self) -> str:
        return f"{self.consumer_id}@{self.group}#{self.partition}"


def broker_info(broker_id: int, host: str, port: int) -> str:
    """A ``brokerInfos`` entry."""
    return f"{broker_id}:{host}:{port}"


def topic_info(topic: str, broker_id: int, partitions: int, max_msg_size: int) -> str:
    """A ``topicInfos`` entry: the topic's partitions on one broker, one store."""
    return f"{topic}#{broker_id}:{partitions}:1#{max_msg_size}"


def parse_partition(text: str) -> PartitionRef:
    """``brokerId:host:port#topic:partitionId``.

    Raises:
        ValueError: another shape.
    """
    broker, sep, rest = text.partition("#")
    fields = broker.split(":")
    topic, colon, partition = rest.rpartition(":")
    if not sep or len(fields) != 3 or not colon or not topic:
        raise ValueError(f"{text!r} is not brokerId:host:port#topic:partitionId")
    return PartitionRef(int(fields[0]), fields[1], int(fields[2]), topic, int(partition))


def parse_subscribe_info(text: str) -> SubscribeInfo:
    """``consumerId@group#partition``.

    Raises:
        ValueError: another shape.
    """
    consumer, sep, partition = text.partition("#")
    consumer_id, at, group = consumer.rpartition("@")
    if not sep or not at:
        raise ValueError(f"{text!r} is not consumerId@group#brokerId:host:port#topic:partitionId")
    return SubscribeInfo(consumer_id, group, parse_partition(partition))


def checksum(data: bytes) -> int:
    """TubeMQ's message checksum: CRC-32 with the sign bit cleared."""
    return zlib.crc32(data) & 0x7FFF_FFFF


def split_payload(data: bytes, flag: int) -> tuple[str, bytes]:
    """A message's ``(attributes, payload)``.

    Raises:
        ValueError: the flag says attributes but the section is cut or not UTF-8.
    """
    if not flag & ATTRIBUTES_FLAG:
        return "", data
    if len(data) < _ATTR_LENGTH.size:
        raise ValueError("message data shorter than its attribute length")
    (length,) = _ATTR_LENGTH.unpack_from(data)
    end = _ATTR_LENGTH.size + length
    if length < 0 or end > len(data):
        raise ValueError(f"attribute length {length} beyond the message data")
    return data[_ATTR_LENGTH.size : end].decode(), data[end:]


def join_payload(attributes: str, payload: bytes) -> tuple[bytes, int]:
    """Message data and flag for ``payload`` with ``attributes`` (none: the payload alone)."""
    if not attributes:
        return payload, 0
    encoded = attributes.encode()
    return _ATTR_LENGTH.pack(len(encoded)) + encoded + payload, ATTRIBUTES_FLAG


def parse_attributes(text: str) -> dict[str, str]:
    """``k=v,k=v`` to a dict (blank keys and items without ``=`` are skipped, as the
    SDKs skip them)."""
    found: dict[str, str] = {}
    for item in text.split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        if eq and key:
            found[key] = value.strip()
    return found


def format_attributes(fields: dict[str, str]) -> str:
    """A dict to ``k=v,k=v``; items a comma or an equals sign would break are left out."""
    return ",".join(
        f"{key}={value}"
        for key, value in fields.items()
        if key and not any(c in key + value for c in ",=")
    )
