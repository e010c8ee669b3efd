"""The fixtures trionsq gives to other projects' test suites (entry point pytest11)."""

from __future__ import annotations

import socket
import struct
import time
from typing import TYPE_CHECKING

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import MAGIC_V2, Pub, Rdy, Sub
from trionsq.protocol.client import MessageFrame, Response, encode_commands

if TYPE_CHECKING:
    import trio

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import ProtocolClient


async def test_nsqd_and_nsqd_client_fixtures(
    nsqd: BoundAddresses, nsqd_client: ProtocolClient
) -> None:
    await nsqd_client.send(Pub("fixture", b"hello"), Sub("fixture", "c"), Rdy(1))
    frames = await nsqd_client.read(3)
    assert [f.is_ok for f in frames[:2] if isinstance(f, Response)] == [True, True]
    assert isinstance(frames[2], MessageFrame)
    assert frames[2].message.body == b"hello"
    assert nsqd.tcp[0] == "127.0.0.1"


async def test_a_broker_starts_quickly(nursery: trio.Nursery) -> None:
    started = time.perf_counter()
    await nursery.start(serve_nsqd, NsqdConfig.loopback())
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5  # median 0.14 ms here; the bound is generous for a loaded CI machine


def test_thread_hosted_broker_for_non_trio_code(nsqd_thread: BoundAddresses) -> None:
    with socket.create_connection(nsqd_thread.tcp, timeout=10) as sock:
        sock.sendall(MAGIC_V2 + encode_commands([Pub("threaded", b"x")]))
        reply = sock.recv(64)
    size, frame_type = struct.unpack(">Ii", reply[:8])
    assert (size, frame_type, reply[8:]) == (6, 0, b"OK")
