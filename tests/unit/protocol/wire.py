"""Byte-building helpers for the protocol tests."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from trionsq.protocol import MAGIC_V2, ProtocolError, ServerConnection, ServerSettings

if TYPE_CHECKING:
    from trionsq.protocol.server import Event, PublishGate


def sized(body: bytes) -> bytes:
    """``[int32 size][body]``."""
    return struct.pack(">i", len(body)) + body


def mpub_body(*parts: bytes) -> bytes:
    """An MPUB body with a correct size header: ``[size][count]([size][part])*``."""
    inner = struct.pack(">i", len(parts)) + b"".join(sized(p) for p in parts)
    return sized(inner)


def ext_part(header: bytes, body: bytes) -> bytes:
    """``[uint16 json_len][json][body]``."""
    return struct.pack(">H", len(header)) + header + body


def fatal(code: str, description: str | None = "") -> ProtocolError:
    return ProtocolError(code, description, fatal=True)


def soft(code: str, description: str = "") -> ProtocolError:
    return ProtocolError(code, description, fatal=False)


def feed(
    data: bytes,
    settings: ServerSettings | None = None,
    *,
    gate: PublishGate | None = None,
    eof: bool = False,
    magic: bytes = MAGIC_V2,
) -> list[Event]:
    """Feed ``magic + data`` in one call (then EOF if asked) to a fresh connection."""
    conn = ServerConnection(settings, publish_gate=gate)
    events = conn.receive_data(magic + data)
    if eof:
        events += conn.receive_data(b"")
    return events


def feed_bytewise(
    data: bytes,
    settings: ServerSettings | None = None,
    *,
    gate: PublishGate | None = None,
    eof: bool = False,
    magic: bytes = MAGIC_V2,
) -> list[Event]:
    """Feed the same stream one byte per call."""
    conn = ServerConnection(settings, publish_gate=gate)
    stream = magic + data
    events: list[Event] = []
    for i in range(len(stream)):
        events += conn.receive_data(stream[i : i + 1])
    if eof:
        events += conn.receive_data(b"")
    return events
