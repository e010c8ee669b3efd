"""Message frames: nsqd's plain layout and Youzan's extended and detail layouts.

Plain (spec §3): ``[8 timestamp][2 attempts][16 id][body]``.
Youzan (spec §8.8) inserts, after the id, ``[1 ext version][2 ext len][ext]`` when the
client has ``extend_support`` on an ext topic ("extended"), and ``[8 offset][4 raw size]``
when it subscribed with SUB_ORDERED or SUB_ADVANCED ("detail").
"""

from __future__ import annotations

import re
import struct
from typing import Final

import attrs

from .errors import ProtocolError
from .frames import FRAME_TYPE_MESSAGE

# twin of part of trionsq.protocol._SUBMODULES: the package names the public ones without importing this module
__all__ = [
    "EXT_VERSION_JSON",
    "EXT_VERSION_NONE",
    "EXT_VERSION_TAG",
    "MESSAGE_FRAME_HEAD",
    "MESSAGE_HEADER_SIZE",
    "Message",
    "binary_id",
    "decode_message",
    "encode_message",
    "encode_message_frame",
    "encode_message_frames",
    "hex_id",
    "parse_binary_id",
    "parse_hex_id",
]

MESSAGE_HEADER_SIZE: Final = 26
EXT_VERSION_NONE: Final = 0
EXT_VERSION_TAG: Final = 2
EXT_VERSION_JSON: Final = 4
MAX_EXT_LENGTH: Final = 0xFFFF

# size, frame type, timestamp, attempts: one pack for the fixed head of a message frame
MESSAGE_FRAME_HEAD: Final = struct.Struct(">IiqH")
"""A message frame's size, frame type, timestamp and attempts, ahead of its id."""
_HEAD: Final = struct.Struct(">qH")
_EXT_HEAD: Final = struct.Struct(">BH")
_DETAIL: Final = struct.Struct(">QI")
_ID_PAIR: Final = struct.Struct(">QQ")
_HEX_ID: Final = re.compile(rb"[0-9a-fA-F]{16}")


@attrs.frozen
class Message:
    """One message as a consumer sees it."""

    timestamp: int
    """Publish time, nanoseconds since the Unix epoch; kept across requeues."""
    attempts: int
    """Delivery count, incremented before each send (first delivery = 1)."""
    id: bytes
    """The 16 id bytes exactly as on the wire (hex text or Youzan's binary pair)."""
    body: bytes
    ext_version: int = EXT_VERSION_NONE
    """Extended layout only: 0 none, 2 tag, 4 JSON header."""
    ext: bytes = b""
    """Extended layout only: the tag or the JSON header bytes as published."""
    offset: int | None = None
    """Detail layout only: the record's virtual offset in its partition log."""
    raw_size: int | None = None
    """Detail layout only: the record's size in the log, its 4-byte prefix included."""


def hex_id(internal_id: int) -> bytes:
    """nsqd's id form: the 8-byte id as 16 lowercase hex characters."""
    return b"%016x" % internal_id


def binary_id(internal_id: int, trace_id: int = 0) -> bytes:
    """Youzan's id form: ``[8-byte internal id][8-byte trace id]``."""
    return _ID_PAIR.pack(internal_id, trace_id)


def parse_hex_id(message_id: bytes) -> int:
    """The internal id inside a hex id; a malformed one is nsqd's ``invalid message ID``."""
    if _HEX_ID.fullmatch(message_id) is None:
        return -1
    return int(message_id, 16)


def parse_binary_id(message_id: bytes) -> tuple[int, int]:
    """The (internal id, trace id) inside a binary id."""
    internal_id, trace_id = _ID_PAIR.unpack(message_id)
    return internal_id, trace_id


def encode_message(message: Message, *, extended: bool = False, detail: bool = False) -> bytes:
    """A message's data in the layout a client negotiated (no frame header)."""
    parts = [_HEAD.pack(message.timestamp, message.attempts), message.id]
    if extended:
        if message.ext_version == EXT_VERSION_NONE:
            parts.append(b"\x00")
        else:
            if len(message.ext) >= MAX_EXT_LENGTH:
                raise ValueError("ext header too long for its 2-byte length")
            parts.append(_EXT_HEAD.pack(message.ext_version, len(message.ext)))
            parts.append(message.ext)
    if detail:
        if message.offset is None or message.raw_size is None:
            raise ValueError("the detail layout needs offset and raw_size")
        parts.append(_DETAIL.pack(message.offset, message.raw_size))
    parts.append(message.body)
    return b"".join(parts)


def encode_message_frame(timestamp: int, attempts: int, message_id: bytes, body: bytes) -> bytes:
    """A whole plain message frame; the hot-path encoder (one pack, two joins)."""
    return (
        MESSAGE_FRAME_HEAD.pack(len(body) + 30, FRAME_TYPE_MESSAGE, timestamp, attempts)
        + message_id
        + body
    )


def encode_message_frames(messages: list[Message]) -> bytes:
    """Plain frames for a batch of messages, joined for one ``send_all``."""
    pack = MESSAGE_FRAME_HEAD.pack
    parts: list[bytes] = []
    append = parts.append
    for m in messages:
        append(pack(len(m.body) + 30, FRAME_TYPE_MESSAGE, m.timestamp, m.attempts))
        append(m.id)
        append(m.body)
    return b"".join(parts)


def decode_message(data: bytes, *, extended: bool = False, detail: bool = False) -> Message:
    """Parse a message frame's data in the given layout.

    Raises:
        ProtocolError: ``E_BAD_MESSAGE`` when the data is too short for its layout.
    """
    if len(data) < MESSAGE_HEADER_SIZE:
        raise ProtocolError("E_BAD_MESSAGE", f"message too short ({len(data)} bytes)")
    timestamp, attempts = _HEAD.unpack_from(data)
    message_id = data[10:26]
    pos = MESSAGE_HEADER_SIZE
    ext_version = EXT_VERSION_NONE
    ext = b""
    offset: int | None = None
    raw_size: int | None = None
    if extended:
        if len(data) < pos + 1:
            raise ProtocolError("E_BAD_MESSAGE", "message too short for its ext version")
        ext_version = data[pos]
        pos += 1
        if ext_version != EXT_VERSION_NONE:
            if len(data) < pos + 2:
                raise ProtocolError("E_BAD_MESSAGE", "message too short for its ext length")
            (ext_len,) = struct.unpack_from(">H", data, pos)
            pos += 2
            if len(data) < pos + ext_len:
                raise ProtocolError("E_BAD_MESSAGE", "message too short for its ext header")
            ext = data[pos : pos + ext_len]
            pos += ext_len
    if detail:
        if len(data) < pos + _DETAIL.size:
            raise ProtocolError("E_BAD_MESSAGE", "message too short for its offset")
        offset, raw_size = _DETAIL.unpack_from(data, pos)
        pos += _DETAIL.size
    return Message(timestamp, attempts, message_id, data[pos:], ext_version, ext, offset, raw_size)
