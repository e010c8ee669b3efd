"""Dead letters (issue 20): what a message past its channel's bound becomes.

A channel with a bound (``max_attempts``, over HTTP or IDENTIFY) takes a message
that was delivered that many times and is put back once more (REQ, timeout, its
consumer gone) out of the channel; with ``--ttl-dead-letter``, a message past its
TTL too. The broker moves it to the channel's dead-letter topic (``<topic>.dead``
unless named; ``dead_letter_moves.py``), created as an ext topic so the message
keeps its JSON headers and gains where it came from, how often it was delivered
and why it left. Pure: the broker does the publishing.
"""

from __future__ import annotations

from typing import Final

import attrs
import orjson

from ..protocol.ext_header import stored_fields
from ..protocol.message import EXT_VERSION_JSON
from ..queues.record import Record

DEAD_FROM_TOPIC: Final = "##dead_from_topic"
DEAD_FROM_CHANNEL: Final = "##dead_from_channel"
DEAD_FROM_PARTITION: Final = "##dead_from_partition"
DEAD_ATTEMPTS: Final = "##dead_attempts"
"""How many times the message was delivered before it left its channel."""
DEAD_REASON: Final = "##dead_reason"
"""Why it left: :data:`MAX_ATTEMPTS_REASON` or :data:`TTL_REASON`."""
MAX_ATTEMPTS_REASON: Final = "max_attempts"
TTL_REASON: Final = "ttl"


@attrs.frozen
class DeadLetter:
    """A message that left its channel for the dead-letter topic."""

    record: Record
    deliveries: int
    """How often it was delivered (0: never, it expired first)."""
    reason: str = MAX_ATTEMPTS_REASON


def dead_topic_name(topic: str, named: str = "") -> str:
    """Where a channel of ``topic`` sends its dead letters: ``named``, else
    ``<topic>.dead``."""
    return named or f"{topic}.dead"


def dead_letter_header(letter: DeadLetter, topic: str, channel: str, partition: int) -> bytes:
    """The JSON header of a dead letter: the message's own headers (an ext record's
    JSON object), with the five ``##dead_*`` keys set, values as strings as Youzan's
    headers carry them."""
    record = letter.record
    headers: dict[str, object] = {}
    if record.ext_version == EXT_VERSION_JSON and record.ext:
        headers.update(stored_fields(record.ext) or {})
    headers[DEAD_FROM_TOPIC] = topic
    headers[DEAD_FROM_CHANNEL] = channel
    headers[DEAD_FROM_PARTITION] = str(partition)
    headers[DEAD_ATTEMPTS] = str(letter.deliveries)
    headers[DEAD_REASON] = letter.reason
    return orjson.dumps(headers)


def came_from(record: Record, body: bytes, topic: str, channel: str, partition: int) -> bool:
    """Whether ``record`` of a dead-letter topic is a dead letter of this channel with
    this body (a plain dead-letter topic holds bodies only: the body must do)."""
    if record.body != body:
        return False
    if record.ext_version != EXT_VERSION_JSON:
        return True
    fields = stored_fields(record.ext) or {}
    return (
        fields.get(DEAD_FROM_TOPIC) == topic
        and fields.get(DEAD_FROM_CHANNEL) == channel
        and fields.get(DEAD_FROM_PARTITION) == str(partition)
    )
