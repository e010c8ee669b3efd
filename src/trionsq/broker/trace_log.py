"""Youzan's message trace log: a line per traced message at publish and at each delivery.

Switched on by ``--trace-log`` (``NsqdConfig.trace_log``). A traced message is one
published with a trace id (PUB_TRACE, MPUB_TRACE, ``##trace_id`` in PUB_EXT, HTTP
/pubtrace and /pub_ext); each line carries what finds the message again: topic,
partition, internal id, trace id, queue offset, and the client's address. Lines go
to the ``trionsq.trace`` logger, so they can be routed to their own file.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..queues.record import Record
    from .consumers import Delivery

__all__ = ["delivered", "published"]

log = logging.getLogger("trionsq.trace")


def published(topic: str, partition: int, records: Iterable[Record], client: str) -> None:
    """One line per traced record of a publish."""
    for record in records:
        if record.trace_id:
            log.info(
                "PUB topic=%s partition=%d id=%d trace_id=%d offset=%d size=%d client=%s",
                topic,
                partition,
                record.internal_id,
                record.trace_id,
                record.offset,
                record.raw_size,
                client,
            )


def delivered(
    topic: str, partition: int, channel: str, deliveries: Iterable[Delivery], client: str
) -> None:
    """One line per traced message sent to a consumer (each attempt)."""
    for delivery in deliveries:
        record = delivery.record
        if record.trace_id:
            log.info(
                "DELIVER topic=%s partition=%d channel=%s id=%d trace_id=%d offset=%d"
                " attempts=%d client=%s",
                topic,
                partition,
                channel,
                record.internal_id,
                record.trace_id,
                record.offset,
                delivery.attempts,
                client,
            )
