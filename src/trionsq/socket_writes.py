"""Writing a whole buffer to a connection's non-blocking socket, the way every
server of the process writes (the broker's NSQ connections, TubeMQ's).

``os.write`` straight to the descriptor: no checkpoint and no parking when the
socket takes it all, which is the common case; only a full socket waits, by the
caller's own rule (the broker's heartbeat-interval write deadline, or none).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["write_all"]


async def write_all(
    fd: int, data: bytes, wait_writable: Callable[[int], Awaitable[None]]
) -> OSError | None:
    """Put all of ``data`` on ``fd``, awaiting ``wait_writable(fd)`` whenever the socket
    is full. Returns the error that ended the writing (reset, broken pipe), or None
    once all is written; the caller has the right to write."""
    with memoryview(data) as view:
        sent = 0
        while sent < len(view):
            try:
                sent += os.write(fd, view[sent:])
            except BlockingIOError:
                await wait_writable(fd)
            except OSError as error:
                return error
    return None
