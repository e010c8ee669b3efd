"""One text message sent to many websockets without copying its bulk for each.

An admin stream snapshot is the same 0.5 MB of JSON for every subscriber of its
interval but for the ``seq`` at its front. Sent with ``send_message``, each subscriber
cost about 2 ms of copies (wsproto encodes the text, then copies the payload twice
to build the frame), which for 20 subscribers at 100 ms was most of the broker's
CPU. Here the message goes as two frames (RFC 6455 §5.4, fragmentation, which every
websocket client reassembles): a small first one with the subscriber's own prefix,
and a final continuation frame built once (:func:`continuation_frame`) and written
as is to every subscriber's socket.

trio-websocket has no public call for that, so :func:`send_in_two_frames` writes
under the connection's own send lock, as its ``_send`` does, and leaves wsproto's
state untouched (it holds none between whole messages). Server frames are never
masked, and the broker's websockets negotiate no extension (no compression), so the
bytes are the frames as wsproto would have made them.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

import trio
from trio_websocket import ConnectionClosed

if TYPE_CHECKING:
    from trio_websocket import WebSocketConnection

__all__ = ["continuation_frame", "send_in_two_frames"]

_TEXT: Final = 0x1
_CONTINUATION: Final = 0x0
_FIN: Final = 0x80
SEND_PIECE: Final = 256 * 1024
"""Bytes of a final frame one write takes before other tasks run. The subscribers of
a group send at once, in one scheduler batch: 20 writes of 0.5 MB each held the loop
(and /ping) 3-7 ms per snapshot, half of that in pieces of 256 KB; smaller pieces
cost more CPU in writes (64 KB: 2% of a core more at 200 snapshots a second)."""


def _header(first_byte: int, length: int) -> bytes:
    """A server frame's header (unmasked) for a payload of ``length`` bytes."""
    if length < 126:
        return struct.pack("!BB", first_byte, length)
    if length < 1 << 16:
        return struct.pack("!BBH", first_byte, 126, length)
    return struct.pack("!BBQ", first_byte, 127, length)


def continuation_frame(*payload: bytes | memoryview) -> bytes:
    """The final frame of a fragmented message, carrying the parts of ``payload``
    joined (built once, with one copy of them)."""
    length = sum(len(part) for part in payload)
    return b"".join((_header(_FIN | _CONTINUATION, length), *payload))


async def send_in_two_frames(ws: WebSocketConnection, head: bytes, tail: bytes) -> None:
    """Send the text message ``head`` + the payload of ``tail`` (a
    :func:`continuation_frame`): ``head`` in a text frame that is not final, then
    ``tail`` unchanged, :data:`SEND_PIECE` bytes a write.

    Raises:
        ConnectionClosed: as ``send_message`` does, when the websocket is closed or
            its socket fails.
    """
    if ws._close_reason:
        raise ConnectionClosed(ws._close_reason)
    first = _header(_TEXT, len(head)) + head
    async with ws._stream_lock:  # whole frames, never inside one of trio-websocket's
        try:
            await ws._stream.send_all(first)
            with memoryview(tail) as view:
                for start in range(0, len(view), SEND_PIECE):
                    await ws._stream.send_all(view[start : start + SEND_PIECE])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await ws._abort_web_socket()
            raise ConnectionClosed(ws._close_reason) from None
