"""The field checks TubeMQ's services make before anything else, worded as its server
words them (its SDKs show ``errMsg`` to the user as it comes)."""

from __future__ import annotations

from typing import Final

from ..protocol.names import is_ephemeral, is_valid_name

__all__ = [
    "MAX_CLIENT_ID",
    "MAX_GROUP",
    "MAX_HOST",
    "MAX_TOPIC",
    "MAX_TOPICS",
    "bad_group",
    "missing",
    "not_text",
    "partition_problem",
    "topic_not_existed",
]

MAX_CLIENT_ID: Final = 1024
MAX_HOST: Final = 256
MAX_GROUP: Final = 1024
MAX_TOPIC: Final = 64
MAX_TOPICS: Final = 1024
"""Most topics one producer or consumer may book."""


def missing(*fields: tuple[str, str, int]) -> str:
    """The first of ``(name, value, max length)`` that is blank or too long, as TubeMQ
    says it, or not text; ``""`` when all are fine."""
    for name, value, limit in fields:
        if not isinstance(value, str):
            return not_text(name)
        if value and len(value) <= limit and not value[0].isspace() and not value[-1].isspace():
            continue  # the usual case, without copying the value
        if not value.strip():
            return f"Request miss necessary {name} data!"
        if len(value.strip()) > limit:
            return f"{name}'s length over max value, allowed max length is {limit}"
    return ""


def bad_group(group: str) -> str:
    """A group must also be a channel name (no ``#ephemeral``: a group keeps offsets)."""
    if not is_valid_name(group.encode()) or is_ephemeral(group) or len(group) > 64:
        return (
            f"Illegal value: groupName {group} must be a valid NSQ channel name"
            " ([.a-zA-Z0-9_-], at most 64 characters, not #ephemeral)"
        )
    return ""


def topic_not_existed(topic: str) -> str:
    return f"topicName {topic} not existed, please check your configure"


def partition_problem(partitions: int | None, topic: str, partition: int) -> str:
    """Why a call cannot name this partition of ``topic`` (which has ``partitions``,
    None: no such topic); ``""`` when it can."""
    if partitions is None:
        return topic_not_existed(topic)
    if not 0 <= partition < partitions:
        return f"partitionId {topic}-{partition} not existed, please check your configure"
    return ""


def not_text(name: str) -> str:
    """A string field that is not UTF-8: protobuf hands a proto2 string over as bytes
    then (TubeMQ's Java server would read it with replacement characters)."""
    return f"Illegal value: {name} is not UTF-8 text"
