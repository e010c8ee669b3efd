"""A replication connection's descriptor reads and writes (cluster/raw_stream.py), on
real loopback sockets: what trio's stream methods did that these must still do."""

from __future__ import annotations

import os
import socket
import struct
from typing import TYPE_CHECKING

import pytest
import trio

from trionsq.cluster.raw_stream import RawStream

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@pytest.fixture
async def pair() -> AsyncIterator[tuple[trio.SocketStream, trio.SocketStream]]:
    """Two ends of one loopback TCP connection."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = trio.socket.socket()
    await client.connect(listener.getsockname())
    server, _ = await listener.accept()
    listener.close()
    ends = trio.SocketStream(client), trio.SocketStream(server)
    yield ends
    for end in ends:
        await end.aclose()


async def test_reads_what_came_and_a_closed_peer_is_a_broken_stream(
    pair: tuple[trio.SocketStream, trio.SocketStream],
) -> None:
    near, far = pair
    raw = RawStream(near)
    await far.send_all(b"records")
    assert await raw.receive(1024) == b"records"
    async with trio.open_nursery() as nursery:  # waits until something comes
        nursery.start_soon(far.send_all, b"ack")
        assert await raw.receive(1024) == b"ack"
    await far.aclose()
    with pytest.raises(trio.BrokenResourceError, match="closed"):
        await raw.receive(1024)


async def test_a_reset_connection_is_a_broken_stream_both_ways(
    pair: tuple[trio.SocketStream, trio.SocketStream],
) -> None:
    near, far = pair
    raw = RawStream(near)
    far.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await far.aclose()  # an RST, not a FIN
    await trio.sleep(0.05)
    with pytest.raises(trio.BrokenResourceError, match="reset"):
        await raw.receive(1024)
    with pytest.raises(trio.BrokenResourceError, match="reset"):
        await raw.send(b"x" * 100_000)


async def test_a_reader_whose_data_keeps_coming_passes_through_the_scheduler_between_reads(
    pair: tuple[trio.SocketStream, trio.SocketStream],
) -> None:
    """Data always there: no read waits (no scheduler pass of its own), so the one
    after a read that did not wait yields first, or a busy follower would starve
    the broker's other tasks and never see its role's end. Seen here by a cancelled
    scope: only a pass through the scheduler raises it."""
    near, far = pair
    raw = RawStream(near)
    await far.send_all(b"first")
    await trio.sleep(0.05)  # on the near end's socket
    assert await raw.receive(1024) == b"first"  # waited for nothing, yielded nothing
    os.write(far.socket.fileno(), b"second")  # there at once, without a checkpoint
    with trio.CancelScope() as scope:
        scope.cancel()
        await raw.receive(1024)  # without the yield: b"second", and no Cancelled
    assert scope.cancelled_caught
    assert await raw.receive(1024) == b"second"  # left for the next read


async def test_send_writes_everything_even_past_what_the_socket_holds(
    pair: tuple[trio.SocketStream, trio.SocketStream],
) -> None:
    near, far = pair
    raw = RawStream(near)
    data = bytes(range(256)) * 40_000  # 10 MB: more than the kernel's buffers
    received = bytearray()

    async def drain() -> None:
        while len(received) < len(data):
            received.extend(await far.receive_some(1 << 20))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        await raw.send(data)
    assert bytes(received) == data
