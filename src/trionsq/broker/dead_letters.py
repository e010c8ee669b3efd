"""Dead letters (issue 20): what a message past its channel's bound becomes.

A channel with a bound (``max_attempts``, over HTTP or IDENTIFY) takes a message
that was delivered that many times and is put back once more (REQ, timeout, its
consumer gone) out of the channel; the broker publishes it to the channel's
dead-letter topic (``<topic>.dead`` unless named), created as an ext topic so the
message keeps its JSON headers and gains where it came from and how often it was
delivered. Pure: the broker does the publishing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from ..protocol.ext_header import stored_fields
from ..protocol.message import EXT_VERSION_JSON

if TYPE_CHECKING:
    from ..queues.record import Record

DEAD_FROM_TOPIC: Final = "##dead_from_topic"
DEAD_FROM_CHANNEL: Final = "##dead_from_channel"
DEAD_FROM_PARTITION: Final = "##dead_from_partition"
DEAD_ATTEMPTS: Final = "##dead_attempts"
"""How many times the message was delivered before it left its channel."""


def dead_topic_name(topic: str, named: str = "") -> str:
    """Where a channel of ``topic`` sends its dead letters: ``named``, else
    ``<topic>.dead``."""
    return named or f"{topic}.dead"


def dead_letter_header(
    record: Record, deliveries: int, topic: str, channel: str, partition: int
) -> bytes:
    """The JSON header of a dead letter: the message's own headers (an ext record's
    JSON object), with the four ``##dead_*`` keys set, values as strings as Youzan's
    headers carry them."""
    headers: dict[str, object] = {}
    if record.ext_version == EXT_VERSION_JSON and record.ext:
        headers.update(stored_fields(record.ext) or {})
    headers[DEAD_FROM_TOPIC] = topic
    headers[DEAD_FROM_CHANNEL] = channel
    headers[DEAD_FROM_PARTITION] = str(partition)
    headers[DEAD_ATTEMPTS] = str(deliveries)
    return orjson.dumps(headers)
