"""Memory the broker holds for queued messages, measured on the ``nsqd`` process
(issue 14: 1,000 queued 1 MB messages held 1 GB of RSS; benchmarks/memory.py has
the full-size measurement)."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from trionsq.protocol import Fin, Nop, Pub, Rdy, Sub
from trionsq.protocol.client import MessageFrame, Response
from trionsq.testing import ProtocolClient

NSQD = Path(sys.executable).parent / "nsqd"
MIB = 1024 * 1024


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None
    return int(match[1]) / 1024


async def test_queued_large_messages_are_held_on_disk_not_in_memory() -> None:
    """200 unconsumed 1 MB messages: RSS grows by the tail cache's byte bound (32 MiB)
    and transient buffers, not by 200 MB; every message comes back intact."""
    data = tempfile.mkdtemp(prefix="trionsq-memory-")
    process = await trio.lowlevel.open_process(
        [str(NSQD), f"--data-path={data}", "--tcp-address=127.0.0.1:0", "--http-address="],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        seen = b""
        with trio.fail_after(20):
            while not (match := re.search(rb"TCP: listening on 127\.0\.0\.1:(\d+)", seen)):
                chunk = await process.stderr.receive_some(4096)
                assert chunk, seen
                seen += chunk
        address = ("127.0.0.1", int(match[1]))
        consumer = await ProtocolClient.connect(address)
        await consumer.send(Sub("big", "c"))
        assert (await consumer.read(1))[0] == Response(b"OK")
        start = rss_mib(process.pid)
        producer = await ProtocolClient.connect(address)
        bodies = [bytes([n]) * MIB for n in range(200)]
        for body in bodies:
            await producer.send(Pub("big", body))
            assert (await producer.read(1))[0] == Response(b"OK")
        grown = rss_mib(process.pid) - start
        assert grown < 100, f"RSS grew {grown:.0f} MiB for 200 MiB queued"

        await consumer.send(Rdy(5))
        got: list[bytes] = []
        while len(got) < len(bodies):
            (frame,) = await consumer.read(1)
            if isinstance(frame, MessageFrame):
                got.append(frame.message.body)
                await consumer.send(Fin(frame.message.id))
            else:
                await consumer.send(Nop())
        assert got == bodies
        for client in (consumer, producer):
            await client.stream.aclose()
    finally:
        process.kill()
        await process.wait()
