"""A replication connection's socket read and written through its descriptor.

trio's socket methods add a scheduler pass after every call that succeeds. On a
replicated publish's way (the leader ships, the follower reads, appends and ACKs,
the leader reads the ACK) two of them stood between the bytes' arrival and their
use: each a whole pass of the busy process (docs/replication.md, "Where a
replicated PUB's time goes"). As the broker's client connections do
(``server/tcp.py``), these read at once and wait for the socket only when it is
empty, and write at once and wait only when it is full. A reader whose data keeps
coming lets the others run once before each read, so it cannot starve them.
"""

from __future__ import annotations

import os

import trio

from ..socket_writes import write_all

__all__ = ["RawStream"]


class RawStream:
    """The hot loops' reads and writes of one replication connection; one task reads
    and one writes at a time, as with the ``trio.SocketStream`` it wraps."""

    __slots__ = ("_fd", "_waited")

    def __init__(self, stream: trio.SocketStream) -> None:
        self._fd = stream.socket.fileno()
        self._waited = True
        """The last read waited for the socket (a scheduler pass, so none is due)."""

    async def receive(self, size: int) -> bytes:
        """Up to ``size`` bytes, at least one.

        Raises:
            trio.BrokenResourceError: the peer closed or reset the connection.
        """
        fd = self._fd
        if not self._waited:  # data kept coming: the others run once per read
            await trio.lowlevel.checkpoint()
        self._waited = False
        while True:
            try:
                data = os.read(fd, size)
            except BlockingIOError:
                self._waited = True
                await trio.lowlevel.wait_readable(fd)
                continue
            except OSError as error:
                raise trio.BrokenResourceError(f"connection reset: {error}") from error
            if not data:
                raise trio.BrokenResourceError("the peer closed the connection")
            return data

    async def send(self, data: bytes) -> None:
        """All of ``data``, waiting only while the socket is full.

        Raises:
            trio.BrokenResourceError: the connection was reset.
        """
        error = await write_all(self._fd, data, trio.lowlevel.wait_writable)
        if error is not None:
            raise trio.BrokenResourceError(f"connection reset: {error}") from error
