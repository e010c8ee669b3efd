"""The commands a client sends, as immutable events (spec tcp-protocol §4 and §8).

The server state machine turns bytes into these; the client encoder turns them
back into bytes. Names and bodies are exactly what was on the wire: topic and
channel names are decoded as UTF-8 with ``surrogateescape``, so every byte string
maps to one ``str`` and encodes back to the same bytes.
"""

from __future__ import annotations

from typing import Final

import attrs

from .identify import IdentifyRequest, IdentifyResponse, NegotiatedSettings
from .strconv import go_atoi

# twin of part of trionsq.protocol._SUBMODULES: the package names the public ones without importing this module
__all__ = [
    "Auth",
    "Cls",
    "Command",
    "Dpub",
    "ExtMessage",
    "Fin",
    "FinMany",
    "Identify",
    "InternalCreateTopic",
    "Mpub",
    "MpubExt",
    "MpubTrace",
    "Nop",
    "OffsetSpec",
    "Pub",
    "PubExt",
    "PubTrace",
    "Pull",
    "Rdy",
    "Req",
    "Sub",
    "SubAdvanced",
    "SubOrdered",
    "Touch",
    "TracedMessage",
]

OFFSET_SPEC_TYPES: Final = ("timestamp", "virtual_queue", "msgcount", "special")


@attrs.frozen
class Identify:
    """IDENTIFY: the client's settings, and the outcome the server negotiated from them."""

    request: IdentifyRequest
    settings: NegotiatedSettings = attrs.field(eq=False)
    """Effective per-client values; derived from ``request`` and the server settings."""
    response: IdentifyResponse | None = attrs.field(eq=False)
    """The JSON reply when ``feature_negotiation`` was asked for, else ``None`` (reply ``OK``)."""


@attrs.frozen
class Auth:
    """AUTH with the client's secret."""

    secret: bytes


@attrs.frozen
class Sub:
    """SUB, optionally to one partition (Youzan)."""

    topic: str
    channel: str
    partition: int | None = None


@attrs.frozen
class SubOrdered:
    """SUB_ORDERED: one message in flight per partition, detail layout (Youzan)."""

    topic: str
    channel: str
    partition: int | None = None


OFFSET_KINDS: Final = ("timestamp", "virtual_queue", "msgcount", "special")


@attrs.frozen
class OffsetSpec:
    """Where SUB_ADVANCED or ``/channel/setoffset`` starts a channel: ``<kind>:<value>``."""

    kind: str
    """One of ``timestamp``, ``virtual_queue``, ``msgcount``, ``special``."""
    value: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"

    @classmethod
    def parse(cls, raw: bytes) -> OffsetSpec | None:
        """``<kind>:<int64>`` as SUB_ADVANCED and /channel/setoffset take it; None if
        malformed (``special`` takes only -1)."""
        kind, sep, value = raw.partition(b":")
        text = kind.decode("utf-8", "surrogateescape")
        if not sep or text not in OFFSET_KINDS:
            return None
        number = go_atoi(value)
        if isinstance(number, str) or (text == "special" and number != -1):
            return None
        return cls(text, number)


@attrs.frozen
class SubAdvanced:
    """SUB_ADVANCED: detail layout, optionally starting the channel at an offset (Youzan)."""

    topic: str
    channel: str
    partition: int | None = None
    offset: OffsetSpec | None = None


@attrs.frozen
class Pub:
    """PUB, optionally to one partition."""

    topic: str
    body: bytes
    partition: int | None = None


@attrs.frozen
class Mpub:
    """MPUB: several bodies, all or none."""

    topic: str
    bodies: tuple[bytes, ...]
    partition: int | None = None


@attrs.frozen
class Dpub:
    """DPUB: one body delivered after ``defer_ms``."""

    topic: str
    defer_ms: int
    body: bytes


@attrs.frozen
class PubTrace:
    """PUB_TRACE: a body with a trace id; answered with the traced reply."""

    topic: str
    trace_id: int
    body: bytes
    partition: int | None = None


