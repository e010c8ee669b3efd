"""Trace log lines (seed 003 §5), on logger ``trionsq.client.trace``, when a
producer or consumer is opened with ``trace=True``.

Published: internal id, trace id, log offset (PUB_TRACE's answer). Consumed: the
internal id and trace id (Youzan's binary ids), offset and size (ordered and
SUB_ADVANCED consumers), publish time, and both ends of the connection.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..protocol.client import TracedReply
    from ..protocol.message import Message
    from .connection import Connection

__all__ = ["trace_consumed", "trace_log", "trace_published"]

trace_log = logging.getLogger("trionsq.client.trace")


def _ids(message_id: bytes) -> tuple[str, int]:
    """(internal id, trace id): Youzan's binary pair, or nsqd's hex text and 0."""
    if len(message_id) == 16 and not all(48 <= b < 58 or 97 <= b < 103 for b in message_id):
        return str(int.from_bytes(message_id[:8], "big")), int.from_bytes(message_id[8:], "big")
    return message_id.decode("ascii", "replace"), 0


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
