"""SIGTERM with a grace period: the real ``nsqd`` stops delivering, waits for the
messages consumers hold to be finished (not for the whole grace), and after a restart
nothing they finished comes again; a second signal stops it at once."""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

import trio

from trionsq.protocol import Fin, Pub, Rdy, Sub
from trionsq.protocol.client import MessageFrame
from trionsq.testing import ProtocolClient

from .test_nsqd_command import Nsqd

if TYPE_CHECKING:
    from pathlib import Path


async def start(data: Path, *flags: str) -> tuple[Nsqd, tuple[str, int]]:
    nsqd = await Nsqd.start(
        "--tcp-address=127.0.0.1:0", "--http-address=", f"--data-path={data}", *flags
    )
    lines = await nsqd.wait_listening("TCP")
    _, host, port = lines["TCP"]
    return nsqd, (host, port)


async def consume(address: tuple[str, int], rdy: int) -> tuple[ProtocolClient, list[bytes]]:
    """A consumer on t/c holding ``rdy`` messages; their ids."""
    consumer = await ProtocolClient.connect(address)
    await consumer.send(Sub("t", "c"), Rdy(rdy))
    assert len(await consumer.read(1)) == 1  # OK to SUB
    with trio.fail_after(10):
        frames = await consumer.read(rdy)
    ids = []
    for frame in frames:
        assert isinstance(frame, MessageFrame)
        ids.append(frame.message.id)
    return consumer, ids


async def test_sigterm_waits_for_held_messages_and_they_do_not_come_back(
    tmp_path: Path,
) -> None:
    nsqd, address = await start(tmp_path, "--shutdown-grace=20s")
    try:
        producer = await ProtocolClient.connect(address)
        await producer.send(*(Pub("t", b"m%d" % i) for i in range(5)))
        await producer.read(5)
        await producer.aclose()
        consumer, held = await consume(address, 2)
        signalled = time.monotonic()
        nsqd.process.send_signal(signal.SIGTERM)
        await trio.sleep(0.5)
        assert nsqd.process.returncode is None  # waiting for the two held messages
        await consumer.send(Rdy(5), Fin(held[0]))
        assert await consumer.drain(quiet=0.3) == []  # nothing new while stopping
        await consumer.send(Fin(held[1]))
        with trio.fail_after(10):
            assert await nsqd.process.wait() == 0
        assert time.monotonic() - signalled < 10  # the FINs ended it, not the grace
        await consumer.aclose()
        log = nsqd.stderr + await _rest(nsqd)
        assert b"stopping: waiting up to 20s for 2 messages in flight" in log
        assert b"stopping: 2 of 2 messages in flight finished" in log
    finally:
        await nsqd.aclose()

    again, address = await start(tmp_path)
    try:
        consumer, ids = await consume(address, 3)
        assert not set(ids) & set(held)  # the finished ones are gone; 3 remain
        await consumer.aclose()
        assert await again.stop() == 0
    finally:
        await again.aclose()


async def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    nsqd, address = await start(tmp_path, "--shutdown-grace=60s")
    try:
        producer = await ProtocolClient.connect(address)
        await producer.send(Pub("t", b"held"))
        await producer.read(1)
        consumer, _ = await consume(address, 1)
        nsqd.process.send_signal(signal.SIGTERM)
        await trio.sleep(0.5)
        assert nsqd.process.returncode is None
        nsqd.process.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            assert await nsqd.process.wait() == 0
        await consumer.aclose()
        await producer.aclose()
    finally:
        await nsqd.aclose()


async def _rest(nsqd: Nsqd) -> bytes:
    """What the stopped process wrote to stderr after the listening lines."""
    assert nsqd.process.stderr is not None
    rest = b""
    with trio.move_on_after(5):
        while chunk := await nsqd.process.stderr.receive_some(65536):
            rest += chunk
    return rest