@attrs.frozen
class TracedMessage:
    """One part of an MPUB_TRACE."""

    trace_id: int
    body: bytes


@attrs.frozen
class MpubTrace:
    """MPUB_TRACE: several traced bodies."""

    topic: str
    messages: tuple[TracedMessage, ...]
    partition: int | None = None


@attrs.define(unsafe_hash=True)
class ExtMessage:
    """A body with its JSON header bytes as the client sent them.

    Immutable by convention, not enforced (as :class:`~trionsq.queues.record.Record`):
    the server makes one per message of an MPUB_EXT, and a frozen attrs class cost
    0.7 us to build against 0.25 us (issue 32). Hashable by value, as it was frozen.
    """

    header: bytes
    body: bytes
    trace_id: int | None = attrs.field(default=None, eq=False)
    """``##trace_id`` from the header, when present (derived from ``header``)."""
    tag: str | None = attrs.field(default=None, eq=False)
    """``##client_dispatch_tag`` from the header, when it is a string (derived)."""
    idempotency_key: str | None = attrs.field(default=None, eq=False)
    """``##idempotency_key`` from the header, when present (derived)."""


@attrs.frozen
class PubExt:
    """PUB_EXT: a body with a JSON header (Youzan)."""

    topic: str
    message: ExtMessage
    partition: int | None = None


@attrs.frozen
class MpubExt:
    """MPUB_EXT: several bodies with JSON headers (Youzan)."""

    topic: str
    messages: tuple[ExtMessage, ...]
    partition: int | None = None


@attrs.frozen
class Rdy:
    """RDY: how many messages may be in flight to this client."""

    count: int


@attrs.frozen
class Pull:
    """PULL (trionsq's pull consumption): send up to ``count`` more messages, once;
    FINs do not renew it as they renew RDY's window. RDY goes back to pushing."""

    count: int


@attrs.frozen
class Fin:
    """FIN: the 16 id bytes as the client echoed them."""

    message_id: bytes


FIN_LINE_LENGTH: Final = 21
"""``FIN `` + a 16-byte id (hex or binary) + ``\\n``: every line of a :class:`FinMany`."""


@attrs.frozen
class FinMany:
    """A run of FINs that arrived as whole lines in one read (``FIN <16 lowercase
    hex>\\n``, or ``FIN <16-byte binary id>\\n`` once ids are binary), in order: the
    server's fast path for consumers that finish every message (issue 19). Any other
    FIN, and every client-side FIN, is a :class:`Fin`; the broker answers both alike."""

    internal_ids: tuple[int, ...]
    lines: bytes
    """The run as sent: ``message_ids`` gives each id back for an error text."""

    @property
    def message_ids(self) -> list[bytes]:
        """Each FIN's 16 id bytes as the client sent them."""
        lines = self.lines
        return [lines[at : at + 16] for at in range(4, len(lines), FIN_LINE_LENGTH)]


@attrs.frozen
class Req:
    """REQ: requeue after ``timeout_ms`` (as sent; the broker clamps to max-req-timeout)."""

    message_id: bytes
    timeout_ms: int


@attrs.frozen
class Touch:
    """TOUCH: reset the message's in-flight deadline."""

    message_id: bytes


@attrs.frozen
class Cls:
    """CLS: the client is closing; answer ``CLOSE_WAIT``."""


@attrs.frozen
class Nop:
    """NOP: no reply; how clients answer heartbeats."""


@attrs.frozen
class InternalCreateTopic:
    """INTERNAL_CREATE_TOPIC: create one partition of a topic, optionally ext (Youzan)."""

    topic: str
    partition: int
    ext: bool = False


Command = (
    Identify
    | Auth
    | Sub
    | SubOrdered
    | SubAdvanced
    | Pub
    | Mpub
    | Dpub
    | PubTrace
    | MpubTrace
    | PubExt
    | MpubExt
    | Rdy
    | Pull
    | Fin
    | Req
    | Touch
    | Cls
    | Nop
    | InternalCreateTopic
)
