"""Trace log lines (seed 003 §5), on logger ``trionsq.client.trace``, when a
producer or consumer is opened with ``trace=True``.

Published: internal id, trace id, log offset (PUB_TRACE's answer). Consumed: the
internal id and trace id (Youzan's binary ids), offset and size (ordered and
SUB_ADVANCED consumers), publish time, and both ends of the connection.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..protocol.message import parse_binary_id, parse_hex_id

if TYPE_CHECKING:
    from ..protocol.client import TracedReply
    from ..protocol.message import Message
    from .connection import Connection

__all__ = ["trace_consumed", "trace_log", "trace_published"]

trace_log = logging.getLogger("trionsq.client.trace")


def _ids(message_id: bytes) -> tuple[str, int]:
    """(internal id, trace id): nsqd's hex text and 0, or Youzan's binary pair."""
    if parse_hex_id(message_id) >= 0:
        return message_id.decode("ascii"), 0
    internal_id, trace_id = parse_binary_id(message_id)
    return str(internal_id), trace_id


def trace_consumed(connection: Connection, partition: int | None, messages: list[Message]) -> None:
    if not trace_log.isEnabledFor(logging.INFO):
        return
    local, remote = connection.local_address, connection.remote_address
    for message in messages:
        internal, trace_id = _ids(message.id)
        trace_log.info(
            "consumed id=%s trace_id=%d partition=%s offset=%s size=%s timestamp=%d "
            "attempts=%d local=%s remote=%s",
            internal,
            trace_id,
            partition,
            message.offset,
            message.raw_size,
            message.timestamp,
            message.attempts,
            local,
            remote,
        )


def trace_published(
    connection: Connection, topic: str, partition: int | None, reply: TracedReply
) -> None:
    trace_log.info(
        "published topic=%s partition=%s id=%d trace_id=%d offset=%d size=%d local=%s remote=%s",
        topic,
        partition,
        reply.internal_id,
        reply.trace_id,
        reply.offset,
        reply.raw_size,
        connection.local_address,
        connection.remote_address,
    )
