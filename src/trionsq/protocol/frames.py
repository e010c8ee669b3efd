"""Server-to-client framing: ``[size][frame type][data]`` (spec tcp-protocol §2)."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .errors import ProtocolError

__all__ = [
    "CLOSE_WAIT_FRAME",
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "FRAME_TYPE_RESPONSE",
    "GROUP_OWNER",
    "GROUP_OWNER_FRAME",
    "HEARTBEAT_FRAME",
    "MAGIC_V2",
    "OK_FRAME",
    "error_frame",
    "frame",
    "response_frame",
    "traced_reply",
    "traced_reply_frame",
]

MAGIC_V2: Final = b"  V2"
FRAME_TYPE_RESPONSE: Final = 0
FRAME_TYPE_ERROR: Final = 1
FRAME_TYPE_MESSAGE: Final = 2

_FRAME_HEADER: Final = struct.Struct(">Ii")
_TRACED: Final = struct.Struct(">2sQQQI")


def frame(frame_type: int, data: bytes) -> bytes:
    """One frame; ``size`` counts the frame type field and the data."""
    return _FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def response_frame(data: bytes) -> bytes:
    """A response frame (``OK``, ``CLOSE_WAIT``, ``_heartbeat_``, JSON, traced reply)."""
    return _FRAME_HEADER.pack(len(data) + 4, FRAME_TYPE_RESPONSE) + data


def error_frame(error: ProtocolError) -> bytes:
    """An error frame carrying ``CODE description``."""
    data = error.data
    return _FRAME_HEADER.pack(len(data) + 4, FRAME_TYPE_ERROR) + data


OK_FRAME: Final = response_frame(b"OK")
HEARTBEAT_FRAME: Final = response_frame(b"_heartbeat_")
CLOSE_WAIT_FRAME: Final = response_frame(b"CLOSE_WAIT")
GROUP_OWNER: Final = b"_group_owner_"
"""trionsq's consumer groups: the connection's member now owns the partition, and
the messages after this notice are its own, from where the channel stands (sent to
members that asked with IDENTIFY ``group_notices``; docs/extensions.md)."""
GROUP_OWNER_FRAME: Final = response_frame(GROUP_OWNER)


def traced_reply(internal_id: int, trace_id: int, offset: int, raw_size: int) -> bytes:
    """The 30-byte reply to PUB_TRACE, MPUB_TRACE and traced PUB_EXT (spec §8.4)."""
    return _TRACED.pack(b"OK", internal_id, trace_id, offset, raw_size)


def traced_reply_frame(internal_id: int, trace_id: int, offset: int, raw_size: int) -> bytes:
    """The traced reply as a response frame."""
    return response_frame(_TRACED.pack(b"OK", internal_id, trace_id, offset, raw_size))
