"""What a consumer is opened with: :class:`ConsumerSettings` (how it behaves) and
:class:`ConsumerKeywords` (``open_consumer``'s keyword options, as one type)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import attrs

from ..config_values import checked_fields, seconds
from ..protocol.commands import OffsetSpec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .options import ConnectionOptions

__all__ = ["ConsumerKeywords", "ConsumerSettings"]


@attrs.frozen(field_transformer=checked_fields)
class ConsumerSettings:
    """How a consumer behaves; the defaults are go-nsq's where it has one."""

    max_in_flight: int = 200
    ordered: bool = False
    """SUB_ORDERED: one message in flight per partition, offsets checked."""
    ordered_window: int = 1
    """With ``ordered``: messages of a partition held at once, in order (IDENTIFY
    ``ordered_window``, trionsq's extension; a broker without it keeps 1). After a
    requeue the consumer drops what it holds of that partition past the message and
    waits for the broker to send it again, so handling stays in order."""
    start_at: OffsetSpec | None = None
    """SUB_ADVANCED from here (first subscription only; reconnects go on)."""
    max_attempts: int = 5
    """Handler mode: past this many deliveries the give-up hook gets the message (0: never)."""
    dead_letter: bool = False
    """Ask the broker to keep ``max_attempts`` instead (IDENTIFY ``max_attempts``,
    trionsq's extension): a message delivered that many times and put back again goes
    to the channel's dead-letter topic (``<topic>.dead``), in any mode, even when this
    consumer is gone before it handles it."""
    group_member: str = ""
    """Join the channel's consumer group under this name (IDENTIFY ``group_member``,
    trionsq's extension): the broker gives each partition to one member and moves a
    departed member's partitions to the others. Connect to every partition (through
    lookupd, or ``partitions=``); give each consumer process its own name (1-64 of
    ``[.a-zA-Z0-9_-]``, e.g. host and pid). Empty: an ordinary NSQ consumer."""
    group_session_timeout: float = attrs.field(default=0.0, converter=seconds)
    """A group member's session timeout in seconds (IDENTIFY ``group_session_timeout``;
    3 to 1800, 0: the broker's default, 10): a member the broker hears nothing from
    for that long is gone and its connections closed. Heartbeats come every third
    of it and are answered, so only a stopped process goes; one that resumes drops
    what it held unhandled (another member has it)."""
    max_msgs_per_sec: int = 0
    """Ask the broker to deliver at most this many messages a second to each of this
    consumer's connections (IDENTIFY ``max_msgs_per_sec``, trionsq's extension; 0: no
    limit). Unlike ``max_in_flight`` it bounds the rate, not what is held at once."""
    max_bytes_per_sec: int = 0
    """The same in bytes a second (bodies plus 34 bytes of frame each; 0: no limit)."""
    pull: bool = False
    """Pull consumption (PULL, trionsq's extension; TubeMQ's pull model): no RDY is
    sent, messages come only as :meth:`Consumer.fetch` asks for them."""
    requeue_delay: float = attrs.field(default=90.0, converter=seconds)
    """Handler mode: a failed message comes back after this times its attempts..."""
    max_requeue_delay: float = attrs.field(default=900.0, converter=seconds)
    """...but not later than this."""
    backoff_unit: float = attrs.field(default=1.0, converter=seconds)
    max_backoff: float = attrs.field(default=120.0, converter=seconds)
    redistribute_interval: float = attrs.field(default=5.0, converter=seconds)
    """With more connections than ``max_in_flight``: how often RDY moves on."""
    idle_before_redistribute: float = attrs.field(default=10.0, converter=seconds)
    lookup_interval: float = attrs.field(default=60.0, converter=seconds)
    trace: bool = False
    """Log each message's ids, offsets, time and addresses (logger ``trionsq.client.trace``)."""
    drain_timeout: float = attrs.field(default=5.0, converter=seconds)
    """Handler mode, once the consumer stops (:meth:`Consumer.handle` cancelled, or
    its block left): seconds the running handlers get to finish the messages they
    hold; then they are cancelled and those messages given back (REQ 0)."""

    @property
    def detail(self) -> bool:
        """Messages carry their offset and size."""
        return self.ordered or self.start_at is not None


class ConsumerKeywords(TypedDict, total=False):
    """``open_consumer``'s keyword options after its addresses, as one type for code
    that passes them on (the ``client`` fixture's ``consumer``), so that mypy names a
    misspelt one there. tests/unit/client/test_consumer_keywords.py keeps it in step
    with ``open_consumer``."""

    partitions: Sequence[int] | None
    options: ConnectionOptions | None
    settings: ConsumerSettings | None
    max_in_flight: int | None
    ordered: bool | None
    start_at: OffsetSpec | None
    trace: bool | None
