"""SIGKILL under load loses nothing acknowledged (issue 5): a real ``nsqd`` process on a
data path is killed at random moments while a publisher keeps publishing; after the
last restart every message that was answered OK is delivered."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import trio

from trionsq.protocol import MAGIC_V2, Fin, Mpub, Pub, Rdy, Sub
from trionsq.protocol.client import ClientConnection, MessageFrame, Response, encode_commands

NSQD = Path(sys.executable).with_name("nsqd")
KILLS = 20
LISTENING = re.compile(rb"(TCP|HTTP): listening on 127\.0\.0\.1:(\d+)")


async def start(data_path: Path, *flags: str) -> tuple[trio.Process, int]:
    """A real ``nsqd`` on ``data_path`` (and ``flags``); its TCP port once it listens."""
    process, ports = await start_listening(data_path, "-http-address=", *flags)
    return process, ports["TCP"]


async def start_listening(
    data_path: Path, *flags: str, env: dict[str, str] | None = None
) -> tuple[trio.Process, dict[str, int]]:
    """A real ``nsqd`` on ``data_path`` with ``flags`` (and ``env``, default this
    process's); its ports by listener (``TCP``, ``HTTP`` unless disabled) once all
    listen."""
    http = "-http-address=" not in flags
    process = await trio.lowlevel.open_process(
        [str(NSQD), "-tcp-address=127.0.0.1:0", f"-data-path={data_path}", *flags],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stderr is not None
    seen = b""
    ports: dict[str, int] = {}
    with trio.fail_after(20):
        while len(ports) < 1 + http:
            chunk = await process.stderr.receive_some(4096)
            assert chunk, seen
            seen += chunk
            ports = {m.group(1).decode(): int(m.group(2)) for m in LISTENING.finditer(seen)}
    return process, ports


async def publish_until_killed(port: int, acked: list[bytes], round_: int) -> None:
    """PUB and MPUB in turn, one at a time, recording each body once it is OK'd."""
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return
    codec = ClientConnection()
    try:
        await stream.send_all(MAGIC_V2)
        for batch in range(1_000_000):
            bodies = [b"r%d-b%d-%d" % (round_, batch, i) for i in range(1 + batch % 5)]
            command = Pub("crash", bodies[0]) if len(bodies) == 1 else Mpub("crash", tuple(bodies))
            await stream.send_all(encode_commands([command]))
            frames: list[object] = []
            while not frames:
                data = await stream.receive_some(4096)
                if not data:
                    return  # killed: this batch was never acknowledged
                frames = list(codec.receive_data(data))
            assert isinstance(frames[0], Response)
            assert frames[0].is_ok
            acked.extend(bodies)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        return
    finally:
        await stream.aclose()


async def drain(port: int, expected: int) -> set[bytes]:
    """Everything on the topic's first channel, finishing as it goes."""
    received: set[bytes] = set()
    codec = ClientConnection()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(MAGIC_V2 + encode_commands([Sub("crash", "all"), Rdy(2500)]))
        with trio.move_on_after(30):
            while len(received) < expected:
                data = await stream.receive_some(65536)
                assert data
                fins = []
                for frame in codec.receive_data(data):
                    if isinstance(frame, MessageFrame):
                        received.add(frame.message.body)
                        fins.append(Fin(frame.message.id))
                if fins:
                    await stream.send_all(encode_commands(fins))
    return received


async def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(5)
    acked: list[bytes] = []
    for round_ in range(KILLS):
        process, port = await start(tmp_path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(publish_until_killed, port, acked, round_)
            await trio.sleep(rng.uniform(0.02, 0.25))
            process.send_signal(signal.SIGKILL)
            await process.wait()
    assert len(acked) > KILLS * 10  # the load really ran
    process, port = await start(tmp_path)
    try:
        received = await drain(port, len(acked))
    finally:
        process.kill()
        await process.wait()
    missing = set(acked) - received
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
